"""The one-loop kernel (``loads="lean_ws_oneloop"``) compiled for sm90 on a machine without
the GPU (``objectives/aot.py``): registers, spills, shared memory, warps and how many
programs (and query rows) an SM holds, per tile; docs/lab/ (the one-loop kernel).

Why the programs an SM: the warp-specialized loop takes the whole register file (12 warps
of 168 registers), one program an SM, which is what made its 64-row tiles slow
(``kernels/_flash_fwd_oneloop.SPECIALIZED_MIN_BLOCK_M``). Run without ``TRITON_INTERPRET``::

    python docs/lab/tools/aot_oneloop.py
    python docs/lab/tools/aot_oneloop.py --case '16,16,1024,64|{"BLOCK_M": 64, "BLOCK_N": 128}'
"""

from __future__ import annotations

import argparse
import json

from flashtune.kernels.space import validate_config
from flashtune.objectives.aot import compiling_for, resource_usage
from flashtune.objectives.hardware import load_spec
from flashtune.objectives.precompile import compile_config
from flashtune.objectives.types import Workload

#: (workload, knobs over 4 warps) of the suite's tiles, both loop forms, and fp8.
CASES: tuple[tuple[str, dict], ...] = (
    ("4,32,4096,128,causal", dict(BLOCK_M=128, BLOCK_N=128, num_stages=2)),
    ("4,32,4096,128", dict(BLOCK_M=128, BLOCK_N=128, num_stages=2)),
    ("2,8/2,1000,128,causal", dict(BLOCK_M=128, BLOCK_N=128, num_stages=2)),
    ("2,16,8192,256", dict(BLOCK_M=128, BLOCK_N=64, num_stages=1)),
    ("1,32,16384,128,causal", dict(BLOCK_M=128, BLOCK_N=128, num_stages=2)),
    ("4,32/8,4096,128,causal", dict(BLOCK_M=128, BLOCK_N=64, num_stages=2)),
    ("8,16,2048,64,causal", dict(BLOCK_M=64, BLOCK_N=128, num_stages=2)),
    ("16,16,1024,64", dict(BLOCK_M=64, BLOCK_N=128, num_stages=1)),
    ("16,16,1024,64", dict(BLOCK_M=64, BLOCK_N=64, num_stages=2)),
    ("4,32,4096,128", dict(BLOCK_M=64, BLOCK_N=128, num_stages=1)),
    ("2,32,8192,128", dict(BLOCK_M=128, BLOCK_N=128, num_stages=2, use_fp8=True)),
    ("2,16,8192,256", dict(BLOCK_M=128, BLOCK_N=64, num_stages=1, use_fp8=True)),
)


def compile_case(workload_text: str, knobs: dict) -> dict:
    """Compile one config for the H200's target and read what it uses."""

    hardware = load_spec("h200")
    config = validate_config({"loads": "lean_ws_oneloop", "num_warps": 4, **knobs})
    with compiling_for(hardware):
        kernel = compile_config(config, Workload.parse(workload_text), device="cpu")
    usage = resource_usage(kernel.asm["cubin"])
    registers, warps, shared = usage["REG"], kernel.metadata.num_warps, int(kernel.metadata.shared)
    # sm90: 228 KB of shared memory an SM, of which a program may have 227 KB and the
    # system keeps 1 KB a program; 64 warps an SM.
    shared_per_sm = hardware.shared_memory_per_block_bytes + 1024
    programs = min(hardware.registers_per_sm // (registers * warps * 32), shared_per_sm // (shared + 1024),
                   64 // warps)
    return {"workload": workload_text, "config": {k: v for k, v in config.to_dict().items() if k in knobs},
            "registers": registers, "spills": (usage["STACK"] + usage["LOCAL"]) // 4, "shared_bytes": shared,
            "warps": warps, "programs_per_sm": programs, "rows_per_sm": programs * int(config["BLOCK_M"])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", default=[], metavar="WORKLOAD|KNOBS_JSON",
                        help="a workload and knobs (4 warps unless given); repeatable (default: the suite's tiles)")
    parser.add_argument("--json", default=None, help="write the rows as JSON to this file")
    args = parser.parse_args(argv)
    cases = [(text.split("|")[0], json.loads(text.split("|", 1)[1])) for text in args.case] or list(CASES)
    rows = []
    print("| workload | knobs | registers / spills / shared | warps | programs an SM | rows an SM |")
    print("|---|---|---|---|---|---|")
    for workload_text, knobs in cases:
        row = compile_case(workload_text, knobs)
        rows.append(row)
        print(f"| {row['workload']} | {row['config']} | {row['registers']} / {row['spills']} / {row['shared_bytes']} | "
              f"{row['warps']} | {row['programs_per_sm']} | {row['rows_per_sm']} |", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
