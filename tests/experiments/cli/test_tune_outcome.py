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
    last = out.strip().splitlines()[-8:]
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

    assert last[4] == f"Optuna study:   'NVIDIA H200/outcome' in {stores['storage']}"
    run_id = re.fullmatch(rf"MLflow run: +(\w+) \(experiment \d+\) in {re.escape(stores['tracking_uri'])}", last[5])
    assert run_id, last[5]
    export = f"flashtune export mlflow:{run_id.group(1)} --to tuned_configs.json --tracking-uri '{stores['tracking_uri']}'"
    assert last[6] == f"export it:      {export}"
    assert last[7] == f"open the UI:    flashtune ui --tracking-uri '{stores['tracking_uri']}'"

    # The printed export command works as printed.
    assert main(shlex.split(export)[1:]) == 0
    assert (tmp_path / "tuned_configs.json").is_file()
