"""Priors read from files: a recorded table (or a folder of them) and a tuned-config store.

Each reader returns the file's measurements as priors (``source="prior"``), keeping the
workload and hardware fingerprint they were measured on, and the label of the source
they came from in ``versions["prior_source"]`` (MLflow records it on every trial that
measures one of them). Feasibility on the target is not checked here: that is
``flashtune.experiments.evaluation.priors.recheck``'s job, the same for every source.
"""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

from flashtune.kernels.space import kernel_of
from flashtune.objectives.replay import load_table
from flashtune.objectives.types import Measurement, Status
from flashtune.runtime.storage.buckets import DENSE_KINDS
from flashtune.runtime.storage.store import read_snapshot

#: Key of ``Measurement.versions`` naming the source a prior came from (``table:PATH`` ...).
SOURCE_KEY = "prior_source"


def as_prior(measurement: Measurement, label: str, **versions: str) -> Measurement:
    """``measurement`` as a prior of source ``label`` (its fingerprint and workload kept)."""
    merged = {**(measurement.versions or {}), **versions, SOURCE_KEY: label}
    return dataclasses.replace(measurement, source="prior", versions=merged)


def table_measurements(path: str | Path) -> list[Measurement]:
    """Every measurement of a recorded table, or of every ``*.jsonl`` table in a folder, as
    recorded (``flashtune export`` stores the best of them; :func:`read_tables` makes priors).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: a table is unreadable (naming its file and line), or a folder holds none.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"table {path} does not exist")
    files = sorted(path.glob("*.jsonl")) if path.is_dir() else [path]
    if not files:
        raise ValueError(f"tables: folder {path} holds no *.jsonl table")
    return [m for file in files for m in load_table(file)]


def read_tables(path: str | Path, label: str) -> list[Measurement]:
    """:func:`table_measurements` as priors of source ``label``, less the rows of the varlen
    and paged kernels (``flashtune sweep --kernel``): as in :func:`read_store`, their configs
    are other kernels' (a study tunes the dense op's).

    Raises:
        ValueError: as :func:`table_measurements`, or every row is a packed kernel's.
    """
    read = table_measurements(path)
    dense = [as_prior(m, label) for m in read if kernel_of(m.config) in DENSE_KINDS]
    if read and not dense:
        raise ValueError(f"tables {path}: only {len(read)} varlen/paged rows, which no study tunes")
    return dense


def read_store(path: str | Path, label: str) -> list[Measurement]:
    """The entries of a tuned-config store file (``flashtune.runtime.storage.store``) as priors.

    A store keeps one config per (GPU, kernel, Triton, bucket), so each entry becomes one
    successful measurement of its bucket's representative workload (batch 1: a bucket
    names shapes, not a batch). The kernel hash and Triton version of the entry are kept
    in ``versions``: a config tuned for another kernel source is a weaker hint, not
    a wrong one. Entries of the varlen and paged classes are left out: their configs are
    other kernels' (a study tunes the dense op's).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: the file exists but holds no usable entry (the store's own warning,
            which says why, is part of the message).
    """

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"prior store {path} does not exist")
    # The store warns (and reads as empty) on a corrupt file; for a prior that is an error.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        read = list(read_snapshot(path).entries())
    entries = [entry for entry in read if entry.bucket.kind in DENSE_KINDS]
    if not entries:
        packed = f"only {len(read)} varlen/paged entries, which no study tunes" if read else "no entries"
        why = "; ".join(str(w.message) for w in caught) or packed
        raise ValueError(f"prior store {path}: nothing usable ({why})")
    priors = []
    for entry in entries:
        median = entry.median_ms if entry.median_ms is not None else 1.0  # unknown time: rank alone
        m = Measurement(
            config=entry.config, workload=entry.bucket.representative(), status=Status.OK,
            fingerprint=entry.fingerprint, hardware=entry.hardware, median_ms=median,
            tflops=entry.tflops or 0.0, source=entry.source,
        )
        priors.append(as_prior(m, label, kernel_hash=entry.kernel_hash, triton=entry.triton))
    return priors
