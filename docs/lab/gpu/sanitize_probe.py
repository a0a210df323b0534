"""Issue 44, 2026-12-06: what the sanitizer's findings on the H100 are (lab probe, one call).

1. initcheck on a TMA-load forward config twice: with the descriptor scratch Triton asks for
   (torch.empty, as the op runs) and with that scratch zeroed. Clean when zeroed means every
   uninitialized read is of the 128-byte device-side descriptor, which Triton's lowering
   writes with tensormap.cp_fenceproxy (a copy initcheck does not track) before any use.
2. racecheck's whole report (every hazard, both sides) on the Gluon Hopper default and a
   4-warp one-loop config, and the SASS at the offsets it names (cuobjdump of the cubin).
"""
import glob
import json
import os
import re
import subprocess
import sys

SAN = "/usr/local/cuda/bin/compute-sanitizer"
HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.environ.get("OUT", "/tmp/out")

from flashtune.objectives.sanitize import request  # noqa: E402

TMA = {"BLOCK_M": 64, "BLOCK_N": 64, "grid": "persistent", "kernel": "prefill", "loads": "tma", "num_stages": 3,
       "num_warps": 4, "tile_order": "head_major", "use_fp8": False}
GLUON = {"BLOCK_M": 128, "BLOCK_N": 128, "grid": "tiles", "kernel": "prefill", "loads": "gluon_pingpong",
         "num_stages": 3, "num_warps": 4, "tile_order": "longest_first", "use_fp8": False}
ONELOOP = {"BLOCK_M": 128, "BLOCK_N": 64, "grid": "tiles", "kernel": "prefill", "loads": "lean_ws_oneloop",
           "num_stages": 1, "num_warps": 4, "tile_order": "longest_first", "use_fp8": False}


def run(tool, config, head_dim, *, zero_scratch=False, limit=8):
    req = json.dumps(request(config, head_dim=head_dim))
    child = [sys.executable, os.path.join(HERE, "sanitize_probe_child.py"), "zero" if zero_scratch else "empty", req]
    env = {**os.environ, "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
    out = subprocess.run([SAN, "--tool", tool, "--print-limit", str(limit), *child], capture_output=True, text=True,
                         env=env, timeout=150).stdout
    return out


def summary(out):
    m = re.search(r"ERROR SUMMARY: (\d+) error", out)
    return m[1] if m else "?"


def sass_near(name, offsets):
    """SASS lines of kernel ``name`` at the given offsets (+-2 instructions), from Triton's cache."""
    cache = os.environ.get("TRITON_CACHE_DIR", os.path.expanduser("~/.triton/cache"))
    for cubin in sorted(glob.glob(f"{cache}/**/{name}.cubin", recursive=True), key=os.path.getmtime)[-1:]:
        sass = subprocess.run(["/usr/local/cuda/bin/cuobjdump", "-sass", cubin], capture_output=True, text=True).stdout
        lines = sass.splitlines()
        with open(f"{OUT}/{name}.sass", "w") as f:
            f.write(sass)
        for off in offsets:
            tag = f"/*{off:04x}*/"
            for i, line in enumerate(lines):
                if tag in line:
                    print(f"  -- {name}+0x{off:x}:")
                    print("\n".join("    " + text.strip() for text in lines[max(0, i - 4):i + 3]))


with open(f"{OUT}/probe.txt", "w") as log:
    def say(text):
        print(text)
        log.write(text + "\n")
        log.flush()

    for zero in (False, True):
        out = run("initcheck", TMA, 256, zero_scratch=zero, limit=2)
        say(f"initcheck tma d256 scratch={'zeroed' if zero else 'empty'}: {summary(out)} errors")
        say("\n".join(out.splitlines()[:14]))
    for name, config, kernel in (("gluon d128", GLUON, "gluon_attention_kernel"),
                                 ("oneloop d128", ONELOOP, "one_loop_attention_kernel")):
        out = run("racecheck", config, 128, limit=8)
        say(f"racecheck {name}: {summary(out)} errors")
        say("\n".join(text for text in out.splitlines() if text.strip() and "Saved host backtrace" not in text)[:6000])
        offsets = sorted({int(x, 16) for x in re.findall(r"\+0x([0-9a-f]+) in", out)})
        sass_near(kernel, offsets)
