"""Replay objective: answer from a recorded sweep table instead of the GPU.

A table is JSON lines, one ``Measurement.to_dict()`` per config of one workload on one
GPU, failures included (``flashtune sweep`` writes them), or a recorded space of any other
kernel: a Kernel Tuner cache or T4 file (``.json``, ``.json.gz``;
``flashtune.objectives.kernel_tuner_files``), whose measurements have no workload (None). Replaying gives the same
``Measurement`` a live run gave, with ``source="replayed"``; an optional noise model
draws each time from the recorded 20/80 % quantiles, so strategies meet the spread the
GPU showed (Kernel Tuner's simulation mode).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import BinaryIO

import numpy as np

from flashtune.kernels.config import Config
from flashtune.kernels.space import IMPLIED
from flashtune.objectives.kernel_tuner_files import is_kernel_tuner_file, json_problem, load_kernel_tuner
from flashtune.objectives.types import Measurement, Status, Workload

# 20th..80th percentile of a normal distribution spans 2 * 0.8416 standard deviations.
_P20_P80_SIGMAS = 2 * 0.8416212335729143


def load_table(path: str | Path) -> list[Measurement]:
    """Read a recorded table, naming the file and line of any bad record.

    A Kernel Tuner cache or T4 file (by its suffix) is read by ``load_kernel_tuner``.
    """
    path = Path(path)
    if is_kernel_tuner_file(path):
        return list(load_kernel_tuner(path).measurements)
    measurements = []
    line_of: dict[Config, int] = {}  # a config's line: one line per config
    try:
        with path.open("rb") as handle:
            for number, line in _nonblank_lines(handle, path):
                measurement = _record(path, number, line)
                # Rows may omit a knob with an implied value (a table extended by a later sweep:
                # rows recorded before the knob mean its implied value); any other difference
                # is an error.
                params = set(measurement.config.keys())
                if measurements and (params ^ set(measurements[0].config.keys())) - set(IMPLIED):
                    raise ValueError(f"replay table {path}, line {number}: config parameters {sorted(params)} "
                                     f"differ from the table's {sorted(measurements[0].config.keys())} "
                                     f"(line {min(line_of.values())})")
                completed = _with_implied(measurement.config)
                if completed in line_of:
                    raise ValueError(f"replay table {path}, line {number}: config {measurement.config} is recorded "
                                     f"twice (line {line_of[completed]} too); keep one line per config")
                line_of[completed] = number
                measurements.append(measurement)
    except OSError as exc:
        raise ValueError(f"replay table {path}: {exc.strerror or exc}") from None
    if not measurements:
        raise ValueError(f"replay table {path} is empty")
    workloads = {m.workload for m in measurements}
    if len(workloads) != 1:
        raise ValueError(f"replay table {path} mixes {len(workloads)} workloads; one table holds one")
    return measurements


#: Bytes read at a time: a table is streamed, never held whole.
_CHUNK_BYTES = 1 << 20
#: The longest line a table may hold; a record is about a kilobyte (compiler output is clipped).
MAX_LINE_BYTES = 16 << 20
#: Any byte that is not JSON whitespace (or a vertical tab or form feed, which ``str.strip``
#: took as blank too).
_CONTENT = re.compile(rb"[^ \t\r\n\f\v]")


def _nonblank_lines(handle: BinaryIO, path: Path) -> Iterator[tuple[int, bytes]]:
    """The lines of ``handle`` that hold anything but whitespace, numbered from 1.

    Blank lines are stepped over by C-level searches, not a Python loop per line: a table
    of 300 MB of blank lines once took 3 GB (read whole, split into a list of lines), and
    a loop over its 300 million lines would take a minute. Memory is a chunk plus one line.

    Raises:
        ValueError: a line over ``MAX_LINE_BYTES``, naming the file and line.
    """
    number = 1  # the number of the line at ``pos`` of the current block
    head: list[bytes] = []  # the start of a line that the chunks read so far have not ended
    head_bytes = 0
    while chunk := handle.read(_CHUNK_BYTES):
        end = chunk.rfind(b"\n")
        if end < 0:
            head.append(chunk)
            head_bytes += len(chunk)
            if head_bytes > MAX_LINE_BYTES:
                raise ValueError(f"replay table {path}, line {number}: over {MAX_LINE_BYTES} bytes, not a record")
            continue
        block = b"".join([*head, chunk[:end + 1]])  # whole lines, the last ending at its end
        head = [chunk[end + 1:]]
        head_bytes = len(head[0])
        if block.isspace():  # blank lines only: about ten times faster than the search below
            number += block.count(b"\n")
            continue
        pos = 0
        while (found := _CONTENT.search(block, pos)) is not None:
            newline = block.rfind(b"\n", pos, found.start())
            start = pos if newline < 0 else newline + 1
            stop = block.index(b"\n", found.start())
            number += block.count(b"\n", pos, start)
            if stop - start > MAX_LINE_BYTES:
                raise ValueError(f"replay table {path}, line {number}: over {MAX_LINE_BYTES} bytes, not a record")
            yield number, block[start:stop]
            number += 1
            pos = stop + 1
        number += block.count(b"\n", pos)
    tail = b"".join(head)
    if _CONTENT.search(tail):
        yield number, tail


def _record(path: Path, number: int, line: bytes) -> Measurement:
    """One line of a table as a measurement; any problem is one ValueError naming the file and line."""
    where = f"replay table {path}, line {number}"
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{where}: not UTF-8 text ({exc.reason} at byte {exc.start} of the line)") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"{where}: {json_problem(exc)}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{where}: not a measurement (a JSON {type(data).__name__}, not an object)")
    try:
        return Measurement.from_dict(data)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        said = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
        raise ValueError(f"{where}: {said}") from None


def _with_implied(config: Config) -> Config:
    """``config`` with the implied value of every knob it omits: equal configs compare equal."""
    missing = {name: value for name, value in IMPLIED.items() if name not in config}
    return config.replace(**missing) if missing else config


def write_table(path: str | Path, measurements: Iterable[Measurement]) -> None:
    """Write a table atomically (temp file, then rename): a killed sweep leaves no half file."""
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("w") as fh:
        for m in measurements:
            fh.write(json.dumps(m.to_dict(), sort_keys=True) + "\n")
    tmp.replace(path)


#: The error of a replayed config that the tables do not hold (a failure value, not an exception).
NOT_RECORDED = "config not in the recorded table"


class ReplayObjective:
    """Measurements from recorded tables, keyed by workload and config.

    Args:
        tables: recorded measurements (any number of workloads, one GPU).
        noise: draw times from the recorded quantiles instead of the median.
        seed: seeds the noise.
    """

    def __init__(self, tables: Iterable[Measurement], *, noise: bool = False, seed: int = 0) -> None:
        self._table: dict[Workload | None, dict[Config, Measurement]] = {}
        for m in tables:
            self._table.setdefault(m.workload, {})[m.config] = m
        if not self._table:
            raise ValueError("ReplayObjective: no measurements given")
        self._noise = noise
        self._rng = np.random.default_rng(seed)

    @classmethod
    def from_files(cls, paths: Iterable[str | Path], **kwargs) -> ReplayObjective:
        measurements: list[Measurement] = []
        for path in paths:
            measurements.extend(load_table(path))
        return cls(measurements, **kwargs)

    @property
    def workloads(self) -> list[Workload | None]:
        return list(self._table)

    def table(self, workload: Workload | None = None) -> Mapping[Config, Measurement]:
        return self._table[self._check_workload(workload)]

    def evaluate(self, config: Config, workload: Workload | None = None) -> Measurement:
        """The recorded measurement of ``config`` (``workload`` None: a table of another kernel)."""
        recorded = self.table(workload).get(config)
        if recorded is None:
            # Outside the recorded space: a failure value, never an exception.
            return Measurement.failure(config, workload, Status.INFEASIBLE, NOT_RECORDED,
                                       source="replayed")
        replayed = dataclasses.replace(recorded, source="replayed")
        if self._noise and recorded.ok:
            sigma = max(recorded.p80_ms - recorded.p20_ms, 0.0) / _P20_P80_SIGMAS
            median = max(float(self._rng.normal(recorded.median_ms, sigma)), recorded.median_ms * 0.5)
            tflops = workload.flops / (median * 1e-3) / 1e12 if workload is not None else 0.0
            replayed = dataclasses.replace(replayed, median_ms=median, tflops=tflops)
        return replayed

    def optimum(self, workload: Workload | None = None) -> Measurement:
        """The fastest recorded ok config (the exhaustive optimum)."""
        ok = [m for m in self.table(workload).values() if m.ok and math.isfinite(m.median_ms)]
        if not ok:
            raise ValueError(f"no config of {_name(workload)} ran correctly in the recorded table")
        return min(ok, key=lambda m: m.median_ms)

    def _check_workload(self, workload: Workload | None) -> Workload | None:
        if workload not in self._table:
            names = sorted(_name(w) for w in self._table)
            raise ValueError(f"workload {_name(workload)} was not recorded; recorded: {names}")
        return workload


def _name(workload: Workload | None) -> str:
    return "(another kernel's space, no workload)" if workload is None else workload.name
