"""`flashtune export`: a real study's best configs from MLflow, Optuna and tables into a store file."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import shutil
import warnings
from pathlib import Path

import pytest
from disk_support import small_disk
from study_support import GQA_WORKLOAD, WORKLOAD, WORKLOAD_ARG, run_cli, tune_args

from flashtune.experiments.cli.main import main
from flashtune.experiments.evaluation import priors
from flashtune.experiments.evaluation.prior_mlflow import default_measurements, trial_measurements_of_run
from flashtune.experiments.study import measurers
from flashtune.experiments.tracking import tracker as tracking
from flashtune.kernels.source_hash import kernel_source_hash
from flashtune.objectives.replay import load_table, write_table
from flashtune.runtime.storage.buckets import Bucket
from flashtune.runtime.storage.store import read_snapshot


@dataclasses.dataclass(frozen=True)
class Studies:
    """Two small real studies on replayed data in one MLflow store and Optuna storage."""

    stores: dict[str, str]
    run_id: str  # study "exp" on WORKLOAD: its parent run
    trials: list  # its trials as measured
    gqa: list  # study "gqa" on GQA_WORKLOAD: its trials as measured


@pytest.fixture(scope="module")
def studies(tmp_path_factory, empty_mlflow_db, replay_dir) -> Studies:
    """Made once for the module: a study costs seconds (MLflow writes a run per trial)."""
    folder = tmp_path_factory.mktemp("export-studies")
    shutil.copyfile(empty_mlflow_db, folder / "mlflow.db")
    stores = {"tracking_uri": f"sqlite:///{folder / 'mlflow.db'}", "storage": f"sqlite:///{folder / 'optuna.db'}"}
    run_ids = {}
    for name, workload, trials in (("exp", WORKLOAD_ARG, 8), ("gqa", "2,8/2,512,128", 4)):
        args = tune_args(stores, replay_dir, "--study-name", name, "--trials", str(trials), "--strategy", "random")
        args[args.index(WORKLOAD_ARG)] = workload
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            assert main(args) == 0
        client = tracking.mlflow_client(stores["tracking_uri"])
        experiment = client.get_experiment_by_name("flashtune/NVIDIA H200")
        (parent,) = client.search_runs([experiment.experiment_id], f"tags.study = '{name}' AND tags.role = 'study'")
        run_ids[name] = parent.info.run_id
    trials = trial_measurements_of_run(stores["tracking_uri"], run_ids["exp"])
    assert len(trials) == 8 and {m.source for m in trials} == {"replayed"}
    return Studies(stores, run_ids["exp"], trials, trial_measurements_of_run(stores["tracking_uri"], run_ids["gqa"]))


def _entries(path: Path) -> list:
    """The store file as the runtime reads it; no warning (a warning means it fell back)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return list(read_snapshot(path).entries())


def _best(measurements, *, fp8: bool = False):
    return min((m for m in measurements if m.ok and (fp8 or not m.config["use_fp8"])), key=lambda m: m.median_ms)


def _export(stores: dict[str, str], out: Path, *sources_: str, extra: tuple[str, ...] = ()) -> int:
    return main(["export", "--to", str(out), "--tracking-uri", stores["tracking_uri"], "--storage", stores["storage"],
                 *extra, *sources_])


def _check_holds_best(path: Path, measured, h200) -> None:
    """The file holds the fastest of ``measured`` (16-bit) for WORKLOAD, as the runtime reads it."""
    best = _best(measured)
    (entry,) = _entries(path)
    assert entry.bucket == Bucket.of(WORKLOAD) and entry.config == best.config
    assert entry.median_ms == pytest.approx(best.median_ms)
    assert entry.fingerprint == h200.fingerprint and entry.hardware == h200.name
    assert entry.kernel_hash == kernel_source_hash() and entry.triton == h200.triton
    assert entry.source == "replayed"
    # The runtime's lookup finds it under its key.
    assert read_snapshot(path).exact(entry.key, Bucket.of(WORKLOAD)) == entry


def test_export_from_mlflow_run_and_optuna_study(studies, tmp_path, h200, capsys) -> None:
    stores, run_id, trials = studies.stores, studies.run_id, studies.trials
    by_run = tmp_path / "run.json"
    assert _export(stores, by_run, f"mlflow:{run_id}") == 0
    out = capsys.readouterr().out
    # From MLflow the study's measured runtime default competes too: export keeps it where none
    # of the 8 random trials beat it (which ones they are depends on the space's size).
    _check_holds_best(by_run, list(trials) + default_measurements(stores["tracking_uri"], "mlflow", run_id), h200)
    assert f"mlflow:{run_id}: 8 measurement(s)" in out
    assert Bucket.of(WORKLOAD).name in out and f"to {by_run}" in out and "exported 1 of 1 entries (1 GPU(s))" in out

    # By the Optuna study's name (GPU/study) or the study's --study-name.
    for name in ("exp", "NVIDIA H200/exp"):
        by_study = tmp_path / f"optuna-{name.replace('/', '_')}.json"
        assert _export(stores, by_study, f"optuna:{name}") == 0
        assert f"optuna:{name}: 8 measurement(s)" in capsys.readouterr().out
        _check_holds_best(by_study, trials, h200)
    # The file is the versioned JSON of the store, not something else that happens to read back.
    data = json.loads(by_study.read_text())
    assert data["format"] and data["version"] and len(data["entries"]) == 1


def test_export_from_a_gpu_models_experiment(studies, tmp_path, h200) -> None:
    stores, trials, gqa = studies.stores, studies.trials, studies.gqa
    for name in ("h200", "NVIDIA H200", "flashtune/NVIDIA H200"):
        out = tmp_path / f"{name.replace('/', '_')}.json"
        assert _export(stores, out, f"mlflow-experiment:{name}") == 0
        by_bucket = {e.bucket: e for e in _entries(out)}
        assert set(by_bucket) == {Bucket.of(WORKLOAD), Bucket.of(GQA_WORKLOAD)}
        # Each study's runtime default, measured by the study: export keeps it where no trial
        # beat it (the 4 random trials of the GQA study depend on the space's feasible configs).
        defaults = default_measurements(stores["tracking_uri"], "mlflow-experiment", name)
        for measured, workload in ((trials, WORKLOAD), (gqa, GQA_WORKLOAD)):
            default = [d for d in defaults if d.workload == workload]
            best = _best(list(measured) + default)
            entry = by_bucket[Bucket.of(workload)]
            assert entry.config == best.config and entry.median_ms == pytest.approx(best.median_ms)
            assert entry.fingerprint == h200.fingerprint


def test_fp8_only_with_include_fp8(replay_dir, stores, tmp_path, capsys) -> None:
    # A table whose fastest config is an fp8 one (a recorded table holds every config).
    measurements = load_table(measurers.table_path(replay_dir, GQA_WORKLOAD))
    fp8 = next(m for m in measurements if m.ok and m.config["use_fp8"])
    fastest = dataclasses.replace(fp8, median_ms=_best(measurements).median_ms / 2)
    table = tmp_path / "fp8.jsonl"
    write_table(table, [fastest if m is fp8 else m for m in measurements])

    plain = tmp_path / "plain.json"
    assert _export(stores, plain, f"table:{table}") == 0
    (entry,) = _entries(plain)
    assert not entry.config["use_fp8"] and entry.config == _best(measurements).config
    assert entry.triton == fp8.versions["triton"] and entry.kernel_hash == kernel_source_hash()

    with_fp8 = tmp_path / "fp8.json"
    assert _export(stores, with_fp8, f"table:{table}", extra=("--include-fp8",)) == 0
    (entry,) = _entries(with_fp8)
    assert entry.config == fastest.config and entry.config["use_fp8"]
    assert entry.median_ms == pytest.approx(fastest.median_ms)

    # Merged into a file holding a faster entry: the file's entry stays, and the output says so.
    capsys.readouterr()
    assert _export(stores, with_fp8, f"table:{table}") == 0
    assert "faster: kept" in capsys.readouterr().out
    (entry,) = _entries(with_fp8)
    assert entry.config == fastest.config


def test_export_folder_of_tables(replay_dir, stores, tmp_path) -> None:
    out = tmp_path / "tables.json"
    assert _export(stores, out, f"table:{replay_dir}") == 0
    by_bucket = {e.bucket: e for e in _entries(out)}
    for workload in (WORKLOAD, GQA_WORKLOAD):
        best = _best(load_table(measurers.table_path(replay_dir, workload)))
        assert by_bucket[Bucket.of(workload)].config == best.config


def test_export_onto_a_store_with_one_bad_number_keeps_the_others(replay_dir, h100_replay_dir, stores, tmp_path,
                                                                 capsys) -> None:
    out = tmp_path / "configs.json"
    assert _export(stores, out, f"table:{replay_dir}") == 0
    doc = json.loads(out.read_text())
    kept = doc["entries"][1]
    out.write_text(json.dumps(doc).replace(f'"median_ms": {doc["entries"][0]["median_ms"]!r}', '"median_ms": NaN', 1))
    with pytest.warns(UserWarning, match=r"1 unusable entries dropped .*entries/0/median_ms: non-finite number NaN"):
        assert _export(stores, out, f"table:{h100_replay_dir}") == 0
    assert "the file holds 2" in capsys.readouterr().out  # the good H200 entry and the H100 one
    assert kept["config"] in [e.config.to_dict() for e in _entries(out)]
    assert [p.name.split(".")[2] for p in tmp_path.glob("configs.json.*.*")] == ["dropped"]  # nothing moved aside


def test_export_onto_a_full_disk_is_one_line_and_keeps_the_store(replay_dir, h100_replay_dir, stores, tmp_path,
                                                                 capsys) -> None:
    with small_disk(tmp_path / "small", "64k") as small:
        out = small / "configs.json"
        assert _export(stores, out, f"table:{replay_dir}") == 0
        before = out.read_bytes()
        room = os.statvfs(small)
        # Less room than the new file needs (it is written whole beside the old one, then renamed).
        (small / "filler").write_bytes(b"x" * (room.f_bavail * room.f_frsize - len(before) // 2))
        capsys.readouterr()
        assert _export(stores, out, f"table:{h100_replay_dir}") == 2
        err = capsys.readouterr().err
        assert err == f"flashtune export: error: --to {out}: cannot write: [Errno 28] No space left on device\n"
        assert out.read_bytes() == before and not list(small.glob(".configs.json.*"))  # no temporary left


def test_bad_sources_exit_2_naming_them(studies, tmp_path, capsys) -> None:
    stores = studies.stores
    out = tmp_path / "never.json"
    cases = [
        ("gopher:x", "source 'gopher:x': use mlflow:RUN_ID, mlflow-experiment:NAME, optuna:STUDY_NAME or table:PATH"),
        ("store:x.json", "source 'store:x.json'"),
        ("mlflow:" + "0" * 32, f"mlflow:{'0' * 32}: no such run"),
        ("mlflow-experiment:a100", "mlflow-experiment:a100: no such experiment"),
        ("optuna:nope", "optuna:nope: no such study in"),
        (f"table:{tmp_path / 'none.jsonl'}", f"table {tmp_path / 'none.jsonl'} does not exist"),
    ]
    for source, message in cases:
        assert _export(stores, out, source) == 2, source
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, (source, err)
    assert not out.exists()
    # A good source with a bad one: nothing written (every source is read before the file).
    run_id = studies.run_id
    assert _export(stores, out, f"mlflow:{run_id}", "optuna:nope") == 2
    assert not out.exists()
    # A missing SQLite store is not created empty.
    missing = {"tracking_uri": f"sqlite:///{tmp_path / 'no-mlflow.db'}", "storage": f"sqlite:///{tmp_path / 'no.db'}"}
    assert _export(missing, out, "optuna:exp") == 2 and "does not exist" in capsys.readouterr().err
    assert _export(missing, out, f"mlflow:{run_id}") == 2 and "does not exist" in capsys.readouterr().err
    assert not (tmp_path / "no.db").exists() and not (tmp_path / "no-mlflow.db").exists()


def test_the_command_line_as_a_user_runs_it(stores, tmp_path, replay_dir) -> None:
    """Through a real `flashtune` process: a bad source is one line on stderr and exit 2."""
    done = run_cli("export", "--to", str(tmp_path / "x.json"), f"table:{replay_dir}", "gopher:x", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "flashtune export: error: source 'gopher:x'" in done.stderr
    done = run_cli("export", "--to", str(tmp_path / "x.json"), f"table:{replay_dir}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"to {tmp_path / 'x.json'}" in done.stdout and len(_entries(tmp_path / "x.json")) == 2


def test_priors_still_marked_as_priors(studies) -> None:
    """The shared readers return measurements; `--prior-from` still gets priors of them."""
    run_id, trials = studies.run_id, studies.trials
    read = priors.read(priors.PriorSpec("mlflow", run_id), tracking_uri=studies.stores["tracking_uri"])
    assert {m.source for m in read} == {"prior"} and len(read) == len(trials)
    assert {m.versions["prior_source"] for m in read} == {f"mlflow:{run_id}"}
    assert {m.versions["run_id"] for m in read} == {m.versions["run_id"] for m in trials}
