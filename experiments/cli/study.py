"""``flashtune study GPU``: the tuning studies of one GPU model, as its study file declares them.

One runner for every GPU: ``experiments/data/studies/<gpu>.toml`` names the shipped hardware
spec and the workloads (a new GPU is a new small file, not a new script). Every option of
``flashtune tune`` applies; the default study name is prefixed by the GPU, and the same
--study-name resumes.

    flashtune study h200 --strategy random --trials 60 --seed 0
    flashtune study path/to/my_gpu.toml --trials 40
"""

from __future__ import annotations

import argparse
import tomllib
from dataclasses import dataclass
from pathlib import Path

from flashtune.experiments import DATA_DIR
from flashtune.experiments.cli import tune
from flashtune.objectives.hardware import load_spec
from flashtune.objectives.types import SUITE, Workload

#: Where the shipped study files lie: one ``<gpu>.toml`` per GPU model.
STUDIES_DIR = DATA_DIR / "studies"


@dataclass(frozen=True)
class GpuStudy:
    """What a study file declares: the hardware spec's key and the workloads to tune."""

    hardware: str
    workloads: tuple[Workload, ...]


def study_names() -> list[str]:
    """The GPU models with a shipped study file."""
    return sorted(p.stem for p in STUDIES_DIR.glob("*.toml"))


def load_study(name_or_path: str | Path) -> GpuStudy:
    """Read a study file: a shipped GPU's name (``h200``) or the path of a ``.toml`` file.

    Raises:
        FileNotFoundError: no such GPU study or file.
        ValueError: the file lacks ``hardware`` or names an unknown spec or a bad workload.
    """
    path = Path(name_or_path)
    if path.suffix != ".toml":
        path = STUDIES_DIR / f"{name_or_path}.toml"
    if not path.is_file():
        raise FileNotFoundError(f"gpu: no study file {str(path)!r}; shipped: {', '.join(study_names())}")
    with path.open("rb") as f:
        data = tomllib.load(f)
    unknown = set(data) - {"hardware", "workloads"}
    if unknown:
        raise ValueError(f"{path}: unknown keys {sorted(unknown)}; expected hardware, workloads")
    hardware = data.get("hardware")
    if not isinstance(hardware, str):
        raise ValueError(f"{path}: hardware must name a spec (h200, h100, ...), got {hardware!r}")
    load_spec(hardware)  # an unknown spec fails here, naming the file's value
    workloads: list[Workload] = []
    for text in data.get("workloads", ["suite"]):
        workloads.extend(SUITE if text == "suite" else [Workload.parse(text)])
    return GpuStudy(hardware, tuple(workloads))


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("study", help="the tuning studies of one GPU model, from its study file",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("gpu", help=f"a shipped GPU study ({', '.join(study_names())}) or a .toml file")
    tune.add_arguments(parser)
    parser.set_defaults(func=run_study_file)


def run_study_file(args: argparse.Namespace) -> int:
    """``tune`` with the study file's GPU (unless --hardware overrides it) and workloads."""
    study = load_study(args.gpu)
    args.hardware = args.hardware or study.hardware
    args.default_workloads = study.workloads
    args.name_prefix = study.hardware
    return tune.run_tune(args)
