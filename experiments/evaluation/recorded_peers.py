"""SDPA's recorded times per GPU model and workload (``experiments/data/recorded_peers.json``).

A replayed study has no SDPA to time (no GPU, and the sweep tables hold only our configs);
the times SDPA's backends ran at beside the recorded tables' best configs are data, declared
once with their date, machine and source, so that a replay can say how its best compares.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from flashtune.experiments import DATA_DIR

RECORDED_PEERS = DATA_DIR / "recorded_peers.json"


@dataclass(frozen=True)
class RecordedPeer:
    """One peer's recorded speed on one workload: TFLOP/s, when, and where it comes from."""

    name: str
    tflops: float
    gpu: str
    date: str
    source: str


@cache
def _read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())["gpus"]


def recorded_peer(gpu: str, workload: str, peer: str = "sdpa_cudnn", path: Path = RECORDED_PEERS) -> RecordedPeer | None:
    """``peer``'s recorded TFLOP/s on ``workload`` (a table name) on ``gpu`` (a spec's name),
    None where nothing is recorded."""
    entry = _read(Path(path)).get(gpu)
    tflops = ((entry or {}).get("workloads", {}).get(workload) or {}).get(peer)
    if not tflops:
        return None
    return RecordedPeer(peer, float(tflops), gpu, entry["date"], entry["source"])
