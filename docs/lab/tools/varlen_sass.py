"""The varlen kernel's key loops against the dense kernel's, in SASS instructions, compiled for the
H100 on this machine (no GPU; lab, 2026-12-07: where packed prefill's 0.958x of dense comes from).

    python docs/lab/tools/varlen_sass.py [BLOCK_M,BLOCK_N,warps,stages]     (default 64,64,4,3; D128 causal bf16)

Prints registers, the kernel's instruction count, and each loop with 8 exponentials or more (the
unmasked key loop, then the masked band) with its most frequent opcodes. Run without
``TRITON_INTERPRET``, with ``CUDA_VISIBLE_DEVICES=`` (objectives/aot.py's stand-in driver).
"""
import argparse
import collections
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from sass_count import _ADDRESSED, compiled_sass

from flashtune.kernels._flash_fwd_varlen import varlen_forward_kernel
from flashtune.kernels.space import SAFE_DEFAULT
from flashtune.objectives.aot import _triton_tool, compiling_for, resource_usage
from flashtune.objectives.hardware import load_spec
from flashtune.objectives.types import Workload

#: The packed batch compiled for: 16 sequences of 1,024 tokens, 32 query and 8 KV heads.
SEQUENCES, LENGTH, Q_HEADS, KV_HEADS = 16, 1024, 32, 8


def varlen_sass(hw, tile: tuple[int, int, int, int], head_dim: int, causal: bool,
                wide: bool = False) -> tuple[str, dict]:
    """(SASS listing, resource usage) of the varlen kernel at ``tile`` compiled for ``hw``."""
    bm, bn, w, s = tile
    q = torch.empty(SEQUENCES * LENGTH, Q_HEADS, head_dim, dtype=torch.bfloat16)
    k = torch.empty(SEQUENCES * LENGTH, KV_HEADS, head_dim, dtype=torch.bfloat16)
    cu = torch.zeros(SEQUENCES + 1, dtype=torch.int32)
    with compiling_for(hw):
        kern = varlen_forward_kernel.warmup(q, k, k, q, cu, cu, *q.stride()[:2], *k.stride()[:2], *k.stride()[:2],
                                            *q.stride()[:2], SEQUENCES, Q_HEADS, Q_HEADS // KV_HEADS, q.shape[0],
                                            k.shape[0], LENGTH, 0.1, HEAD_DIM=head_dim, BLOCK_M=bm, BLOCK_N=bn,
                                            IS_CAUSAL=causal, WIDE_OFFSETS=wide, num_warps=w, num_stages=s,
                                            grid=(1,))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "k.cubin"
        path.write_bytes(kern.asm["cubin"])
        sass = subprocess.run([str(_triton_tool("cuobjdump")), "-sass", str(path)], capture_output=True,
                              text=True, check=True).stdout
    return sass, resource_usage(kern.asm["cubin"])


def loops(sass: str) -> tuple[int, list[tuple[int, collections.Counter]]]:
    """The listing's instruction count, and each loop closed by a backward branch with 8
    exponentials or more: (instructions, opcode counts)."""
    lines = [(int(m.group(1), 16), m.group(2).strip()) for m in _ADDRESSED.finditer(sass)]
    at = {a: i for i, (a, _) in enumerate(lines)}
    out = []
    for i, (a, t) in enumerate(lines):
        b = re.search(r"\bBRA\s+(0x[0-9a-f]+)", t)
        if b and int(b.group(1), 16) < a and int(b.group(1), 16) in at:
            first = at[int(b.group(1), 16)]
            body = [re.sub(r"^@!?U?P\w+\s+", "", x) for _, x in lines[first:i + 1]]
            ops = collections.Counter(x.split()[0].split(".")[0] for x in body)
            if ops["MUFU"] >= 8:
                out.append((i - first + 1, ops))
    return len(lines), out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tile", nargs="?", default="64,64,4,3", help="BLOCK_M,BLOCK_N,warps,stages (default 64,64,4,3)")
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--full", action="store_true", help="no causal mask")
    parser.add_argument("--wide", action="store_true", help="64-bit row offsets (buffers of 2**31 elements or more)")
    args = parser.parse_args(argv)
    tile = tuple(int(x) for x in args.tile.split(","))
    hw, causal = load_spec("h100"), not args.full
    bm, bn, w, s = tile
    cfg = {**SAFE_DEFAULT, "BLOCK_M": bm, "BLOCK_N": bn, "num_warps": w, "num_stages": s}
    dense = compiled_sass(cfg, Workload(SEQUENCES, Q_HEADS, KV_HEADS, LENGTH, LENGTH, args.head_dim, "bfloat16",
                                        causal), hw)
    for name, (sass, res) in (("dense", dense), ("varlen", varlen_sass(hw, tile, args.head_dim, causal, args.wide))):
        total, found = loops(sass)
        print(name, "regs", res.get("REG"), "total instr", total)
        for n, ops in found:
            print("  loop", n, "instr;", ", ".join(f"{k} {v}" for k, v in ops.most_common(14)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
