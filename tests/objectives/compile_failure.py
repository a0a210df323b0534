"""A real Triton compile failure without a GPU, for the compiler-output tests.

``triton.compile`` runs Triton's whole pipeline (MLIR passes, LLVM, ptxas) for a target
named by hand, so it works on a machine without a GPU. The attention kernel with
warp-specialized TMA loads and 4 warps, built for sm_90 (the H200), fails in the
``NVGPUWarpSpecialization`` pass (seen on the H200 too, issue 16), and Triton's C++ prints
the pass's reproducer (about 170 lines of IR) on file descriptor 2.

Run as a script without ``TRITON_INTERPRET`` (the interpreter compiles nothing):
``python compile_failure.py raw`` compiles with nothing captured (a child of the
benchmark worker does this in ``faults.compile_failure``); ``python compile_failure.py
captured`` compiles inside ``captured_output`` and prints what it caught as one JSON line.
"""

from __future__ import annotations

import json
import sys


def compile_failing_config() -> None:
    """Compile the attention kernel with loads=tma_ws and 4 warps for sm_90; raises Triton's error."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from flashtune.kernels._flash_fwd import attention_forward_kernel as kernel
    from flashtune.kernels.attention import compile_options
    from flashtune.kernels.space import validate_config

    config = validate_config({"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3, "loads": "tma_ws"})
    options = compile_options(config, head_dim=128, causal=False)
    launch = {name: options.pop(name) for name in ("num_warps", "num_stages")}
    pointers = {"Q", "K", "V", "Out", "Scales"}
    signature = {name: "constexpr" if name in options else "*bf16" if name in pointers
                 else "fp32" if name == "qk_scale" else "i32" for name in kernel.arg_names}
    triton.compile(ASTSource(fn=kernel, signature=signature, constexprs=options),
                   target=GPUTarget("cuda", 90, 32), options=launch)
    raise AssertionError("the kernel now compiles loads=tma_ws with 4 warps: pick another failing config")


def main(mode: str) -> None:
    if mode == "raw":
        compile_failing_config()
        return
    from flashtune.objectives.compiler_output import captured_output, describe_failure

    with captured_output() as output:
        try:
            compile_failing_config()
        except Exception as exc:  # the failure under test
            failure = exc
    print(json.dumps({"error": describe_failure(failure, output), "text": output.text}))


if __name__ == "__main__":
    main(sys.argv[1])
