"""bench_peers' ``--process-per-workload``: what the parent writes for a child is what the
child parses: the same tables, top, rounds and extra configs, the one workload, its own JSON."""

import json
from pathlib import Path

from flashtune.experiments.benchmarks.bench_peers import child_argv, parser
from flashtune.objectives.types import SUITE


def test_a_child_parses_the_parents_choices_for_its_one_workload(tmp_path):
    also = {"loads": "gluon_pingpong_poly", "BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 4, "num_stages": 2,
            "grid": "persistent_zigzag", "tile_order": "head_major"}
    parent = parser().parse_args(["--tables", "a", "--tables", "b", "--top", "1", "--rounds", "3",
                                  "--also", json.dumps(also), "--also", json.dumps({**also, "BLOCK_N": 64}),
                                  "--process-per-workload", "--json", str(tmp_path / "all.json")])
    workload = SUITE[2]
    child = parser().parse_args(child_argv(parent, workload, tmp_path / "row.json"))
    assert child.tables == [Path("a"), Path("b")] and child.top == 1 and child.rounds == 3
    assert child.also == parent.also == [also, {**also, "BLOCK_N": 64}]
    assert child.only == [workload.name] and child.json == tmp_path / "row.json"
    assert not child.process_per_workload
