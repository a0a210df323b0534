"""The varlen kernel's key loops against the dense kernel's, in SASS instructions, compiled for the
H100 on this machine (no GPU; lab, 2026-12-07: where packed prefill's 0.958x of dense comes from).

    python docs/lab/tools/varlen_sass.py [BLOCK_M,BLOCK_N,warps,stages]     (default 64,64,4,3; D128 causal bf16)

Prints registers, the kernel's instruction count, and each loop with 8 exponentials or more (the
unmasked key loop, then the masked band) with its most frequent opcodes. Run without
``TRITON_INTERPRET``, with ``CUDA_VISIBLE_DEVICES=`` (objectives/aot.py's stand-in driver).
"""
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

hw = load_spec("h100")
bm, bn, w, s = [int(x) for x in sys.argv[1].split(",")] if len(sys.argv) > 1 else (64, 64, 4, 3)
causal = True
D = 128
cfg = {**SAFE_DEFAULT, "BLOCK_M": bm, "BLOCK_N": bn, "num_warps": w, "num_stages": s}
dense_sass, dense_res = compiled_sass(cfg, Workload(16, 32, 8, 1024, 1024, D, "bfloat16", causal), hw)

q = torch.empty(16 * 1024, 32, D, dtype=torch.bfloat16)
k = torch.empty(16 * 1024, 8, D, dtype=torch.bfloat16)
cu = torch.zeros(17, dtype=torch.int32)
with compiling_for(hw):
    kern = varlen_forward_kernel.warmup(q, k, k, q, cu, cu, *q.stride()[:2], *k.stride()[:2], *k.stride()[:2],
                                        *q.stride()[:2], 16, 32, 4, q.shape[0], k.shape[0], 1024, 0.1,
                                        HEAD_DIM=D, BLOCK_M=bm, BLOCK_N=bn, IS_CAUSAL=causal,
                                        num_warps=w, num_stages=s, grid=(1,))
with tempfile.TemporaryDirectory() as folder:
    path = Path(folder) / "k.cubin"
    path.write_bytes(kern.asm["cubin"])
    varlen_sass = subprocess.run([str(_triton_tool("cuobjdump")), "-sass", str(path)], capture_output=True,
                                 text=True, check=True).stdout
varlen_res = resource_usage(kern.asm["cubin"])

def loops(sass):
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

for name, sass, res in (("dense", dense_sass, dense_res), ("varlen", varlen_sass, varlen_res)):
    total, ls = loops(sass)
    print(name, "regs", res.get("REG"), "total instr", total)
    for n, ops in ls:
        print("  loop", n, "instr;", ", ".join(f"{k} {v}" for k, v in ops.most_common(14)))
