"""The study side: the CLI, the study loop and its storage, MLflow tracking, evaluation, GPU benchmarks."""

from pathlib import Path

#: Data shipped with the package: recorded tables (``data/<gpu>/``) and per-GPU study files
#: (``data/studies/<gpu>.toml``). One place, so no module guesses its way there from ``__file__``.
DATA_DIR = Path(__file__).resolve().with_name("data")
