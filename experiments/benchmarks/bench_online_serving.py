"""The online re-tuner inside a generate loop: what re-tuning while
serving costs in tokens/s, whether a token is lost, and how soon a rollback takes effect.

A random-init Llama generates greedily with the op as its attention (transformers'
dynamic cache), three ways per round, interleaved:

* ``plain``: no tuner attached (the dispatcher's prepared calls serve);
* ``attached``: an :class:`~flashtune.runtime.retuning.online.OnlineTuner` with the default
  options watching every bucket (it times one call in 8 with CUDA events; prepared calls
  are off while a tuner is attached), with no candidate to try;
* ``retune``: a tuner forced through one whole re-tune inside the generate: after
  ``--drift-after`` decode calls the incumbent's readings are scaled by 1.5 (the GPU slows
  down), the re-tune's benchmark calls one candidate (``BLOCK_N=32, num_splits=2``) twice
  as fast as the incumbent, and that candidate's live readings are scaled by
  ``--slow-factor`` (it benchmarks fast but serves slow), so it is swapped in, put on
  probation and rolled back. The kernels, the CUDA-event timing and its lag, the swap and
  the rollback are real; the slowdown and the two verdicts are injected, as in the CPU
  test ``tests/runtime/test_online_serving.py``, so that one generate sees them.

Reported: tokens/s of each (median of ``--rounds``, after one warm-up round that compiles
the candidate too), the tokens against ``plain``'s (a served config changes only the bf16
rounding of the attention), the tuner's events, and the rollback's lag: decode calls the
candidate served after its probation's last sample (0: the call after the verdict's sample
already ran the incumbent; a decode step is one call per layer).

Usage (about a minute on an H200)::

    flashtune bench online-serving --json online.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import torch

from flashtune.experiments.benchmarks.bench_generate import build_model, generate
from flashtune.kernels.config import Config
from flashtune.objectives.types import Measurement, Status, Workload
from flashtune.runtime.dispatching.dispatch import get_dispatcher
from flashtune.runtime.integrations.hf_attention import FallbackLog, register, set_attention
from flashtune.runtime.retuning.online import OnlineOptions, OnlineTuner
from flashtune.runtime.retuning.timing import CudaEventTiming, HostTiming, Reader, TimingSource

#: The forced re-tune's knobs: a short window so that one generate holds the whole loop.
FORCED = OnlineOptions(window=16, min_samples=8, probation_samples=8, sample_every=1, cooldown_s=0.0,
                       initial_cost_s=0.001, metrics_every_s=600.0)
DRIFT = 1.5  # the incumbent's slowdown, as the CPU test's world


def is_decode(config: Config) -> bool:
    return config.get("kernel") == "decode"


class DriftTiming(TimingSource):
    """Real timing (CUDA events on a GPU, the host clock otherwise) of every timed call,
    a record of the config each one ran, and the injected world: a decode incumbent's
    readings times :data:`DRIFT` after ``drift_after`` decode calls, the candidate's
    (``slow``, set by the candidates function) times ``slow_factor``."""

    def __init__(self, real: TimingSource, *, drift_after: int, slow_factor: float) -> None:
        self.real, self.drift_after, self.slow_factor = real, drift_after, slow_factor
        self.slow: Config | None = None
        self.ran: list[Config] = []  # decode configs, in launch order

    def start(self, config: Config) -> object:
        factor = 1.0
        if is_decode(config):
            self.ran.append(config)
            if config == self.slow:
                factor = self.slow_factor
            elif len(self.ran) > self.drift_after:
                factor = DRIFT
        return factor, self.real.start(config)

    def stop(self, token: object) -> Reader:
        factor, inner = token  # type: ignore[misc]
        read = self.real.stop(inner)

        def scaled() -> float | None:
            ms = read()
            return None if ms is None else ms * factor

        return scaled


def slower_candidate(incumbent: Config) -> Config:
    """The forced re-tune's one candidate: the CPU test's (fewer splits, smaller tiles)."""
    return incumbent.replace(BLOCK_N=32, num_splits=2)


def forced_tuner(timing: DriftTiming) -> OnlineTuner:
    """A tuner that re-tunes the decode bucket once the drift sets in (see the module doc)."""

    def candidates(key: Any, current: Config, workload: Workload) -> list[Config]:
        if workload.q_len != 1:
            return []
        timing.slow = slower_candidate(current)
        return [timing.slow]

    def benchmark(config: Config, workload: Workload) -> Measurement:
        return Measurement(config=config, workload=workload, status=Status.OK,
                           median_ms=0.5 if config == timing.slow else 1.0)

    return OnlineTuner(get_dispatcher(), options=FORCED, timing=timing, benchmark=benchmark, candidates=candidates)


def watching_tuner() -> OnlineTuner:
    """The default options, every call routed through the tuner, nothing to try."""

    def benchmark(config: Config, workload: Workload) -> Measurement:
        return Measurement(config=config, workload=workload, status=Status.OK, median_ms=1.0)

    return OnlineTuner(get_dispatcher(), benchmark=benchmark, candidates=lambda key, current, workload: [])


def rollback_lag(ran: list[Config], slow: Config | None, probation: int) -> int | None:
    """Decode calls the candidate served beyond its probation (None: it never served)."""
    served = sum(1 for c in ran if c == slow)
    return served - probation if served else None


def one_round(model: Any, ids: torch.Tensor, new_tokens: int, *, drift_after: int, slow_factor: float,
              real: TimingSource | None = None) -> dict[str, Any]:
    """plain, attached, retune: (tokens, seconds) each, and the forced tuner's record.

    ``real`` times the forced tuner's calls before the injected scaling (default CUDA events
    on a GPU, the host clock otherwise; a test injects constant latencies)."""
    out: dict[str, Any] = {}
    out["plain"] = generate(model, ids, new_tokens)
    with watching_tuner() as watcher:
        out["attached"] = generate(model, ids, new_tokens)
    if real is None:
        real = CudaEventTiming() if ids.is_cuda else HostTiming()
    timing = DriftTiming(real, drift_after=drift_after, slow_factor=slow_factor)
    tuner = forced_tuner(timing)
    with tuner:
        out["retune"] = generate(model, ids, new_tokens)
        tuner.wait_idle(30)
    out["events"] = [e["kind"] for e in tuner.events]
    out["watcher_events"] = [e["kind"] for e in watcher.events]
    out["rollback_lag_calls"] = rollback_lag(timing.ran, timing.slow, FORCED.probation_samples)
    out["decode_calls_timed"] = len(timing.ran)
    out["rollback_latency_s"] = list(tuner.rollback_latencies_s)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--new-tokens", type=int, default=96)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--drift-after", type=int, default=40, help="decode calls before the injected slowdown")
    parser.add_argument("--slow-factor", type=float, default=4.0, help="the candidate's live readings' scale")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    for name in ("batch", "prompt", "new_tokens", "layers", "rounds", "drift_after"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    name = register()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model = build_model(layers=args.layers, hidden=args.hidden, heads=args.heads, kv_heads=args.kv_heads,
                        vocab=args.vocab, max_len=args.prompt + args.new_tokens, device=device, dtype=dtype)
    set_attention(model, name)
    gen = torch.Generator().manual_seed(args.prompt)
    ids = torch.randint(1, args.vocab, (args.batch, args.prompt), generator=gen).to(device)
    options = {"drift_after": args.drift_after, "slow_factor": args.slow_factor}
    rounds = []
    with FallbackLog() as log:
        one_round(model, ids, args.new_tokens, **options)  # warm-up: compiles every kernel, the candidate's too
        for _ in range(args.rounds):
            rounds.append(one_round(model, ids, args.new_tokens, **options))
    tokens = args.batch * args.new_tokens
    ways = ("plain", "attached", "retune")
    tps = {w: tokens / statistics.median(r[w][1] for r in rounds) for w in ways}
    result = {
        "setup": {"batch": args.batch, "prompt": args.prompt, "new_tokens": args.new_tokens, "layers": args.layers,
                  "hidden": args.hidden, "rounds": args.rounds, "dtype": str(dtype).removeprefix("torch."),
                  "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
                  "forced_options": FORCED.__dict__, "drift": DRIFT, **options},
        "tokens_per_s": tps,
        "ratio_to_plain": {w: tps[w] / tps["plain"] for w in ways},
        "generate_s": {w: [r[w][1] for r in rounds] for w in ways},
        "tokens_equal_plain": {w: [bool(torch.equal(r[w][0], r["plain"][0])) for r in rounds] for w in ways[1:]},
        "events": [r["events"] for r in rounds],
        "watcher_events": [r["watcher_events"] for r in rounds],
        "rollback_lag_calls": [r["rollback_lag_calls"] for r in rounds],
        "decode_calls_timed": [r["decode_calls_timed"] for r in rounds],
        "rollback_latency_s": [r["rollback_latency_s"] for r in rounds],
        "fallback": sorted(set(log.lines)),
    }
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["setup"]))
    print(f"{'way':>9} {'tok/s':>9} {'/plain':>7} tokens==plain")
    for w in ways:
        same = result["tokens_equal_plain"].get(w, ["-"])
        print(f"{w:>9} {tps[w]:>9.1f} {result['ratio_to_plain'][w]:>7.3f} {same}")
    print(f"retune events {result['events']}; rollback lag (decode calls past probation) "
          f"{result['rollback_lag_calls']} with {args.layers} calls a step; fallback {result['fallback']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
