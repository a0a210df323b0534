"""``flashtune compare``: search strategies x seeds x workloads on recorded spaces.

Every run is the real thing, replayed: ``make_strategy`` + the run loop +
``ReplayObjective``, exactly as a study would run on the GPU, only the measurements come
from the table (Kernel Tuner's simulation mode). With no arguments it compares every
registered strategy on every table in ``experiments/data/h200``.

Reported per strategy and workload, over seeds:

- score: Kernel Tuner's methodology (``flashtune.experiments.evaluation.scoring``), the mean over
  seeds (the score of the mean curve, as Kernel Tuner averages repeats; random search's
  is then exactly 0 in expectation, where its median over seeds is not: one unlucky
  run costs more than a lucky one gains). The median and quartiles are reported too.
  A strategy's ``score`` is the mean of its per-workload scores. The score averages
  over the methodology's budget, capped at the runs' budget (``score_window``): past
  ``--budget`` a run has no evaluations to score.
- evals_to_2pct / evals_to_5pct: evaluations until the best so far is within 2 % / 5 %
  of the exhaustive optimum. A run that never gets there counts as budget + 1 (so
  medians stay finite); ``reached`` says which fraction of the runs got there.

- time_score: the same score over a time budget, as Kernel Tuner's methodology counts it:
  each evaluation takes its config's recorded compile + benchmark time (a repeat is free;
  ``scoring.time_score``). Where a table's builds came from a compile cache (our H200
  tables on some workloads: compile_s ~0.01 s against 0.6-0.9 s), the report says the
  time score is not comparable there.

Where the spaces are of several kernels (Kernel Tuner's files: gemm, pnpoly, ...), the report
leads with leave one kernel out over the cold runs (JSON ``loko``, ``loko.py``): each kernel
held out in turn, the strategy that wins on the others scored on it, Kernel Tuner's strategies
of the same run (``--kernel-tuner``) beside them. Then the cold comparison (no priors): that is
where strategies are compared. With ``--priors loo`` (the default) a held-out comparison follows it in the same
report (JSON ``held_out``, ``curves_held_out*.png``): each workload's search is warm-started
with the other recorded workloads' tables as priors (leave one workload out), never its
own, so nothing a strategy learns comes from the workload it is scored on. The strategies
run with their registered defaults unless ``--option`` sets some; the report's evaluation
line says which (``evaluation_line``). Where the priors already place the optimum first
for every strategy, a note says the strategies are not being compared there.
``--priors none`` runs the cold comparison only.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from flashtune.experiments import DATA_DIR
from flashtune.experiments.evaluation import kernel_tuner_peer, scoring
from flashtune.experiments.evaluation.landscape import Landscape, build_landscape
from flashtune.experiments.evaluation.loko import format_loko
from flashtune.experiments.evaluation.replay_batch import quiet_worker
from flashtune.kernels.config import Config
from flashtune.objectives.hardware import load_spec
from flashtune.objectives.kernel_tuner_files import is_kernel_tuner_file, read_json
from flashtune.objectives.replay import ReplayObjective
from flashtune.objectives.types import Measurement
from flashtune.search import make_strategy, run

DEFAULT_TABLES = DATA_DIR / "h200"
TOLERANCES = {"evals_to_2pct": 0.02, "evals_to_5pct": 0.05}
PRIOR_MODES = ("loo", "none")
#: What the report says about where each search's knowledge came from.
EVALUATION = {
    "loo": "held out (leave one workload out): each workload's search is warm-started with the other "
           "workloads' tables as priors, never its own",
    "none": "cold: no priors",
}


def evaluation_line(mode: str, options: Mapping[str, Mapping[str, Any]]) -> str:
    """``EVALUATION[mode]`` and the strategy options the runs used: the registered defaults,
    or the ones given (``--option``), so a report never claims defaults it did not run."""
    given = [f"{strategy}.{name}={value!r}" for strategy, values in sorted(options.items())
             for name, value in sorted(values.items())]
    used = ("strategy options: " + ", ".join(given) + " (the rest the registered defaults)" if given
            else "strategy options are the registered defaults")
    return f"{EVALUATION[mode]}; {used}"


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One run: a strategy with its options, on one workload, with one seed."""

    strategy: str
    options: tuple[tuple[str, Any], ...]
    workload: str
    seed: int
    budget: int
    priors: str = "none"  # one of PRIOR_MODES


@dataclasses.dataclass(frozen=True)
class RunResult:
    spec: RunSpec
    costs: tuple[float, ...]  # ms per trial in order, inf for failures
    seconds: float
    #: The recorded time (s) each trial's config took to compile and benchmark, in trial
    #: order; 0 for a config the run had already measured (a repeat is free). Empty when
    #: the table records no times.
    eval_seconds: tuple[float, ...] = ()


# -- the runs, in worker processes ----------------------------------------------------

_WORKER: dict[str, Any] = {}


def init_worker(paths: Sequence[Sequence[str]], hardware: str, noise: bool) -> None:
    """Load the tables once per process (``paths``: each workload's tables); keep numeric
    libraries to one thread each."""
    _WORKER["limits"] = quiet_worker()
    spec = load_spec(hardware)
    landscapes = {ls.name: ls for ls in (build_landscape(p, spec) for p in paths)}
    times = {name: eval_times(ls)[0] for name, ls in landscapes.items()}
    _WORKER.update(landscapes=landscapes, noise=noise, times=times)


def run_one(spec: RunSpec) -> RunResult:
    landscapes: dict[str, Landscape] = _WORKER["landscapes"]
    landscape = landscapes[spec.workload]
    objective = ReplayObjective(landscape.table.values(), noise=_WORKER["noise"], seed=spec.seed)
    priors: list[Measurement] = []
    if spec.priors == "loo":
        priors = [dataclasses.replace(m, source="prior")
                  for other in landscapes.values() if other.name != landscape.name for m in other.table.values()]
    strategy = make_strategy(spec.strategy, landscape.space, seed=spec.seed, **dict(spec.options))
    started = time.perf_counter()
    history = run(strategy, lambda config: objective.evaluate(config, landscape.workload),
                  max_trials=spec.budget, priors=priors)
    seconds = time.perf_counter() - started
    times: dict[Config, float] | None = _WORKER["times"][spec.workload]
    eval_seconds: list[float] = []
    if times is not None:
        seen: set[Config] = set()
        for t in history.trials:
            eval_seconds.append(0.0 if t.config in seen else times.get(t.config, 0.0))
            seen.add(t.config)
    return RunResult(spec, tuple(t.cost_ms for t in history.trials), seconds, tuple(eval_seconds))


# -- the recorded time of an evaluation ---------------------------------------------------

#: Below this median compile time (s) a table's builds came from a compile cache: its
#: time budget is mostly benchmark time, not comparable with a table that compiled.
CACHED_BUILD_S = 0.05


def eval_times(ls: Landscape) -> tuple[dict[Config, float] | None, str]:
    """The recorded seconds each config's evaluation took (compile + benchmark), and what they count.

    Kernel Tuner caches: ``compile_time`` + ``benchmark_time`` (ms); T4: ``compilation`` + the
    sum of ``runtimes`` (ms); our tables: ``compile_s`` only (the benchmark's wall time is
    not recorded). A config without a recorded time (a build that failed before it was
    timed) takes the median of the recorded ones, and the description says how many did.
    None where no config has a time: no time score then.
    """
    if len(ls.paths) <= 1 and is_kernel_tuner_file(ls.path):
        data = read_json(ls.path)
        if "cache" in data:
            records = list(data["cache"].values())
            times = [_sum_ms(r.get("compile_time"), r.get("benchmark_time")) for r in records]
            what = "compile_time + benchmark_time (Kernel Tuner cache)"
        else:
            records = [r.get("times") or {} for r in data["results"]]
            times = [_sum_ms(r.get("compilation"), sum(r.get("runtimes") or []) if r.get("runtimes") else None)
                     for r in records]
            what = "compilation + runtimes (T4)"
        if len(times) != len(ls.table):
            return None, "not recorded config by config"
    else:
        times = [m.compile_s if math.isfinite(m.compile_s) and m.compile_s >= 0 else None for m in ls.table.values()]
        what = "compile_s only (benchmark time not recorded)"
    recorded = [t for t in times if t is not None]
    if not recorded:
        return None, "not recorded"
    missing = len(times) - len(recorded)
    if missing:
        fill = float(np.median(recorded))
        times = [fill if t is None else t for t in times]
        what += f"; {missing} config(s) without a time take the median"
    return dict(zip(ls.table, times)), what


def _sum_ms(*values: Any) -> float | None:
    """Seconds of the recorded milliseconds; None if any is missing or not a number."""
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) for v in values):
        return None
    return sum(values) / 1e3


def time_summary(ls: Landscape) -> dict[str, Any]:
    """What the time score of a workload counts: mean seconds per evaluation, the median
    compile time, and whether the builds were cached (then not comparable)."""
    times, what = eval_times(ls)
    if times is None:
        return {"counts": what, "mean_s": None, "compile_median_s": None, "cached_builds": None}
    compile_s = [m.compile_s for m in ls.table.values() if math.isfinite(m.compile_s)]
    median_compile = float(np.median(compile_s)) if compile_s else math.nan
    return {"counts": what, "mean_s": float(np.mean([times[c] for c in ls.feasible])),
            "compile_median_s": median_compile, "cached_builds": bool(median_compile < CACHED_BUILD_S)}


# -- aggregation ------------------------------------------------------------------------


def run_curve(landscape: Landscape, result: RunResult) -> np.ndarray:
    """A run's best-so-far curve in ms (a run without trials: the space's worst)."""
    if not result.costs:
        return np.array([landscape.worst_ms])
    return scoring.best_so_far(result.costs, landscape.worst_ms)


def evals_to(landscape: Landscape, results: Sequence[RunResult], tolerance: float) -> list[int]:
    """Evaluations each run needed to come within ``tolerance``; budget + 1 if it never did."""
    counts = []
    for r in results:
        hit = scoring.evals_to_within(run_curve(landscape, r), landscape.optimum_ms, tolerance)
        counts.append(r.spec.budget + 1 if hit is None else hit)
    return counts


def summarize_runs(landscape: Landscape, results: Sequence[RunResult]) -> dict[str, Any]:
    """Scores and evaluations-to-target of one strategy's runs on one workload."""
    window = score_window(landscape, results)
    scores = [scoring.methodology_score(run_curve(landscape, r), landscape.random_curve, landscape.optimum_ms, window)
              for r in results]
    summary: dict[str, Any] = {"score": scoring.spread(scores), "score_window": window}
    mean_s = time_summary(landscape)["mean_s"]
    if mean_s and all(len(r.eval_seconds) == len(r.costs) for r in results):
        # Kernel Tuner's time budget: the window's evaluations at the space's mean time each.
        time_scores = [scoring.time_score(scoring.fill_failures(r.costs, landscape.worst_ms) if r.costs
                                          else np.array([landscape.worst_ms]),
                                          r.eval_seconds or (0.0,), landscape.random_curve, mean_s,
                                          landscape.optimum_ms, window * mean_s) for r in results]
        summary["time_score"] = scoring.spread(time_scores)
        summary["time_budget_s"] = window * mean_s
    for key, tolerance in TOLERANCES.items():
        counts = evals_to(landscape, results, tolerance)
        reached = sum(c <= r.spec.budget for c, r in zip(counts, results))
        summary[key] = {**scoring.spread(counts), "reached": reached / len(results)}
    summary["seconds_per_run"] = float(np.mean([r.seconds for r in results]))
    summary["runs"] = len(results)
    return summary


def score_window(landscape: Landscape, results: Sequence[RunResult]) -> int:
    """The evaluations a score averages over: the methodology's budget, capped at the
    shortest run's budget (beyond it a run was not allowed to search)."""
    return min([landscape.score_budget, *(r.spec.budget for r in results)])


def relative_curves(landscape: Landscape, results: Sequence[RunResult], length: int) -> np.ndarray:
    """Best so far / optimum for each run (rows), padded with the last value to ``length``."""
    rows = []
    for r in results:
        curve = run_curve(landscape, r)
        curve = np.concatenate([curve[:length], np.full(max(length - len(curve), 0), curve[-1])])
        rows.append(curve / landscape.optimum_ms)
    return np.array(rows)


def aggregate(landscapes: Sequence[Landscape], results: Sequence[RunResult], strategies: Sequence[str]) -> dict[str, Any]:
    """The JSON report of one comparison (one priors mode): the comparison schema, plus per-workload detail.

    A strategy's ``score`` is the mean of its per-workload scores (``time_score`` likewise,
    over the workloads with recorded times); its ``evals_to_*`` spread pools the runs of
    every workload.
    """
    grouped: dict[tuple[str, str], list[RunResult]] = defaultdict(list)
    for r in results:
        grouped[(r.spec.strategy, r.spec.workload)].append(r)
    report: dict[str, Any] = {
        # Each workload's own: spaces differ (head dim 256 leaves fewer configs feasible).
        "space_size": {ls.name: ls.space.size for ls in landscapes},
        "feasible": {ls.name: len(ls.feasible) for ls in landscapes},
        "workloads": {ls.name: _landscape_summary(ls) for ls in landscapes},
        "strategies": {},
    }
    for name in strategies:
        per_workload = {ls.name: summarize_runs(ls, grouped[(name, ls.name)]) for ls in landscapes}
        entry: dict[str, Any] = {"score": float(np.mean([w["score"]["mean"] for w in per_workload.values()]))}
        for key, tolerance in TOLERANCES.items():
            entry[key] = scoring.spread([c for ls in landscapes for c in evals_to(ls, grouped[(name, ls.name)], tolerance)])
        # The fraction of all runs (every workload, every seed) that came within 2 % in budget.
        entry["hit_rate_2pct"] = float(np.mean([w["evals_to_2pct"]["reached"] for w in per_workload.values()]))
        timed = [w["time_score"]["mean"] for w in per_workload.values() if "time_score" in w]
        entry["time_score"] = float(np.mean(timed)) if timed else None
        entry["workloads"] = per_workload
        report["strategies"][name] = entry
    report["first_is_optimal"] = first_is_optimal(report)
    return report


def same_run_peer(landscapes: Sequence[Landscape], report: dict[str, Any], strategies: Sequence[str], seeds: int,
                  budget: int) -> dict[str, Any]:
    """Kernel Tuner's own strategies on this report's Kernel Tuner cache files, beside ours on the same files.

    Only cache files: Kernel Tuner's simulation mode replays its own cache format, not T4 (a
    T4 space of the report is left out of both sides of this comparison). Ours on those
    spaces (``ours_hit_rate_2pct``) is the mean over the same spaces of the share of runs
    within 2 % in budget, as Kernel Tuner's is.
    """
    caches = {ls.name: ls.path for ls in landscapes if len(ls.paths) <= 1 and _is_cache(ls.path)}
    peer = kernel_tuner_peer.run([caches[n] for n in caches], strategies, seeds, budget) if caches else {
        "budget": budget, "seeds": seeds, "tolerance": TOLERANCES["evals_to_2pct"], "strategies": {}}
    peer["spaces"] = list(caches)
    peer["ours_hit_rate_2pct"] = {
        name: float(np.mean([entry["workloads"][w]["evals_to_2pct"]["reached"] for w in caches])) if caches else None
        for name, entry in report["strategies"].items()}
    return peer


def _is_cache(path: Any) -> bool:
    return is_kernel_tuner_file(path) and "cache" in read_json(path)


def unchanged_by_priors(cold: Sequence[RunResult], held_out: Sequence[RunResult]) -> list[str]:
    """Workloads where every held-out run measured exactly what its cold twin (same strategy,
    options and seed) measured: the other workloads' tables gave no usable prior (another
    kernel's parameters), so the held-out comparison there repeats the cold one."""
    def key(r: RunResult) -> tuple:
        return r.spec.strategy, r.spec.options, r.spec.workload, r.spec.seed, r.spec.budget

    twins = {key(r): r.costs for r in cold}
    workloads = sorted({r.spec.workload for r in held_out})
    return [w for w in workloads
            if all(twins.get(key(r)) == r.costs for r in held_out if r.spec.workload == w)]


def first_is_optimal(report: dict[str, Any]) -> list[str]:
    """Workloads where every strategy's first evaluation is already within 2 % (median over
    seeds): there the priors, not the strategies, found the optimum, and nothing is compared."""
    names = list(report["workloads"])
    return [w for w in names if report["strategies"] and all(
        e["workloads"][w]["evals_to_2pct"]["median"] <= 1 for e in report["strategies"].values())]


def _landscape_summary(ls: Landscape) -> dict[str, Any]:
    return {
        "tables": [str(p) for p in ls.paths or (ls.path,)],
        "space_size": ls.space.size,
        "feasible": len(ls.feasible),
        "optimum_ms": ls.optimum_ms,
        "optimum_config": ls.optimum_config.to_dict(),
        "median_ms": ls.median_ms,
        "within_2pct": ls.within(0.02),
        "within_5pct": ls.within(0.05),
        "score_budget": ls.score_budget,
        "random_expected_evals_to_2pct": ls.random_evals_to_within(0.02),
        "random_expected_evals_to_5pct": ls.random_evals_to_within(0.05),
        "eval_time": time_summary(ls),
    }


# -- command line -----------------------------------------------------------------------


def format_table(report: dict[str, Any]) -> str:
    """The report as text, each part labelled: leave one kernel out first (where the spaces are of
    several kernels: what a choice among the strategies is worth on a kernel it was not made
    on), then the cold comparison, then the held-out one (when run)."""
    sections = []
    if report.get("loko"):
        sections.append(format_loko(report["loko"], peers=report["loko"].get("peers")))
    sections.append(format_comparison(report, "COLD (no priors): the strategies compared", held_out=False))
    if report.get("held_out"):
        sections.append(format_comparison(report["held_out"], "HELD OUT (priors from the other workloads)",
                                          held_out=True))
    peer = report.get("kernel_tuner")
    if peer and peer["strategies"]:
        ours = sorted(peer["ours_hit_rate_2pct"].items(), key=lambda kv: -kv[1])
        theirs = sorted(((n, e["hit_rate_2pct"]) for n, e in peer["strategies"].items()), key=lambda kv: -kv[1])
        sections.append(f"same run, cold, on the {len(peer['spaces'])} Kernel Tuner cache file(s) only, hit rate "
                        f"within 2 % in {peer['budget']}: ours " + ", ".join(f"{n} {h:.2f}" for n, h in ours)
                        + f"; Kernel Tuner's ({peer['seeds']} seeds, simulation mode) "
                        + ", ".join(f"{n} {h:.2f}" for n, h in theirs))
    return "\n\n".join(sections)


def format_comparison(report: dict[str, Any], title: str, held_out: bool) -> str:
    """One comparison's table: score (mean over seeds) and median evaluations to 2 % per
    strategy and workload, the time score where the tables record times, and the notes."""
    workloads = list(report["workloads"])
    short = [_short(w) for w in workloads]
    width = max([12, *(len(s) for s in short)])
    lines = [f"== {title}",
             "score (mean over seeds; 0 = random search, 1 = optimum at once) / evals to 2 % (median over seeds)"]
    if report.get("evaluation"):
        lines.append(f"evaluation: {report['evaluation']}")
    header = f"{'strategy':>10s} " + " ".join(f"{s:>{width}s}" for s in short) + f" {'overall':>{width}s}"
    lines.append(header)
    lines.append(f"{'space':>10s} " + " ".join(f"{report['workloads'][w]['space_size']:>{width}d}" for w in workloads))
    lines.append(f"{'feasible':>10s} " + " ".join(f"{report['workloads'][w]['feasible']:>{width}d}" for w in workloads))
    windows = [min((e["workloads"][w]["score_window"] for e in report["strategies"].values()), default=0)
               for w in workloads]
    lines.append(f"{'window':>10s} " + " ".join(f"{n:>{width}d}" for n in windows))
    lines.append(f"{'random E':>10s} " + " ".join(
        f"{'0.00 / ' + format(report['workloads'][w]['random_expected_evals_to_2pct'], '.0f'):>{width}s}" for w in workloads))
    for name, entry in report["strategies"].items():
        cells = []
        for w in workloads:
            detail = entry["workloads"][w]
            cells.append(f"{detail['score']['mean']:+.2f} / {detail['evals_to_2pct']['median']:.0f}")
        overall = f"{entry['score']:+.2f} / {entry['evals_to_2pct']['median']:.0f}"
        lines.append(f"{name:>10s} " + " ".join(f"{c:>{width}s}" for c in cells) + f" {overall:>{width}s}")
    hits = {name: entry.get("hit_rate_2pct") for name, entry in report["strategies"].items()}
    if all(h is not None for h in hits.values()):
        lines.append("hit rate (runs within 2 % of the optimum in budget): "
                     + ", ".join(f"{n} {h:.2f}" for n, h in sorted(hits.items(), key=lambda kv: -kv[1])))
    lines.extend(_time_lines(report, workloads, short, width))
    trivial = report.get("first_is_optimal") or []
    if trivial and held_out:
        # First, before any figure: the table below does not compare strategies on these.
        lines.insert(1, f"NOTE: on {len(trivial)} of {len(workloads)} workloads every strategy's first evaluation is "
                        f"within 2 % ({', '.join(_short(w) for w in trivial)}): the held-out priors placed the "
                        "optimum first there, so the strategies are not being compared; the cold comparison "
                        "compares them")
    same = report.get("same_as_cold") or []
    if same and held_out:
        lines.insert(1, f"NOTE: on {len(same)} of {len(workloads)} workloads ({', '.join(_short(w) for w in same)}) "
                        "the priors changed no run (the other tables gave none this space can use): the held-out "
                        "comparison there repeats the cold one")
    return "\n".join(lines)


def _time_lines(report: dict[str, Any], workloads: Sequence[str], short: Sequence[str], width: int) -> list[str]:
    """The time-budget score rows and the note on what each workload's times count."""
    timed = [w for w in workloads if report["workloads"][w]["eval_time"]["mean_s"]]
    if not timed or not report["strategies"]:
        return []
    lines = ["time score (Kernel Tuner's methodology over a time budget: each evaluation takes its config's "
             "recorded compile + benchmark time, a repeat is free; mean over seeds)"]
    lines.append(f"{'s/eval':>10s} " + " ".join(
        f"{format(report['workloads'][w]['eval_time']['mean_s'], '.3g') if w in timed else '-':>{width}s}"
        for w in workloads))
    for name, entry in report["strategies"].items():
        cells = [f"{entry['workloads'][w]['time_score']['mean']:+.2f}" if "time_score" in entry["workloads"][w]
                 else "-" for w in workloads]
        overall = f"{entry['time_score']:+.2f}" if entry.get("time_score") is not None else "-"
        lines.append(f"{name:>10s} " + " ".join(f"{c:>{width}s}" for c in cells) + f" {overall:>{width}s}")
    counts = sorted({report["workloads"][w]["eval_time"]["counts"] for w in timed})
    lines.append("times counted: " + "; ".join(counts))
    cached = [w for w in timed if report["workloads"][w]["eval_time"]["cached_builds"]]
    if cached:
        compiled = [w for w in timed if w not in cached]
        lines.append(
            f"NOTE: time score not comparable across workloads: {len(cached)} of {len(timed)} were recorded from "
            f"cached builds (median compile {_seconds(report, cached)}: "
            f"{', '.join(_short(w) for w in cached)})"
            + (f", the others compiled (median compile {_seconds(report, compiled)})" if compiled else "")
            + "; a cached build's recorded time is not what building it costs")
    return lines


def _seconds(report: dict[str, Any], workloads: Sequence[str]) -> str:
    values = [report["workloads"][w]["eval_time"]["compile_median_s"] for w in workloads]
    return f"{min(values):.3g}-{max(values):.3g} s" if len(values) > 1 else f"{values[0]:.3g} s"


def _short(name: str) -> str:
    """``b4_h32_n4096_d128_causal_bfloat16`` -> ``b4_h32_n4096_d128_causal`` (dtype is bf16 throughout)."""
    return name.removesuffix("_bfloat16")
