"""Tuning studies on the NVIDIA GeForce RTX 4090. Runs where that GPU is (about 100 KB of shared memory per block).

    python -m flashtune.experiments.studies.rtx4090 --strategy random --trials 60 --seed 0
    python experiments/studies/rtx4090.py --help

Every option of ``flashtune tune`` applies; the same --study-name resumes.
"""

from __future__ import annotations

import sys

from flashtune.experiments.tune import main_for_gpu
from flashtune.objectives.types import SUITE

#: Shipped spec (objectives/specs/rtx4090.json): names the MLflow experiment, decides feasibility.
HARDWARE = "rtx4090"
#: The foundation suite; a workload can be added here or picked with --workload.
WORKLOADS = SUITE

if __name__ == "__main__":
    sys.exit(main_for_gpu(HARDWARE, WORKLOADS))
