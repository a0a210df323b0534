"""Write the small slices of the development set that the tests read (run once, by hand).

The development set (exhaustive Kernel Tuner spaces, AutoTuningAssociation/benchmark_hub
commit 8eeb99e7, MIT licence) is 12 MB; the tests need a few hundred configs of each
format. A slice keeps every recorded config whose values are in ``KEEP`` (failures
included), the file's own metadata, ``tune_params`` narrowed to the kept values, and at
most three of each config's repeated times.

    python experiments/data/foreign/make_slices.py DEVELOPMENT_SET_FOLDER
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

HERE = Path(__file__).parent
KEEP = {
    "pnpoly_RTX_3090": {"block_size_x": [32, 64, 128, 256, 512, 992], "tile_size": [1, 4, 12, 20]},
    "gemm_RTX_3090": {"MDIMC": [8, 16], "NDIMC": [8, 16], "MDIMA": [8, 16], "NDIMB": [8, 16], "SA": [1], "SB": [1]},
    "gemm_RTX_2080_Ti": {"MDIMC": [8, 16], "NDIMC": [8, 16], "MDIMA": [8, 16], "NDIMB": [8, 16], "SA": [1], "SB": [1]},
}


def _kept(values: dict, keep: dict) -> bool:
    return all(values[name] in allowed for name, allowed in keep.items())


def slice_cache(source: Path, keep: dict) -> dict:
    data = json.loads(gzip.decompress(source.read_bytes()))
    data["tune_params"] = {name: [v for v in values if v in keep.get(name, values)]
                           for name, values in data["tune_params"].items()}
    cache = {}
    for key, record in data["cache"].items():
        if _kept(record, keep):
            record = {k: v for k, v in record.items() if k in (*data["tune_params"], "time", "times", "compile_time")}
            if isinstance(record.get("times"), list):
                record["times"] = record["times"][:3]
            cache[key] = record
    data["cache"] = cache
    return data


def slice_t4(source: Path, keep: dict) -> dict:
    data = json.loads(gzip.decompress(source.read_bytes()))
    results = []
    for result in data["results"]:
        if _kept(result["configuration"], keep):
            runtimes = result.get("times", {}).get("runtimes")
            if isinstance(runtimes, list):
                result["times"]["runtimes"] = runtimes[:3]
            results.append(result)
    data["results"] = results
    return data


def main(folder: str) -> None:
    source = Path(folder)
    for name, keep in KEEP.items():
        _write(HERE / f"{name}.json.gz", slice_cache(source / f"{name}.json.gz", keep))
    _write(HERE / "pnpoly_RTX_3090_T4.json.gz", slice_t4(source / "pnpoly_RTX_3090_T4.json.gz", KEEP["pnpoly_RTX_3090"]))


def _write(path: Path, data: dict) -> None:
    path.write_bytes(gzip.compress(json.dumps(data, separators=(",", ":")).encode(), mtime=0))
    print(f"wrote {path}")


if __name__ == "__main__":
    main(sys.argv[1])
