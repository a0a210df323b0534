"""``flashtune export``: the best configs of studies into a tuned-config store file.

Reads the measurements of one or more sources and merges the fastest successful config
per (GPU fingerprint, kernel source hash, Triton version, workload bucket) into the
store file that ``flashtune.runtime`` serves (``flashtune.runtime.storage.export``). An entry
already in the file is kept if it is faster. Sources, spelt as ``tune --prior-from``:

- ``mlflow:RUN_ID``: one study's trials (its parent run) in the tracking store;
- ``mlflow-experiment:NAME``: every study of a GPU model (``h200``, ``NVIDIA H200``
  or ``flashtune/NVIDIA H200``);
- ``optuna:STUDY_NAME``: one study's trials in the Optuna storage (``--storage``), by its
  Optuna name (``NVIDIA H200/NAME``) or, when only one GPU has it, its ``--study-name``;
- ``table:PATH``: a recorded table (``flashtune sweep``), or a folder of them.

fp8 configs trade precision for speed; they are exported only with ``--include-fp8``
(the runtime serves them only when ``FLASHTUNE_ALLOW_FP8=1``).

Where a GPU and compute-sanitizer are, each config of this GPU is first checked under
compute-sanitizer's four tools (memcheck, racecheck, synccheck, initcheck) at small edge-case
shapes, once per kernel, config and GPU (verdicts cached in ``~/.cache/flashtune/sanitized.json``
or ``$FLASHTUNE_SANITIZED``); an unsafe one is left out with one line naming it and its first
finding, and its bucket gets the next fastest safe config. Without a GPU or compute-sanitizer,
or with ``--no-sanitize``, one line says the configs were not sanitized.

Example::

    flashtune export --to tuned.json mlflow-experiment:h200
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from flashtune.experiments.cli.sweep import INTERPRETED_SOURCE
from flashtune.experiments.evaluation import prior_mlflow
from flashtune.experiments.evaluation.prior_files import table_measurements
from flashtune.experiments.evaluation.priors import parse_source
from flashtune.experiments.study.storage import DEFAULT_STORAGE, IDENTITY_ATTR, MEASUREMENT_ATTR, open_storage
from flashtune.experiments.tracking.tracker import DEFAULT_TRACKING_URI, sqlite_path
from flashtune.objectives.types import Measurement
from flashtune.runtime.storage.export import best_entries, entry_of, ranked_entries
from flashtune.runtime.storage.sanitized import SanitizedCache, not_sanitized_line, screen_entries
from flashtune.runtime.storage.store import Store, StoreEntry, completed, read_snapshot

#: The kinds of source ``flashtune export`` reads, in the order its messages list them.
KINDS = ("mlflow", "mlflow-experiment", "optuna", "table")


def add_parser(subparsers: argparse._SubParsersAction) -> None:

    parser = subparsers.add_parser("export", help="write the best configs of studies to a tuned-config store file",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sources", nargs="+", metavar="SOURCE",
                        help="mlflow:RUN_ID, mlflow-experiment:NAME, optuna:STUDY_NAME or table:PATH")
    parser.add_argument("--to", required=True, type=Path, metavar="PATH",
                        help="the store file (created if missing; merged into if present)")
    parser.add_argument("--tracking-uri", default=DEFAULT_TRACKING_URI,
                        help=f"MLflow tracking URI of mlflow sources (default: {DEFAULT_TRACKING_URI})")
    parser.add_argument("--storage", default=DEFAULT_STORAGE,
                        help=f"Optuna storage URL or journal:PATH of optuna sources (default: {DEFAULT_STORAGE})")
    parser.add_argument("--include-fp8", action="store_true", help="also export fp8 configs")
    parser.add_argument("--no-sanitize", action="store_true",
                        help="do not check configs under compute-sanitizer first (said in one line)")
    parser.set_defaults(func=run_export)


def run_export(args: argparse.Namespace) -> int:
    """Read every source (all of them, before writing anything), then merge into the store."""

    specs = [parse_source(text, kinds=KINDS, option="source") for text in args.sources]
    measurements: list[Measurement] = []
    defaults: list[Measurement] = []
    for spec in specs:
        read = read_source(spec.kind, spec.value, tracking_uri=args.tracking_uri, storage_url=args.storage)
        interpreted = [m for m in read if m.source == INTERPRETED_SOURCE]
        read = [m for m in read if m.source != INTERPRETED_SOURCE]
        print(f"{spec.label}: {len(read)} measurement(s), {sum(m.ok for m in read)} successful")
        if interpreted:
            print(f"{spec.label}: skipped {len(interpreted)} measurement(s) run in Triton's CPU interpreter "
                  "(`sweep --interpret`): their times are the CPU's, not a GPU's", file=sys.stderr)
        measurements += read
        if spec.kind in ("mlflow", "mlflow-experiment"):
            defaults += prior_mlflow.default_measurements(args.tracking_uri, spec.kind, spec.value)
    entries = keep_faster_defaults(best_entries(measurements, include_fp8=args.include_fp8), defaults)
    if not entries:
        fp8 = "" if args.include_fp8 else " (fp8 configs need --include-fp8)"
        print(f"flashtune export: nothing to export: no successful measurement with a time and a GPU "
              f"fingerprint in {', '.join(s.label for s in specs)}{fp8}", file=sys.stderr)
        return 1
    entries = sanitized(entries, measurements + defaults, args)
    if not entries:
        print("flashtune export: nothing to export: every config was unsafe", file=sys.stderr)
        return 1
    try:
        total = Store(args.to).merge(entries)
    except OSError as exc:
        raise ValueError(f"--to {args.to}: cannot write: {exc}") from None

    stored = read_snapshot(args.to)
    kept = 0
    for entry in sorted(entries, key=lambda e: (e.hardware, e.key, e.bucket.name)):
        in_file = stored.exact(entry.key, entry.bucket)
        note = ""
        # Compared as the store holds configs (completed with the knobs it fills in).
        if in_file is not None and in_file.config != completed(entry).config:
            kept += 1
            note = f"  (the file's {in_file.median_ms:.4f} ms entry is faster: kept)"
        time = f"{entry.median_ms:.4f} ms" if entry.median_ms is not None else "time unknown"
        print(f"  {entry.hardware or entry.fingerprint[:12]}  {entry.bucket.name}  {entry.config}  {time}{note}")
    gpus = len({e.fingerprint for e in entries})
    print(f"exported {len(entries) - kept} of {len(entries)} entries ({gpus} GPU(s)) to {args.to}; "
          f"the file holds {total}")
    return 0


def sanitized(entries: list[StoreEntry], measurements: list[Measurement], args: argparse.Namespace) -> list[StoreEntry]:
    """``entries`` less the unsafe ones (each replaced by its bucket's next fastest safe
    config), each line of the screening printed; ``--no-sanitize``: one line, all kept."""
    if args.no_sanitize:
        print(f"flashtune export: {not_sanitized_line('--no-sanitize', len(entries))}")
        return entries
    screening = screen_entries(entries, alternatives=ranked_entries(measurements, include_fp8=args.include_fp8),
                               cache=SanitizedCache())
    for line in screening.lines:
        print(f"flashtune export: {line}")
    if screening.checked:
        print(f"flashtune export: sanitized {screening.checked} config(s): {len(screening.unsafe)} unsafe")
    return screening.kept


def keep_faster_defaults(entries: list[StoreEntry], defaults: list[Measurement]) -> list[StoreEntry]:
    """``entries``, each one slower than the runtime's default config measured by its study
    replaced by that default (said on stderr): a store must not make the runtime slower
    than no store. Leaving the bucket out instead would not keep the default: the runtime
    would serve the nearest bucket's config."""
    kept = []
    for entry in entries:
        faster = [d for d in defaults if (replacement := entry_of(d)) is not None
                  and replacement.fingerprint == entry.fingerprint and replacement.bucket == entry.bucket
                  and entry.median_ms is not None and d.median_ms < entry.median_ms]
        if not faster:
            kept.append(entry)
            continue
        default = min(faster, key=lambda d: d.median_ms)
        print(f"flashtune export: {entry.bucket.name}: the best trial ({entry.median_ms:.4f} ms) is slower than "
              f"the runtime's default config ({default.median_ms:.4f} ms): exporting the default "
              f"{default.config.to_dict()}", file=sys.stderr)
        kept.append(entry_of(default))
    return kept


def read_source(kind: str, value: str, *, tracking_uri: str, storage_url: str) -> list[Measurement]:
    """The measurements of one source, as recorded (not priors).

    Raises:
        ValueError, FileNotFoundError: the source cannot be read (the message names it).
    """
    if kind == "table":

        return table_measurements(value)
    if kind == "optuna":
        return optuna_measurements(storage_url, value)

    _must_exist(sqlite_path(tracking_uri), f"{kind}:{value}: tracking store")
    if kind == "mlflow":
        return prior_mlflow.trial_measurements_of_run(tracking_uri, value)
    return prior_mlflow.trial_measurements_of_experiment(tracking_uri, value)


def optuna_measurements(storage_url: str, study_name: str) -> list[Measurement]:
    """The measured trials of a flashtune study in Optuna storage (the measurement each
    trial holds in its ``flashtune.measurement`` user attribute).

    Raises:
        ValueError: the storage cannot be opened, or holds no flashtune study of that name
            (the message lists the studies there).
    """
    import optuna


    label = f"optuna:{study_name}"
    _must_exist(sqlite_path(storage_url), f"{label}: storage")
    storage = open_storage(storage_url)
    names = sorted(s.study_name for s in storage.get_all_studies())
    # flashtune names a study ``<GPU name>/<study name>`` (``Study.storage_name``): either is accepted.
    matches = [study_name] if study_name in names else [n for n in names if n.endswith(f"/{study_name}")]
    if len(matches) != 1:
        which = f"several studies match ({matches}); give the full name" if matches else "no such study"
        raise ValueError(f"{label}: {which} in {storage_url}; studies there: {names or 'none'}")
    study_id = storage.get_study_id_from_name(matches[0])
    if IDENTITY_ATTR not in storage.get_study_user_attrs(study_id):
        raise ValueError(f"{label}: study in {storage_url} was not made by flashtune")
    # FAIL trials hold their failure's measurement too; RUNNING ones are not finished.
    finished = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL)
    return [Measurement.from_dict(trial.user_attrs[MEASUREMENT_ATTR])
            for trial in storage.get_all_trials(study_id, deepcopy=False, states=finished)
            if MEASUREMENT_ATTR in trial.user_attrs]


def _must_exist(path: Path | None, what: str) -> None:
    """Opening a missing SQLite store would create an empty one: say it is missing instead."""
    if path is not None and not path.exists():
        raise FileNotFoundError(f"{what} {path} does not exist")
