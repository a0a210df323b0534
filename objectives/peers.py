"""The peers a tuned config must beat: torch SDPA's cuDNN and flash backends on a workload.

Timed as the objective times a config (``bench.time_call``: ``do_bench``, L2 flushed,
median), on the same inputs, so a ratio against a config's measurement compares like with
like. Only meaningful on a GPU; a backend that does not take a shape is reported as such.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from flashtune.objectives.bench import make_inputs, time_call
from flashtune.objectives.types import Workload

#: Display name -> SDPA backend.
PEERS: dict[str, SDPBackend] = {"SDPA cuDNN": SDPBackend.CUDNN_ATTENTION, "SDPA flash": SDPBackend.FLASH_ATTENTION}


@dataclass(frozen=True)
class PeerTime:
    """One peer on one workload: its median time, or why it did not run."""

    name: str
    median_ms: float | None
    error: str = ""


def sdpa_call(backend: SDPBackend, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> Callable[[], None]:
    """One SDPA call pinned to ``backend`` (GQA heads expanded: not every backend takes
    ``enable_gqa``, and the expansion happens once, outside the timed call)."""
    group = q.shape[1] // k.shape[1]
    if group > 1:
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)

    def run() -> None:
        with sdpa_kernel([backend]):
            F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return run


def time_peers(workload: Workload, dev: torch.device, *, seed: int = 1234, rep_ms: int = 100) -> list[PeerTime]:
    """Each peer's median milliseconds on ``workload`` (inputs as the objective makes them)."""
    q, k, v = make_inputs(workload, seed=seed, dev=dev)
    times = []
    for name, backend in PEERS.items():
        try:
            median_ms, _, _ = time_call(sdpa_call(backend, q, k, v, workload.causal), dev, rep_ms)
            times.append(PeerTime(name, median_ms))
        except RuntimeError as exc:  # "No available kernel": the backend refuses this shape or device
            times.append(PeerTime(name, None, str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__))
    return times
