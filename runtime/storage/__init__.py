"""The tuned-config store: the JSON file, its schema, the buckets it keys on, and export."""
