"""The peers a tuned config must beat: torch SDPA's cuDNN and flash backends on a workload.

Timed as the objective times a config (``bench.time_call``: ``do_bench``, L2 flushed,
median), on the same inputs, and as users call them: on a grouped-query workload SDPA runs
both with ``enable_gqa=True`` (K/V read once per KV head) and with K/V expanded to the
query heads beforehand (what a caller does for a backend that refuses ``enable_gqa``); the
faster form that runs is the peer.

Peers and the configs they are compared with are timed side by side in interleaved rounds
(A B C A B C ..., :func:`time_side_by_side`): the H200 runs a 125 ms burst after an idle
spell at a higher SM clock than the same kernel after minutes of load, so a peer timed on
its own and a config timed at another moment differ by the clock, not by the code
(BENCHMARKS.md, "Peers timed as users call them"). Only meaningful on a GPU; a backend that
does not take a shape is reported as such.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from flashtune.objectives.bench import gpu_state, make_inputs, time_call
from flashtune.objectives.types import Workload

#: Display name -> SDPA backend.
PEERS: dict[str, SDPBackend] = {"SDPA cuDNN": SDPBackend.CUDNN_ATTENTION, "SDPA flash": SDPBackend.FLASH_ATTENTION}

#: How a grouped-query workload reaches SDPA: ``enable_gqa=True``, or K/V heads expanded
#: (``repeat_interleave``, once, outside the timed call).
GQA_FORMS = ("enable_gqa", "expanded")

#: Interleaved rounds the main job and ``bench_peers`` both time (their figures agree by
#: construction: one function, one protocol).
DEFAULT_ROUNDS = 3


@dataclass(frozen=True)
class PeerTime:
    """One peer on one workload: its median time and the call form that gave it, or why it did not run."""

    name: str
    median_ms: float | None
    error: str = ""
    form: str = ""


@dataclass(frozen=True)
class SideBySide:
    """Medians (over rounds) of functions timed in interleaved rounds, and the SM clock seen.

    ``median_ms[name]`` is None where the function raised (its first line in ``errors``).
    """

    median_ms: dict[str, float | None]
    errors: dict[str, str]
    sm_clock_mhz: tuple[float, float] | None  # lowest and highest reading between rounds


def gqa_forms(workload: Workload) -> tuple[str, ...]:
    """The SDPA call forms a peer is timed in on ``workload`` (one when heads are equal)."""
    return GQA_FORMS if workload.q_heads != workload.kv_heads else ("expanded",)


def sdpa_call(backend: SDPBackend, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
              form: str = "expanded") -> Callable[[], torch.Tensor]:
    """One SDPA call pinned to ``backend``, grouped-query heads in ``form`` (``GQA_FORMS``).

    Raises:
        ValueError: ``form`` is not one of ``GQA_FORMS``.
    """
    if form not in GQA_FORMS:
        raise ValueError(f"form must be one of {GQA_FORMS}, got {form!r}")
    group = q.shape[1] // k.shape[1]
    enable_gqa = group > 1 and form == "enable_gqa"
    if group > 1 and not enable_gqa:
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)

    def run() -> torch.Tensor:
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=enable_gqa)

    return run


def peer_calls(workload: Workload, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> dict[str, Callable[[], object]]:
    """Every (peer, form) call on ``workload``'s inputs, keyed ``"<peer> [<form>]"``."""
    return {_key(name, form): sdpa_call(backend, q, k, v, workload.causal, form)
            for name, backend in PEERS.items() for form in gqa_forms(workload)}


def _key(name: str, form: str) -> str:
    return f"{name} [{form}]"


def time_side_by_side(fns: Mapping[str, Callable[[], object]], dev: torch.device, *, rounds: int = DEFAULT_ROUNDS,
                      rep_ms: int = 100) -> SideBySide:
    """Each function's median over ``rounds`` interleaved rounds of ``time_call``.

    A function that raises (SDPA's "No available kernel", a config out of resources) is not
    timed again; the others go on. The SM clock is read (NVML) after each round.

    Raises:
        ValueError: ``rounds`` < 1.
    """
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    samples: dict[str, list[float]] = {name: [] for name in fns}
    errors: dict[str, str] = {}
    clocks: list[float] = []
    for _ in range(rounds):
        for name, fn in fns.items():
            if name in errors:
                continue
            try:
                samples[name].append(time_call(fn, dev, rep_ms)[0])
            except Exception as exc:  # SDPA's "No available kernel", Triton's OutOfResources: values
                text = str(exc).strip()
                errors[name] = text.splitlines()[0] if text else type(exc).__name__
        clock, _ = gpu_state()
        if clock is not None:
            clocks.append(clock)
    medians = {name: (statistics.median(s) if name not in errors and s else None) for name, s in samples.items()}
    return SideBySide(medians, errors, (min(clocks), max(clocks)) if clocks else None)


def best_peers(workload: Workload, timed: SideBySide) -> list[PeerTime]:
    """Each peer's fastest form in ``timed`` (keys from :func:`peer_calls`), or why none ran."""
    peers = []
    for name in PEERS:
        ran = [(timed.median_ms[_key(name, f)], f) for f in gqa_forms(workload)
               if timed.median_ms.get(_key(name, f)) is not None]
        if ran:
            ms, form = min(ran)
            peers.append(PeerTime(name, ms, form=form))
        else:
            why = {f: timed.errors.get(_key(name, f), "not timed") for f in gqa_forms(workload)}
            text = next(iter(why.values())) if len(set(why.values())) == 1 else \
                "; ".join(f"{f}: {e}" for f, e in why.items())
            peers.append(PeerTime(name, None, text))
    return peers


def time_peers(workload: Workload, dev: torch.device, *, seed: int = 1234, rep_ms: int = 100,
               rounds: int = DEFAULT_ROUNDS,
               beside: Mapping[str, Callable[[torch.Tensor, torch.Tensor, torch.Tensor], Callable[[], object]]] | None = None,
               ) -> tuple[list[PeerTime], SideBySide]:
    """Each peer's median milliseconds on ``workload`` (inputs as the objective makes them).

    Args:
        beside: functions to time in the same interleaved rounds, by name: each receives
            the inputs (q, k, v) and returns the call to time (e.g. the tuned config), so
            that a ratio to a peer compares figures of the same minutes of the same card.

    Returns:
        The peers (fastest form each) and everything timed, peers' forms included.
    """
    q, k, v = make_inputs(workload, seed=seed, dev=dev)
    fns: dict[str, Callable[[], object]] = {name: make(q, k, v) for name, make in (beside or {}).items()}
    fns.update(peer_calls(workload, q, k, v))
    timed = time_side_by_side(fns, dev, rounds=rounds, rep_ms=rep_ms)
    return best_peers(workload, timed), timed


def tflops(workload: Workload, median_ms: float | None) -> float:
    """TFLOP/s of ``workload`` at ``median_ms`` (0 when it did not run)."""
    return workload.flops / (median_ms * 1e-3) / 1e12 if median_ms and math.isfinite(median_ms) else 0.0
