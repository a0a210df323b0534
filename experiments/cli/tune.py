"""``flashtune tune``: run or resume a study per workload, tracked in MLflow.

    flashtune tune --strategy random --trials 50 --study-name rnd-1 --seed 1 \\
        --workload 4,32,4096,128,causal

Without a GPU (nothing visible to ``nvidia-smi``) the study replays the recorded H200
tables and says so. The same ``--study-name`` resumes: trials live in Optuna storage.
Several workloads run one study each, in the order given, each told the trials of the
earlier ones as priors (``--independent``: each cold).
``flashtune study GPU`` runs the same with a GPU's study file.
"""

from __future__ import annotations

import argparse
import math
import shlex
import signal
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flashtune.experiments.evaluation import priors
from flashtune.experiments.evaluation.recorded_peers import recorded_peer
from flashtune.experiments.study import measurers, workers
from flashtune.experiments.study.progress import ProgressBar
from flashtune.experiments.study.runner import StudyInterrupted, StudyResult, check_study_name, run_study, studies_for
from flashtune.experiments.study.sanitize_top import sanitize_top
from flashtune.experiments.study.signals import raise_interrupted
from flashtune.experiments.study.storage import (
    DEFAULT_STORAGE,
    DamagedDatabase,
    close_storage,
    is_shared_storage,
    open_storage,
)
from flashtune.experiments.tracking import report
from flashtune.experiments.tracking.tracker import DEFAULT_TRACKING_URI, check_tracking_uri, record_default, sqlite_path
from flashtune.objectives.feasibility import for_workload
from flashtune.objectives.hardware import HardwareSpec, load_spec
from flashtune.objectives.replay import NOT_RECORDED
from flashtune.objectives.sanitize import find_sanitizer
from flashtune.objectives.types import SUITE, Measurement, Status, Workload
from flashtune.runtime.dispatching.baselines import fallback_config
from flashtune.runtime.dispatching.resolve import uses_fp8
from flashtune.runtime.storage.store import ENV_STORE, default_store_path
from flashtune.search import make_strategy, option_value, strategy_names

if TYPE_CHECKING:
    from flashtune.objectives.peers import PeerTime

#: The search strategy of a study that names none.
DEFAULT_STRATEGY = "portfolio"  # GP and TPE sharing one budget (BENCHMARKS.md, "Search: the portfolio default")
#: The replayed GPU when none is named and none is here (the tables shipped are H200's).
DEFAULT_REPLAY_HARDWARE = "h200"
#: Exit codes of a study stopped by a signal (the shell's 128 + signal number).
_EXIT_SIGTERM, _EXIT_SIGINT = 128 + signal.SIGTERM, 128 + signal.SIGINT


def add_arguments(parser: argparse.ArgumentParser, *, hardware: str | None = None,
                  workloads: Sequence[Workload] = ()) -> None:
    """The options of ``flashtune tune`` (also used by the per-GPU study scripts)."""

    default_workloads = ", ".join(w.name for w in workloads) or f"{SUITE[0].name}"
    parser.add_argument("--strategy", default=DEFAULT_STRATEGY, metavar="NAME",
                        help=f"search strategy, one of: {', '.join(strategy_names())} (default: {DEFAULT_STRATEGY})")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="strategy option, VALUE as JSON or text; repeatable")
    parser.add_argument("--trials", type=int, default=50,
                        help="budget per workload, earlier runs of the study included (default: 50)")
    parser.add_argument("--max-seconds", type=float, default=None, help="wall-time budget of this run per workload")
    parser.add_argument("--study-name", default=None,
                        help="the same name resumes (default: <strategy>-seed<seed>, prefixed by the GPU in scripts)")
    parser.add_argument("--seed", type=int, default=0, help="seeds the strategy (default: 0)")
    parser.add_argument("--workload", action="append", default=[], metavar="B,H[/HKV],N[/NK],D[,causal][,dtype]",
                        help="repeatable; one study each; dtype bfloat16 (default), float16, float32 or "
                             "bf16, fp16, half, fp32; a table's name (b4_h32_n4096_d128_causal_bfloat16) works too "
                             f"(default: {default_workloads})")
    parser.add_argument("--hardware", default=hardware,
                        help="GPU model: shipped spec name (h200, h100, a100, l40s, rtx4090) or JSON file "
                             f"(default: this machine's GPU; {DEFAULT_REPLAY_HARDWARE} when replaying)")
    parser.add_argument("--objective", choices=("auto", "live", "replay"), default="auto",
                        help="live GPU, recorded tables, or auto: live where a GPU is visible (default)")
    parser.add_argument("--replay-dir", type=Path, action="append", default=None,
                        help="folder of recorded tables <workload>.jsonl; repeatable: a workload's tables of "
                             "every folder are merged (default: the GPU's recorded space, "
                             f"{_recorded_space_help()})")
    parser.add_argument("--replay-noise", action="store_true", help="draw replayed times from the recorded spread")
    parser.add_argument("--timeout", type=float, default=120.0, help="live: per-config seconds (default: 120)")
    parser.add_argument("--precompile", type=int, default=0, help="live: compile pool processes (default: 0)")
    parser.add_argument("--tracking-uri", default=DEFAULT_TRACKING_URI,
                        help=f"MLflow tracking URI (default: {DEFAULT_TRACKING_URI})")
    parser.add_argument("--storage", default=DEFAULT_STORAGE,
                        help=f"Optuna storage URL or journal:PATH (default: {DEFAULT_STORAGE})")
    parser.add_argument("--workers", type=int, default=1,
                        help="worker processes on the study, one GPU each (needs a shared --storage: "
                             "postgresql://... or journal:PATH; default: 1)")
    parser.add_argument("--worker-index", type=int, default=None,
                        help="this worker's index on a shared study: seeds its strategy apart "
                             "(default: $FLASHTUNE_WORKER_INDEX, else from the process id)")
    parser.add_argument("--heartbeat", type=float, default=None,
                        help="shared PostgreSQL study: seconds between Optuna heartbeats; a dead "
                             "worker's trial is failed after 3 (default: 10)")
    parser.add_argument("--prior-from", action="append", default=[], metavar="SOURCE",
                        help="priors told to each study first, re-checked on its GPU; repeatable: mlflow:RUN_ID, "
                             "mlflow-experiment:NAME, store:PATH, table:PATH or baselines")
    parser.add_argument("--independent", action="store_true",
                        help="with several workloads, start each study cold (default: each is also told the "
                             "trials of this run's earlier studies on the GPU, as priors re-checked on its workload)")
    parser.add_argument("--prior-tracking-uri", default=None,
                        help="MLflow tracking URI of mlflow: priors (default: --tracking-uri)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--sanitize-top", type=int, default=0, metavar="N",
                        help="live: check each study's N best configs under compute-sanitizer before reporting "
                             "the winner; an unsafe one is recorded as an 'unsafe' trial (default: 0, none)")
    parser.set_defaults(func=run_tune, default_workloads=tuple(workloads), name_prefix=hardware or "")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("tune", help="run or resume a tuning study (MLflow-tracked, resumable)",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)


def parse_options(items: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs; VALUE read by ``search.option_value`` (JSON, True/False, or text)."""

    options: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--option {item!r}: expected KEY=VALUE")
        options[key.strip()] = option_value(text)
    return options


def run_tune(args: argparse.Namespace) -> int:
    """Validate everything, open the objective, run the studies one after another."""

    # Messages name the command typed (``flashtune study`` runs this too).
    prog = f"flashtune {getattr(args, 'command', None) or 'tune'}"
    # Cheap checks first, so a typo costs no objective start-up and writes nothing.
    if args.strategy not in strategy_names():
        raise ValueError(f"unknown strategy {args.strategy!r}; registered: {strategy_names()}")
    options = parse_options(args.option)
    if args.trials < 1:
        raise ValueError(f"--trials: trials must be a positive int, got {args.trials}")
    _check_ranges(args)
    workloads = [Workload.parse(text) for text in args.workload] or list(args.default_workloads) or [SUITE[0]]
    kind = measurers.resolve_kind(args.objective)
    _check_sanitize_top(args, kind)
    expected: HardwareSpec | None = load_spec(args.hardware) if args.hardware else None
    name = args.study_name or "-".join(p for p in (args.name_prefix, args.strategy, f"seed{args.seed}") if p)
    check_study_name(name)
    # Built once on a stand-in space so that a mistyped option fails before anything starts.
    stand_in = expected or load_spec(DEFAULT_REPLAY_HARDWARE)
    make_strategy(args.strategy, for_workload(workloads[0], stand_in), seed=args.seed, **options)
    tracking_uri, storage_url = _check_stores(args.tracking_uri, args.storage)
    prior_specs, raw_priors = _read_priors(args, tracking_uri)
    if args.workers != 1:
        return _launch_workers(args, kind, storage_url)

    if kind == "live":
        measurer = measurers.open_live(expected, timeout_s=args.timeout, precompile=args.precompile, seed=args.seed)
    else:
        hardware = expected or load_spec(DEFAULT_REPLAY_HARDWARE)
        if not args.workload:
            workloads = _recorded_or_all(workloads, args.replay_dir or measurers.default_replay_dirs(hardware), prog)
        measurer = measurers.open_replay(hardware, workloads, args.replay_dir, noise=args.replay_noise, seed=args.seed)
    note = "" if args.objective == "replay" or kind == "live" else "no GPU found (nvidia-smi): "
    print(wrap_line(f"{prog}: {note}{measurer.description}"), file=sys.stderr)

    studies = studies_for(name, workloads, hardware=measurer.hardware, strategy=args.strategy,
                          strategy_options=options, trials=args.trials, seed=args.seed, objective=kind,
                          max_seconds=args.max_seconds)
    results = []
    previous = signal.signal(signal.SIGTERM, raise_interrupted)
    try:
        # What this run's finished studies measured on the GPU: priors of the next
        # (replayed H200 suite, 10 seeds: 59-61 of 70 studies within 2 % of the optimum in 40
        # trials told them, 46 of 70 cold). A resumed run re-reads the same trials.
        earlier: list[Measurement] = []
        for study in studies:
            told = _study_priors(study, prior_specs, raw_priors, prog,
                                 earlier=() if getattr(args, "independent", False) else earlier)
            result = _run_one(study, measurer, tracking_uri, storage_url, progress=not args.no_progress,
                              worker=_worker_index(args), heartbeat_s=args.heartbeat, priors=told, prog=prog)
            if args.sanitize_top:
                result, _ = sanitize_top(result, args.sanitize_top, gpu=measurer.hardware, tracking_uri=tracking_uri)
            results.append(result)
            earlier += priors.from_study([t.measurement for t in result.trials], f"mlflow:{result.parent_run_id}")
        # The figure a user came for: the tuned config against what runs without tuning.
        defaults = [_default_measurement(measurer, r.study) for r in results]
        for result, default in zip(results, defaults):
            record_default(tracking_uri, result.parent_run_id, default)
        peers = [_peer_times(measurer, r.study, r.best) for r in results]
    except BaseException as exc:

        if isinstance(exc, (StudyInterrupted, KeyboardInterrupt)):
            why = "SIGTERM" if isinstance(exc, StudyInterrupted) else "Ctrl-C"
            print(f"{prog}: stopped by {why}; the study's MLflow run ended KILLED. "
                  "Run the same command again to resume.", file=sys.stderr)
            return _EXIT_SIGTERM if isinstance(exc, StudyInterrupted) else _EXIT_SIGINT
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
        measurer.close()
    if len(results) == 1:
        print(outcome_text(results[0], defaults[0], peers[0], tracking_uri=tracking_uri, storage_url=storage_url))
    else:
        print(overview_text(results, defaults, peers, tracking_uri=tracking_uri, storage_url=storage_url))
    return 0


#: Where a long message line is wrapped (the width the code and the terminal keep to).
LINE_WIDTH = 120


def wrap_line(text: str, width: int = LINE_WIDTH) -> str:
    """``text`` wrapped at spaces to ``width``, continuation lines indented: a replay's
    description names every folder it reads in full, several hundred characters on one line.
    Paths and numbers are never split."""
    return textwrap.fill(text, width=width, subsequent_indent="    ", break_long_words=False,
                         break_on_hyphens=False)


def _default_measurement(measurer: Any, study: Any) -> Measurement:
    """The runtime's default config for the study's workload on its GPU (what runs with no
    tuned store): replayed from the table, or measured live."""
    return measurer.evaluator(study.workload)(fallback_config(study.hardware, study.workload))


def _peer_times(measurer: Any, study: Any, best: Any) -> list[PeerTime] | None:
    """torch SDPA's backends on the study's workload, timed here and now on a live GPU in
    interleaved rounds beside the tuned config (re-timed, so that the ratio compares the
    same minutes of the card: a peer timed alone after the study ran at another SM clock
    than the trials, BENCHMARKS.md "Peers timed as users call them"); None when replaying
    (recorded tables hold no peers, and this machine may have no GPU)."""
    if measurer.kind != "live":
        return None
    # Lazy: the tuning process never imports torch otherwise (workers measure); a live
    # run on a GPU has it anyway.
    import math

    import torch

    from flashtune.kernels.attention import launch  # lazy: imports torch and triton (above)
    from flashtune.objectives.peers import PeerTime, time_peers  # lazy: imports torch (above)

    workload = study.workload
    beside = {}
    if best is not None:
        def tuned(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Any:
            out = torch.empty_like(q)
            return lambda: launch(q, k, v, out, causal=workload.causal, scale=1 / math.sqrt(workload.head_dim),
                                  config=best.config)

        beside[_TUNED] = tuned
    peers, timed = time_peers(workload, torch.device("cuda"), beside=beside)
    if best is not None:
        peers.append(PeerTime(_TUNED, timed.median_ms.get(_TUNED), timed.errors.get(_TUNED, "")))
    return peers


#: The tuned config's entry among the peer times (re-timed beside them).
_TUNED = "tuned config"


def outcome_text(result: Any, default: Measurement, peers: list[PeerTime] | None = None, *,
                 tracking_uri: str, storage_url: str) -> str:
    """The main job's last lines for one study: tuned against default and SDPA, where it is, what next."""
    study, best = result.study, result.best
    lines = [f"== {study.name}: {study.workload.name} on {study.hardware.name}"]
    if best is None:
        lines.append("best config: none ran correctly")
    else:
        lines.append(f"best config:    {best.config.to_dict()}: {best.cost_ms:.4g} ms, "
                     f"{best.measurement.tflops:.1f} TFLOP/s")
    if default.status is Status.OK:
        lines.append(f"default config: {default.config.to_dict()}: {default.median_ms:.4g} ms, "
                     f"{default.tflops:.1f} TFLOP/s")
        if best is not None:
            lines.append(f"speedup over the default: {_speedup_text(best, default)}")
    elif default.error == NOT_RECORDED:
        # The runtime's default can lie outside a replayed space (on the H200 the Gluon kernel,
        # whose rows the main job's tables do not hold): say that, not "infeasible".
        lines.append(f"default config: {default.config.to_dict()}: not in the replayed tables; no speedup to report")
    else:
        lines.append(f"default config: {default.config.to_dict()}: {default.status.value} ({default.error}); "
                     "no speedup to report")
    lines += _peer_lines(best, peers)
    lines += [
        f"Optuna study:   {study.storage_name!r} in {storage_url}",
        f"MLflow run:     {result.parent_run_id} (experiment {result.experiment_id}) in {tracking_uri}",
        *_next_commands([result.parent_run_id], tracking_uri, only_fp8=_only_fp8_succeeded([result])),
    ]
    return "\n".join(lines)


def overview_text(results: Sequence[Any], defaults: Sequence[Measurement], peers: Sequence[list[PeerTime] | None],
                  *, tracking_uri: str, storage_url: str) -> str:
    """The main job's last lines for several studies: one row each, then where they are and
    one command that exports them all."""
    width = max(len("study"), *(len(r.study.name) for r in results))
    lines = [f"{'study':{width}s} {'trials':>6s} {'best ms':>10s} {'TFLOP/s':>8s} {'default ms':>10s}  "
             f"{'speedup':<8s} config"]
    for result, default in zip(results, defaults):
        best = result.best
        default_ms = f"{default.median_ms:10.4f}" if default.status is Status.OK else f"{default.status.value:>10s}"
        if best is None:
            lines.append(f"{result.study.name:{width}s} {len(result.trials):6d} {'-':>10s} {'-':>8s} {default_ms}  "
                         f"{'-':<8s} no config ran")
            continue
        speedup = f"{default.median_ms / best.cost_ms:.2f}x" if default.status is Status.OK else "-"
        lines.append(f"{result.study.name:{width}s} {len(result.trials):6d} {best.cost_ms:10.4f} "
                     f"{best.measurement.tflops:8.1f} {default_ms}  {speedup:<8s} {best.config.to_dict()}")
    slower = [r.study.name for r, d in zip(results, defaults)
              if r.best is not None and d.status is Status.OK and r.best.cost_ms > d.median_ms]
    if slower:
        lines.append(f"slower than the runtime's default (keep the default; `flashtune export` does): "
                     f"{', '.join(slower)}")
    if any(p is not None for p in peers):
        for result, peer in zip(results, peers):
            lines += [f"{result.study.name}: {line}" for line in _peer_lines(result.best, peer)]
    else:
        lines += _peer_lines(None, None)
    experiments = sorted({str(r.experiment_id) for r in results})
    lines += [
        f"Optuna studies: {', '.join(repr(r.study.storage_name) for r in results)} in {storage_url}",
        f"MLflow runs:    {', '.join(r.parent_run_id for r in results)} (experiment {', '.join(experiments)}) "
        f"in {tracking_uri}",
        *_next_commands([r.parent_run_id for r in results], tracking_uri, only_fp8=_only_fp8_succeeded(results)),
    ]
    return "\n".join(lines)


def _speedup_text(best: Any, default: Measurement) -> str:
    """The tuned config's speedup over the default, saying plainly when it is slower."""
    speedup = default.median_ms / best.cost_ms
    if best.cost_ms <= default.median_ms:
        return f"{speedup:.2f}x"
    return (f"{speedup:.2f}x: the best config found is SLOWER than the runtime's default; keep the default "
            "(`flashtune export` exports the default for this workload)")


def _only_fp8_succeeded(results: Sequence[Any]) -> bool:
    """Whether the studies' successful trials are all fp8 configs (and there is one): export
    leaves fp8 out unless told ``--include-fp8``, so the printed command must say it."""
    ok = [t for r in results for t in r.trials if t.measurement.status is Status.OK]
    return bool(ok) and all(uses_fp8(t.config) for t in ok)


def _next_commands(run_ids: Sequence[str], tracking_uri: str, *, only_fp8: bool = False) -> list[str]:
    """The export command (into the store the runtime serves) and the UI command."""
    tracking_flag = "" if tracking_uri == DEFAULT_TRACKING_URI else f" --tracking-uri {shlex.quote(tracking_uri)}"
    sources = " ".join(f"mlflow:{run_id}" for run_id in run_ids)
    store = shlex.quote(str(default_store_path()))
    fp8_flag = " --include-fp8" if only_fp8 else ""
    fp8_note = ["                (every config that ran correctly is fp8: it trades precision for speed, "
                "so export takes it only with --include-fp8)"] if only_fp8 else []
    return [
        f"export it:      flashtune export {sources} --to {store}{tracking_flag}{fp8_flag}",
        *fp8_note,
        f"                (the store flashtune.runtime serves: ${ENV_STORE}, else ~/.cache/flashtune/configs.json)",
        f"open the UI:    flashtune ui{tracking_flag}",
    ]


def _peer_lines(best: Any, peers: list[PeerTime] | None) -> list[str]:
    """Each peer's time; as a ratio to the tuned config re-timed in the same rounds (the
    ``_TUNED`` entry), else to the study's best when that entry is missing."""
    if peers is None:
        return ["SDPA peers:     timed on a live GPU only (this run replays recorded times)"]
    retimed = next((p for p in peers if p.name == _TUNED), None)
    tuned_ms, same_run = (retimed.median_ms, True) if retimed and retimed.median_ms else (
        best.cost_ms if best is not None else None, False)
    lines = []
    if retimed is not None:
        lines.append(f"{'re-timed:':<15} the tuned config {retimed.median_ms:.4g} ms beside the peers"
                     if retimed.median_ms else f"{'re-timed:':<15} the tuned config failed ({retimed.error})")
    for peer in peers:
        if peer.name == _TUNED:
            continue
        form = f" ({peer.form})" if peer.form == "enable_gqa" else ""
        if peer.median_ms is None:
            lines.append(f"{peer.name + ':':<15} unavailable for this shape ({peer.error})")
        elif tuned_ms is None:
            lines.append(f"{peer.name + ':':<15} {peer.median_ms:.4g} ms{form}")
        else:
            # Above 1x: the tuned config is faster than this peer.
            lines.append(f"{peer.name + ':':<15} {peer.median_ms:.4g} ms{form}; the tuned config runs at "
                         f"{peer.median_ms / tuned_ms:.2f}x its speed ({'same rounds' if same_run else 'study time'})")
    return lines


def recorded_text(best: Any, optimum: Measurement, study: Any) -> str:
    """A replayed study's best against the recorded optimum and SDPA cuDNN's recorded speed
    (``experiments/data/recorded_peers.json``): what a replay can say of how good it is."""
    tflops = study.workload.flops / (best.cost_ms * 1e-3) / 1e12
    optimum_tflops = study.workload.flops / (optimum.median_ms * 1e-3) / 1e12
    text = (f"vs recorded: best {tflops:.1f} TFLOP/s, {100 * optimum.median_ms / best.cost_ms:.1f} % of the "
            f"recorded optimum ({optimum_tflops:.1f} TFLOP/s)")
    cudnn = recorded_peer(study.hardware.name, study.workload.name)
    if cudnn is None:
        return f"{text}; no SDPA cuDNN time recorded for this workload on {study.hardware.name}"
    return (f"{text}, {tflops / cudnn.tflops:.2f}x the speed of SDPA cuDNN's recorded {cudnn.tflops:.1f} TFLOP/s "
            f"({cudnn.gpu}, {cudnn.date})")


def _check_sanitize_top(args: argparse.Namespace, kind: str) -> None:
    """``--sanitize-top`` runs the kernel under compute-sanitizer: a live study's option only."""
    n = getattr(args, "sanitize_top", 0)
    if n < 0:
        raise ValueError(f"--sanitize-top must be >= 0, got {n}")
    if n and kind != "live":
        raise ValueError("--sanitize-top needs a live study on a GPU (compute-sanitizer runs the kernel); "
                         "this one replays recorded tables")
    if n and getattr(args, "workers", 1) != 1:
        raise ValueError("--sanitize-top: one worker only (run it on the study's result, --workers 1)")
    if n and find_sanitizer() is None:
        raise ValueError("--sanitize-top: no compute-sanitizer on PATH or in /usr/local/cuda/bin")


def _check_ranges(args: argparse.Namespace) -> None:
    """Numbers out of range and an empty study name, refused before anything starts (even
    those only one objective or storage uses: a typo should not wait for the day it matters)."""
    for option, value in (("--timeout", args.timeout), ("--heartbeat", args.heartbeat)):
        if value is not None and not value > 0:
            raise ValueError(f"{option} must be a positive number of seconds, got {value}")
    if args.precompile < 0:
        raise ValueError(f"--precompile must be an int >= 0, got {args.precompile}")
    if args.study_name is not None and not args.study_name.strip():
        raise ValueError("--study-name must not be empty (leave it out for the default name)")
    # A mistyped folder is not an empty recording: say it does not exist, rather than the
    # replay's "no table ... (recorded there: none)", which reads as a folder with nothing in it.
    for folder in args.replay_dir or ():
        if not folder.is_dir():
            raise ValueError(f"--replay-dir {str(folder)!r}: "
                             f"{'not a folder' if folder.exists() else 'no such folder'}")


def _recorded_or_all(workloads: list[Workload], folders: Sequence[Path], prog: str) -> list[Workload]:
    """A script's default workloads, replayed: those with a recorded table, saying which are
    skipped (all of them when none is recorded: then the replay names what is missing)."""

    recorded = set(measurers.recorded_workloads(folders))
    kept = [w for w in workloads if w.name in recorded]
    skipped = [w.name for w in workloads if w.name not in recorded]
    if kept and skipped:
        print(f"{prog}: no recorded table in {', '.join(map(str, folders))} for {', '.join(skipped)}: skipped",
              file=sys.stderr)
    return kept or workloads


def _recorded_space_help() -> str:
    """The shipped folders each GPU model replays by default, for --help."""
    named = "; ".join(f"{gpu}: {' + '.join(folders)}" for gpu, folders in measurers.RECORDED_SPACE.items())
    return f"{named}; others: experiments/data/<gpu>"


def _launch_workers(args: argparse.Namespace, kind: str, storage_url: str) -> int:

    if args.workers < 1:
        raise ValueError(f"--workers must be a positive int, got {args.workers}")
    if not is_shared_storage(storage_url):
        raise ValueError(f"--workers {args.workers}: SQLite storage ({storage_url}) takes one process at a time; "
                         "use --storage postgresql://... (many hosts) or journal:PATH (one host)")
    return workers.launch(args.workers, kind)


def _worker_index(args: argparse.Namespace) -> int | None:
    import os

    if args.worker_index is not None:
        return args.worker_index
    text = os.environ.get("FLASHTUNE_WORKER_INDEX", "")
    return int(text) if text.isdigit() else None


def _read_priors(args: argparse.Namespace, tracking_uri: str) -> tuple[list[Any], dict[Any, Any]]:
    """Parse and read every ``--prior-from`` source once (a bad one fails before any study)."""

    specs = list(dict.fromkeys(priors.parse_source(text) for text in getattr(args, "prior_from", [])))
    uri = getattr(args, "prior_tracking_uri", None) or tracking_uri
    return specs, {spec: priors.read(spec, tracking_uri=uri) for spec in specs}


def _study_priors(study: Any, specs: Sequence[Any], raw: dict[Any, Any], prog: str,
                  earlier: Sequence[Measurement] = ()) -> tuple[Any, ...]:
    """The priors of one study: the ``--prior-from`` sources' and ``earlier`` (this run's
    finished studies' trials), re-checked on its workload and GPU, summarised on stderr."""

    if not specs and not earlier:
        return ()
    prior_set = priors.load_for(specs, raw, study.workload, study.hardware) if specs else priors.PriorSet(())
    if earlier:
        prior_set = prior_set.plus(priors.recheck(earlier, study.workload, study.hardware))
    print(f"{prog}: study {study.name}: {prior_set.summary()}", file=sys.stderr)
    return prior_set.told


def _check_stores(tracking_uri: str, storage_url: str) -> tuple[str, str]:

    # MLflow makes a SQLite file's missing folders without a word: a typo in the path would
    # put the study somewhere nobody looks. The folder must exist already.
    _check_folder_exists("--tracking-uri", tracking_uri, sqlite_path(tracking_uri))
    _check_folder_exists("--storage", storage_url, sqlite_path(storage_url))
    check_tracking_uri(tracking_uri)
    try:
        close_storage(open_storage(storage_url))
    except DamagedDatabase as exc:  # its repair reads the study's trials back from this MLflow store
        raise ValueError(exc.advice(tracking_uri=tracking_uri)) from None
    return tracking_uri, storage_url


def _check_folder_exists(option: str, uri: str, path: Path | None) -> None:
    """Refuse a local database file whose folder does not exist (naming that folder)."""
    if path is not None and not path.parent.is_dir():
        raise ValueError(f"{option} {uri!r}: folder {str(path.parent)!r} does not exist; create it first")


def _run_one(study: Any, measurer: Any, tracking_uri: str, storage_url: str, *, progress: bool,
             worker: int | None = None, heartbeat_s: float | None = None, priors: Sequence[Any] = (),
             prog: str = "flashtune tune") -> Any:

    bars: list[ProgressBar] = []

    def on_start(result: StudyResult) -> None:
        best = result.best
        if result.resumed_trials:
            print(f"{prog}: resuming study {study.name!r} at trial {result.resumed_trials}", file=sys.stderr)
        bars.append(ProgressBar(study.trials, initial=len(result.trials), description=study.name,
                                best_ms=best.cost_ms if best else math.inf,
                                best_tflops=best.measurement.tflops if best else 0.0,
                                disable=True if not progress else None))

    def forward(trial: Any, trials: Any) -> None:
        bars[0](trial, trials)

    try:
        result = run_study(study, measurer.evaluator(study.workload), tracking_uri=tracking_uri,
                           storage_url=storage_url, fingerprint=measurer.fingerprint, versions=measurer.versions,
                           callbacks=[forward], on_start=on_start, constraint=measurer.constraint(study.workload),
                           worker=worker, priors=priors,
                           **({} if heartbeat_s is None else {"heartbeat_s": heartbeat_s}))
    finally:
        for bar in bars:
            bar.close()
    title = f"study {study.name} | {study.workload.name} | {study.hardware.name} | {study.strategy} seed {study.seed}"
    print(report.summary_text(result.trials, title=title))
    if len(result.trials) < study.trials and study.max_seconds is None:
        print(f"note: the strategy ran out of configs after {len(result.trials)} of {study.trials} trials "
              "(the feasible space is smaller than the budget)")
    if result.best is not None and (optimum := measurer.optimum(study.workload)) is not None:
        print(wrap_line(recorded_text(result.best, optimum, study)))
    print()
    return result


