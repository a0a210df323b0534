"""GPU benchmark scripts (run on the device; they import no optimizer or tracking package)."""
