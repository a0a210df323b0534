"""Priors from MLflow, a store file and a table; re-checked on the target; `tune --prior-from`."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from study_support import GQA_WORKLOAD, WORKLOAD, WORKLOAD_ARG, tune_args

from flashtune.experiments.cli.main import main
from flashtune.experiments.evaluation import priors
from flashtune.experiments.evaluation.prior_mlflow import parse_config
from flashtune.experiments.study import measurers
from flashtune.experiments.study.runner import Study, run_study
from flashtune.kernels.config import Config
from flashtune.kernels.resources import known_failure
from flashtune.objectives.feasibility import check
from flashtune.objectives.hardware import HardwareSpec
from flashtune.objectives.replay import load_table
from flashtune.objectives.types import Workload
from flashtune.runtime.dispatching.baselines import baseline_priors
from flashtune.runtime.storage.buckets import Bucket
from flashtune.runtime.storage.export import export_best
from flashtune.runtime.storage.store import Store, read_snapshot

#: A GPU like the H200 with the 99 KB of shared memory per block of sm86/sm89.
SMALL_SHARED_BYTES = 101376


def _table(replay_dir: Path, workload: Workload) -> Path:
    return measurers.table_path(replay_dir, workload)


def _small(h200: HardwareSpec) -> HardwareSpec:
    return dataclasses.replace(h200, name="small H200", shared_memory_per_block_bytes=SMALL_SHARED_BYTES)


def _replay_study(replay_dir: Path, stores: dict[str, str], hardware: HardwareSpec, *, name: str, trials: int,
                  workload: Workload = WORKLOAD, strategy: str = "random", prior_list=()):
    source = measurers.open_replay(hardware, [workload], replay_dir)
    study = Study(name=name, workload=workload, hardware=hardware, strategy=strategy, trials=trials, seed=1)
    return run_study(study, source.evaluator(workload), tracking_uri=stores["tracking_uri"],
                     storage_url=stores["storage"], fingerprint=source.fingerprint, versions=source.versions,
                     constraint=source.constraint(workload), priors=prior_list)


# -- sources ---------------------------------------------------------------------------------


@pytest.mark.parametrize("text, spec", [
    ("table:/x/y.jsonl", priors.PriorSpec("table", "/x/y.jsonl")),
    ("mlflow:abc123", priors.PriorSpec("mlflow", "abc123")),
    ("mlflow-experiment:NVIDIA H200", priors.PriorSpec("mlflow-experiment", "NVIDIA H200")),
    ("store: tuned.json", priors.PriorSpec("store", "tuned.json")),
    ("baselines", priors.PriorSpec("baselines")),
])
def test_sources_parse(text, spec) -> None:
    assert priors.parse_source(text) == spec


@pytest.mark.parametrize("text", ["table", "table:", "gopher:x", "baselines:sm90", "h200"])
def test_bad_sources_name_the_forms(text) -> None:
    with pytest.raises(ValueError, match="mlflow:RUN_ID, mlflow-experiment:NAME, store:PATH, table:PATH or baselines"):
        priors.parse_source(text)


def test_priors_from_a_table_keep_where_they_were_measured(replay_dir, h200) -> None:
    path = _table(replay_dir, WORKLOAD)
    read = priors.read(priors.PriorSpec("table", str(path)))
    assert len(read) == len(load_table(path))
    assert {m.source for m in read} == {"prior"}
    assert {m.fingerprint for m in read} == {h200.fingerprint} and {m.workload for m in read} == {WORKLOAD}
    assert {m.versions["prior_source"] for m in read} == {f"table:{path}"}
    # A folder: every table in it, each keeping its own workload.
    folder = priors.read(priors.PriorSpec("table", str(replay_dir)))
    assert {m.workload for m in folder} == {WORKLOAD, GQA_WORKLOAD}


def test_priors_from_a_store_file(replay_dir, h200, tmp_path) -> None:
    measurements = load_table(_table(replay_dir, GQA_WORKLOAD))
    store = tmp_path / "tuned.json"
    assert export_best(measurements, store) == 1
    read = priors.read(priors.PriorSpec("store", str(store)))
    best = min((m for m in measurements if m.ok and not m.config["use_fp8"]), key=lambda m: m.median_ms)
    assert len(read) == 1
    (prior,) = read
    assert prior.config == best.config and prior.median_ms == pytest.approx(best.median_ms)
    assert prior.source == "prior" and prior.fingerprint == h200.fingerprint and prior.ok
    assert prior.workload.head_dim == GQA_WORKLOAD.head_dim and prior.versions["kernel_hash"]
    assert prior.versions["prior_source"] == f"store:{store}"

    # Entries of the varlen and paged classes are other kernels' configs: never priors.
    varlen = Bucket.of_shape(kind="varlen", dtype="bfloat16", causal=True, head_dim=GQA_WORKLOAD.head_dim,
                             q_heads=4, kv_heads=2, q_len=100, kv_len=100, batch=2)
    tile = Config(BLOCK_M=32, BLOCK_N=64, num_warps=4, num_stages=1)
    Store(store).merge([dataclasses.replace(next(read_snapshot(store).entries()), bucket=varlen, config=tile)])
    assert [p.config for p in priors.read(priors.PriorSpec("store", str(store)))] == [best.config]
    only_packed = tmp_path / "packed.json"
    Store(only_packed).merge([dataclasses.replace(next(read_snapshot(store).entries()), bucket=varlen, config=tile)])
    with pytest.raises(ValueError, match="varlen/paged entries"):
        priors.read(priors.PriorSpec("store", str(only_packed)))


def test_missing_and_corrupt_files_are_errors(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        priors.read(priors.PriorSpec("store", str(tmp_path / "none.json")))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        priors.read(priors.PriorSpec("table", str(tmp_path / "none.jsonl")))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="nothing usable"):  # the store's own warning is the reason given
        priors.read(priors.PriorSpec("store", str(bad)))


# -- re-checked on the target ----------------------------------------------------------------


def test_recheck_on_a_smaller_gpu_drops_what_does_not_fit(replay_dir, h200) -> None:
    read = priors.read(priors.PriorSpec("table", str(_table(replay_dir, GQA_WORKLOAD))))
    small = _small(h200)
    result = priors.recheck(read, GQA_WORKLOAD, small)
    fits = {m.config for m in read if check(m.config, GQA_WORKLOAD, small).feasible}
    assert {m.config for m in result.told} == fits
    assert {m.config for m, _ in result.dropped} == {m.config for m in read} - fits
    # Some configs the H200 ran are too big for the smaller GPU: dropped, and said why.
    ran_on_h200 = {m.config for m in read if m.ok}
    assert ran_on_h200 - fits
    # Dropped for the target's shared memory, or as a known failure (kernels.resources declares them).
    assert all("shared memory" in why or why == known_failure(m.config, small.compute_capability) for m, why in result.dropped)
    assert any("shared memory" in why for _, why in result.dropped)
    assert f"{len(result.dropped)} dropped as infeasible on the target" in result.summary()
    # Kept priors keep their source's workload and fingerprint: they say where they were measured.
    assert {m.fingerprint for m in result.told} == {h200.fingerprint}


def test_recheck_uses_the_targets_head_dim(replay_dir, h200) -> None:
    """A config that fits at head_dim 64 may not at 256: feasibility is the target's workload's."""
    read = priors.read(priors.PriorSpec("table", str(_table(replay_dir, WORKLOAD))))  # head_dim 64
    target = Workload(1, 8, 8, 2048, 2048, 256)
    result = priors.recheck(read, target, h200)
    assert result.dropped and all(not check(m.config, target, h200).feasible for m, _ in result.dropped)
    assert all(check(m.config, target, h200).feasible for m in result.told)


def test_baselines_stand_in_when_no_source_has_data(h200) -> None:
    spec = priors.PriorSpec("mlflow-experiment", "h100")
    result = priors.load_for([spec], {spec: []}, GQA_WORKLOAD, h200)
    assert result.fallback and result.sources == ("mlflow-experiment:h100", "baselines")
    assert [m.config for m in result.told] == [m.config for m in baseline_priors(h200, GQA_WORKLOAD)]
    assert "baselines instead" in result.summary()
    explicit = priors.load_for([priors.PriorSpec("baselines")], {}, GQA_WORKLOAD, _small(h200))
    assert not explicit.fallback and explicit.told
    assert all(check(m.config, GQA_WORKLOAD, _small(h200)).feasible for m in explicit.told)


# -- MLflow ----------------------------------------------------------------------------------


def test_priors_from_a_real_mlflow_study(replay_dir, stores, h200, mlflow_client) -> None:
    result = _replay_study(replay_dir, stores, h200, name="source-study", trials=10)
    by_config = {t.config: t.measurement for t in result.trials}

    read = priors.read(priors.PriorSpec("mlflow", result.parent_run_id), tracking_uri=stores["tracking_uri"])
    assert len(read) == 10 and {m.config for m in read} == set(by_config)
    for prior in read:
        measured = by_config[prior.config]
        assert prior.source == "prior" and prior.status == measured.status
        assert prior.workload == WORKLOAD and prior.fingerprint == measured.fingerprint
        assert prior.hardware == h200.name and prior.versions["triton"] == h200.triton
        if measured.ok:
            assert prior.median_ms == pytest.approx(measured.median_ms)
            assert prior.registers == measured.registers

    # The GPU model's experiment, by short name, GPU name or experiment name: every study in it.
    _replay_study(replay_dir, stores, h200, name="other-study", trials=4, workload=GQA_WORKLOAD)
    for name in ("h200", "NVIDIA H200", "flashtune/NVIDIA H200"):
        everything = priors.read(priors.PriorSpec("mlflow-experiment", name), tracking_uri=stores["tracking_uri"])
        assert len(everything) == 14 and {m.workload for m in everything} == {WORKLOAD, GQA_WORKLOAD}

    with pytest.raises(ValueError, match="flashtune experiments there: \\['flashtune/NVIDIA H200'\\]"):
        priors.read(priors.PriorSpec("mlflow-experiment", "a100"), tracking_uri=stores["tracking_uri"])
    child = mlflow_client.search_runs([result.experiment_id],
                                      f"tags.`mlflow.parentRunId` = '{result.parent_run_id}'", max_results=1)[0]
    with pytest.raises(ValueError, match=f"give its study's run, mlflow:{result.parent_run_id}"):
        priors.read(priors.PriorSpec("mlflow", child.info.run_id), tracking_uri=stores["tracking_uri"])
    with pytest.raises(ValueError, match="no such run"):
        priors.read(priors.PriorSpec("mlflow", "0" * 32), tracking_uri=stores["tracking_uri"])


def test_mlflow_params_read_back_as_the_kernel_declares_them() -> None:
    params = {"BLOCK_M": "128", "BLOCK_N": "64", "num_warps": "8", "num_stages": "3", "loads": "tma",
              "use_fp8": "False"}
    config = parse_config(params)
    assert config == Config(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3, loads="tma", use_fp8=False)
    assert config["use_fp8"] is False
    with pytest.raises(ValueError, match="not one of"):
        parse_config({**params, "BLOCK_M": "100"})
    assert parse_config({**params, "grid": "persistent"})["grid"] == "persistent"
    with pytest.raises(ValueError, match="not one of"):
        parse_config({**params, "grid": "waves"})


def test_a_study_records_its_priors(replay_dir, stores, h200, mlflow_client) -> None:
    told = priors.recheck(priors.read(priors.PriorSpec("table", str(_table(replay_dir, WORKLOAD)))), WORKLOAD, h200)
    result = _replay_study(replay_dir, stores, h200, name="warm", trials=6, strategy="tpe", prior_list=told.told)
    parent = mlflow_client.get_run(result.parent_run_id)
    assert parent.data.tags["flashtune.prior_sources"] == f"table:{_table(replay_dir, WORKLOAD)}"
    assert parent.data.tags["flashtune.priors_told"] == str(len(told.told))
    children = mlflow_client.search_runs([result.experiment_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
    by_number = {int(c.data.tags["trial"]): c for c in children}
    # The table held every config: each trial names its source; the first is the priors' best.
    assert all(c.data.tags["flashtune.prior_source"] == f"table:{_table(replay_dir, WORKLOAD)}"
               for c in by_number.values())
    assert by_number[0].data.tags["flashtune.prior_rank"] == "1"


# -- the command line ------------------------------------------------------------------------


def test_tune_prior_from_end_to_end(replay_dir, stores, tmp_path, capsys, mlflow_client) -> None:
    # A source study on another workload, then a study on WORKLOAD told its MLflow trials.
    source_args = [*tune_args(stores, replay_dir, "--study-name", "src", "--trials", "8", "--strategy", "random")]
    source_args[source_args.index(WORKLOAD_ARG)] = "2,8/2,512,128"
    assert main(source_args) == 0
    experiment = mlflow_client.get_experiment_by_name("flashtune/NVIDIA H200")
    (source_parent,) = mlflow_client.search_runs([experiment.experiment_id], "tags.study = 'src' AND tags.role = 'study'")
    capsys.readouterr()

    table = _table(replay_dir, WORKLOAD)
    args = tune_args(stores, replay_dir, "--study-name", "warm", "--trials", "5", "--strategy", "grid",
                     "--prior-from", f"mlflow:{source_parent.info.run_id}", "--prior-from", f"table:{table}")
    assert main(args) == 0
    err = capsys.readouterr().err
    assert f"prior(s) from mlflow:{source_parent.info.run_id}, table:{table}" in err

    (parent,) = mlflow_client.search_runs([experiment.experiment_id], "tags.study = 'warm' AND tags.role = 'study'")
    assert parent.data.tags["flashtune.prior_sources"] == f"mlflow:{source_parent.info.run_id}; table:{table}"
    children = mlflow_client.search_runs([experiment.experiment_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
    assert len(children) == 5
    first = next(c for c in children if c.data.tags["trial"] == "0")
    assert first.data.tags["flashtune.prior_rank"] == "1" and "table:" in first.data.tags["flashtune.prior_source"]


def test_tune_tells_each_study_the_earlier_studies_of_its_run(replay_dir, stores, capsys, mlflow_client) -> None:
    args = tune_args(stores, replay_dir, "--study-name", "pair", "--trials", "6", "--strategy", "tpe",
                     "--workload", "2,8/2,512,128")
    assert main(args) == 0
    first_err = capsys.readouterr().err
    experiment = mlflow_client.get_experiment_by_name("flashtune/NVIDIA H200")

    def parent(name: str):
        (run,) = mlflow_client.search_runs([experiment.experiment_id], f"tags.study = '{name}' AND tags.role = 'study'")
        return run

    first, second = parent(f"pair/{WORKLOAD.name}"), parent(f"pair/{GQA_WORKLOAD.name}")
    assert "flashtune.prior_sources" not in first.data.tags  # the first study of the run starts cold
    source = f"mlflow:{first.info.run_id}"
    assert second.data.tags["flashtune.prior_sources"] == source
    told = int(second.data.tags["flashtune.priors_told"])
    assert 0 < told <= 6  # the first study's trials, re-checked on the GQA workload
    children = mlflow_client.search_runs([experiment.experiment_id],
                                         f"tags.`mlflow.parentRunId` = '{second.info.run_id}'")
    first_trial = next(c for c in children if c.data.tags["trial"] == "0")
    assert first_trial.data.tags["flashtune.prior_source"] == source  # the first study's best, measured first
    assert first_trial.data.tags["flashtune.prior_rank"] == "1"
    assert f"study pair/{GQA_WORKLOAD.name}: {told} prior(s) from {source}" in first_err

    # Resumed, the run tells the second study the same priors again.
    assert main(args) == 0
    assert f"study pair/{GQA_WORKLOAD.name}: {told} prior(s) from {source}" in capsys.readouterr().err

    # --independent: every study cold.
    assert main([*tune_args(stores, replay_dir, "--study-name", "apart", "--trials", "4", "--strategy", "tpe",
                            "--workload", "2,8/2,512,128"), "--independent"]) == 0
    assert "prior(s)" not in capsys.readouterr().err
    assert "flashtune.prior_sources" not in parent(f"apart/{GQA_WORKLOAD.name}").data.tags


def test_tune_rejects_a_bad_prior_source(replay_dir, stores, tmp_path, capsys) -> None:
    assert main(tune_args(stores, replay_dir, "--prior-from", "gopher:x")) == 2
    assert "--prior-from 'gopher:x'" in capsys.readouterr().err
    assert main(tune_args(stores, replay_dir, "--prior-from", f"table:{tmp_path / 'none.jsonl'}")) == 2
    assert "does not exist" in capsys.readouterr().err


# -- flashtune transfer ----------------------------------------------------------------------


def test_transfer_command_writes_its_report(tmp_path, capsys) -> None:
    out = tmp_path / "transfer"
    assert main(["transfer", "--seeds", "2", "--pairs", "3,9", "--strategies", "grid,random", "--jobs", "1",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "cold / with priors" in printed and "(smaller GPU)" in printed
    report = json.loads((out / "transfer.json").read_text())
    assert {"pairs", "negative_transfer", "target", "seeds", "command", "date", "smaller_gpu", "strategies"} <= set(report)
    assert report["seeds"] == 2 and report["smaller_gpu"]["shared_memory_per_block_bytes"] == SMALL_SHARED_BYTES
    assert [p["kind"] for p in report["pairs"]] == ["head_dim", "smaller GPU"]
    for pair in report["pairs"]:
        for cell in pair["strategies"].values():
            assert {"cold", "prior", "cold_median", "prior_median", "ratio", "target_met", "negative",
                    "seeds_worse", "priors_told", "priors_dropped"} <= set(cell)
            assert cell["cold"]["evals_to_2pct"]["median"] == cell["cold_median"]
    # The smaller GPU cannot run the H200's best configs: they were dropped, not told.
    smaller = report["pairs"][1]["strategies"]["grid"]
    assert smaller["priors_dropped"] > 0 and smaller["prior_median"] <= smaller["cold_median"]
    assert (out / "transfer.png").stat().st_size > 0
