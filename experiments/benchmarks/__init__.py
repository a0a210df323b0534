"""GPU benchmarks (run where the GPU is): peers, fp8, the knee, Nsight Compute metrics, scale-out."""
