"""The tuner target on the CPU, by replay: does ``flashtune tune`` with the default
strategy reach within 2 % of each workload's best of the recorded space in <= 40 trials?

Each run is what a ``flashtune tune --objective replay`` study does (the default strategy
with its registered options, the kernel's whole space narrowed to the recorded configs that
the feasibility model admits, the replay measurer), without the study's MLflow and Optuna
bookkeeping, which do not change what is proposed (seed 0 on D256 proposes the trials
``flashtune tune --seed 0`` does). By default the workloads run as ``flashtune tune`` runs
several (``flashtune study h200``): in suite order, each study told the trials of the ones
before it (``--priors chain``); ``--priors none`` is a lone cold study. Not ``flashtune
compare``'s runs: those search a space of the recorded knob values only, whose start design
differs. Per workload and seed: the trial at which the best so far first comes within the
tolerance of the table's optimum, and how far from it the best of the budget is. The target
is met on a workload when every seed gets there within the budget.

What replay cannot say: configs no table records (``loads="lean_ws_oneloop"`` was timed
only by bench_peers, never swept) are outside the replayed space, so "the new best" here is
the best recorded config. Usage::

    python docs/lab/tools/tuner_target.py --seeds 5 --json target.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from flashtune.experiments import DATA_DIR
from flashtune.experiments.cli.tune import DEFAULT_STRATEGY
from flashtune.experiments.evaluation import priors as prior_sources  # "priors" names a mode here
from flashtune.experiments.evaluation.compare import PRIOR_MODES
from flashtune.experiments.evaluation.landscape import Landscape, build_landscape, group_by_workload, table_files
from flashtune.experiments.study.measurers import RECORDED_SPACE, ReplayDirs, open_replay
from flashtune.objectives.feasibility import for_workload
from flashtune.objectives.hardware import HardwareSpec, load_spec
from flashtune.objectives.types import SUITE, Measurement, Workload
from flashtune.search import History, SearchSpace, make_strategy, run

#: The recorded space of the tuner target, the one ``flashtune tune`` replays on the H200 by default.
DEFAULT_TABLES = tuple(DATA_DIR / name for name in RECORDED_SPACE["h200"])
BUDGET = 40
TOLERANCE = 0.02


@dataclass(frozen=True)
class WorkloadOutcome:
    """One workload's runs against the target."""

    workload: str
    optimum_tflops: float
    optimum_config: dict
    feasible: int
    within_tolerance: int  # feasible configs within the tolerance of the optimum
    trials_to_target: tuple[int | None, ...]  # per seed; None: not within the budget
    best_fraction: tuple[float, ...]  # per seed: optimum ms / best ms of the budget (1.0 = the optimum)
    best_configs: tuple[dict, ...]  # per seed: the best config of the budget

    @property
    def met(self) -> bool:
        return all(t is not None for t in self.trials_to_target)

    def to_dict(self) -> dict:
        return {"workload": self.workload, "optimum_tflops": self.optimum_tflops, "optimum_config": self.optimum_config,
                "feasible": self.feasible, "within_tolerance": self.within_tolerance,
                "trials_to_target": list(self.trials_to_target), "best_fraction": list(self.best_fraction),
                "best_configs": list(self.best_configs), "met": self.met}


def trials_to_within(costs: Sequence[float], optimum_ms: float, tolerance: float) -> int | None:
    """The 1-based trial at which a cost first comes within ``tolerance`` of the optimum."""
    for i, cost in enumerate(costs, 1):
        if cost <= optimum_ms * (1 + tolerance):
            return i
    return None


#: Where each workload's search gets priors: ``"chain"`` (the trials of the studies run before
#: it, in suite order, same seed: what ``flashtune tune`` over several workloads does, e.g.
#: ``flashtune study h200``), ``"none"`` (cold: one ``--workload``, or ``--independent``) or
#: ``"loo"`` (the other workloads' whole tables, as ``--prior-from table:...`` would).
TARGET_PRIOR_MODES = ("chain", *PRIOR_MODES)
PRIORS_SAID = {"chain": "each told the earlier studies of its seed (suite order)", "none": "cold",
               "loo": "held-out priors"}


def evaluate(landscapes: Sequence[Landscape], paths: Sequence[Sequence[str]], *, strategy: str, seeds: int,
             budget: int, tolerance: float, hardware: str, noise: bool = False,
             priors: str = "none") -> list[WorkloadOutcome]:
    """Run ``strategy`` on each landscape for ``seeds`` seeds of ``budget`` trials, with the
    priors ``priors`` names (one of ``TARGET_PRIOR_MODES``)."""
    import optuna

    if priors not in TARGET_PRIOR_MODES:
        raise ValueError(f"priors must be one of {TARGET_PRIOR_MODES}, got {priors!r}")
    spec = load_spec(hardware)
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        with tempfile.TemporaryDirectory() as folder:
            # The parts may be files of any name; tune's replay finds a table by its workload's
            # name, in each of its folders in turn (a config in two: the later folder's row, as
            # with repeated --replay-dir): a workload's k-th part goes to folder k.
            replay_dirs = [Path(folder) / str(k) for k in range(max(map(len, paths), default=0))]
            for ls, parts in zip(landscapes, paths):
                for replay_dir, part in zip(replay_dirs, parts):
                    replay_dir.mkdir(exist_ok=True)
                    (replay_dir / f"{ls.name}.jsonl").write_bytes(Path(part).read_bytes())
            runs: dict[str, list[History]] = {ls.name: [] for ls in landscapes}
            for seed in range(seeds):
                if priors == "chain":
                    studies = replay_run(sorted(landscapes, key=_suite_position), replay_dirs, spec,
                                         strategy=strategy, seed=seed, budget=budget, noise=noise)
                else:
                    studies = {ls.name: replay_study(ls.workload, replay_dirs, spec, strategy=strategy, seed=seed,
                                                     budget=budget, noise=noise,
                                                     priors=_held_out(ls, landscapes) if priors == "loo" else [])
                               for ls in landscapes}
                for name, history in studies.items():
                    runs[name].append(history)
            return [_outcome(ls, runs[ls.name], tolerance) for ls in landscapes]
    finally:
        optuna.logging.set_verbosity(verbosity)


def replay_run(landscapes: Sequence[Landscape], replay_dirs: ReplayDirs, spec: HardwareSpec, *, strategy: str, seed: int,
               budget: int, noise: bool = False) -> dict[str, History]:
    """The studies of one ``flashtune tune --objective replay`` run over several workloads (in the
    order given, as ``--workload`` options), by name: each told the trials of the ones before
    it, re-checked on its workload (as ``tune`` makes them: ``priors.from_study``, ``recheck``)."""
    studies: dict[str, History] = {}
    earlier: list[Measurement] = []
    for ls in landscapes:
        told = prior_sources.recheck(earlier, ls.workload, spec).told
        studies[ls.name] = replay_study(ls.workload, replay_dirs, spec, strategy=strategy, seed=seed, budget=budget,
                                        priors=told, noise=noise)
        earlier += prior_sources.from_study([t.measurement for t in studies[ls.name].trials], f"replay:{ls.name}")
    return studies


def _suite_position(ls: Landscape) -> int:
    """Where ``flashtune tune`` runs this workload's study: the suite's order, others after."""
    return SUITE.index(ls.workload) if ls.workload in SUITE else len(SUITE)


def _held_out(ls: Landscape, landscapes: Sequence[Landscape]) -> list[Measurement]:
    """The other workloads' tables as priors ("loo")."""
    return [dataclasses.replace(m, source="prior") for other in landscapes if other.name != ls.name
            for m in other.table.values()]


def replay_study(workload: Workload, replay_dirs: ReplayDirs, spec: HardwareSpec, *, strategy: str, seed: int, budget: int,
                 priors: Sequence[Measurement] = (), noise: bool = False) -> History:
    """The trials of one ``flashtune tune --objective replay --replay-dir FOLDER`` study, as
    ``experiments.study.runner`` sets it up: the replay measurer, the kernel's whole space
    narrowed to the recorded configs the feasibility model admits, the strategy seeded."""
    measurer = open_replay(spec, [workload], replay_dirs, noise=noise, seed=seed)
    try:
        space = for_workload(workload, spec)
        fits, recorded = space.is_feasible, measurer.constraint(workload)
        space = SearchSpace(space.tunables, lambda config: fits(config) and recorded(config))
        return run(make_strategy(strategy, space, seed=seed), measurer.evaluator(workload), max_trials=budget,
                   priors=priors)
    finally:
        measurer.close()


def _outcome(ls: Landscape, histories: Sequence[History], tolerance: float) -> WorkloadOutcome:
    """One workload's replayed studies (``replay_study``, one a seed) against the target."""
    reached, fractions, bests = [], [], []
    for history in histories:
        costs = [t.cost_ms for t in history.trials]
        reached.append(trials_to_within(costs, ls.optimum_ms, tolerance))
        finite = [(c, t.config) for c, t in zip(costs, history.trials) if math.isfinite(c)]
        best_ms, best_config = min(finite, key=lambda pair: pair[0]) if finite else (math.inf, None)
        fractions.append(ls.optimum_ms / best_ms if finite else 0.0)
        bests.append(best_config.to_dict() if best_config is not None else {})
    within = sum(1 for c in ls.feasible if ls.cost(c) <= ls.optimum_ms * (1 + tolerance))
    flops = ls.workload.flops if ls.workload is not None else math.nan
    return WorkloadOutcome(ls.name, flops / (ls.optimum_ms * 1e-3) / 1e12, ls.optimum_config.to_dict(),
                           len(ls.feasible), within, tuple(reached), tuple(fractions), tuple(bests))


def format_report(outcomes: Sequence[WorkloadOutcome], *, strategy: str, seeds: int, budget: int,
                  tolerance: float, priors: str = "none") -> str:
    lines = [f"{strategy}, {PRIORS_SAID[priors]}, {seeds} seeds, {budget} trials: trials until within {tolerance:.0%} of the "
             "recorded optimum (- = not in the budget)",
             "| workload | optimum TFLOP/s | within tolerance / feasible | trials per seed | median | worst best/optimum "
             "| met |", "|---|---|---|---|---|---|---|"]
    for o in outcomes:
        hits = [t for t in o.trials_to_target if t is not None]
        median = statistics.median([t if t is not None else budget + 1 for t in o.trials_to_target])
        lines.append(f"| {o.workload} | {o.optimum_tflops:.0f} | {o.within_tolerance} / {o.feasible} | "
                     f"{' '.join(str(t) if t is not None else '-' for t in o.trials_to_target)} | "
                     f"{median if median <= budget else f'>{budget}'} | {min(o.best_fraction):.3f} | "
                     f"{'yes' if o.met else f'no ({len(hits)}/{len(o.trials_to_target)})'} |")
    met = sum(o.met for o in outcomes)
    runs = [t for o in outcomes for t in o.trials_to_target]
    lines.append(f"target met on {met} of {len(outcomes)} workloads; {sum(t is not None for t in runs)} of "
                 f"{len(runs)} runs within {tolerance:.0%} in {budget} trials")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", nargs="+", type=Path, default=list(DEFAULT_TABLES),
                        help="tables or folders (tables of one workload are merged; default: "
                             f"{', '.join(RECORDED_SPACE['h200'])})")
    parser.add_argument("--workloads", default="", help="comma-separated workload names (default: every table)")
    parser.add_argument("--strategy", default=DEFAULT_STRATEGY, help=f"default: {DEFAULT_STRATEGY} (flashtune tune's)")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--budget", type=int, default=BUDGET)
    parser.add_argument("--tolerance", type=float, default=TOLERANCE)
    parser.add_argument("--noise", action="store_true", help="draw replayed times from the recorded spread")
    parser.add_argument("--priors", choices=TARGET_PRIOR_MODES, default="chain",
                        help="chain (default: each study told the trials of the studies before it, as flashtune "
                             "tune runs several workloads), none (cold: one --workload, or --independent) or loo "
                             "(the other workloads' tables as priors)")
    parser.add_argument("--hardware", default="h200")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.budget < 1:
        raise ValueError(f"--seeds and --budget must be >= 1, got {args.seeds} and {args.budget}")
    groups = group_by_workload(table_files(args.tables))
    spec = load_spec(args.hardware)
    landscapes = [build_landscape(g, spec) for g in groups]
    if args.workloads:
        wanted = args.workloads.split(",")
        unknown = set(wanted) - {ls.name for ls in landscapes}
        if unknown:
            raise ValueError(f"--workloads: no table for {sorted(unknown)}; recorded: {[ls.name for ls in landscapes]}")
        keep = [i for i, ls in enumerate(landscapes) if ls.name in wanted]
        landscapes, groups = [landscapes[i] for i in keep], [groups[i] for i in keep]
    outcomes = evaluate(landscapes, [[str(p) for p in g] for g in groups], strategy=args.strategy, seeds=args.seeds,
                        budget=args.budget, tolerance=args.tolerance, hardware=args.hardware, noise=args.noise, priors=args.priors)
    report = format_report(outcomes, strategy=args.strategy, seeds=args.seeds, budget=args.budget,
                           tolerance=args.tolerance, priors=args.priors)
    print(report)
    if args.json:
        args.json.write_text(json.dumps({"strategy": args.strategy, "seeds": args.seeds, "budget": args.budget,
                                         "tolerance": args.tolerance, "noise": args.noise, "priors": args.priors,
                                         "tables": [str(t) for t in args.tables],
                                         "workloads": [o.to_dict() for o in outcomes]}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
