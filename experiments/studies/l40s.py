"""Tuning studies on the NVIDIA L40S. Runs where that GPU is (about 100 KB of shared memory per block).

    python -m flashtune.experiments.studies.l40s --strategy random --trials 60 --seed 0
    python experiments/studies/l40s.py --help

Every option of ``flashtune tune`` applies; the same --study-name resumes.
"""

from __future__ import annotations

import sys

from flashtune.experiments.tune import main_for_gpu
from flashtune.objectives.types import SUITE

#: Shipped spec (objectives/specs/l40s.json): names the MLflow experiment, decides feasibility.
HARDWARE = "l40s"
#: The foundation suite; a workload can be added here or picked with --workload.
WORKLOADS = SUITE

if __name__ == "__main__":
    sys.exit(main_for_gpu(HARDWARE, WORKLOADS))
