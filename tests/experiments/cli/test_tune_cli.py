"""`flashtune tune` and `flashtune ui` from the command line: the happy path and bad input."""

from __future__ import annotations

import dataclasses

import pytest
from mlflow import MlflowClient
from study_support import WORKLOAD, WORKLOAD_ARG, run_cli, tune_args

from flashtune.experiments.cli.main import main
from flashtune.experiments.study import measurers
from flashtune.objectives.types import SUITE


def test_replay_study_from_the_command_line(replay_dir, stores, tmp_path) -> None:
    """What a user types on a CPU machine (the default strategy, the portfolio): it says it replays,
    shows a summary, fills MLflow."""
    done = run_cli(*tune_args(stores, replay_dir, "--study-name", "cli", "--trials", "8"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "no GPU found (nvidia-smi): replaying recorded NVIDIA H200 tables" in done.stderr
    assert f"study cli | {WORKLOAD.name} | NVIDIA H200 | portfolio seed 0" in done.stdout
    assert "8 trials" in done.stdout and "median ms" in done.stdout and "flashtune ui" in done.stdout
    client = MlflowClient(tracking_uri=stores["tracking_uri"])
    experiment = client.get_experiment_by_name("flashtune/NVIDIA H200")
    runs = client.search_runs([experiment.experiment_id])
    assert sum(r.data.tags.get("role") == "study" for r in runs) == 1
    assert sum(r.data.tags.get("role") == "trial" for r in runs) == 8


def test_several_workloads_one_study_each(replay_dir, stores, tmp_path, capsys) -> None:
    args = tune_args(stores, replay_dir, "--study-name", "multi", "--trials", "3", "--workload", "2,8/2,512,128")
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"multi/{WORKLOAD.name}" in out and "multi/b2_hq8kv2_n512_d128_full_bfloat16" in out


@pytest.mark.parametrize("extra, words", [
    (["--strategy", "simulated-annealing-9000"], "unknown strategy 'simulated-annealing-9000'"),
    (["--workload", "4,32,4096"], "workload '4,32,4096': expected B,H,N,D"),
    (["--workload", "4,32,4096,128,sideways"], "unknown field 'sideways'"),
    (["--workload", "4,32/5,4096,128"], "multiple of kv_heads"),
    (["--tracking-uri", "sqlite://mlflow.db"], "SQLite URIs need three slashes"),
    (["--tracking-uri", "gopher://x"], "unknown scheme 'gopher'"),
    (["--tracking-uri", "sqlite:////nonexistent/dir/x.db"], "folder '/nonexistent/dir' does not exist"),
    (["--storage", "sqlite:////nonexistent/dir/o.db"], "folder '/nonexistent/dir' does not exist"),
    (["--storage", "sqlite://optuna.db"], "storage URL 'sqlite://optuna.db'"),
    (["--storage", "optuna.db"], "is not a URL"),
    (["--hardware", "voodoo2"], "unknown hardware 'voodoo2'"),
    (["--option", "novalue"], "expected KEY=VALUE"),
    (["--option", "no_such_option=3"], "unknown option(s) ['no_such_option']"),
    (["--option", "prior_trials=many"], "option prior_trials must be int"),
    (["--trials", "0"], "trials must be a positive int"),
    (["--study-name", "'; drop"], "study name"),
])
def test_bad_input_is_one_clear_line(replay_dir, stores, capsys, extra, words) -> None:
    assert main(tune_args(stores, replay_dir, *extra)) == 2
    err = capsys.readouterr().err
    assert err.startswith("flashtune tune: error: ") and words in err, err


def test_missing_table_says_where_and_what(stores, tmp_path, capsys) -> None:
    empty = tmp_path / "no-tables"
    empty.mkdir()
    assert main(tune_args(stores, empty)) == 2
    err = capsys.readouterr().err
    assert f"no recorded NVIDIA H200 table for workload {WORKLOAD.name}" in err
    assert "flashtune sweep" in err and "recorded there: none" in err


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_a_replay_dir_that_is_no_folder_is_named_as_such(stores, tmp_path, capsys, kind) -> None:
    folder = tmp_path / "typo"
    if kind == "file":
        folder.write_text("")
    assert main(tune_args(stores, folder)) == 2
    err = capsys.readouterr().err
    assert f"--replay-dir '{folder}': {'no such folder' if kind == 'missing' else 'not a folder'}" in err, err
    assert "recorded there" not in err


def test_live_without_gpu_is_refused(stores, replay_dir, capsys, monkeypatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert main(tune_args(stores, replay_dir, "--objective", "live")) == 2
    assert "needs an NVIDIA GPU and none is visible" in capsys.readouterr().err


def test_other_gpu_replay_needs_its_tables(stores, capsys, monkeypatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    args = ["tune", "--hardware", "a100", "--tracking-uri", stores["tracking_uri"], "--storage", stores["storage"],
            "--workload", WORKLOAD_ARG, "--no-progress"]
    assert main(args) == 2
    assert "no recorded NVIDIA A100-SXM4-80GB table" in capsys.readouterr().err


def test_ui_refuses_a_store_that_does_not_exist(tmp_path, capsys) -> None:
    assert main(["ui", "--tracking-uri", f"sqlite:///{tmp_path / 'nothing.db'}"]) == 2
    assert "does not exist; run `flashtune tune` first" in capsys.readouterr().err


def _shipped_h200_tables() -> list:
    from flashtune.objectives.hardware import load_spec

    recorded = set(measurers.recorded_workloads(measurers.default_replay_dirs(load_spec("h200"))))
    return [w for w in SUITE if w.name in recorded]


@pytest.mark.skipif(not _shipped_h200_tables(), reason="no recorded H200 tables shipped yet")
def test_shipped_h200_tables_replay(stores, capsys, monkeypatch) -> None:
    """The default command on a CPU machine: the recorded H200 tables, no --replay-dir."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    workload = _shipped_h200_tables()[0]
    args = ["tune", "--trials", "5", "--study-name", "shipped", "--tracking-uri", stores["tracking_uri"],
            "--storage", stores["storage"], "--no-progress"]
    if workload != SUITE[0]:
        args += ["--workload", f"{workload.batch},{workload.q_heads}/{workload.kv_heads},{workload.q_len},"
                               f"{workload.head_dim},{'causal' if workload.causal else 'full'}"]
    assert main(args) == 0, capsys.readouterr().err
    captured = capsys.readouterr()
    assert "replaying recorded NVIDIA H200 tables" in captured.err
    assert all(f"{folder}" in captured.err for folder in measurers.RECORDED_SPACE["h200"])
    assert "5 trials" in captured.out
    # The runtime's default (the Gluon kernel on Hopper) is in the replayed space: the main job
    # ends with its speedup over it, not "not in the replayed tables".
    assert "speedup over the default" in captured.out, captured.out


@pytest.mark.skipif(not _shipped_h200_tables(), reason="no recorded H200 tables shipped yet")
def test_the_main_jobs_first_lines_are_short_and_say_all_they_said(stores, capsys, monkeypatch) -> None:
    """The replay's description names five folders in full: wrapped, not one line of ~400 characters."""
    from flashtune.objectives.hardware import load_spec

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    workload = _shipped_h200_tables()[0]
    args = ["tune", "--trials", "2", "--study-name", "short", "--tracking-uri", stores["tracking_uri"],
            "--storage", stores["storage"], "--no-progress", "--workload", workload.name]
    assert main(args) == 0
    err = capsys.readouterr().err.splitlines()
    assert all(len(line) <= 120 for line in err), [len(line) for line in err]
    measurer = measurers.open_replay(load_spec("h200"), [workload])
    measurer.close()
    said = f"flashtune tune: no GPU found (nvidia-smi): {measurer.description}"
    first = [err[0], *(line for line in err[1:] if line.startswith("    "))]
    assert " ".join(line.strip() for line in first) == said


def test_replay_dirs_merge_a_workloads_tables_and_the_later_folder_wins(replay_dir, tmp_path) -> None:
    from flashtune.objectives.hardware import load_spec
    from flashtune.objectives.replay import load_table, write_table

    rows = load_table(replay_dir / f"{WORKLOAD.name}.jsonl")
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    write_table(first / f"{WORKLOAD.name}.jsonl", rows[: len(rows) // 2 + 1])
    again = dataclasses.replace(rows[len(rows) // 2], median_ms=rows[len(rows) // 2].median_ms * 3)
    write_table(second / f"{WORKLOAD.name}.jsonl", [again, *rows[len(rows) // 2 + 1:]])
    measurer = measurers.open_replay(load_spec("h200"), [WORKLOAD], [first, second])
    try:
        assert f"{first}, {second}" in measurer.description
        assert f"({len({m.config for m in rows})} of the kernel's" in measurer.description
        recorded = measurer.constraint(WORKLOAD)
        assert all(recorded(m.config) for m in rows)
        assert measurer.evaluator(WORKLOAD)(again.config).median_ms == again.median_ms
    finally:
        measurer.close()


def test_the_tuning_process_never_imports_torch(replay_dir, stores, tmp_path) -> None:
    """The parent never touches CUDA: a replay study does not even import torch or triton
    (a live one measures in the objective's worker process)."""
    import subprocess
    import sys

    from study_support import cli_env

    code = ("import sys; from flashtune.experiments.cli.main import main; "
            f"rc = main({tune_args(stores, replay_dir, '--trials', '2')!r}); "
            "print('IMPORTED', sorted(m for m in ('torch', 'triton') if m in sys.modules)); sys.exit(rc)")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=cli_env(), capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert "IMPORTED []" in done.stdout


def test_ui_says_when_its_port_is_taken(replay_dir, stores, tmp_path, capsys) -> None:
    import socket

    run_cli(*tune_args(stores, replay_dir, "--trials", "1"), cwd=tmp_path)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["ui", "--tracking-uri", stores["tracking_uri"], "--port", str(port)]) == 2
    assert f"port {port} on 127.0.0.1 is in use" in capsys.readouterr().err


def test_option_values_read_as_the_defaults_print() -> None:
    from flashtune.experiments.cli.tune import parse_options

    assert parse_options(["start_center=False", "n_startup=4", "startup=latin", "xi=0.5"]) == {
        "start_center": False, "n_startup": 4, "startup": "latin", "xi": 0.5}


def test_a_workload_the_missing_table_error_lists_is_accepted_by_workload(replay_dir, stores, capsys) -> None:
    def args(workload: str, *extra: str) -> list[str]:
        return ["tune", "--tracking-uri", stores["tracking_uri"], "--storage", stores["storage"],
                "--replay-dir", str(replay_dir), "--workload", workload, "--no-progress", *extra]

    assert main(args("1,8,64,64", "--trials", "1")) == 2
    listed = capsys.readouterr().err.split("recorded there: ")[1]
    name = listed.split("'")[1]  # the first recorded workload, as the error spells it
    assert main(args(name, "--trials", "2", "--study-name", "by-name")) == 0
    assert f"study by-name | {name}" in capsys.readouterr().out
