"""Grade the static feasibility model against sweeps recorded with ``--no-static-check``.

    python docs/lab/tools/feasibility_report.py --tables experiments/data/h200 --hardware h200
"""

from __future__ import annotations

import argparse
from pathlib import Path

from flashtune.objectives.feasibility import grade
from flashtune.objectives.hardware import load_spec
from flashtune.objectives.replay import load_table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=Path, required=True)
    parser.add_argument("--hardware", default="h200")
    args = parser.parse_args(argv)
    hardware = load_spec(args.hardware)
    measurements = [m for path in sorted(args.tables.glob("*.jsonl")) for m in load_table(path)]
    result = grade(measurements, hardware)
    print(f"static model vs Triton on {hardware.name}: {result.agreed}/{result.total} agree ({result.fraction:.1%})")
    for label, items in (("predicted to fit, OutOfResources", result.false_feasible),
                         ("predicted not to fit, ran", result.false_infeasible)):
        for m in items:
            print(f"  {label}: {m.workload.name} {m.config.to_dict()} measured shared={m.shared_bytes}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
