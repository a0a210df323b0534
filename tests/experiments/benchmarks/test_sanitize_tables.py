"""sanitize_tables (docs/gpu/sanitize.sh's Python) on the CPU up to the GPU: the plan from the
recorded tables, the one line without a GPU, and a whole run through a real fake
compute-sanitizer with the GPU's spec given (the GPU itself is not touched)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sanitize_tables as st
import sanitizer_fake

from flashtune.objectives import sanitize as sz
from flashtune.objectives.hardware import load_spec

DATA = Path(__file__).resolve().parents[3] / "experiments" / "data"
TABLES = ["--tables", str(DATA / "h200_gluon"), "--tables", str(DATA / "h200_decode"), "--tables",
          str(DATA / "h200_lean")]


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("FLASHTUNE_SANITIZED", str(tmp_path / "sanitized.json"))
    monkeypatch.delenv(sz.ENV_BIN, raising=False)
    monkeypatch.setattr(sz, "CUDA_BINS", ())


def test_the_plan_puts_the_defaults_first_then_each_variants_best_by_rank(tmp_path) -> None:
    assert st.main([*TABLES, "--top", "2", "--out", str(tmp_path), "--plan-only", "--arch", "h200"]) == 0
    items = json.loads((tmp_path / "plan.json").read_text())
    whys = [i["why"] for i in items]
    n_defaults = sum(w.startswith("default") for w in whys)
    assert n_defaults >= 2 and all(w.startswith("default") for w in whys[:n_defaults])
    assert {"gluon", "decode", "lean"} <= {i["variant"] for i in items[n_defaults:]}
    ranks = [int(w.rsplit("#", 1)[1]) for w in whys[n_defaults:]]
    assert ranks == sorted(ranks) and set(ranks) <= {1, 2}
    keys = [(json.dumps(i["config"], sort_keys=True), i["head_dim"], i["dtype"]) for i in items]
    assert len(keys) == len(set(keys))
    assert all(i["kernel"] == "decode" for i in items if i["variant"] == "decode")
    # The packed ops' defaults too, as their kernels' rows: the runtime serves them under continuous batching.
    packed = [i for i in items[:n_defaults] if i["variant"] in ("varlen", "paged")]
    assert {i["variant"] for i in packed} == {"varlen", "paged"} and all(i["kernel"] == i["variant"] for i in packed)
    assert {i["config"]["page_size"] for i in packed if i["variant"] == "paged"} == set(st.DEFAULT_PAGE_SIZES)
    assert {i["config"]["num_splits"] > 1 for i in packed if i["variant"] == "paged"} == {True, False}


def test_without_a_gpu_the_plan_and_one_line(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(st, "probe_gpu", lambda: None)
    assert st.main([*TABLES, "--top", "1", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == "sanitize_tables: nothing sanitized (no GPU)\n"
    assert (tmp_path / "plan.json").exists() and not (tmp_path / "findings.jsonl").exists()


def test_a_run_through_the_executable_records_every_verdict(tmp_path, monkeypatch, capsys) -> None:
    h200 = load_spec("h200")
    monkeypatch.setattr(st, "probe_gpu", lambda: h200.to_dict())
    default = st.default_items(h200)[0]["config"]
    report = ("========= COMPUTE-SANITIZER\n========= Error: Race reported between Write access at _gluon+0x10 "
              "in gluon.py:10\n=========     and Read access at _gluon+0x20 in gluon.py:12\n"
              "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)\n")
    sanitizer_fake.install(tmp_path / "bin", report=report, exitcode=sz.ERROR_EXITCODE,
                 unsafe_if=json.dumps(default, sort_keys=True))
    sanitizer_fake.on_path(monkeypatch, tmp_path / "bin")
    out = tmp_path / "out"
    assert st.main(["--tables", str(DATA / "h200_gluon"), "--top", "1", "--out", str(out), "--jobs", "2"]) == 1
    rows = [json.loads(line) for line in (out / "findings.jsonl").read_text().splitlines()]
    plan = json.loads((out / "plan.json").read_text())
    assert len(rows) == len(plan)
    unsafe = [r for r in rows if r["verdict"] == "unsafe"]
    # The default's config, wherever it is planned (at its head dim, and any other where a table ranks it).
    # (findings.jsonl is in the order batches end: the default's own row need not be first.)
    assert unsafe and all(r["config"] == default for r in unsafe) and any(r["why"].startswith("default") for r in unsafe)
    assert all(r["reason"].startswith("compute-sanitizer memcheck: Error: Race reported between") for r in unsafe)
    assert all(r["verdict"] == "safe" for r in rows if r["config"] != default)
    table = (out / "findings.md").read_text()
    assert table.startswith("# Sanitized configs on NVIDIA H200") and table.count("| unsafe |") == len(unsafe)
    assert f"{len(unsafe)} unsafe (1 of them defaults the runtime serves)" in capsys.readouterr().out


def test_configs_are_checked_a_batch_at_a_time(tmp_path, monkeypatch) -> None:
    h200 = load_spec("h200")
    monkeypatch.setattr(st, "probe_gpu", lambda: h200.to_dict())
    clean = "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n"
    sanitizer_fake.install(tmp_path / "bin", report=clean, exitcode=0)
    sanitizer_fake.on_path(monkeypatch, tmp_path / "bin")
    out = tmp_path / "out"
    assert st.main(["--tables", str(DATA / "h200_gluon"), "--top", "1", "--out", str(out), "--jobs", "2",
                    "--batch-size", "4"]) == 0
    rows = [json.loads(line) for line in (out / "findings.jsonl").read_text().splitlines()]
    batches = st.batches_of(json.loads((out / "plan.json").read_text()), 4)
    assert len(rows) > 4 and len(sanitizer_fake.calls(tmp_path / "bin")) == 4 * len(batches)  # a run a tool a batch
    assert all(r["verdict"] == "safe" for r in rows)
    assert max(map(len, batches)) == 4 and all(len({i["variant"] for i in batch}) == 1 for batch in batches)
    assert sorted(r["tools"][0].get("batch", 1) for r in rows) == sorted(len(b) for b in batches for _ in b)


def test_batches_hold_one_variant_and_keep_the_plans_tiers() -> None:
    items = [{"why": "default prefill", "variant": "gluon"}, {"why": "default decode", "variant": "decode"},
             {"why": "w forward #1", "variant": "forward"}, {"why": "w gluon #1", "variant": "gluon"},
             {"why": "x forward #1", "variant": "forward"}, {"why": "w forward #2", "variant": "forward"}]
    got = [[i["why"] for i in batch] for batch in st.batches_of(items, 8)]
    assert got == [["default prefill"], ["default decode"], ["w forward #1", "x forward #1"], ["w gluon #1"],
                   ["w forward #2"]]
    assert [len(b) for b in st.batches_of(items[2:3] * 5, 2)] == [2, 2, 1]
