"""The best recorded configs of a workload across several table folders.

Why: the pointer-load tables (experiments/data/h200, complete, replay input) and the
variant tables (experiments/data/h200_variants, partial, named ``run<N>_[fp8_]<workload>``)
hold rows of one workload in several files; the GPU benchmarks (bench_fp8, bench_knee,
ncu_metrics) must time the best of the merged space, not of one file. CPU only.
"""

from __future__ import annotations

from pathlib import Path

from flashtune.experiments import DATA_DIR
from flashtune.kernels.config import Config
from flashtune.kernels.space import validate_config
from flashtune.objectives.replay import load_table

#: The recorded H200 folders, in the repository.
DEFAULT_DIRS = (
    DATA_DIR / "h200",
    DATA_DIR / "h200_variants",
)


def table_files(workload_name: str, dirs=DEFAULT_DIRS) -> list[Path]:
    """Every table of ``workload_name`` in ``dirs``: ``<name>.jsonl`` or ``<prefix>_<name>.jsonl``."""
    found = []
    for d in map(Path, dirs):
        found += sorted(p for p in d.glob(f"*{workload_name}.jsonl")
                        if p.name == f"{workload_name}.jsonl" or p.name.endswith(f"_{workload_name}.jsonl"))
    return found


def best_configs(workload_name: str, *, fp8: bool = False, top: int = 1, dirs=DEFAULT_DIRS,
                 distinct: tuple[str, ...] = ()) -> list[tuple[Config, float]]:
    """The ``top`` fastest distinct ``ok`` configs (with their recorded TFLOP/s), bf16 or fp8.

    ``distinct`` names knobs whose combination must differ between the configs returned
    (e.g. tile shape and loads), so that a short list is not one config at five depths.

    fp8 rows recorded before ``launch_quantized`` include the per-call quantization: their
    ranking is a lead for the kernel-only timing, not a measurement of it.
    """
    best: dict[Config, float] = {}
    for path in table_files(workload_name, dirs):
        for m in load_table(path):
            if not m.ok:
                continue
            config = validate_config(m.config)  # older rows omit knobs added since
            if bool(config["use_fp8"]) != fp8:
                continue
            best[config] = max(best.get(config, 0.0), float(m.tflops))
    ranked, seen = [], set()
    for config, tflops in sorted(best.items(), key=lambda kv: -kv[1]):
        shape = tuple(config[k] for k in distinct)
        if distinct and shape in seen:
            continue
        seen.add(shape)
        ranked.append((config, tflops))
    return ranked[:top]
