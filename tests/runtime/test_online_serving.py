"""The online re-tuner while decoding (issue 19, item 4), on real kernels in the interpreter:
every step's output is right through a swap and a rollback (no token lost), and the
rollback takes effect on the very next decode step. Latencies are injected (a candidate
the benchmark calls fast but that is slow live); the kernels really run each config.
"""

from __future__ import annotations

import pytest
import torch

from flashtune.kernels.config import Config
from flashtune.objectives.types import Measurement, Status, Workload
from flashtune.runtime.dispatching.dispatch import Dispatcher
from flashtune.runtime.retuning.online import OnlineOptions, OnlineTuner
from flashtune.runtime.retuning.timing import InjectedTiming

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="CPU interpreter suite; tests/gpu covers the GPU")

OPTIONS = OnlineOptions(window=8, min_samples=4, probation_samples=4, sample_every=1, cooldown_s=0.0,
                        initial_cost_s=0.001, metrics_every_s=60.0)


class World:
    """Invented time: live milliseconds per config (the incumbent's drifting), and what ran."""

    def __init__(self, slow: Config) -> None:
        self.t, self.drift, self.slow = 0.0, 1.0, slow
        self.ran: list[Config] = []

    def clock(self) -> float:
        return self.t

    def latency(self, config: Config) -> float:
        self.ran.append(config)
        ms = 3.0 if config == self.slow else 1.0 * self.drift
        self.t += ms / 1e3
        return ms

    def benchmark(self, config: Config, workload: Workload) -> Measurement:
        self.t += 0.001
        return Measurement(config=config, workload=workload, status=Status.OK,
                           median_ms=0.5 if config == self.slow else 1.0)


def test_a_rollback_while_decoding_loses_no_token_and_takes_effect_on_the_next_step(tmp_path):
    dispatcher = Dispatcher(tmp_path / "none.json")
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 4, 1, 32, generator=g)
    k, v = torch.randn(1, 2, 64, 32, generator=g), torch.randn(1, 2, 64, 32, generator=g)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1))
    incumbent = dispatcher.config_for(q, k, causal=True)
    slow = incumbent.replace(BLOCK_N=32, num_splits=2)
    world = World(slow)
    steps = 0

    def step() -> None:
        nonlocal steps
        out = dispatcher(q, k, v, causal=True)
        steps += 1
        torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)  # whichever config served it

    tuner = OnlineTuner(dispatcher, options=OPTIONS, timing=InjectedTiming(world.latency), benchmark=world.benchmark,
                        clock=world.clock, candidates=lambda key, current, workload: [slow])
    with tuner:
        for _ in range(OPTIONS.window):
            step()  # the baseline
        world.drift = 1.5  # the GPU slows down: a re-tune swaps the candidate in
        for _ in range(50):
            step()
            assert tuner.wait_idle(30)
            if any(e["kind"] == "swap" for e in tuner.events):
                break
        swapped_at = len(world.ran)
        for _ in range(OPTIONS.probation_samples + 2):
            step()
            if any(e["kind"] == "rollback" for e in tuner.events):
                break
        rolled_back_at = len(world.ran)  # the call that completed the verdict
        step()  # the next decode step
    kinds = [e["kind"] for e in tuner.events]
    assert kinds[-3:] == ["degraded", "swap", "rollback"], kinds
    assert world.ran[swapped_at:rolled_back_at] == [slow] * OPTIONS.probation_samples  # its probation, then out
    assert world.ran[rolled_back_at] == incumbent  # rollback within one decode step
    assert dispatcher.config_for(q, k, causal=True) == incumbent
    assert steps == len(world.ran)  # every step timed and returned (none lost or repeated)


def test_an_attached_tuner_sees_every_call_of_a_prepared_key_and_a_swap_takes_the_next_call(tmp_path, monkeypatch):
    # While a tuner is attached, a key's later calls launch a prepared call (no launcher's
    # checks: a bare decode call's host time) routed through the tuner, which still counts
    # (and may time) each; a swap drops them, so the next call serves the new config.
    from flashtune.runtime.dispatching import dispatch

    launches: list[Config | None] = []
    launcher = dispatch._launcher

    def counted(*args, **kwargs):
        launches.append(kwargs.get("config"))
        return launcher(*args, **kwargs)

    monkeypatch.setattr(dispatch, "_launcher", counted)
    dispatcher = Dispatcher(tmp_path / "none.json")
    g = torch.Generator().manual_seed(1)
    q = torch.randn(1, 4, 1, 32, generator=g)
    k, v = torch.randn(1, 2, 64, 32, generator=g), torch.randn(1, 2, 64, 32, generator=g)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1))
    world = World(slow=None)
    tuner = OnlineTuner(dispatcher, options=OPTIONS, timing=InjectedTiming(world.latency), benchmark=world.benchmark,
                        clock=world.clock, candidates=lambda key, current, workload: [])
    with tuner:
        for _ in range(5):
            torch.testing.assert_close(dispatcher(q, k, v, causal=True), expected, atol=1e-4, rtol=1e-4)
        assert len(launches) == 1  # the first call; the other four prepared
        (state,) = tuner._buckets.values()
        assert state.calls == 5 and len(world.ran) == 5  # every call through the tuner, timed (sample_every=1)
        (key,) = tuner._buckets
        other = launches[0].replace(BLOCK_N=32, num_splits=2)
        dispatcher.swap(key, other)
        torch.testing.assert_close(dispatcher(q, k, v, causal=True), expected, atol=1e-4, rtol=1e-4)
    assert launches[1:] == [other]  # the next call after the swap launched the new config


def test_an_attached_tuner_launches_the_launched_combine_for_ranges_of_a_batch(tmp_path):
    # Per-sequence key ranges at batch 2 in a long cache take the launched combine (the
    # default's fused one waits for the longest sequence): with a tuner attached too, which
    # tracks the served config.
    dispatcher = Dispatcher(tmp_path / "none.json")
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 4, 1, 32, generator=g)
    k, v = torch.randn(2, 2, 2, 8192, 32, generator=g)
    ranges = {"kv_start": torch.tensor([5, 0], dtype=torch.int32), "cache_seqlens": torch.tensor([700, 8192], dtype=torch.int32)}
    world = World(slow=None)
    tuner = OnlineTuner(dispatcher, options=OPTIONS, timing=InjectedTiming(world.latency), benchmark=world.benchmark,
                        clock=world.clock, candidates=lambda key, current, workload: [])
    with tuner:
        first = dispatcher(q, k, v, causal=True, **ranges)
        torch.testing.assert_close(dispatcher(q, k, v, causal=True, **ranges), first)
        (routed,) = dispatcher._routed.values()
    served, prepared = routed[1], routed[3]
    assert served["combine"] == "fused" and prepared.splits > 1 and prepared.config["combine"] == "launch"
    cols = torch.arange(8192)
    keep = (cols >= torch.tensor([5, 0])[:, None]) & (cols < torch.tensor([700, 8192])[:, None])
    ref = torch.nn.functional.scaled_dot_product_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1),
                                                           attn_mask=keep[:, None, None, :])
    torch.testing.assert_close(first, ref, atol=1e-4, rtol=1e-4)
