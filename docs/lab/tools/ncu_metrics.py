"""Nsight Compute metrics of the best configs: where the kernel's time goes.

Why: the tuner's objective is time; when the best config misses a target (cuDNN, the fp8
target), the counters say which resource limits it: DRAM bandwidth, the tensor pipe,
the issue slots, or occupancy (registers, shared memory). Three parts:

- ``target``: the program ncu profiles; it launches each named workload's best recorded
  config once (the GPU side).
- ``metrics``: the ``--metrics`` list, filtered by what this ncu knows (a name it does not
  know aborts the whole profile), from ``ncu --query-metrics`` output.
- ``parse``: ncu's raw CSV page -> JSON, one record per kernel, with the headline figures
  named (CPU). ``log_to_mlflow`` puts those figures onto a trial's MLflow run.
- ``log``: each record onto the MLflow trial runs that measured its workload and config
  (``attach_to_trials``), so the counters sit with the trial in the UI.
- ``stalls``: ncu's per-instruction page (``--page source --csv``, with the sampled warp
  stalls) -> the stall reasons' shares of the samples in each block loop of the kernel (the
  innermost loops that issue warpgroup MMAs: a consumer's view, apart from the producer's
  and the idle warps') and in the whole kernel (CPU).

    ncu --clock-control none -k regex:attention_forward --section SpeedOfLight ... \\
        --metrics $(python docs/lab/tools/ncu_metrics.py metrics q.txt) -o rep \\
        python docs/lab/tools/ncu_metrics.py target NAME...
    ncu --import rep.ncu-rep --csv --page raw > raw.csv
    python docs/lab/tools/ncu_metrics.py parse raw.csv --json ncu.json NAME...
    python docs/lab/tools/ncu_metrics.py log ncu.json --experiment h200 [--tracking-uri URI]
    ncu --import rep.ncu-rep --csv --page source --print-source sass > source.csv
    python docs/lab/tools/ncu_metrics.py stalls source.csv[.gz]
"""

from __future__ import annotations

import argparse
import collections
import csv
import gzip
import io
import json
import re
import sys
from pathlib import Path

from best_configs import best_configs
from sass_count import block_loops

from flashtune.experiments.evaluation.prior_mlflow import RUN_ID_KEY, trial_measurements_of_experiment
from flashtune.experiments.tracking.tracker import DEFAULT_TRACKING_URI
from flashtune.kernels.attention import launch
from flashtune.kernels.space import validate_config
from flashtune.objectives.bench import make_inputs
from flashtune.objectives.feasibility import check
from flashtune.objectives.hardware import HardwareSpec
from flashtune.objectives.types import Workload

#: Headline figures: (name in our JSON, ncu raw metric). Alternatives for one figure are
#: listed in order; the first present wins (metric names moved between ncu versions).
HEADLINES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("duration", ("gpu__time_duration.sum",)),
    ("sm_clock", ("sm__cycles_elapsed.avg.per_second",)),
    ("instructions", ("smsp__inst_executed.sum",)),
    ("dram_bandwidth", ("dram__bytes.sum.per_second",)),
    ("dram_throughput_pct", ("dram__throughput.avg.pct_of_peak_sustained_elapsed",)),
    ("l2_bandwidth", ("lts__t_bytes.sum.per_second",)),
    ("sm_throughput_pct", ("sm__throughput.avg.pct_of_peak_sustained_elapsed",)),
    ("tensor_pipe_pct", ("sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
                         "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
                         "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active")),
    ("tensor_pipe_hmma_pct", ("sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",)),
    ("xu_pipe_pct", ("sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active",)),
    ("fma_pipe_pct", ("sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",)),
    ("alu_pipe_pct", ("sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active",)),
    ("issue_active_pct", ("smsp__issue_active.avg.pct_of_peak_sustained_active",)),
    ("achieved_occupancy_pct", ("sm__warps_active.avg.pct_of_peak_sustained_active",)),
    ("theoretical_occupancy_pct", ("sm__maximum_warps_per_active_cycle_pct",)),
    ("registers_per_thread", ("launch__registers_per_thread",)),
    ("shared_mem_per_block", ("launch__shared_mem_per_block_dynamic", "launch__shared_mem_per_block")),
    ("block_size", ("launch__block_size",)),
    ("grid_size", ("launch__grid_size",)),
)

#: Sections every profile takes (their metrics exist on every ncu that has the section).
SECTIONS = ("SpeedOfLight", "LaunchStats", "Occupancy", "ComputeWorkloadAnalysis", "MemoryWorkloadAnalysis", "WarpStateStats")


def metrics_arg(query_output: str) -> str:
    """Comma list of the headline metrics whose base name ``ncu --query-metrics`` lists."""
    known = {line.split()[0] for line in query_output.splitlines() if line.strip() and "__" in line.split()[0]}
    wanted = [m for _, alts in HEADLINES for m in alts if not m.startswith("launch__")]
    return ",".join(dict.fromkeys(m for m in wanted if m.split(".")[0] in known))


def _number(text: str) -> float | str:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return text


def parse(raw_csv: str, labels: list[str] | None = None) -> list[dict]:
    """ncu's ``--page raw --csv`` (a header row, a units row, one row per kernel) -> records."""
    rows = [r for r in csv.reader(io.StringIO(raw_csv)) if r and not r[0].startswith("==")]
    if len(rows) < 2:
        return []
    header, units, data = rows[0], rows[1], rows[2:]
    records = []
    for i, row in enumerate(data):
        values = dict(zip(header, row))
        unit = dict(zip(header, units))
        rec: dict = {"label": labels[i] if labels and i < len(labels) else f"kernel{i}",
                     "kernel": values.get("Kernel Name", ""), "metrics": {}, "units": {}}
        for name, alts in HEADLINES:
            for metric in alts:
                if values.get(metric, "") not in ("", "n/a"):
                    rec["metrics"][name] = _number(values[metric])
                    rec["units"][name] = unit.get(metric, "")
                    break
        # Warp stall reasons: ncu 2025's raw page names them ..._per_issue_active.ratio (warps
        # stalled for that reason per issued instruction); older ones ..._per_warp_active.pct.
        stalls = {k: _number(v) for k, v in values.items()
                  if "issue_stalled" in k and not k.split("issue_stalled_")[1].startswith("selected")
                  and k.endswith(("per_warp_active.pct", "per_issue_active.ratio")) and v not in ("", "n/a")}
        rec["stalls"] = dict(sorted(((k, v) for k, v in stalls.items() if isinstance(v, float)),
                                        key=lambda kv: -kv[1])[:8])
        records.append(rec)
    return records


def stall_reason(metric: str) -> str:
    """'smsp__..._issue_stalled_long_scoreboard_per_issue_active.ratio' -> 'long_scoreboard'."""
    reason = metric.split("issue_stalled_")[1]
    for suffix in ("_per_warp_active.pct", "_per_issue_active.ratio"):
        reason = reason.removesuffix(suffix)
    return reason


#: A sampled-stall column of the source page ("stall_wait"; the "(Not Issued)" twins left out).
_STALL_COLUMN = re.compile(r"^stall_(\w+)$")


def source_stalls(source_csv: str) -> list[dict]:
    """ncu's ``--page source --csv`` of one kernel -> a record for each block loop (sass_count's
    ``block_loops``) and one for the whole kernel:
    its address range (offsets from the kernel's first instruction), instructions, samples and
    each stall reason's share of the samples ("selected": the warp issued)."""
    rows = list(csv.reader(io.StringIO(source_csv)))
    start = next((i for i, row in enumerate(rows) if row and row[0] == "Address"), None)
    if start is None:
        raise ValueError("not ncu's source page: no 'Address' header row (ncu --page source --csv)")
    header = rows[start]
    reasons = {i: m.group(1) for i, name in enumerate(header) if (m := _STALL_COLUMN.match(name))}
    body = [row for row in rows[start + 1:] if len(row) == len(header)]
    if not body:
        return []
    base = int(body[0][0], 16)

    def record(name: str, first: int, last: int) -> dict:
        counts: collections.Counter[str] = collections.Counter()
        for row in body[first:last + 1]:
            for i, reason in reasons.items():
                counts[reason] += int(_number(row[i] or "0"))
        total = sum(counts.values())
        shares = {r: round(n / total, 4) for r, n in counts.most_common() if n} if total else {}
        return {"range": name, "from": hex(int(body[first][0], 16) - base), "to": hex(int(body[last][0], 16) - base),
                "instructions": last - first + 1, "samples": total, "shares": shares}

    loops = block_loops([(int(row[0], 16), row[1]) for row in body])
    return [record(f"block loop {k}", *span) for k, span in enumerate(loops)] + [record("kernel", 0, len(body) - 1)]


def log_to_mlflow(record: dict, run_id: str | None = None, *, tracking_uri: str | None = None) -> None:
    """Log a parsed record's numeric figures as ``ncu.<name>`` metrics on an MLflow run
    (the active run, or ``run_id`` in ``tracking_uri``): the counters then sit next to the
    trial they explain."""
    import mlflow

    numeric = {f"ncu.{k}": float(v) for k, v in record["metrics"].items() if isinstance(v, (int, float))}
    numeric |= {f"ncu.stall.{stall_reason(k)}": float(v) for k, v in record.get("stalls", {}).items()}
    if run_id is None:
        mlflow.log_metrics(numeric)
    else:
        mlflow.tracking.MlflowClient(tracking_uri=tracking_uri).log_batch(
            run_id, metrics=[mlflow.entities.Metric(k, v, 0, 0) for k, v in numeric.items()])


def attach_to_trials(records: list[dict], tracking_uri: str, experiment: str) -> list[tuple[str, str]]:
    """Log each record onto every trial run of a GPU model's MLflow experiment that measured
    the record's workload (its label, a ``Workload.name``) with the record's config.

    Returns:
        (label, run id) for each run written; a record no trial matches is left out.

    Raises:
        ValueError: no such experiment, or a record has no label or config.
    """

    trials = trial_measurements_of_experiment(tracking_uri, experiment)
    written = []
    for number, record in enumerate(records):
        if not record.get("label") or not record.get("config"):
            raise ValueError(f"ncu record {number} has no label or config: run `parse` with workload names")
        config = validate_config(record["config"])  # fills implied knobs, as trials store them
        for m in trials:
            if m.workload.name == record["label"] and m.config == config and m.versions.get(RUN_ID_KEY):
                log_to_mlflow(record, m.versions[RUN_ID_KEY], tracking_uri=tracking_uri)
                written.append((record["label"], m.versions[RUN_ID_KEY]))
    return written


def target(names: list[str], configs: list[dict] | None = None) -> None:
    """Launch each workload's best recorded bf16 config once (compiling first), then sync;
    a workload is a suite name or ``B,HQ[/HKV],NQ[/NK],D[,causal]`` (Workload.parse: bf16; an
    fp8 config quantizes in the call, as users call it, so ncu's ``-k`` picks the kernel); with ``configs``, each of those that fits the workload instead (a new kernel beside the
    recorded best: ``parse``'s labels are then the printed lines' order)."""
    import math

    import torch

    for name in names:
        w = Workload.parse(name)
        if configs:
            hardware = HardwareSpec.from_device()
            runs = [(c, None) for c in map(validate_config, configs) if check(c, w, hardware).feasible]
        else:
            runs = best_configs(name, top=1)
        q, k, v = make_inputs(w, seed=5, dev=torch.device("cuda"))
        for config, tflops in runs:
            out = torch.empty_like(q)
            launch(q, k, v, out, causal=w.causal, scale=1 / math.sqrt(w.head_dim), config=config)
            torch.cuda.synchronize()
            recorded = f" (recorded {tflops:.0f} TFLOP/s)" if tflops else ""
            print(f"{name}: {config.to_dict()}{recorded}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("target")
    t.add_argument("names", nargs="+")
    t.add_argument("--config", type=json.loads, action="append", default=[], metavar="CONFIG_JSON",
                   help="launch this config (repeatable; those that fit each workload) instead of the recorded best")
    m = sub.add_parser("metrics")
    m.add_argument("query_output", type=Path)
    p = sub.add_parser("parse")
    p.add_argument("raw_csv", type=Path)
    p.add_argument("names", nargs="*")
    p.add_argument("--json", type=Path, required=True)
    st = sub.add_parser("stalls", help="sampled stall reasons of each block loop, from ncu's source page")
    st.add_argument("source_csv", type=Path, help="ncu --page source --csv output (.gz read as gzip)")
    st.add_argument("--json", type=Path, default=None)
    g = sub.add_parser("log", help="put a parsed JSON's figures onto the MLflow trials that measured them")
    g.add_argument("ncu_json", type=Path)
    g.add_argument("--experiment", required=True, help="GPU model: h200, 'NVIDIA H200' or 'flashtune/NVIDIA H200'")
    g.add_argument("--tracking-uri", default=None, help="default: flashtune tune's")
    args = parser.parse_args(argv)
    if args.cmd == "target":
        target(args.names, args.config)
    elif args.cmd == "log":

        records = json.loads(args.ncu_json.read_text())
        written = attach_to_trials(records, args.tracking_uri or DEFAULT_TRACKING_URI, args.experiment)
        for label, run_id in written:
            print(f"{label}: ncu figures logged on trial run {run_id}")
        if not written:
            print("no trial in the experiment measured these workloads and configs", file=sys.stderr)
            return 1
    elif args.cmd == "stalls":
        path = args.source_csv
        with (gzip.open(path, "rt", errors="replace") if path.suffix == ".gz" else path.open(errors="replace")) as page:
            records = source_stalls(page.read())
        if args.json:
            args.json.write_text(json.dumps(records, indent=2) + "\n")
        for rec in records:
            shares = ", ".join(f"{r} {v:.2f}" for r, v in list(rec["shares"].items())[:6])
            print(f"{rec['range']} [{rec['from']}, {rec['to']}] {rec['instructions']} instructions, "
                  f"{rec['samples']} samples: {shares}")
    elif args.cmd == "metrics":
        print(metrics_arg(args.query_output.read_text(errors="replace")))
    else:

        records = parse(args.raw_csv.read_text(errors="replace"), args.names)
        for rec in records:
            if rec["label"] in args.names:
                rec["config"] = best_configs(rec["label"], top=1)[0][0].to_dict()
        args.json.write_text(json.dumps(records, indent=2) + "\n")
        for rec in records:
            stalls = ", ".join(f"{stall_reason(k)} {v:.2f}" for k, v in list(rec["stalls"].items())[:3])
            print(rec["label"], json.dumps(rec["metrics"]), f"stalls: {stalls}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
