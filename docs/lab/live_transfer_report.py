"""Live cold and warm studies on one GPU: trials each needed to come within 2 % of the GPU's
best known config (its re-timed table), per workload and seed (lab script, 2026-12-06).

    python docs/lab/live_transfer_report.py OPTUNA_DB... [--retimed experiments/data/h100_retimed]

Study names are ``<gpu>/<arm>-s<seed>-<workload>`` (docs/gpu/live-transfer.sh). A study that
never came within 2 % counts as ``>N`` (N its trials); one cut short says so.
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import optuna

from flashtune.objectives.replay import load_table


def best_known_ms(retimed: Path) -> dict[str, float]:
    """Each workload's fastest ``ok`` time (ms) in the re-timed tables, by table name."""
    best = {}
    for table in sorted(retimed.glob("*.jsonl")):
        times = [row.median_ms for row in load_table(table) if row.status.value == "ok"]
        best[table.stem] = min(times)
    return best


def workload_table_name(workload: str) -> str:
    """``4_32-8_4096_128_causal`` -> ``b4_hq32kv8_n4096_d128_causal_bfloat16``."""
    parts = workload.split("_")
    b, h, n, d = parts[:4]
    mask = "causal" if "causal" in parts[4:] else "full"
    heads = f"hq{h.split('-')[0]}kv{h.split('-')[1]}" if "-" in h else f"h{h}"
    return f"b{b}_{heads}_n{n}_d{d}_{mask}_bfloat16"


def trials_to_reach(study: optuna.Study, target_ms: float) -> int | None:
    for number, trial in enumerate(sorted(study.trials, key=lambda t: t.number), start=1):
        if trial.state == optuna.trial.TrialState.COMPLETE and trial.value <= target_ms:
            return number
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dbs", nargs="+")
    parser.add_argument("--retimed", default="experiments/data/h100_retimed", type=Path)
    parser.add_argument("--planned", type=int, default=20, help="trials each study was asked for")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    best = best_known_ms(args.retimed)
    rows = []
    for db in args.dbs:
        storage = f"sqlite:///{db}"
        for summary in optuna.get_all_study_summaries(storage):
            match = re.match(r".*/(warm|cold)-s(\d+)-(.+)$", summary.study_name)
            if not match:
                continue
            arm, seed, workload = match[1], int(match[2]), match[3]
            study = optuna.load_study(study_name=summary.study_name, storage=storage)
            ref = best[workload_table_name(workload)]
            done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
            rows.append(dict(db=Path(db).name, workload=workload, seed=seed, arm=arm, trials=len(study.trials),
                             reached=trials_to_reach(study, ref * 1.02), best_ms=min(t.value for t in done),
                             best_known_ms=ref, cut_short=len(study.trials) < args.planned))
    print(f"{'workload':28} seed  warm      cold      warm best/known  cold best/known  run")
    pairs = {}
    for row in rows:
        pairs.setdefault((row["workload"], row["seed"], row["db"]), {})[row["arm"]] = row

    def show(row):
        if row is None:
            return "-"
        mark = "*" if row["cut_short"] else ""
        return (str(row["reached"]) if row["reached"] else f">{row['trials']}") + mark

    for (workload, seed, db), arms in sorted(pairs.items()):
        w, c = arms.get("warm"), arms.get("cold")
        ratio = lambda r: f"{r['best_known_ms'] / r['best_ms']:.3f}" if r else "-"  # noqa: E731
        print(f"{workload:28} {seed:4}  {show(w):8}  {show(c):8}  {ratio(w):15}  {ratio(c):15}  {db}")
    print("(trials to within 2 % of the re-timed best; >N: not within 2 % in N trials; *: study cut short)")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
