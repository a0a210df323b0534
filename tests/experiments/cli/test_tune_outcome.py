"""The main job's last lines: tuned against the runtime's default, where the study is, what next."""

from __future__ import annotations

import re
import shlex

from study_support import WORKLOAD, tune_args

from flashtune.experiments.cli.main import main
from flashtune.objectives.hardware import load_spec
from flashtune.objectives.replay import load_table
from flashtune.runtime.baselines import fallback_config


def test_tune_ends_with_speedup_places_and_next_commands(replay_dir, stores, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert main(tune_args(stores, replay_dir, "--study-name", "outcome", "--trials", "5")) == 0
    out = capsys.readouterr().out
    last = out.strip().splitlines()[-9:]
    assert last[0] == f"== outcome: {WORKLOAD.name} on NVIDIA H200"

    best = re.fullmatch(r"best config: +(\{.*\}): ([\d.]+) ms, ([\d.]+) TFLOP/s", last[1])
    default = re.fullmatch(r"default config: (\{.*\}): ([\d.]+) ms, ([\d.]+) TFLOP/s", last[2])
    assert best and default, last
    # The default is the runtime's fallback for this workload, timed as the table recorded it.
    fallback = fallback_config(load_spec("h200"), WORKLOAD)
    recorded = {m.config: m for m in load_table(replay_dir / f"{WORKLOAD.name}.jsonl")}[fallback]
    assert default.group(1) == str(fallback.to_dict()) and float(default.group(2)) == float(f"{recorded.median_ms:.4g}")
    speedup = float(last[3].removeprefix("speedup over the default: ").removesuffix("x"))
    assert abs(speedup - recorded.median_ms / float(best.group(2))) < 0.01

    # Replayed: no SDPA in the recorded table, and none timed on this machine; said so.
    assert last[4] == "SDPA peers:     timed on a live GPU only (this run replays recorded times)"
    assert last[5] == f"Optuna study:   'NVIDIA H200/outcome' in {stores['storage']}"
    run_id = re.fullmatch(rf"MLflow run: +(\w+) \(experiment \d+\) in {re.escape(stores['tracking_uri'])}", last[6])
    assert run_id, last[6]
    export = f"flashtune export mlflow:{run_id.group(1)} --to tuned_configs.json --tracking-uri '{stores['tracking_uri']}'"
    assert last[7] == f"export it:      {export}"
    assert last[8] == f"open the UI:    flashtune ui --tracking-uri '{stores['tracking_uri']}'"

    # The printed export command works as printed.
    assert main(shlex.split(export)[1:]) == 0
    assert (tmp_path / "tuned_configs.json").is_file()


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
