"""Tuning studies on the NVIDIA A100-SXM4-80GB. Runs where that GPU is (no fp8: compute capability 8.0).

    python -m flashtune.experiments.studies.a100 --strategy random --trials 60 --seed 0
    python experiments/studies/a100.py --help

Every option of ``flashtune tune`` applies; the same --study-name resumes.
"""

from __future__ import annotations

import sys

from flashtune.experiments.tune import main_for_gpu
from flashtune.objectives.types import SUITE

#: Shipped spec (objectives/specs/a100.json): names the MLflow experiment, decides feasibility.
HARDWARE = "a100"
#: The foundation suite; a workload can be added here or picked with --workload.
WORKLOADS = SUITE

if __name__ == "__main__":
    sys.exit(main_for_gpu(HARDWARE, WORKLOADS))
