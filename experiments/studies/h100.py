"""Tuning studies on the NVIDIA H100 80GB HBM3. Runs where that GPU is.

    python -m flashtune.experiments.studies.h100 --strategy random --trials 60 --seed 0
    python experiments/studies/h100.py --help

Every option of ``flashtune tune`` applies; the same --study-name resumes.
"""

from __future__ import annotations

import sys

from flashtune.experiments.tune import main_for_gpu
from flashtune.objectives.types import SUITE

#: Shipped spec (objectives/specs/h100.json): names the MLflow experiment, decides feasibility.
HARDWARE = "h100"
#: The foundation suite; a workload can be added here or picked with --workload.
WORKLOADS = SUITE

if __name__ == "__main__":
    sys.exit(main_for_gpu(HARDWARE, WORKLOADS))
