"""The main job's last lines: tuned against the runtime's default, where the study is, what next."""

from __future__ import annotations

import re
import shlex

from study_support import WORKLOAD, tune_args

from flashtune.experiments.cli.main import main
from flashtune.objectives.hardware import load_spec
from flashtune.objectives.replay import load_table
from flashtune.runtime.dispatching.baselines import fallback_config


def test_tune_ends_with_speedup_places_and_next_commands(replay_dir, stores, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    store = tmp_path / "runtime store.json"  # the runtime's store: where the export hint writes
    monkeypatch.setenv("FLASHTUNE_STORE", str(store))
    assert main(tune_args(stores, replay_dir, "--study-name", "outcome", "--trials", "5")) == 0
    out = capsys.readouterr().out
    last = out.strip().splitlines()[-10:]
    assert last[0] == f"== outcome: {WORKLOAD.name} on NVIDIA H200"

    best = re.fullmatch(r"best config: +(\{.*\}): ([\d.]+) ms, ([\d.]+) TFLOP/s", last[1])
    default = re.fullmatch(r"default config: (\{.*\}): ([\d.]+) ms, ([\d.]+) TFLOP/s", last[2])
    assert best and default, last
    # The default is the runtime's fallback for this workload, timed as the table recorded it.
    fallback = fallback_config(load_spec("h200"), WORKLOAD)
    recorded = {m.config: m for m in load_table(replay_dir / f"{WORKLOAD.name}.jsonl")}[fallback]
    assert default.group(1) == str(fallback.to_dict()) and float(default.group(2)) == float(f"{recorded.median_ms:.4g}")
    speedup = float(last[3].removeprefix("speedup over the default: ").split("x")[0])
    assert abs(speedup - recorded.median_ms / float(best.group(2))) < 0.01

    # Replayed: no SDPA in the recorded table, and none timed on this machine; said so.
    assert last[4] == "SDPA peers:     timed on a live GPU only (this run replays recorded times)"
    assert last[5] == f"Optuna study:   'NVIDIA H200/outcome' in {stores['storage']}"
    run_id = re.fullmatch(rf"MLflow run: +(\w+) \(experiment \d+\) in {re.escape(stores['tracking_uri'])}", last[6])
    assert run_id, last[6]
    export = (f"flashtune export mlflow:{run_id.group(1)} --to {shlex.quote(str(store))} "
              f"--tracking-uri {shlex.quote(stores['tracking_uri'])}")
    assert last[7] == f"export it:      {export}"
    assert "$FLASHTUNE_STORE, else ~/.cache/flashtune/configs.json" in last[8]
    assert last[9] == f"open the UI:    flashtune ui --tracking-uri {shlex.quote(stores['tracking_uri'])}"

    # The printed export command works as printed, into the file the runtime reads.
    assert main(shlex.split(export)[1:]) == 0
    assert store.is_file()


def test_peer_lines_give_each_peer_as_a_ratio_or_why_it_did_not_run() -> None:
    from flashtune.experiments.cli.tune import _peer_lines
    from flashtune.objectives.peers import PeerTime
    from flashtune.objectives.types import Measurement, Status
    from flashtune.search.loop import Trial

    config = fallback_config(load_spec("h200"), WORKLOAD)
    measured = Measurement(config=config, workload=WORKLOAD, status=Status.OK, median_ms=0.5)
    best = Trial(number=3, config=config, measurement=measured, elapsed_s=1.0)
    lines = _peer_lines(best, [PeerTime("SDPA cuDNN", 0.55), PeerTime("SDPA flash", None, "No available kernel")])
    assert lines == [
        "SDPA cuDNN:     0.55 ms; the tuned config runs at 1.10x its speed (study time)",
        "SDPA flash:     unavailable for this shape (No available kernel)",
    ]
    # Re-timed beside the peers in the same rounds: the ratio is to that time, not the study's.
    lines = _peer_lines(best, [PeerTime("SDPA cuDNN", 0.55, form="enable_gqa"), PeerTime("tuned config", 0.6)])
    assert lines == [
        "re-timed:       the tuned config 0.6 ms beside the peers",
        "SDPA cuDNN:     0.55 ms (enable_gqa); the tuned config runs at 0.92x its speed (same rounds)",
    ]


def test_peers_refused_by_the_device_are_reported_not_raised() -> None:
    import torch

    from flashtune.objectives.peers import PEERS, time_peers

    # cuDNN has no CPU kernel: it comes back with torch's reason (flash has one on a CPU).
    times, _ = time_peers(WORKLOAD.__class__.parse("1,2,64,64"), torch.device("cpu"), rep_ms=1, rounds=1)
    assert [t.name for t in times] == list(PEERS)
    assert times[0].median_ms is None and "No viable backend" in times[0].error
    assert all((t.median_ms is None) != (t.error == "") for t in times), times


def _slow_table(replay_dir, tmp_path):
    """The replayed table with the runtime's default made the fastest config by far."""
    import dataclasses

    from flashtune.objectives.replay import write_table

    fallback = fallback_config(load_spec("h200"), WORKLOAD)
    rows = load_table(replay_dir / f"{WORKLOAD.name}.jsonl")
    fast = [dataclasses.replace(m, median_ms=m.median_ms / 100) if m.config == fallback else m for m in rows]
    folder = tmp_path / "tables"
    folder.mkdir()
    write_table(folder / f"{WORKLOAD.name}.jsonl", fast)
    return folder, fallback


def test_a_best_slower_than_the_default_is_said_and_the_default_is_exported(replay_dir, stores, tmp_path,
                                                                             monkeypatch, capsys) -> None:
    from flashtune.runtime.storage.store import read_snapshot

    folder, fallback = _slow_table(replay_dir, tmp_path)
    store = tmp_path / "configs.json"
    monkeypatch.setenv("FLASHTUNE_STORE", str(store))
    # Grid, 3 trials: the default config is not among them, and it is 100x faster than any.
    assert main(tune_args(stores, folder, "--study-name", "slow", "--trials", "3", "--strategy", "grid")) == 0
    out = capsys.readouterr().out
    speedup = next(line for line in out.splitlines() if line.startswith("speedup over the default"))
    assert "SLOWER than the runtime's default; keep the default" in speedup, speedup
    export = next(line for line in out.splitlines() if line.startswith("export it:")).split(":", 1)[1]
    assert main(shlex.split(export)[1:]) == 0
    err = capsys.readouterr().err
    assert "is slower than the runtime's default config" in err and "exporting the default" in err
    (entry,) = read_snapshot(store).entries()
    assert entry.config == fallback


def test_several_studies_end_with_one_table_and_one_export_command(replay_dir, stores, tmp_path, monkeypatch,
                                                                   capsys) -> None:
    monkeypatch.setenv("FLASHTUNE_STORE", str(tmp_path / "configs.json"))
    # The output's form, not a strategy's: random search (its asks depend on the seed alone),
    # and trials enough for a bf16 success in each study (export leaves fp8 configs out
    # without --include-fp8; with 2 trials of the GP-first default both successes were fp8).
    args = tune_args(stores, replay_dir, "--study-name", "two", "--trials", "4", "--strategy", "random",
                     "--workload", "2,8/2,512,128")
    assert main(args) == 0
    out = capsys.readouterr().out
    assert out.count("export it:") == 1 and out.count("== ") == 0 and out.count("open the UI:") == 1
    table = out[out.index("study "):]
    assert "default ms" in table and f"two/{WORKLOAD.name}" in table and "two/b2_hq8kv2_n512_d128_full_bfloat16" in table
    export = next(line for line in out.splitlines() if line.startswith("export it:")).split(":", 1)[1]
    assert export.count("mlflow:") == 2
    assert main(shlex.split(export)[1:]) == 0


def test_study_messages_name_flashtune_study(tmp_path, stores, capsys, monkeypatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    main(["study", "h200", "--trials", "1", "--tracking-uri", stores["tracking_uri"], "--storage",
          stores["storage"], "--replay-dir", str(tmp_path), "--no-progress", "--workload", "1,8,64,64"])
    err = capsys.readouterr().err
    assert "flashtune study:" in err and "flashtune tune:" not in err, err


def test_when_only_fp8_configs_ran_the_export_hint_says_include_fp8_and_works(replay_dir, stores, tmp_path,
                                                                             monkeypatch, capsys) -> None:
    from flashtune.objectives.replay import write_table
    from flashtune.objectives.types import Measurement, Status
    from flashtune.runtime.dispatching.resolve import uses_fp8
    from flashtune.runtime.storage.store import read_snapshot

    # Every bf16 config of the table failed: what ran correctly is fp8 only, which export
    # leaves out unless told --include-fp8 (the hint used to print the command without it).
    rows = load_table(replay_dir / f"{WORKLOAD.name}.jsonl")
    assert any(uses_fp8(m.config) and m.ok for m in rows)
    only_fp8 = [m if uses_fp8(m.config) else Measurement.failure(m.config, m.workload, Status.COMPILE_ERROR,
                                                                  "made to fail", hardware=m.hardware,
                                                                  fingerprint=m.fingerprint)
                for m in rows]
    folder = tmp_path / "tables"
    folder.mkdir()
    write_table(folder / f"{WORKLOAD.name}.jsonl", only_fp8)
    store = tmp_path / "configs.json"
    monkeypatch.setenv("FLASHTUNE_STORE", str(store))
    assert main(tune_args(stores, folder, "--study-name", "fp8", "--trials", "6", "--strategy", "random")) == 0
    out = capsys.readouterr().out
    assert "best config:    {" in out and "'use_fp8': True" in out.split("best config:", 1)[1].splitlines()[0]
    export = next(line for line in out.splitlines() if line.startswith("export it:")).split(":", 1)[1]
    assert export.rstrip().endswith("--include-fp8")
    assert "every config that ran correctly is fp8" in out
    assert main(shlex.split(export)[1:]) == 0
    (entry,) = read_snapshot(store).entries()
    assert uses_fp8(entry.config)


def test_a_default_the_replayed_tables_do_not_hold_is_said_so(replay_dir, stores, tmp_path, monkeypatch,
                                                              capsys) -> None:
    # The main job's recorded H200 tables predate the Gluon kernel that the runtime now serves by
    # default there: the outcome says the default was not recorded, not that it is infeasible.
    from flashtune.objectives.replay import write_table

    fallback = fallback_config(load_spec("h200"), WORKLOAD)
    folder = tmp_path / "tables"
    folder.mkdir()
    write_table(folder / f"{WORKLOAD.name}.jsonl",
                [m for m in load_table(replay_dir / f"{WORKLOAD.name}.jsonl") if m.config != fallback])
    monkeypatch.setenv("FLASHTUNE_STORE", str(tmp_path / "configs.json"))
    assert main(tune_args(stores, folder, "--study-name", "unrecorded", "--trials", "3")) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("default config:"))
    assert line == f"default config: {fallback.to_dict()}: not in the replayed tables; no speedup to report"


def test_a_replayed_study_says_how_close_it_came_to_the_recorded_optimum_and_cudnn(stores, monkeypatch, capsys) -> None:
    import json

    from flashtune.experiments import DATA_DIR
    from flashtune.experiments.study import measurers
    from flashtune.objectives.types import SUITE

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    workload = SUITE[0]  # the main job's workload, replayed from the shipped recorded space
    args = ["tune", "--trials", "5", "--study-name", "close", "--tracking-uri", stores["tracking_uri"],
            "--storage", stores["storage"], "--no-progress", "--workload", workload.name]
    assert main(args) == 0
    out = capsys.readouterr().out
    # The line (wrapped at 120, continuation indented) ends the study's summary.
    text = re.sub(r"\n +", " ", out)
    said = re.search(r"vs recorded: best ([\d.]+) TFLOP/s, ([\d.]+) % of the recorded optimum \(([\d.]+) TFLOP/s\), "
                     r"([\d.]+)x the speed of SDPA cuDNN's recorded ([\d.]+) TFLOP/s \(NVIDIA H200, (\S+)\)", text)
    assert said, out
    best, percent, optimum, ratio, cudnn = map(float, said.groups()[:5])
    measurer = measurers.open_replay(load_spec("h200"), [workload])
    measurer.close()
    recorded = measurer.optimum(workload)
    assert abs(optimum - recorded.tflops) < 0.06 and abs(percent - 100 * best / recorded.tflops) < 0.1
    peers = json.loads((DATA_DIR / "recorded_peers.json").read_text())["gpus"]["NVIDIA H200"]
    assert cudnn == peers["workloads"][workload.name]["sdpa_cudnn"] and said.group(6) == peers["date"]
    assert abs(ratio - best / cudnn) < 0.01
