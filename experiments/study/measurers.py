"""What measures a study's configs: the live GPU, or recorded tables replayed (a ``Measurer``).

The parent process never initialises CUDA (a poisoned context would kill the study, and
forking after CUDA init breaks workers): whether a GPU is there is asked of
``nvidia-smi``, and measuring happens in the live objective's worker process.
"""

from __future__ import annotations

import dataclasses
import math
import re
import shutil
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from flashtune.experiments import DATA_DIR
from flashtune.kernels.config import Config
from flashtune.kernels.space import tunables_for, validate_config
from flashtune.objectives.hardware import HardwareSpec, known_specs
from flashtune.objectives.objective import Objective
from flashtune.objectives.packed import is_packed_table
from flashtune.objectives.replay import ReplayObjective, load_table
from flashtune.objectives.types import Measurement, Workload

OBJECTIVE_KINDS = ("auto", "live", "replay")


class _Measures(Protocol):
    def evaluate(self, config: Config, workload: Workload) -> Measurement: ...


def gpu_names() -> list[str]:
    """Names of the NVIDIA GPUs this process may use, without touching CUDA.

    Honours ``CUDA_VISIBLE_DEVICES`` set to nothing or -1 (no GPU), as CUDA would.
    """
    import os

    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return []
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if out.returncode != 0:
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


def spec_key(hardware: HardwareSpec) -> str:
    """Short name of a spec (``h200``): the shipped spec's file name, else a slug of its name."""
    for key, spec in known_specs().items():
        if spec.name == hardware.name:
            return key
    return re.sub(r"[^a-z0-9]+", "-", hardware.name.lower().removeprefix("nvidia ")).strip("-")


#: The shipped folders whose tables, merged per workload, are a GPU model's recorded space:
#: it was swept in parts as kernels joined the space (each folder's README says when and how;
#: ``h200_grown`` holds ``h200``'s 120 pointer configs a workload too). A GPU model not named
#: here replays ``experiments/data/<key>/``.
RECORDED_SPACE = {"h200": ("h200_grown", "h200_lean", "h200_lean_order", "h200_gluon", "h200_retimed"),
                  "h100": ("h100_sampled", "h100_retimed")}

ReplayDirs = Path | Sequence[Path]


def default_replay_dirs(hardware: HardwareSpec) -> list[Path]:
    """Recorded tables shipped for a GPU model: the folders of ``RECORDED_SPACE``, else
    ``experiments/data/<key>/``."""
    key = spec_key(hardware)
    return [DATA_DIR / name for name in RECORDED_SPACE.get(key, (key,))]


def table_path(replay_dir: Path, workload: Workload) -> Path:
    """Where the recorded table of ``workload`` lies in ``replay_dir``."""
    return Path(replay_dir) / f"{workload.name}.jsonl"


def _folders(replay_dirs: ReplayDirs) -> list[Path]:
    return [Path(replay_dirs)] if isinstance(replay_dirs, (str, Path)) else [Path(f) for f in replay_dirs]


def recorded_workloads(replay_dirs: ReplayDirs) -> list[str]:
    """Names of the workloads with a table in any of ``replay_dirs`` (folders that do not exist
    hold none); a packed kernel's table beside them is not one (objectives/packed.py)."""
    return sorted({p.name[: -len(".jsonl")] for folder in _folders(replay_dirs) if folder.is_dir()
                   for p in folder.glob("*.jsonl") if not is_packed_table(p)})


@dataclass
class Measurer:
    """An opened objective: measures configs of any of its workloads, then is closed.

    Attributes:
        kind: ``live`` or ``replay``.
        hardware: the GPU measured (live: read from the device; replay: the spec named).
        description: one line for people (what is measured, from where).
        fingerprint: fingerprint of the measuring machine (replay: the recording's).
        versions: driver/CUDA/torch/Triton of the measuring machine.
    """

    kind: str
    hardware: HardwareSpec
    description: str
    fingerprint: str
    versions: dict[str, str]
    _objective: _Measures
    _close: Callable[[], None] = field(default=lambda: None)

    def constraint(self, workload: Workload) -> Callable[[Config], bool] | None:
        """Replay: only recorded configs are in the space (Kernel Tuner's simulation mode),
        so a kernel space grown since the recording costs no trials on unrecorded configs."""
        if self.kind != "replay":
            return None
        recorded = frozenset(self._objective.table(workload))  # type: ignore[attr-defined]
        return recorded.__contains__

    def optimum(self, workload: Workload) -> Measurement | None:
        """Replay: the fastest recorded config of ``workload`` (the exhaustive optimum a study
        is measured against); None live, or where no recorded config ran."""
        if self.kind != "replay":
            return None
        try:
            return self._objective.optimum(workload)  # type: ignore[attr-defined]
        except ValueError:
            return None

    def evaluator(self, workload: Workload) -> Callable[[Config], Measurement]:
        objective = self._objective
        return lambda config: objective.evaluate(config, workload)

    def close(self) -> None:
        self._close()


def resolve_kind(kind: str) -> str:
    """``auto`` becomes ``live`` where a GPU is visible, else ``replay``."""
    if kind not in OBJECTIVE_KINDS:
        raise ValueError(f"objective {kind!r}: use one of {list(OBJECTIVE_KINDS)}")
    if kind != "auto":
        return kind
    return "live" if gpu_names() else "replay"


def open_replay(hardware: HardwareSpec, workloads: Iterable[Workload], replay_dirs: ReplayDirs | None = None,
                *, noise: bool = False, seed: int = 0) -> Measurer:
    """Replay recorded tables of ``hardware`` for ``workloads``: each workload's tables of
    every folder of ``replay_dirs`` (default: ``default_replay_dirs``), merged; a config
    recorded twice replays its later folder's row.

    Raises:
        ValueError: a workload has no table (naming the files and what is recorded), or a
            table was recorded on another GPU.
    """

    folders = _folders(replay_dirs) if replay_dirs is not None else default_replay_dirs(hardware)
    workloads = list(workloads)  # read twice: the tables, then the description
    measurements: list[Measurement] = []
    partial: list[str] = []
    covered: list[int] = []
    for workload in workloads:
        paths = [path for folder in folders if (path := table_path(folder, workload)).exists()]
        if not paths:
            recorded = recorded_workloads(folders)
            raise ValueError(
                f"no recorded {hardware.name} table for workload {workload.name}: no {workload.name}.jsonl in "
                f"{', '.join(map(str, folders))} (recorded there: {recorded or 'none'}). Record one with "
                "`flashtune sweep` on that GPU, point --replay-dir at a folder of tables, or run where the GPU is"
            )
        table = []
        for path in paths:
            part = load_table(path)
            gpus = {m.hardware for m in part if m.hardware}
            if gpus and gpus != {hardware.name}:
                raise ValueError(f"replay table {path} was recorded on {sorted(gpus)}, not on {hardware.name}")
            table += part
        # Tables recorded before a knob joined the space omit it; it then means its implied
        # value (kernels.space.IMPLIED): key the replay by the complete config the strategies ask.
        complete = [dataclasses.replace(m, config=c) for m in table if (c := _complete(validate_config, m.config))]
        if not complete:
            # The kernel's space changed since the recording: replaying would find nothing.
            raise ValueError(
                f"replay table {' + '.join(map(str, paths))}: none of its {len(table)} configs is in the kernel's "
                "current space "
                f"(table keys {sorted(table[0].config)}, space keys {sorted(tunables_for(workload))}); "
                "re-record it with `flashtune sweep`"
            )
        if len(complete) < len(table):
            partial.append(f"{workload.name}: {len(complete)} of {len(table)} recorded configs are in the space")
        covered.append(len({m.config for m in complete}))
        measurements.extend(complete)
    stamped = next((m for m in measurements if m.fingerprint), None)
    fingerprint = stamped.fingerprint if stamped else hardware.fingerprint
    versions = dict(stamped.versions) if stamped and stamped.versions else _spec_versions(hardware)
    return Measurer(
        kind="replay",
        hardware=hardware,
        description=f"replaying recorded {hardware.name} tables from {', '.join(map(str, folders))} (no GPU is used); "
                    f"the space is the recorded configs ({'/'.join(map(str, covered))} of the kernel's "
                    f"{'/'.join(str(math.prod(len(v) for v in tunables_for(w).values())) for w in workloads)})"
                    + "".join(f"; {note}" for note in partial),
        fingerprint=fingerprint,
        versions=versions,
        _objective=ReplayObjective(measurements, noise=noise, seed=seed),
    )


def open_live(expected: HardwareSpec | None = None, **options: Any) -> Measurer:
    """The live objective on this machine's GPU (measured in a worker process).

    Args:
        expected: the GPU model the study is for; a different GPU here is refused.
        options: passed to ``flashtune.objectives.objective.Objective``.

    Raises:
        ValueError: no GPU, or not the expected one.
    """
    names = gpu_names()
    if not names:
        raise ValueError("objective 'live' needs an NVIDIA GPU and none is visible here (nvidia-smi); "
                         "use --objective replay")
    if expected is not None and not any(_same_model(expected.name, name) for name in names):
        raise ValueError(f"this study is for {expected.name}, but this machine has {names}")

    objective = Objective(**options)
    try:
        hardware = objective.hardware  # read in the worker process, never here
    except BaseException:
        objective.close()
        raise
    return Measurer(
        kind="live",
        hardware=hardware,
        description=f"measuring live on {hardware.name} ({hardware.arch})",
        fingerprint=hardware.fingerprint,
        versions=_spec_versions(hardware),
        _objective=objective,
        _close=objective.close,
    )


def _complete(validate: Callable[[Config], Config], config: Config) -> Config | None:
    try:
        return validate(config)
    except ValueError:
        return None


def _spec_versions(hardware: HardwareSpec) -> dict[str, str]:
    return {"driver": hardware.driver, "cuda": hardware.cuda, "torch": hardware.torch, "triton": hardware.triton}


def _same_model(spec_name: str, device_name: str) -> bool:
    # nvidia-smi says "NVIDIA H100 80GB HBM3" where the spec says "NVIDIA H100".
    return device_name.lower().startswith(spec_name.lower()) or spec_name.lower().startswith(device_name.lower())

