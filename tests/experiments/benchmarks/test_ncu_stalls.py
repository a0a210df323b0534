"""The sampled stall reasons of a kernel's block loops, from Nsight Compute's per-instruction
page: the real page of the fp8 D128 ping-pong profiled on an H100 (2026-12-05)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import ncu_metrics
import pytest

SOURCE = Path(__file__).resolve().parents[3] / "docs" / "results" / "ncu-source-2026-12-05" / "source.csv.gz"


def test_the_two_consumer_loops_are_found_and_their_shares_sum_to_one() -> None:
    records = ncu_metrics.source_stalls(gzip.open(SOURCE, "rt").read())
    loops, kernel = records[:-1], records[-1]
    # One block loop per consumer warpgroup (the mbarrier retries' stubs jump back over the
    # EXIT: not loops), each the 511 instructions sass_count's schedule showed.
    assert [(r["range"], r["instructions"]) for r in loops] == [("block loop 0", 511), ("block loop 1", 511)]
    assert kernel["range"] == "kernel" and kernel["instructions"] == 3360
    for rec in records:
        assert sum(rec["shares"].values()) == pytest.approx(1.0, abs=1e-3)
    assert sum(r["samples"] for r in loops) < kernel["samples"]
    # The consumer loops issue a quarter of their samples; the kernel as a whole is mostly the
    # producer warpgroup's idle warps at a barrier.
    assert all(0.2 < r["shares"]["selected"] < 0.3 for r in loops)
    assert max(kernel["shares"], key=kernel["shares"].get) == "barrier"


def test_the_cli_writes_json_and_refuses_a_page_that_is_not_the_source_page(tmp_path, capsys) -> None:
    out = tmp_path / "stalls.json"
    assert ncu_metrics.main(["stalls", str(SOURCE), "--json", str(out)]) == 0
    assert [r["range"] for r in json.loads(out.read_text())] == ["block loop 0", "block loop 1", "kernel"]
    assert "block loop 0 [0x2020, 0x4000] 511 instructions" in capsys.readouterr().out
    raw = tmp_path / "raw.csv"
    raw.write_text('"ID","Kernel Name"\n"0","gluon_attention_kernel"\n')
    with pytest.raises(ValueError, match="source page"):
        ncu_metrics.main(["stalls", str(raw)])
