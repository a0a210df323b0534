"""A recorded table extended by a later sweep: rows that omit a knob mean its implied value."""

from __future__ import annotations

import dataclasses

from flashtune.experiments.evaluation.landscape import build_landscape
from flashtune.objectives.hardware import load_spec
from flashtune.objectives.replay import load_table, write_table


def test_rows_without_a_knob_join_the_rows_that_name_it(recorded_tables, tmp_path) -> None:
    old = load_table(recorded_tables[1])  # no grid key (recorded before the knob)
    assert all("grid" not in m.config for m in old)
    new = [dataclasses.replace(m, config=m.config.replace(grid="persistent")) for m in old[:10]]
    path = tmp_path / recorded_tables[1].name
    write_table(path, old + new)
    landscape = build_landscape(path, load_spec("h200"))
    assert landscape.space.values("grid") == ("persistent", "tiles")
    assert landscape.space.size == 2 * build_landscape(recorded_tables[1], load_spec("h200")).space.size
    assert all(c in landscape.space for c in landscape.table)
    assert sum(c["grid"] == "tiles" for c in landscape.table) == len(old)
