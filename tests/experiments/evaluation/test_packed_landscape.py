"""A packed kernel's table (``<workload>.varlen.jsonl``) beside the workload's dense one: two
spaces, each searched and scored on its own, never merged into one."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from flashtune.experiments.cli.main import main
from flashtune.experiments.evaluation.landscape import build_landscape, group_by_workload, table_files
from flashtune.kernels.space import VARLEN_KERNEL, VARLEN_TUNABLES, all_configs
from flashtune.objectives.hardware import load_spec
from flashtune.objectives.packed import packed_row, table_suffix
from flashtune.objectives.replay import load_table, write_table
from flashtune.objectives.types import Status


def varlen_table(dense_table: Path, folder: Path) -> Path:
    """The dense table's workload, measured by the varlen kernel: every tile of its space,
    the last one out of resources (a failure the sweep records)."""
    template = load_table(dense_table)[0]
    tiles = list(all_configs(VARLEN_TUNABLES))
    rows = [dataclasses.replace(template, config=packed_row(tile, VARLEN_KERNEL), median_ms=1.0 + i / 10,
                                status=Status.OK, error="")
            for i, tile in enumerate(tiles[:-1])]
    rows.append(dataclasses.replace(template, config=packed_row(tiles[-1], VARLEN_KERNEL), median_ms=float("inf"),
                                    status=Status.COMPILE_ERROR, error="out of resources"))
    path = folder / f"{template.workload.name}.{table_suffix(VARLEN_KERNEL)}.jsonl"
    write_table(path, rows)
    return path


def test_a_varlen_table_is_a_space_of_its_own(recorded_tables, tmp_path: Path) -> None:
    dense = tmp_path / recorded_tables[1].name
    dense.write_bytes(recorded_tables[1].read_bytes())
    varlen = varlen_table(dense, tmp_path)
    groups = group_by_workload(table_files([tmp_path]))
    assert sorted(map(tuple, groups)) == sorted([(dense,), (varlen,)])
    landscape = build_landscape(varlen, load_spec("h200"))
    assert landscape.name.endswith(".varlen") and landscape.packed == "varlen"
    # No static feasibility model for a packed kernel: every recorded tile is asked, the
    # failed one scored as the worst time.
    assert len(landscape.feasible) == len(list(all_configs(VARLEN_TUNABLES)))
    assert landscape.optimum_ms == 1.0 and landscape.optimum_config["kernel"] == VARLEN_KERNEL
    with pytest.raises(ValueError, match="spaces of 2 kernels"):
        build_landscape([dense, varlen], load_spec("h200"))


def test_compare_scores_a_dense_and_a_varlen_space_of_one_workload_apart(recorded_tables, tmp_path: Path) -> None:
    dense = tmp_path / recorded_tables[1].name
    dense.write_bytes(recorded_tables[1].read_bytes())
    varlen_table(dense, tmp_path)
    report = tmp_path / "report.json"
    assert main(["compare", "--tables", str(tmp_path), "--strategies", "random,tpe", "--seeds", "1",
                 "--budget", "12", "--jobs", "1", "--json", str(report)]) == 0
    workload = load_table(dense)[0].workload.name
    result = json.loads(report.read_text())
    assert sorted(result["workloads"]) == [workload, workload + ".varlen"]
    # Leave one kernel out sees two kernels: the attention kernel's space and the varlen kernel's.
    assert result["loko"]["kernels"] == {"attention": [workload], "varlen": [workload + ".varlen"]}
