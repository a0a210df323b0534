"""Grade compiling here (no GPU) against what a GPU recorded: registers, spills, shared memory, compile errors.

For a sample of each recorded table's configs, ``objectives.aot`` compiles the config for
the table's GPU model on this machine and the figures are compared with the ones the GPU
reported when it ran the config (a table's kernel source may be older than today's: a
register or two of difference then says the source moved, not that compiling here is off).

    python docs/lab/tools/compile_agreement.py --tables experiments/data/h200_decode \
        --tables experiments/data/h200_lean --sample 20 --json agreement.json

Run without ``TRITON_INTERPRET`` (the interpreter's kernels do not compile).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

from flashtune.kernels.space import validate_config
from flashtune.objectives.aot import CompileFailed, compiled_resources
from flashtune.objectives.hardware import load_spec
from flashtune.objectives.replay import load_table
from flashtune.objectives.types import Measurement, Status


def grade_table(path: Path, hardware_name: str, sample: int, rng: random.Random) -> dict:
    """Compile up to ``sample`` ok configs and ``sample`` compile errors of one table; count agreements."""
    rows = load_table(path)
    ok = [m for m in rows if m.status is Status.OK and m.registers is not None]
    errors = [m for m in rows if m.status is Status.COMPILE_ERROR]
    hardware = load_spec(hardware_name)
    result = {"table": str(path), "ok": 0, "exact": 0, "shared_exact": 0, "registers_within_4": 0,
              "errors": 0, "errors_reproduced": 0, "differences": []}
    for m in rng.sample(ok, min(sample, len(ok))):
        got = _compile(m, hardware)
        result["ok"] += 1
        if isinstance(got, str):
            result["differences"].append({"config": m.config.to_dict(), "recorded": "ok", "here": got})
            continue
        figures = (got.registers, got.spills, got.shared_bytes)
        recorded = (m.registers, m.spills, m.shared_bytes)
        result["exact"] += figures == recorded
        result["shared_exact"] += got.shared_bytes == m.shared_bytes
        result["registers_within_4"] += abs(got.registers - (m.registers or 0)) <= 4
        if figures != recorded:
            result["differences"].append({"config": m.config.to_dict(), "recorded": recorded, "here": figures})
    for m in rng.sample(errors, min(sample, len(errors))):
        got = _compile(m, hardware)
        result["errors"] += 1
        result["errors_reproduced"] += isinstance(got, str)
    return result


def _compile(m: Measurement, hardware) -> object:
    try:
        return compiled_resources(validate_config(m.config), m.workload, hardware)
    except CompileFailed as exc:
        return f"compile error: {exc}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=Path, action="append", required=True, help="a table or a folder of tables")
    parser.add_argument("--hardware", default="h200", help="the GPU model the tables were recorded on")
    parser.add_argument("--sample", type=int, default=10, help="configs a table, of each kind (default: 10)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    if args.sample < 1:
        raise SystemExit("--sample must be at least 1")
    missing = [str(t) for t in args.tables if not t.exists()]
    if missing:
        raise SystemExit(f"--tables: no such file or folder: {', '.join(missing)}")
    paths = [p for t in args.tables for p in (sorted(t.glob("*.jsonl")) if t.is_dir() else [t])]
    if not paths:
        raise SystemExit(f"no *.jsonl table in {[str(t) for t in args.tables]}")
    rng = random.Random(args.seed)
    results = []
    started = time.perf_counter()
    for i, path in enumerate(paths, 1):
        results.append(grade_table(path, args.hardware, args.sample, rng))
        print(f"[{i}/{len(paths)}] {path.name}: {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    print("| table | ok configs compiled | registers, spills, shared exact | shared exact | registers within 4 "
          "| compile errors reproduced |")
    print("|---|---|---|---|---|---|")
    for r in results:
        print(f"| {Path(r['table']).parent.name}/{Path(r['table']).stem} | {r['ok']} | {r['exact']} | "
              f"{r['shared_exact']} | {r['registers_within_4']} | {r['errors_reproduced']} of {r['errors']} |")
    total = {k: sum(r[k] for r in results) for k in ("ok", "exact", "shared_exact", "registers_within_4",
                                                     "errors", "errors_reproduced")}
    print(f"| **all** | {total['ok']} | {total['exact']} | {total['shared_exact']} | {total['registers_within_4']} | "
          f"{total['errors_reproduced']} of {total['errors']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
