"""Recorded values checked at the door, naming the file and the line (issue 23)."""

from __future__ import annotations

import json
import math

import pytest

from flashtune.kernels.config import Config
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
