"""Recorded values checked at the door, naming the file and the line (issue 23)."""

from __future__ import annotations

import json
import math
import tracemalloc

import pytest

from flashtune.kernels.config import Config
from flashtune.objectives import replay
from flashtune.objectives.replay import load_table
from flashtune.objectives.types import Measurement, Status, Workload

WORKLOAD = Workload(2, 8, 8, 1024, 1024, 64, "bfloat16", True)


def _line(block_m: int, median_ms, status: str = "ok", **config) -> str:
    m = Measurement(config=Config(BLOCK_M=block_m, BLOCK_N=64, num_warps=4, num_stages=2, **config),
                    workload=WORKLOAD, status=Status(status), median_ms=1.0, p20_ms=0.9, p80_ms=1.1, tflops=10.0)
    data = m.to_dict()
    data["median_ms"] = median_ms
    return json.dumps(data)


def _table(tmp_path, *lines: str):
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("median", [0, -5.0, None, "fast", True])
def test_a_bad_recorded_time_names_the_file_and_line(tmp_path, median):
    path = _table(tmp_path, _line(64, 1.0), _line(128, median))
    with pytest.raises(ValueError, match=rf"replay table {path}, line 2: Measurement: .*median_ms must be a"):
        load_table(path)


def test_a_failure_has_no_time_to_check(tmp_path):
    path = _table(tmp_path, _line(64, 1.0), _line(128, None, "compile_error"))
    assert [m.status for m in load_table(path)] == [Status.OK, Status.COMPILE_ERROR]
    assert math.isinf(load_table(path)[1].median_ms)


def test_a_duplicated_config_is_an_error_naming_both_lines(tmp_path):
    path = _table(tmp_path, _line(64, 1.0), _line(128, 2.0), _line(64, 0.001))
    with pytest.raises(ValueError, match=rf"replay table {path}, line 3: config .* is recorded twice \(line 1 too\)"):
        load_table(path)


def test_a_config_of_other_parameters_is_an_error(tmp_path):
    path = _table(tmp_path, _line(64, 1.0), _line(128, 2.0, num_ctas=2))
    with pytest.raises(ValueError, match=rf"replay table {path}, line 2: config parameters .* differ from the table's"):
        load_table(path)


def test_rows_may_omit_a_knob_with_an_implied_value(tmp_path):
    # A table extended by a later sweep: the old rows mean the knob's implied value (grid="tiles").
    path = _table(tmp_path, _line(64, 1.0), _line(64, 2.0, grid="persistent"), _line(128, 3.0, grid="tiles"))
    assert [m.median_ms for m in load_table(path)] == [1.0, 2.0, 3.0]


def test_a_config_equal_once_its_implied_knobs_are_filled_in_is_a_duplicate(tmp_path):
    path = _table(tmp_path, _line(64, 1.0), _line(64, 2.0, grid="tiles"))
    with pytest.raises(ValueError, match=rf"replay table {path}, line 2: config .* is recorded twice \(line 1 too\)"):
        load_table(path)


@pytest.mark.parametrize("chunk_bytes", [1, 7, 1 << 20])
def test_blank_lines_are_skipped_and_lines_keep_their_numbers(tmp_path, monkeypatch, chunk_bytes):
    monkeypatch.setattr(replay, "_CHUNK_BYTES", chunk_bytes)  # lines cut at every chunk boundary
    path = tmp_path / "t.jsonl"
    path.write_text("\n \t\n" + _line(64, 1.0) + "\r\n\n\n" + _line(128, 2.0) + "\n\f\n" + _line(64, 0.5))  # no last \n
    with pytest.raises(ValueError, match=rf"replay table {path}, line 8: config .* is recorded twice \(line 3 too\)"):
        load_table(path)
    path.write_text("\n" * 5 + _line(64, 1.0) + "\n" * 3 + "  " + _line(128, 2.0) + "  \n\n")
    assert [m.median_ms for m in load_table(path)] == [1.0, 2.0]
    path.write_text("\n \n\t\n")
    with pytest.raises(ValueError, match=rf"replay table {path} is empty"):
        load_table(path)


def test_a_table_of_blank_lines_costs_no_memory(tmp_path):
    """It was read whole and split into a list of lines: 300 MB of them took 3 GB."""
    path = tmp_path / "t.jsonl"
    with path.open("w") as handle:
        handle.write("\n" * (32 << 20) + _line(64, 1.0) + "\n")
    tracemalloc.start()
    try:
        assert [m.median_ms for m in load_table(path)] == [1.0]
        peak_bytes = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak_bytes < 8 << 20, peak_bytes  # a chunk or two of 1 MiB, not the 32 MiB file


def test_a_line_too_long_to_be_a_record_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(replay, "MAX_LINE_BYTES", 4096)
    monkeypatch.setattr(replay, "_CHUNK_BYTES", 1000)
    path = _table(tmp_path, _line(64, 1.0), "[" + " " * 10_000 + "]")
    with pytest.raises(ValueError, match=rf"replay table {path}, line 2: over 4096 bytes, not a record"):
        load_table(path)
