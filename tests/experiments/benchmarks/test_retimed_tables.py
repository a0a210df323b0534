"""bench_peers' re-timed configs written as replay tables (docs/gpu/retimed_tables.py),
on a real recorded table: replayed after it, a re-timed config reads its re-timed time."""

import dataclasses
import json

import pytest
import retimed_tables

from flashtune.experiments import DATA_DIR
from flashtune.experiments.study import measurers
from flashtune.kernels.space import validate_config
from flashtune.objectives.hardware import load_spec
from flashtune.objectives.replay import load_table
from flashtune.objectives.types import Workload

WORKLOAD = Workload.parse("b2_h16_n8192_d256_full_bfloat16")
SWEEP = DATA_DIR / "h200_grown"


def _top(n: int):
    """The sweep's ``n`` best rows, their configs with the knobs the table predates filled in."""
    rows = load_table(SWEEP / f"{WORKLOAD.name}.jsonl")
    best = sorted((m for m in rows if m.ok), key=lambda m: m.median_ms)[:n]
    return [dataclasses.replace(m, config=validate_config(m.config)) for m in best]


def _bench_json(path, readings):
    path.write_text(json.dumps([{"workload": WORKLOAD.name, "sdpa_cudnn": 600.0,
                                 "recorded_each": {json.dumps(m.config.to_dict()): t for m, t in readings}}]))
    return path


def test_replay_after_the_sweep_reads_the_retimed_times(tmp_path, capsys):
    top = _top(4)
    # The sweep's best re-times 10 % slower, below the second's single reading; the third was
    # not timed to a number (left out); the fourth is not re-timed at all.
    readings = [(top[0], top[0].tflops * 0.9), (top[1], top[1].tflops), (top[2], 0.0)]
    out = tmp_path / "retimed"
    assert retimed_tables.main([str(_bench_json(tmp_path / "retime.json", readings)), "--tables", str(SWEEP),
                                "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert "not timed, left out" in printed.err
    rows = {validate_config(m.config): m for m in load_table(out / f"{WORKLOAD.name}.jsonl")}
    assert set(rows) == {top[0].config, top[1].config}
    first = rows[top[0].config]
    assert first.tflops == pytest.approx(top[0].tflops * 0.9)
    assert first.median_ms == pytest.approx(WORKLOAD.flops / (first.tflops * 1e12) * 1e3)
    assert (first.fingerprint, first.registers) == (top[0].fingerprint, top[0].registers)  # the sweep row's facts

    replay = measurers.open_replay(load_spec("h200"), [WORKLOAD], [SWEEP, out])
    try:
        evaluate = replay.evaluator(WORKLOAD)
        assert evaluate(top[0].config).median_ms == pytest.approx(first.median_ms)  # re-timed
        assert evaluate(top[3].config).median_ms == pytest.approx(top[3].median_ms)  # the sweep's
    finally:
        replay.close()

    # The summary: the re-timed best (top[1]'s, unchanged) and the one faster config left (none:
    # top[0] was re-timed, top[2]'s and top[3]'s readings are below top[1]'s).
    folded = retimed_tables.retimed_rows(json.loads((tmp_path / "retime.json").read_text())[0],
                                         load_table(SWEEP / f"{WORKLOAD.name}.jsonl"))
    assert folded.retimed_best_tflops == pytest.approx(top[1].tflops)
    assert folded.sweep_best_tflops == pytest.approx(top[0].tflops)
    assert folded.faster_not_retimed == 0


def test_a_second_retiming_keeps_the_first_ones_other_rows(tmp_path):
    top = _top(3)
    out = tmp_path / "retimed"
    retimed_tables.main([str(_bench_json(tmp_path / "a.json", [(top[0], 500.0), (top[1], 400.0)])),
                         "--tables", str(SWEEP), "--out", str(out)])
    retimed_tables.main([str(_bench_json(tmp_path / "b.json", [(top[1], 450.0), (top[2], 300.0)])),
                         "--tables", str(SWEEP), "--out", str(out)])
    rows = {validate_config(m.config): m.tflops for m in load_table(out / f"{WORKLOAD.name}.jsonl")}
    assert rows == {top[0].config: 500.0, top[1].config: 450.0, top[2].config: 300.0}


def test_a_config_no_table_holds_is_named(tmp_path):
    config = dict(_top(1)[0].config.to_dict(), loads="gluon_pingpong", num_warps=4)  # swept later, elsewhere
    path = tmp_path / "retime.json"
    path.write_text(json.dumps([{"workload": WORKLOAD.name, "recorded_each": {json.dumps(config): 400.0}}]))
    with pytest.raises(ValueError, match="in no sweep table"):
        retimed_tables.main([str(path), "--tables", str(SWEEP), "--out", str(tmp_path / "out")])
