"""``flashtune transfer``: what priors from another workload or GPU buy, on recorded spaces.

For each pair (a source table, a target table, the target's GPU) and each strategy, the
same seeds run twice on the target's recorded space: cold (no priors) and told the
source's table as priors, exactly as ``flashtune tune --prior-from table:SOURCE`` would
(``flashtune.experiments.evaluation.priors``: read, re-checked on the target's spec and workload,
told before the first ask). Reported: evaluations until the best so far is within 2 %
(and 5 %) of the target's optimum, median over seeds, with and without priors, their
ratio, and every case of negative transfer (priors slower than cold start).

The smaller GPU is simulated: the H200's spec with less shared memory per block
(``--smaller-shared-bytes``, default 101,376 B: what an RTX 4090, L40S or A10 allows).
Its recorded space is the H200 table restricted by that spec's feasibility model, so
the source's best configs that no longer fit are dropped from the priors, and the
times of the configs that do fit are the H200's (no smaller GPU was measured).

A run stops at the first config within 2 % (nothing after it changes either count), or
when the space is exhausted; a run that never gets there counts as budget + 1.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from flashtune.experiments import DATA_DIR
from flashtune.experiments.evaluation import priors as prior_sources
from flashtune.experiments.evaluation import scoring
from flashtune.experiments.evaluation.landscape import Landscape, build_landscape
from flashtune.experiments.evaluation.replay_batch import quiet_worker
from flashtune.kernels.config import Config
from flashtune.kernels.space import IMPLIED
from flashtune.objectives.hardware import HardwareSpec, load_spec
from flashtune.objectives.kernel_tuner_files import space_name
from flashtune.objectives.packed import is_packed_table
from flashtune.objectives.replay import ReplayObjective, load_table
from flashtune.objectives.types import Measurement
from flashtune.search import History, SearchSpace, make_strategy, run

DEFAULT_TABLES = DATA_DIR / "h200"
#: Shared memory per block of the simulated smaller GPU: sm86/sm89's 99 KB (RTX 4090, L40S, A10).
SMALLER_SHARED_BYTES = 101376
#: ``Pair.target_gpu`` of the simulated smaller GPU.
SMALLER_GPU = "smaller"
TOLERANCES = {"evals_to_2pct": 0.02, "evals_to_5pct": 0.05}
#: The targets transfer is held to: priors need at most this fraction of cold start's evaluations on
#: most pairs, and no pair may need more than cold start times ``WORST_RATIO``.
TARGET_RATIO, WORST_RATIO = 1 / 3, 1.2
#: "where the optimum moves little (the source's best within 5 % of the target's
#: optimum, on the target), warm start <= TARGET_RATIO of cold's evaluations". A pair is one
#: such when the source's best config, measured on the target, is at most this times the
#: target's optimum.
STABLE_OPTIMUM = 1.05


@dataclass(frozen=True)
class Pair:
    """One transfer: the source's table told as priors to a search of the target's space.

    Attributes:
        kind: what changes (``tokens``, ``head_dim``, ``mask``, ``smaller GPU``, ``GPU``).
        source: workload name of the source table (recorded on the H200 unless files say).
        target: workload name of the target table.
        target_gpu: the GPU the target is searched on: a shipped spec's key (``h200``,
            ``h100``), or ``smaller`` (the H200 with less shared memory, simulated).
        source_files, target_files: the tables, given as files (``--pair SOURCE TARGET``: any
            two tables of one kernel, such as Kernel Tuner caches of two GPUs; ``--gpu-pair``:
            a GPU model's recorded space, its folders' tables of the workload merged); empty:
            ``<workload>.jsonl`` in ``--tables``.
        source_gpu: names the source's GPU in the pair's name (``--gpu-pair``), else "".
    """

    kind: str
    source: str
    target: str
    target_gpu: str = "h200"
    source_files: tuple[str, ...] = ()
    target_files: tuple[str, ...] = ()
    source_gpu: str = ""

    @property
    def smaller(self) -> bool:
        return self.target_gpu == SMALLER_GPU

    @property
    def name(self) -> str:
        if self.source_gpu:
            return f"{_short(self.source)}: {self.source_gpu} -> {self.target_gpu}"
        gpu = " (smaller GPU)" if self.smaller else ""
        return f"{_short(self.source)} -> {_short(self.target)}{gpu}"

    @property
    def landscape_key(self) -> tuple[str, str]:
        """What identifies the target's landscape: its tables and the GPU it is searched on."""
        return (":".join(self.target_files) or self.target, self.target_gpu)


def file_pair(source: str | Path, target: str | Path) -> Pair:
    """A pair of two recorded tables given as files (their names name the pair)."""
    return Pair("files", space_name(source), space_name(target), source_files=(str(source),),
                target_files=(str(target),))


def gpu_pairs(source_gpu: str, target_gpu: str, folders: dict[str, Sequence[Path]]) -> list[Pair]:
    """One pair per workload both GPU models recorded: the source GPU's recorded space of the
    workload told as priors to a search of the target GPU's (each side its folders' tables of
    the workload, merged; ``folders`` maps a GPU's spec key to them)."""
    def tables(gpu: str) -> dict[str, tuple[str, ...]]:
        found: dict[str, list[str]] = defaultdict(list)
        for folder in folders[gpu]:
            for path in sorted(Path(folder).glob("*.jsonl")):
                if not is_packed_table(path):  # a packed kernel's table is not the workload's space
                    found[path.name.removesuffix(".jsonl")].append(str(path))
        return {name: tuple(paths) for name, paths in found.items()}

    source, target = tables(source_gpu), tables(target_gpu)
    return [Pair("GPU", name, name, target_gpu=target_gpu, source_files=source[name], target_files=target[name],
                 source_gpu=source_gpu) for name in sorted(source) if name in target]


def _both_ways(kind: str, a: str, b: str) -> list[Pair]:
    return [Pair(kind, a, b), Pair(kind, b, a)]


_D128C, _D128F = "b4_h32_n4096_d128_causal_bfloat16", "b4_h32_n4096_d128_full_bfloat16"
_N16K = "b1_h32_n16384_d128_causal_bfloat16"
_D64C, _D64F = "b8_h16_n2048_d64_causal_bfloat16", "b16_h16_n1024_d64_full_bfloat16"
_D256 = "b2_h16_n8192_d256_full_bfloat16"

#: The default pairs: 4k <-> 16k tokens, head_dim 128 <-> 64 (causal and full),
#: causal <-> full, and H200 -> a smaller GPU (same workload, and with a workload change).
DEFAULT_PAIRS: tuple[Pair, ...] = (
    *_both_ways("tokens", _D128C, _N16K),
    *_both_ways("head_dim", _D128C, _D64C),
    *_both_ways("head_dim", _D128F, _D64F),
    *_both_ways("mask", _D128C, _D128F),
    Pair("smaller GPU", _D128C, _D128C, SMALLER_GPU),
    Pair("smaller GPU", _D128F, _D128F, SMALLER_GPU),
    Pair("smaller GPU", _D256, _D256, SMALLER_GPU),
    Pair("smaller GPU", _D64C, _D64C, SMALLER_GPU),
    Pair("smaller GPU + tokens", _D128C, _N16K, SMALLER_GPU),
    Pair("smaller GPU + mask", _D128C, _D128F, SMALLER_GPU),
)


@dataclass(frozen=True)
class RunSpec:
    pair: Pair
    strategy: str
    seed: int
    priors: bool


@dataclass(frozen=True)
class RunResult:
    spec: RunSpec
    evals: dict[str, int]  # tolerance key -> evaluations (budget + 1: never)
    told: int  # priors told (after the feasibility re-check)
    dropped: int  # priors dropped as infeasible on the target
    seconds: float


# -- the runs, in worker processes ------------------------------------------------------------

_WORKER: dict[str, Any] = {}


def smaller_spec(shared_bytes: int = SMALLER_SHARED_BYTES) -> HardwareSpec:
    """The H200's spec with less shared memory per block: a simulated smaller GPU."""
    h200 = load_spec("h200")
    return dataclasses.replace(h200, name=f"{h200.name} (simulated {shared_bytes} B shared memory)",
                               shared_memory_per_block_bytes=shared_bytes,
                               source=f"simulated: {h200.name} with {shared_bytes} B of shared memory per block")


def target_spec(pair: Pair, shared_bytes: int = SMALLER_SHARED_BYTES) -> HardwareSpec:
    """The spec a pair's target is searched on."""
    return smaller_spec(shared_bytes) if pair.smaller else load_spec(pair.target_gpu)


def init_worker(tables: str, shared_bytes: int, budget: int | None = None) -> None:
    _WORKER["limits"] = quiet_worker()
    _WORKER.update(tables=Path(tables), shared_bytes=shared_bytes, landscapes={}, budget=budget)


def table_paths(tables: Path, pair: Pair, side: str) -> list[Path]:
    """The files of a pair's source or target table (several: parts of one recorded space)."""
    given = pair.source_files if side == "source" else pair.target_files
    return [Path(p) for p in given] if given else [tables / f"{pair.source if side == 'source' else pair.target}.jsonl"]


def _landscape(pair: Pair) -> Landscape:
    cache: dict[tuple[str, str], Landscape] = _WORKER["landscapes"]
    if pair.landscape_key not in cache:
        cache[pair.landscape_key] = build_landscape(table_paths(_WORKER["tables"], pair, "target"),
                                                    target_spec(pair, _WORKER["shared_bytes"]))
    return cache[pair.landscape_key]


def in_space(priors: Sequence[Measurement], space: SearchSpace) -> tuple[Measurement, ...]:
    """Priors with the knobs a recorded target space predates dropped where they hold the value
    the kernel implies (``kernels.space.IMPLIED``).

    Why: re-checking completes a prior with every knob the kernel declares today, and a
    target table recorded before a knob existed has no such parameter, so no prior named a
    config of its space and the priors were silently ignored (cold = priors in every cell).
    """
    kept = []
    for prior in priors:
        extra = {k: v for k, v in prior.config.items() if k not in space.names}
        if extra and all(k in IMPLIED and IMPLIED[k] == v for k, v in extra.items()):
            prior = dataclasses.replace(prior, config=Config({k: v for k, v in prior.config.items() if k in space.names}))
        kept.append(prior)
    return tuple(kept)


class _Reached(Exception):
    """Raised by the run's callback at the first config within the tightest tolerance."""


def run_one(spec: RunSpec) -> RunResult:

    target = _landscape(spec.pair)
    told: tuple = ()
    dropped: tuple = ()
    if spec.priors:
        source_paths = table_paths(_WORKER["tables"], spec.pair, "source")
        if target.workload is None:
            # Another kernel's space: no feasibility model here; the source's whole table is told.
            told = tuple(dataclasses.replace(m, source="prior") for path in source_paths for m in load_table(path))
        else:
            # The path `flashtune tune --prior-from table:SOURCE ...` takes: read, then re-check on the target.
            read = [m for path in source_paths for m in prior_sources.read(prior_sources.PriorSpec("table", str(path)))]
            checked = prior_sources.recheck(read, target.workload, target_spec(spec.pair, _WORKER["shared_bytes"]))
            told, dropped = in_space(checked.told, target.space), checked.dropped
    objective = ReplayObjective(target.table.values())
    goal = target.optimum_ms * (1.0 + min(TOLERANCES.values()))

    def stop_when_reached(trial: Any, trials: Any) -> None:
        if trial.cost_ms <= goal:
            raise _Reached

    strategy = make_strategy(spec.strategy, target.space, seed=spec.seed)
    history = History()
    budget = min(len(target.feasible), _WORKER.get("budget") or len(target.feasible))
    started = time.perf_counter()
    try:
        run(strategy, lambda config: objective.evaluate(config, target.workload), max_trials=budget,
            priors=told, history=history, callbacks=[stop_when_reached])
    except _Reached:
        pass
    seconds = time.perf_counter() - started
    curve = scoring.best_so_far([t.cost_ms for t in history.trials], target.worst_ms)
    evals = {}
    for key, tolerance in TOLERANCES.items():
        hit = scoring.evals_to_within(curve, target.optimum_ms, tolerance) if len(curve) else None
        evals[key] = budget + 1 if hit is None else hit
    return RunResult(spec, evals, len(told), len(dropped), seconds)


# -- aggregation ------------------------------------------------------------------------------


def optimum_moves(source: Landscape, target: Landscape) -> float:
    """How far the optimum moves from source to target: the source's best config's time on the
    target over the target's optimum (1.0: the same config is best on both; inf: the source's
    best failed on the target, is not in its space, or was not recorded there)."""
    config = source.optimum_config
    if config not in target.table:
        # A target table recorded before a knob existed: drop it where it holds the implied value.
        config = next(iter(in_space([dataclasses.replace(source.table[config], config=config)],
                                    target.space))).config
    # Feasible on the target, not only recorded: the smaller GPU's table is the H200's, cut by its spec.
    return target.cost(config) / target.optimum_ms if config in set(target.feasible) else float("inf")



def summarize(results: Sequence[RunResult], pairs: Sequence[Pair], strategies: Sequence[str],
              landscapes: dict[tuple[str, str], Landscape],
              moves: dict[Pair, float] | None = None) -> dict[str, Any]:
    """The JSON report: per pair and strategy, cold and prior evaluations and their ratio;
    with ``moves`` (``optimum_moves`` per pair), the ratio target on the pairs whose optimum
    moves at most ``STABLE_OPTIMUM``."""
    moves = moves or {}
    grouped: dict[tuple[Pair, str, bool], list[RunResult]] = defaultdict(list)
    for r in results:
        grouped[(r.spec.pair, r.spec.strategy, r.spec.priors)].append(r)
    report: dict[str, Any] = {"pairs": [], "negative_transfer": []}
    met = total = 0
    for pair in pairs:
        target = landscapes[pair.landscape_key]
        entry: dict[str, Any] = {
            "name": pair.name, "kind": pair.kind, "source": pair.source, "target": pair.target,
            "source_files": list(pair.source_files), "target_files": list(pair.target_files),
            "target_gpu": pair.target_gpu, "target_feasible": len(target.feasible),
            "target_optimum_ms": target.optimum_ms, "target_optimum_config": target.optimum_config.to_dict(),
            "target_within_2pct": target.within(0.02),
            "random_expected_evals_to_2pct": target.random_evals_to_within(0.02), "strategies": {},
            # JSON has no inf: a source best that fails or does not fit on the target is None
            # here, flagged apart (and never a pair whose optimum stays).
            "source_best_on_target": moves[pair] if math.isfinite(moves.get(pair, math.inf)) else None,
            "source_best_fails_on_target": pair in moves and not math.isfinite(moves[pair]),
        }
        for name in strategies:
            cold, warm = grouped[(pair, name, False)], grouped[(pair, name, True)]
            cell = _cell(cold, warm)
            entry["strategies"][name] = cell
            total += 1
            met += cell["target_met"]
            if cell["negative"]:
                report["negative_transfer"].append({"pair": pair.name, "strategy": name, **{
                    k: cell[k] for k in ("cold_median", "prior_median", "ratio", "seeds_worse")}})
        report["pairs"].append(entry)
    report["target"] = {"cells": total, "met": met, "worse_than_20pct": sum(
        1 for p in report["pairs"] for c in p["strategies"].values() if c["ratio"] > WORST_RATIO)}
    stable = [p for p in report["pairs"]
              if p["source_best_on_target"] is not None and p["source_best_on_target"] <= STABLE_OPTIMUM]
    report["target"]["stable_optimum"] = {
        "threshold": STABLE_OPTIMUM, "pairs": len(stable),
        "cells": sum(len(p["strategies"]) for p in stable),
        "met": sum(c["target_met"] for p in stable for c in p["strategies"].values()),
    }
    return report


def _cell(cold: Sequence[RunResult], warm: Sequence[RunResult]) -> dict[str, Any]:
    key = "evals_to_2pct"
    by_seed = {r.spec.seed: r for r in cold}
    cold_median = float(np.median([r.evals[key] for r in cold]))
    prior_median = float(np.median([r.evals[key] for r in warm]))
    ratio = prior_median / cold_median
    paired = [(r.evals[key], by_seed[r.spec.seed].evals[key]) for r in warm if r.spec.seed in by_seed]
    return {
        "cold": {k: scoring.spread([r.evals[k] for r in cold]) for k in TOLERANCES},
        "prior": {k: scoring.spread([r.evals[k] for r in warm]) for k in TOLERANCES},
        "cold_median": cold_median, "prior_median": prior_median, "ratio": ratio,
        "target_met": ratio <= TARGET_RATIO + 1e-9,
        "negative": prior_median > cold_median,
        # Seeds where the run with priors needed more evaluations than the same seed cold.
        "seeds_worse": sum(p > c for p, c in paired), "seeds": len(paired),
        "priors_told": int(np.median([r.told for r in warm])) if warm else 0,
        "priors_dropped": int(np.median([r.dropped for r in warm])) if warm else 0,
        "seconds_per_run": float(np.mean([r.seconds for r in [*cold, *warm]])),
    }


def format_table(report: dict[str, Any]) -> str:
    """Median evaluations to 2 %: cold / with priors, per pair (rows) and strategy (columns)."""
    strategies = list(report["pairs"][0]["strategies"]) if report["pairs"] else []
    width = max([8, *(len(s) for s in strategies)]) + 6
    name_width = max(len(p["name"]) for p in report["pairs"]) if report["pairs"] else 10
    lines = [f"evaluations to come within 2 % of the optimum, median over {report['seeds']} seeds: "
             "cold / with priors (x: the priors need more; *: at most a third of cold)",
             f"{'pair':<{name_width}s} {'drop':>5s} {'moves':>6s} " + " ".join(f"{s:>{width}s}" for s in strategies)]
    for pair in report["pairs"]:
        cells = []
        for name in strategies:
            cell = pair["strategies"][name]
            mark = "x" if cell["negative"] else "*" if cell["target_met"] else " "
            cells.append(f"{_num(cell['cold_median'])} / {_num(cell['prior_median'])}{mark}")
        dropped = max(c["priors_dropped"] for c in pair["strategies"].values())
        moved = pair.get("source_best_on_target")
        moved_text = "fails" if pair.get("source_best_fails_on_target") else "" if moved is None else f"{moved:.3f}"
        lines.append(f"{pair['name']:<{name_width}s} {dropped:>5d} {moved_text:>6s} "
                     + " ".join(f"{c:>{width}s}" for c in cells))
    target = report["target"]
    lines.append("moves: the source's best config's time on the target over the target's optimum")
    lines.append(f"at most a third of cold start: {target['met']} of {target['cells']} pair x strategy cells; "
                 f"more than 20 % worse than cold start: {target['worse_than_20pct']}")
    stable = target.get("stable_optimum")
    if stable is not None:
        lines.append(f"where the optimum moves at most {100 * (stable['threshold'] - 1):.0f} % "
                     f"({stable['pairs']} pair(s)): at most a third of cold start in {stable['met']} of "
                     f"{stable['cells']} cells")
    if report["negative_transfer"]:
        lines.append("negative transfer (median with priors above cold start):")
        for case in report["negative_transfer"]:
            lines.append(f"  {case['strategy']:>7s} on {case['pair']}: {_num(case['cold_median'])} -> "
                         f"{_num(case['prior_median'])} (x{case['ratio']:.2f}; "
                         f"{case['seeds_worse']} seeds worse)")
    else:
        lines.append("negative transfer: none")
    return "\n".join(lines)


def _num(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"


def _short(name: str) -> str:
    return name.removesuffix("_bfloat16")


# -- command line -----------------------------------------------------------------------------
