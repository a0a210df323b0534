"""Sanitize the recorded best configs of every kernel variant, and the runtime's defaults.

    python docs/gpu/sanitize_tables.py --tables experiments/data/h200_grown \\
        --tables experiments/data/h200_gluon --top 3 --out /tmp/sanitize

The plan: the runtime's architecture defaults for this GPU (or ``--arch``'s spec) first, then
per recorded workload and kernel variant (forward, lean, one-loop, Gluon, decode; fp8 apart)
its fastest successful config, then the second fastest of each, up to ``--top``; one check per
(config, head dim, dtype). Each is checked under compute-sanitizer's four tools
(``flashtune.objectives.sanitize``; verdicts cached as export's are), ``--batch-size`` configs
to a sanitizer run, one kernel variant a batch (``sanitize_many``: a tool clean on a batch vouches
for its configs, one that is not runs again on each alone), ``--jobs`` batches at a time, until ``--budget-s``
is spent (no batch starts after it); the rest are listed as not checked. Written to ``--out``:
``plan.json``, ``findings.jsonl`` (one verdict a line, a batch's as it ends), ``findings.md`` (the table). With
``--plan-only``, or without a GPU or compute-sanitizer (exit 2, one line), only the plan.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from flashtune.experiments.evaluation.prior_files import table_measurements
from flashtune.kernels.space import PAGED_KERNEL, VARLEN_KERNEL, kernel_of
from flashtune.objectives.hardware import HardwareSpec, load_spec
from flashtune.objectives.packed import packed_row
from flashtune.objectives.sanitize import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_TIMEOUT_S,
    TOOLS,
    Check,
    Verdict,
    find_sanitizer,
    probe_gpu,
    takes_key_ranges,
    variant_of,
)
from flashtune.objectives.types import Workload
from flashtune.runtime.dispatching.baselines import decode_default, fallback_config
from flashtune.runtime.dispatching.resolve import PACKED_DEFAULTS
from flashtune.runtime.storage.sanitized import SanitizedCache, checked_many

#: Head dims and masks the defaults are taken at (the suite's, and decode against a long cache).
DEFAULT_HEAD_DIMS = (64, 128, 256)
#: Page sizes the paged default is taken at: transformers' continuous batching's and vLLM's
#: usual 16, and 256.
DEFAULT_PAGE_SIZES = (16, 256)


def batches_of(items: list[dict[str, Any]], size: int) -> list[list[dict[str, Any]]]:
    """The plan cut into batches of ``size`` or fewer, each of one kernel variant (as
    ``sanitize_many`` batches, for racecheck's waiver), tier by tier in the plan's order (the
    defaults, then every variant's best, then its second, ...)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for item in items:
        tier = "default" if item["why"].startswith("default") else item["why"].rsplit("#", 1)[-1]
        groups.setdefault((tier, item["variant"]), []).append(item)
    return [group[at:at + size] for group in groups.values() for at in range(0, len(group), size)]


def default_items(hardware: HardwareSpec) -> list[dict[str, Any]]:
    """The runtime's defaults on ``hardware``: prefill per head dim and mask, and decode; then
    the packed ops' per head dim: the varlen tile, and the paged default (one split, and
    several with their combine) at transformers' and vLLM's usual page sizes."""
    items = []
    for head_dim in DEFAULT_HEAD_DIMS:
        for causal in (False, True):
            workload = Workload(4, 32, 8, 4096, 4096, head_dim, "bfloat16", causal)
            prefill = fallback_config(hardware, workload)
            # A call with per-sequence key ranges gets the first baseline that takes them.
            ranged = fallback_config(hardware, workload, accept=takes_key_ranges)
            decode = decode_default(hardware, Workload(4, 32, 8, 1, 8192, head_dim, "bfloat16", causal))[0]
            items += [{"config": c.to_dict(), "head_dim": head_dim, "dtype": "bfloat16", "why": why}
                      for c, why in ((prefill, "default prefill"), (ranged, "default prefill with key ranges"),
                                     (decode, "default decode"))]
    for head_dim in DEFAULT_HEAD_DIMS:
        varlen = PACKED_DEFAULTS[VARLEN_KERNEL](hardware, Workload(16, 32, 8, 1024, 1024, head_dim, "bfloat16", True))[0]
        packed = [(packed_row(varlen, VARLEN_KERNEL), "default varlen")]
        for batch, capacity in ((64, 4096), (1, 32768)):  # one split, and several with their combine
            paged = PACKED_DEFAULTS[PAGED_KERNEL](hardware, Workload(batch, 32, 8, 1, capacity, head_dim, "bfloat16",
                                                                     True))[0]
            packed += [(packed_row(paged, PAGED_KERNEL, page_size=page),
                        f"default paged ({batch} x {capacity} keys), pages of {page}") for page in DEFAULT_PAGE_SIZES]
        items += [{"config": c.to_dict(), "head_dim": head_dim, "dtype": "bfloat16", "why": why} for c, why in packed]
    return items


def table_items(tables: list[Path], top: int) -> list[dict[str, Any]]:
    """Per table workload and kernel variant, its ``top`` fastest successes, rank by rank."""
    by_group: dict[tuple, list] = {}
    for folder in tables:
        for m in table_measurements(folder):
            if m.ok and m.workload is not None:
                by_group.setdefault((m.workload, variant_of(m.config)), []).append(m)
    items = []
    for rank in range(top):
        for (workload, variant), rows in sorted(by_group.items(), key=lambda kv: (kv[0][0].name, kv[0][1])):
            rows.sort(key=lambda m: m.median_ms)
            if rank < len(rows):
                items.append({"config": rows[rank].config.to_dict(), "head_dim": workload.head_dim,
                              "dtype": workload.dtype, "why": f"{workload.name} {variant} #{rank + 1}"})
    return items


def plan(hardware: HardwareSpec, tables: list[Path], top: int) -> list[dict[str, Any]]:
    """Defaults first, then the tables' configs; one item per (config, head dim, dtype)."""
    seen, out = set(), []
    for item in [*default_items(hardware), *table_items(tables, top)]:
        key = (json.dumps(item["config"], sort_keys=True), item["head_dim"], item["dtype"])
        if key not in seen:
            seen.add(key)
            out.append({**item, "variant": variant_of(item["config"]), "kernel": kernel_of(item["config"])})
    return out


def row_of(item: dict[str, Any], verdict: Verdict) -> dict[str, Any]:
    """A plan item's line of findings.jsonl: its verdict, reason, seconds and each tool's result."""
    return {**item, "verdict": "safe" if verdict.safe else "unsafe", "reason": verdict.reason or verdict.waived,
            "seconds": verdict.seconds, "cached": verdict.cached, "tools": [r.to_dict() for r in verdict.results]}


def markdown(rows: list[dict[str, Any]], hardware: str) -> str:
    lines = [f"# Sanitized configs on {hardware}", "",
             "| verdict | variant | head_dim | why | config | first finding | s |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['verdict']} | {row['variant']} | {row['head_dim']} | {row['why']} | "
                     f"`{json.dumps(row['config'], sort_keys=True)}` | {row.get('reason', '')} | "
                     f"{row.get('seconds', 0):.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", type=Path, action="append", default=[], help="recorded tables (file or folder)")
    parser.add_argument("--top", type=int, default=3, help="configs per workload and variant (default: 3)")
    parser.add_argument("--out", type=Path, required=True, help="folder for plan.json, findings.jsonl, findings.md")
    parser.add_argument("--jobs", type=int, default=4, help="batches checked at a time (default: 4)")
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE,
                        help=f"configs to a sanitizer run (default: {DEFAULT_BATCH_SIZE}; 1: each alone)")
    parser.add_argument("--budget-s", type=float, default=420.0, help="stop starting checks after this (default: 420)")
    parser.add_argument("--timeout-s", type=float, default=DEFAULT_TIMEOUT_S, help="one tool's run limit")
    parser.add_argument("--arch", default=None, help="plan for this shipped spec (h200, h100) instead of the GPU")
    parser.add_argument("--plan-only", action="store_true", help="write the plan and stop")
    args = parser.parse_args(argv)
    if args.top < 1 or args.jobs < 1 or args.batch_size < 1:
        parser.error("--top, --jobs and --batch-size must be >= 1")
    args.out.mkdir(parents=True, exist_ok=True)

    gpu = None if args.plan_only and args.arch else probe_gpu()
    hardware = load_spec(args.arch) if args.arch else (HardwareSpec.from_dict(gpu) if gpu else load_spec("h200"))
    items = plan(hardware, args.tables, args.top)
    (args.out / "plan.json").write_text(json.dumps(items, indent=1) + "\n")
    print(f"plan: {len(items)} config(s) for {hardware.name} ({sum(i['why'].startswith('default') for i in items)} "
          f"defaults) -> {args.out / 'plan.json'}")
    if args.plan_only:
        return 0
    sanitizer = find_sanitizer()
    if gpu is None or sanitizer is None:
        print(f"sanitize_tables: nothing sanitized ({'no GPU' if gpu is None else 'no compute-sanitizer'})",
              file=sys.stderr)
        return 2
    this_gpu = HardwareSpec.from_dict(gpu)
    cache = SanitizedCache()
    deadline = time.monotonic() + args.budget_s
    findings = args.out / "findings.jsonl"
    findings.write_text("")
    lock = threading.Lock()

    def check(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if time.monotonic() > deadline:
            return [{**item, "verdict": "not checked (budget)"} for item in batch]
        verdicts = checked_many([Check(i["config"], i["head_dim"], i["dtype"]) for i in batch],
                                gpu=this_gpu.fingerprint, cache=cache, tools=TOOLS, sanitizer=sanitizer,
                                timeout_s=args.timeout_s, batch_size=args.batch_size)
        rows = [row_of(item, verdict) for item, verdict in zip(batch, verdicts)]
        with lock:  # the lines of a batch as it ends: a call cut short keeps what was checked
            with findings.open("a") as handle:
                handle.writelines(json.dumps(row, sort_keys=True) + "\n" for row in rows)
            for item, verdict in zip(batch, verdicts):
                print(f"{'safe' if verdict.safe else 'unsafe':>6} {verdict.seconds:6.1f} s {item['variant']:>10} "
                      f"d{item['head_dim']} {item['why']}: {verdict.reason or verdict.waived or 'clean'}", flush=True)
        return rows

    batches = batches_of(items, args.batch_size)
    with ThreadPoolExecutor(args.jobs) as pool:
        done = dict(zip((id(item) for batch in batches for item in batch),
                        (row for batch_rows in pool.map(check, batches) for row in batch_rows)))
    rows = [done[id(item)] for item in items]  # the plan's order
    (args.out / "findings.md").write_text(markdown(rows, this_gpu.name))
    unsafe = [r for r in rows if r["verdict"] == "unsafe"]
    served_unsafe = [r for r in unsafe if r["why"].startswith("default")]
    skipped = sum(r["verdict"].startswith("not checked") for r in rows)
    print(f"sanitized {len(rows) - skipped} of {len(rows)} config(s) on {this_gpu.name}: {len(unsafe)} unsafe "
          f"({len(served_unsafe)} of them defaults the runtime serves); {skipped} not checked (budget)")
    return 1 if served_unsafe else 0


if __name__ == "__main__":
    sys.exit(main())
