"""`flashtune export` sanitizes what it writes where it can, and says in one line when it cannot.

Without a GPU (here) the export is unchanged but for that line; the screening itself runs
against a real fake compute-sanitizer (tests/sanitizer_fake.py) with the GPU given.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sanitizer_fake
from study_support import GQA_WORKLOAD, WORKLOAD

from flashtune.experiments.cli.main import main
from flashtune.experiments.study import measurers
from flashtune.kernels.space import validate_config
from flashtune.objectives import sanitize as sz
from flashtune.objectives.replay import load_table
from flashtune.runtime.storage.export import best_entries, ranked_entries
from flashtune.runtime.storage.sanitized import SanitizedCache, screen_entries
from flashtune.runtime.storage.store import read_snapshot


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FLASHTUNE_SANITIZED", str(tmp_path / "sanitized.json"))
    monkeypatch.delenv(sz.ENV_BIN, raising=False)
    monkeypatch.setattr(sz, "CUDA_BINS", ())
    for name in ("CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(name, raising=False)


def _export(out: Path, *args: str) -> int:
    return main(["export", "--to", str(out), *args])


def test_without_compute_sanitizer_one_line_and_the_same_store(replay_dir, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    out = tmp_path / "configs.json"
    assert _export(out, f"table:{replay_dir}") == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "not sanitized" in line]
    assert lines == ["flashtune export: configs were not sanitized (no compute-sanitizer on PATH or in "
                     "/usr/local/cuda/bin): 2 entries written unchecked"]
    plain = tmp_path / "plain.json"
    assert _export(plain, "--no-sanitize", f"table:{replay_dir}") == 0
    assert "configs were not sanitized (--no-sanitize): 2 entries written unchecked" in capsys.readouterr().out
    assert [e.config for e in read_snapshot(out).entries()] == [e.config for e in read_snapshot(plain).entries()]


def test_with_compute_sanitizer_but_no_gpu_one_line(replay_dir, tmp_path, monkeypatch, capsys) -> None:
    folder = tmp_path / "bin"
    sanitizer_fake.install(folder, report="never printed", exitcode=sz.ERROR_EXITCODE)
    monkeypatch.setenv("PATH", str(folder))  # no nvidia-smi either
    if Path("/dev/nvidiactl").exists():
        pytest.skip("this machine has an NVIDIA device")
    assert _export(tmp_path / "configs.json", f"table:{replay_dir}") == 0
    assert "configs were not sanitized (no GPU): 2 entries written unchecked" in capsys.readouterr().out
    assert sanitizer_fake.calls(folder) == []  # nothing ran


def _screen(replay_dir, h200, tmp_path, *, unsafe_if: str):
    measurements = load_table(measurers.table_path(replay_dir, WORKLOAD))
    entries = best_entries(measurements)
    folder = tmp_path / "bin"
    sanitizer = str(sanitizer_fake.install(folder, report=MEMCHECK, exitcode=sz.ERROR_EXITCODE, unsafe_if=unsafe_if))
    screening = screen_entries(entries, alternatives=ranked_entries(measurements), gpu=h200.to_dict(),
                               sanitizer=sanitizer, cache=SanitizedCache(tmp_path / "verdicts.json"))
    return entries, ranked_entries(measurements), screening, folder


MEMCHECK = ("========= COMPUTE-SANITIZER\n========= Invalid __global__ read of size 16 bytes\n"
            "=========     at _attn_fwd+0x90 in _flash_fwd.py:200\n========= ERROR SUMMARY: 1 error\n")


def test_an_unsafe_best_is_left_out_for_the_next_fastest_safe_one(replay_dir, h200, tmp_path) -> None:
    measurements = load_table(measurers.table_path(replay_dir, WORKLOAD))
    (best,) = best_entries(measurements)
    marker = json.dumps(validate_config(best.config).to_dict(), sort_keys=True)  # as the child's request has it
    entries, ranked, screening, folder = _screen(replay_dir, h200, tmp_path, unsafe_if=marker)
    (kept,) = screening.kept
    unsafe_configs = [e.config for e, _ in screening.unsafe]
    assert best.config in unsafe_configs and kept.config not in unsafe_configs
    alternatives = ranked[(best.key, best.bucket)]
    safe = [e for e in alternatives if e.config not in unsafe_configs]
    assert kept.config == safe[0].config  # the fastest of those not found unsafe
    assert screening.lines[0].startswith(f"left out {best.bucket.name} {best.config.to_dict()}: unsafe: "
                                         "compute-sanitizer memcheck: Invalid __global__ read of size 16 bytes")
    runs = len(sanitizer_fake.calls(folder))
    # Once per kernel, config and GPU: a second export runs nothing.
    again = screen_entries(entries, alternatives=ranked, gpu=h200.to_dict(), sanitizer=str(folder / "compute-sanitizer"),
                           cache=SanitizedCache(tmp_path / "verdicts.json"))
    assert [e.config for e in again.kept] == [kept.config] and len(sanitizer_fake.calls(folder)) == runs


def test_a_clean_best_is_kept_and_other_gpus_are_said_unchecked(replay_dir, h200, tmp_path) -> None:
    entries, _, screening, folder = _screen(replay_dir, h200, tmp_path, unsafe_if="no config holds this")
    assert [e.config for e in screening.kept] == [e.config for e in entries] and not screening.unsafe
    assert screening.lines == [] and screening.checked == 1 and len(sanitizer_fake.calls(folder)) == 4
    from flashtune.objectives.hardware import load_spec

    other = screen_entries(entries, gpu=load_spec("h100").to_dict(), sanitizer=str(folder / "compute-sanitizer"))
    assert other.kept == entries and other.lines == [
        "configs were not sanitized (measured on another GPU than this NVIDIA H100 80GB HBM3): "
        "1 entry written unchecked"]


def test_the_buckets_are_checked_in_one_batch(replay_dir, h200, tmp_path) -> None:
    measurements = [m for w in (WORKLOAD, GQA_WORKLOAD) for m in load_table(measurers.table_path(replay_dir, w))]
    entries = best_entries(measurements)
    assert len({(e.config, e.bucket.head_dim, e.bucket.dtype) for e in entries}) == 2  # two checks
    folder = tmp_path / "bin"
    clean = "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n"
    sanitizer = str(sanitizer_fake.install(folder, report=clean, exitcode=0))
    screening = screen_entries(entries, alternatives=ranked_entries(measurements), gpu=h200.to_dict(),
                               sanitizer=sanitizer, cache=SanitizedCache(tmp_path / "verdicts.json"))
    assert screening.kept == entries and screening.checked == 2 and not screening.lines
    runs = sanitizer_fake.calls(folder)
    assert len(runs) == 4 and all(len(json.loads(r[-1])["batch"]) == 2 for r in runs)  # one run a tool for both
