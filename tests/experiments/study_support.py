"""Helpers of the study tests: synthetic recorded tables and running the CLI.

The synthetic tables have the shape of a real ``flashtune sweep`` table (every config of
the kernel's space, failures included, ``Measurement.to_dict`` per line) with times from
a seeded model, so the tests do not depend on which GPU tables are recorded yet.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from flashtune.kernels.space import all_configs
from flashtune.objectives.feasibility import check
from flashtune.objectives.hardware import HardwareSpec
from flashtune.objectives.replay import write_table
from flashtune.objectives.types import Measurement, Status, Workload

#: Small workloads on purpose: the tests replay them, nothing is computed.
WORKLOAD_ARG = "2,8,1024,64,causal"
WORKLOAD = Workload.parse(WORKLOAD_ARG)
GQA_WORKLOAD = Workload.parse("2,8/2,512,128")


def synthetic_table(workload: Workload, hardware: HardwareSpec, *, seed: int = 0) -> list[Measurement]:
    """Every config of the space: out_of_resources where the static model says so, a few
    wrong results, and times from a seeded landscape."""
    rng = np.random.default_rng(seed)
    versions = {"driver": hardware.driver, "cuda": hardware.cuda, "torch": hardware.torch, "triton": hardware.triton}
    stamp = {"fingerprint": hardware.fingerprint, "hardware": hardware.name, "versions": versions}
    rows = []
    for config in all_configs():
        verdict = check(config, workload, hardware)
        if not verdict.feasible:
            rows.append(Measurement.failure(config, workload, Status.OUT_OF_RESOURCES, "OutOfResources: shared memory",
                                            shared_bytes=verdict.shared_bytes, **stamp))
            continue
        # A per-config factor that does not depend on the order configs are listed in.
        jitter = float(np.random.default_rng(zlib.crc32(config.key().encode()) + seed).lognormal(0.0, 0.35))
        if jitter > 1.9:
            rows.append(Measurement.failure(config, workload, Status.WRONG_RESULT, "NaN in the output",
                                            compile_s=0.5, **stamp))
            continue
        median = 0.002 + workload.flops / 400e12 * 1e3 * jitter
        spread = median * float(rng.uniform(0.002, 0.02))
        rows.append(Measurement(
            config=config, workload=workload, status=Status.OK, median_ms=median, p20_ms=median - spread,
            p80_ms=median + spread, tflops=workload.flops / (median * 1e-3) / 1e12,
            compile_s=float(rng.uniform(0.4, 1.0)), registers=min(verdict.registers_per_thread, 255),
            spills=max(0, verdict.registers_per_thread - 255), shared_bytes=verdict.shared_bytes,
            rel_error=float(rng.uniform(1e-3, 5e-3)), sm_clock_mhz=1980.0, temperature_c=45.0, **stamp,
        ))
    return rows


def write_tables(folder: Path, hardware: HardwareSpec, workloads: Sequence[Workload]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for workload in workloads:
        write_table(folder / f"{workload.name}.jsonl", synthetic_table(workload, hardware))
    return folder


def flashtune_command(*args: str) -> list[str]:
    """The CLI, run by this interpreter (the venv's), as a user would run ``flashtune``."""
    return [sys.executable, "-m", "flashtune.experiments.cli.main", *args]


def cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env["CUDA_VISIBLE_DEVICES"] = ""  # the replay path, even on a machine with a GPU
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_cli(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(flashtune_command(*args), cwd=cwd, env=cli_env(), capture_output=True, text=True,
                          timeout=timeout, check=False)


def tune_args(stores: dict[str, str], replay_dir: Path, *extra: str) -> list[str]:
    return ["tune", "--tracking-uri", stores["tracking_uri"], "--storage", stores["storage"],
            "--replay-dir", str(replay_dir), "--workload", WORKLOAD_ARG, "--no-progress", *extra]
