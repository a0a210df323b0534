"""The values every layer passes around: a config, a workload, a measurement and its status.

The bottom layer (tests/architecture/test_layers.py): it imports nothing else of flashtune,
so the search strategies, the kernels and the objectives read the same types without one
depending on another. The facts these types check (the dtypes and head dims the kernel
takes) are declared here with them, and the kernels import them from here.
"""
