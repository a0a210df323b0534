"""`flashtune sweep --kernel varlen|paged`: rows that name their kernel (and page size), failures
recorded, and a sweep exported into the store and served by the packed runtime ops.

Triton's CPU interpreter at tiny float32 shapes (a simulated H200), a few configs each.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

import flashtune.runtime as runtime
import flashtune.runtime.dispatching.dispatch as dispatch
from flashtune.experiments.cli.main import main
from flashtune.experiments.cli.sweep import SweptKernel, sweep_workload
from flashtune.experiments.evaluation.prior_files import read_tables
from flashtune.experiments.evaluation.transfer import gpu_pairs
from flashtune.experiments.study.measurers import recorded_workloads
from flashtune.kernels.config import Config
from flashtune.kernels.reference import reference_attention
from flashtune.kernels.space import PAGE_SIZE_KEY, SAFE_DEFAULT, validate_paged_config, validate_varlen_config
from flashtune.objectives.hardware import load_spec
from flashtune.objectives.objective import Objective
from flashtune.objectives.replay import load_table, write_table
from flashtune.objectives.types import Measurement, Status, Workload
from flashtune.runtime.dispatching.resolve import PACKED_DEFAULTS

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="CPU interpreter suite")

#: One sequence of 48 queries and keys: a 32-row tile leaves a ragged last one.
VARLEN_ARG = "1,2/1,48,32,causal,float32"
#: Two sequences of 80 cached keys, one query each, GQA 2.
PAGED_ARG = "2,4/2,1/80,32,causal,float32"
INTERPRET = ["--interpret", "--hardware", "h200"]
#: Two paged tiles: one inside a page of 16 and one over several, both split (the combine runs).
PAGED_WHERE = ["--where", "BLOCK_N=16,64", "--where", "num_splits=2", "--where", "num_warps=2",
               "--where", "num_stages=1"]


@pytest.fixture(autouse=True)
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")


@pytest.fixture
def serving(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A fresh default dispatcher on a tmp store, simulating an H200 (never the user's store)."""
    monkeypatch.setenv("FLASHTUNE_STORE", str(tmp_path / "default-configs.json"))
    monkeypatch.setattr(dispatch, "_DEFAULT", None)
    store = tmp_path / "configs.json"
    runtime.set_store(store)
    runtime.set_hardware(load_spec("h200"))
    yield store
    runtime.set_hardware(None)


def _objective() -> Objective:
    """The live objective in the interpreter, stamped as the simulated H200 (so that
    ``flashtune export`` stores its rows, as it would a GPU's)."""
    return Objective(hardware=load_spec("h200"), env={"TRITON_INTERPRET": "1"}, precompile=0, timeout_s=120)


def test_varlen_sweep_writes_rows_of_the_varlen_kernel(tmp_path: Path, capsys) -> None:
    out = tmp_path / "sweeps"
    assert main(["sweep", "--kernel", "varlen", "--workload", VARLEN_ARG, "--out", str(out), *INTERPRET,
                 "--limit", "2", "--where", "BLOCK_M=32"]) == 0
    workload = Workload.parse(VARLEN_ARG)
    rows = load_table(out / f"{workload.name}.varlen.jsonl")
    assert len(rows) == 2 and all(m.status is Status.OK for m in rows), [m.error for m in rows]
    for m in rows:
        assert m.config["kernel"] == "varlen" and m.config["BLOCK_M"] == 32 and m.rel_error < 1e-4
        validate_varlen_config(m.config)  # the store's check of a varlen entry
    assert not (out / f"{workload.name}.jsonl").exists()  # the dense table's name stays free
    # Run again, the rows read back as the varlen kernel's: nothing is measured again.
    assert main(["sweep", "--kernel", "varlen", "--workload", VARLEN_ARG, "--out", str(out), *INTERPRET,
                 "--limit", "2", "--where", "BLOCK_M=32"]) == 0
    assert "already holds all 2 configs" in capsys.readouterr().err
    with pytest.raises(ValueError, match="only 2 varlen/paged rows"):
        read_tables(out, "table:sweeps")  # a study's priors are the dense op's


def test_priors_from_a_folder_leave_the_packed_tables_out(tmp_path: Path) -> None:
    workload = Workload.parse(VARLEN_ARG)
    varlen = Config(BLOCK_M=32, BLOCK_N=32, num_warps=4, num_stages=1, kernel="varlen")
    for config, name in ((SAFE_DEFAULT, f"{workload.name}.jsonl"), (varlen, f"{workload.name}.varlen.jsonl")):
        write_table(tmp_path / name, [Measurement(config=config, workload=workload, status=Status.OK, median_ms=1.0)])
    (prior,) = read_tables(tmp_path, "table:x")
    assert prior.config == SAFE_DEFAULT and prior.source == "prior"


def test_a_folders_workloads_and_gpu_pairs_leave_the_packed_tables_out(tmp_path: Path) -> None:
    # Packed tables swept into a GPU's data folder are not that GPU's recordings of a workload.
    workload = Workload.parse(VARLEN_ARG)
    for gpu in ("h200", "h100"):
        folder = tmp_path / gpu
        folder.mkdir()
        for kernel in (SweptKernel(), SweptKernel("varlen"), SweptKernel("paged", 16)):
            write_table(kernel.table(folder, workload), [])
    assert recorded_workloads([tmp_path / "h200"]) == [workload.name]
    (pair,) = gpu_pairs("h200", "h100", {"h200": [tmp_path / "h200"], "h100": [tmp_path / "h100"]})
    assert pair.source == workload.name and pair.source_files == (str(tmp_path / "h200" / f"{workload.name}.jsonl"),)


@pytest.mark.parametrize("page_size", [16, 32])
def test_paged_sweep_writes_rows_with_the_page_size(tmp_path: Path, page_size: int) -> None:
    out = tmp_path / "sweeps"
    assert main(["sweep", "--kernel", "paged", "--page-size", str(page_size), "--workload", PAGED_ARG,
                 "--out", str(out), *INTERPRET, *PAGED_WHERE]) == 0
    rows = load_table(out / f"{Workload.parse(PAGED_ARG).name}.paged-p{page_size}.jsonl")
    assert [m.config["BLOCK_N"] for m in rows] == [16, 64]
    assert all(m.status is Status.OK for m in rows), [m.error for m in rows]
    for m in rows:
        assert m.config["kernel"] == "paged" and m.config[PAGE_SIZE_KEY] == page_size
        validate_paged_config({k: v for k, v in m.config.items() if k != PAGE_SIZE_KEY})


def test_a_page_size_the_kernel_cannot_read_is_refused_in_one_line(tmp_path: Path, capsys) -> None:
    assert main(["sweep", "--kernel", "paged", "--page-size", "24", "--workload", PAGED_ARG,
                 "--out", str(tmp_path), *INTERPRET]) == 2
    assert "a positive multiple of 16" in capsys.readouterr().err
    assert main(["sweep", "--kernel", "paged", "--page-size", "256", "--workload", PAGED_ARG,
                 "--out", str(tmp_path), *INTERPRET]) == 2
    assert "another bucket" in capsys.readouterr().err
    assert main(["sweep", "--page-size", "16", "--workload", PAGED_ARG, "--out", str(tmp_path), *INTERPRET]) == 2
    assert not list(tmp_path.iterdir())


def test_invalid_packed_configs_are_recorded_failures(tmp_path: Path) -> None:
    varlen = Workload.parse(VARLEN_ARG)
    good = Config(BLOCK_M=32, BLOCK_N=32, num_warps=4, num_stages=1, kernel="varlen")
    with _objective() as objective:
        rows = sweep_workload(objective, varlen, tmp_path, progress=False, kernel=SweptKernel("varlen"),
                              configs=[good, good.replace(BLOCK_M=48), good.replace(loads="tma")])
        assert [m.status for m in rows] == [Status.OK, Status.INFEASIBLE, Status.INFEASIBLE]
        assert "BLOCK_M=48" in rows[1].error and "loads" in rows[2].error
        # A page size the parent takes (a positive int) and the kernel refuses: the worker's failure.
        bad_page = Config(BLOCK_N=16, num_splits=1, num_warps=2, num_stages=1, kernel="paged", page_size=24)
        (row,) = sweep_workload(objective, Workload.parse(PAGED_ARG), tmp_path, progress=False,
                                kernel=SweptKernel("paged", 24), configs=[bad_page])
    assert row.status is Status.CRASHED and "multiple of 16" in row.error and row.config == bad_page


def _export(out: Path, store: Path) -> None:
    assert main(["export", "--to", str(store), "--no-sanitize", f"table:{out}"]) == 0
    runtime.reload_store()


def _fastest(rows) -> Config:
    return min((m for m in rows if m.ok), key=lambda m: m.median_ms).config


def test_a_varlen_sweep_exported_is_served_by_the_varlen_op(tmp_path: Path, serving: Path) -> None:
    workload = Workload.parse(VARLEN_ARG)
    out = tmp_path / "sweeps"
    with _objective() as objective:
        rows = sweep_workload(objective, workload, out, progress=False, kernel=SweptKernel("varlen"),
                              where={"BLOCK_M": {"32"}, "num_stages": {"1"}}, limit=2)
    _export(out, serving)

    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, h, 48, 32, generator=g) for h in (2, 1, 1))
    cu = torch.tensor([0, 48], dtype=torch.int32)
    packed = [t[0].transpose(0, 1).contiguous() for t in (q, k, v)]  # (48, heads, 32)
    why = runtime.explain_varlen(packed[0], packed[1], cu, 48, 48, causal=True)
    assert why.origin == "exact" and why.config == validate_varlen_config(_fastest(rows)), why
    result = runtime.flash_attention_varlen(*packed, cu, cu, 48, 48, causal=True)
    expected = reference_attention(q, k, v, causal=True, scale=1 / math.sqrt(32))[0].transpose(0, 1)
    torch.testing.assert_close(result, expected, atol=1e-4, rtol=1e-4)


def test_a_paged_sweep_exported_is_served_by_the_paged_op(tmp_path: Path, serving: Path) -> None:
    workload = Workload.parse(PAGED_ARG)
    out = tmp_path / "sweeps"
    with _objective() as objective:
        rows = sweep_workload(objective, workload, out, progress=False, kernel=SweptKernel("paged", 16),
                              where={"BLOCK_N": {"16", "32"}, "num_splits": {"2"}, "num_warps": {"2"},
                                     "num_stages": {"1"}})
    _export(out, serving)

    g = torch.Generator().manual_seed(4)
    q = torch.randn(2, 4, 1, 32, generator=g)
    k, v = (torch.randn(2, 2, 80, 32, generator=g) for _ in range(2))
    # Each sequence's 80 keys in 5 pages of 16, the pages in reverse order.
    pages = k.transpose(1, 2).reshape(10, 16, 2, 32), v.transpose(1, 2).reshape(10, 16, 2, 32)
    k_cache, v_cache = (p.flip(0).contiguous() for p in pages)
    table = (9 - torch.arange(10, dtype=torch.int32)).view(2, 5)
    q_rows = q.transpose(1, 2).contiguous()
    why = runtime.explain_paged(q_rows, k_cache, table, causal=True)
    tile = {k: v for k, v in _fastest(rows).items() if k != PAGE_SIZE_KEY}
    assert why.origin == "exact" and why.config == validate_paged_config(tile), why
    result = runtime.flash_attention_with_kvcache(q_rows, k_cache, v_cache, cache_seqlens=torch.tensor(
        [80, 80], dtype=torch.int32), block_table=table, causal=True)
    expected = reference_attention(q, k, v, causal=True, scale=1 / math.sqrt(32)).transpose(1, 2)
    torch.testing.assert_close(result, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("kernel", ["varlen", "paged"])
def test_a_packed_sweep_measures_the_served_tile_first(kernel: str) -> None:
    """A sweep cut short still compares its best with the tile the op serves without an entry."""
    h100 = load_spec("h100")
    workload = Workload.parse("16,32/8,1024,128,causal,bfloat16" if kernel == "varlen"
                              else "64,32/8,1/4096,128,causal,bfloat16")
    swept = SweptKernel(kernel, 256 if kernel == "paged" else None, h100)
    served, _ = PACKED_DEFAULTS[kernel](h100, workload)
    rows = swept.select({}, None, workload)
    assert {k: rows[0][k] for k in served} == dict(served)
    assert sum({k: row[k] for k in served} == dict(served) for row in rows) == 1  # moved, not repeated
    assert len(rows) == len(SweptKernel(kernel, swept.page_size).select({}, None, workload))
    assert swept.select({}, 3, workload)[0] == rows[0]
