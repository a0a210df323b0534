"""`flashtune sweep`: no GPU is one clear line; a finished table is resumed, not re-measured."""

from __future__ import annotations

from pathlib import Path

from study_support import WORKLOAD, WORKLOAD_ARG

from flashtune.experiments.cli.main import main
from flashtune.experiments.cli.sweep import sweep_workload
from flashtune.kernels.config import Config
from flashtune.objectives.replay import ReplayObjective, load_table
from flashtune.objectives.types import Measurement, Workload


class _CountingReplay(ReplayObjective):
    """A replayed objective that records which configs a sweep asks it to measure."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.measured: list[Config] = []

    def prefetch(self, configs: list[Config], workload: Workload) -> None:
        """Nothing to compile ahead in a replay."""

    def evaluate(self, config: Config, workload: Workload) -> Measurement:
        self.measured.append(config)
        return super().evaluate(config, workload)


def test_sweep_without_gpu_is_one_clear_line(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert main(["sweep", "--workload", WORKLOAD_ARG, "--out", str(tmp_path), "--limit", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("flashtune sweep: error: no NVIDIA GPU visible") and "--interpret" in err


def test_interpret_without_gpu_needs_hardware(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert main(["sweep", "--workload", WORKLOAD_ARG, "--out", str(tmp_path), "--interpret"]) == 2
    assert "--interpret without a GPU needs --hardware" in capsys.readouterr().err


def test_finished_table_is_resumed_not_measured_again(replay_dir: Path, tmp_path: Path, capsys) -> None:
    objective = _CountingReplay(load_table(replay_dir / f"{WORKLOAD.name}.jsonl"))
    first = sweep_workload(objective, WORKLOAD, tmp_path, progress=False, limit=3)
    assert len(objective.measured) == 3 and not (tmp_path / f"{WORKLOAD.name}.jsonl.partial").exists()

    objective.measured.clear()
    again = sweep_workload(objective, WORKLOAD, tmp_path, progress=False, limit=3)
    assert objective.measured == [] and [m.config for m in again] == [m.config for m in first]
    assert "already holds all 3 configs; nothing to measure" in capsys.readouterr().err

    more = sweep_workload(objective, WORKLOAD, tmp_path, progress=False, limit=5)
    assert objective.measured == [m.config for m in more[3:]] and len(more) == 5
    assert "3 of 5 configs already measured" in capsys.readouterr().err

    # A narrower rerun keeps what the wider one measured in the table.
    sweep_workload(objective, WORKLOAD, tmp_path, progress=False, limit=2)
    assert len(load_table(tmp_path / f"{WORKLOAD.name}.jsonl")) == 5


def test_interpret_refuses_bfloat16_in_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    # The interpreter's bf16 dot is wrong: a bf16 sweep would record every config as wrong_result.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    code = main(["sweep", "--workload", "1,2,64,64", "--out", str(tmp_path), "--interpret", "--hardware", "h200"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "bfloat16" in err and "float16" in err and "b1_h2_n64_d64_full_bfloat16" in err
    assert not list(tmp_path.iterdir())


def test_interpreted_sweep_is_stamped_as_the_interpreter_and_not_exported(tmp_path: Path, monkeypatch,
                                                                           capsys) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    out = tmp_path / "sweeps"
    assert main(["sweep", "--workload", "1,2,64,32,float16", "--out", str(out), "--interpret",
                 "--hardware", "h200", "--limit", "1", "--where", "BLOCK_M=32", "--where", "BLOCK_N=32"]) == 0
    assert "Triton's CPU interpreter's, not a GPU's" in capsys.readouterr().out
    (row,) = load_table(out / "b1_h2_n64_d32_full_float16.jsonl")
    assert row.ok, row.error  # fp16: the interpreter computes it right
    assert row.source == "interpreted" and row.fingerprint == ""
    assert "interpreter" in row.hardware and row.hardware != "NVIDIA H200"
    assert "interpreter" in row.versions["driver"]

    store = tmp_path / "configs.json"
    assert main(["export", "--to", str(store), f"table:{out}"]) == 1
    err = capsys.readouterr().err
    assert "skipped 1 measurement(s) run in Triton's CPU interpreter" in err and not store.exists()
