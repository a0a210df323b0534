"""Dispatch: the fallback chain, caching, store location, the CPU path, bad inputs, numerics."""

from __future__ import annotations

import pytest
import torch
from runtime_helpers import cfg, entry, store_warnings

import flashtune.runtime as runtime
from flashtune.kernels.attention import takes_key_ranges
from flashtune.kernels.reference import reference_attention, relative_error
from flashtune.kernels.space import SAFE_DEFAULT, validate_config
from flashtune.objectives.hardware import HardwareSpec, load_spec
from flashtune.objectives.types import Workload
from flashtune.runtime.dispatching.baselines import fallback_config
from flashtune.runtime.dispatching.dispatch import Dispatcher, default_store_path
from flashtune.runtime.storage.buckets import Bucket
from flashtune.runtime.storage.store import Store


def _qkv(batch=1, heads=2, kv_heads=1, q_len=100, kv_len=100, head_dim=64, dtype=torch.float16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, q_len, head_dim, generator=gen).to(dtype)
    k = torch.randn(batch, kv_heads, kv_len, head_dim, generator=gen).to(dtype)
    v = torch.randn(batch, kv_heads, kv_len, head_dim, generator=gen).to(dtype)
    return q, k, v


# Inputs of _qkv() fall in this bucket.
EXACT = Bucket("float16", False, 64, 2, 128, 128)


@pytest.fixture
def dispatcher(store_path, h200) -> Dispatcher:
    return Dispatcher(store_path, hardware=lambda device: h200)


def test_exact_then_nearest_then_baseline(dispatcher, store_path, h200, recorder):
    Store(store_path).merge([
        entry(h200, EXACT, cfg(128, 64, 4, 2)),
        entry(h200, Bucket("float16", False, 64, 2, 256, 256), cfg(64, 32, 4, 4)),
        entry(h200, Bucket("float16", False, 64, 2, 8192, 8192), cfg(256, 64, 8, 2)),
    ])
    q, k, v = _qkv()
    dispatcher(q, k, v)
    assert recorder.configs[-1] == cfg(128, 64, 4, 2)
    assert dispatcher.explain(q, k).origin == "exact"

    q, k, v = _qkv(q_len=500, kv_len=500)  # bucket 512: 256 is nearer than 8192
    dispatcher(q, k, v)
    assert recorder.configs[-1] == cfg(64, 32, 4, 4)
    assert dispatcher.explain(q, k).origin == "nearest"

    q, k, v = _qkv(head_dim=128)  # no entry of this head dim
    dispatcher(q, k, v, causal=True)
    resolution = dispatcher.explain(q, k, causal=True)
    assert resolution.origin == "baseline" and "sm90" in resolution.detail
    assert recorder.configs[-1] == fallback_config(h200, Workload(1, 2, 1, 128, 128, 128, "float16", True))


def test_entries_of_another_gpu_or_infeasible_here_are_skipped(store_path, h200, recorder):
    a100 = load_spec("a100")
    d256 = Bucket("float16", False, 256, 2, 128, 128)
    big = cfg(128, 128, 8, 3)  # about 450 KB at head_dim 256: fits no GPU
    Store(store_path).merge([entry(a100, EXACT, cfg(128, 64, 4, 2)), entry(h200, d256, big)])
    on_h200 = Dispatcher(store_path, hardware=lambda device: h200)
    q, k, v = _qkv()
    assert on_h200.explain(q, k).origin == "baseline"  # only the A100 has this bucket
    on_a100 = Dispatcher(store_path, hardware=lambda device: a100)
    assert on_a100.explain(q, k).origin == "exact"
    q, k, v = _qkv(head_dim=256)
    resolution = on_h200.explain(q, k)
    assert resolution.origin == "baseline" and "infeasible" in resolution.detail


def test_a_gpu_the_store_has_not_seen_gets_a_same_architecture_gpus_entry(store_path, h200, recorder):
    # A team tunes on an H200 and deploys on an H100: the H200's entry for the bucket, not the
    # baseline (measured: 0.98x the H100's own over the suite, the baseline 0.96x); the A100's
    # (sm80) never; each GPU's own entries win.
    h100, a100 = load_spec("h100"), load_spec("a100")
    d128 = Bucket("float16", False, 128, 2, 128, 128)
    Store(store_path).merge([entry(h200, EXACT, cfg(128, 64, 4, 2)), entry(a100, d128, cfg(64, 64, 4, 2)),
                             entry(h200, Bucket("float16", False, 128, 2, 512, 512), cfg(128, 32, 8, 3))])
    on_h100 = Dispatcher(store_path, hardware=lambda device: h100)
    q, k, v = _qkv()
    with store_warnings() as caught:
        on_h100(q, k, v)
        on_h100(*_qkv(head_dim=128))
    assert recorder.configs == [cfg(128, 64, 4, 2), cfg(128, 32, 8, 3)]
    assert len(caught) == 1 and "no entries for NVIDIA H100 80GB HBM3: serving NVIDIA H200's" in str(caught[0].message)
    resolution = on_h100.explain(q, k)
    assert resolution.origin == "sibling"
    assert "NVIDIA H200's entry, its exact bucket (same architecture sm90" in resolution.detail
    assert "flashtune study" in resolution.detail
    # The A100 (sm80) has the exact D128 bucket; the H200's nearest one is served instead.
    assert "nearest bucket" in on_h100.explain(*_qkv(head_dim=128)[:2]).detail

    Store(store_path).merge([entry(h100, EXACT, cfg(64, 32, 4, 3))])
    on_h100.reload()
    on_h100(q, k, v)
    assert recorder.configs[-1] == cfg(64, 32, 4, 3) and on_h100.explain(q, k).origin == "exact"


def test_an_unknown_gpus_entries_or_one_that_does_not_fit_are_not_served_elsewhere(store_path, h200, recorder):
    h100 = load_spec("h100")
    mystery = HardwareSpec.from_dict({**h200.to_dict(), "name": "Some GPU", "driver": "1"})
    d256 = Bucket("float16", False, 256, 2, 128, 128)
    Store(store_path).merge([entry(mystery, EXACT, cfg(128, 64, 4, 2)), entry(h200, d256, cfg(128, 128, 8, 3))])
    on_h100 = Dispatcher(store_path, hardware=lambda device: h100)
    assert on_h100.explain(*_qkv()[:2]).origin == "baseline"  # an unknown GPU's architecture is unknown
    assert on_h100.explain(*_qkv(head_dim=256)[:2]).origin == "baseline"  # about 450 KB: fits no GPU


def test_a_bad_store_is_one_warning_then_baselines(dispatcher, store_path, recorder):
    store_path.write_bytes(b'{"format": "flashtune.configs", "version": 1, "entries": [')
    with store_warnings() as caught:
        for head_dim in (32, 64, 128):
            q, k, v = _qkv(head_dim=head_dim)
            dispatcher(q, k, v)
            dispatcher(q, k, v, causal=True)
    assert len(caught) == 1
    assert len(recorder.configs) == 6


def test_lookups_are_cached_until_reload(dispatcher, store_path, h200, recorder):
    q, k, v = _qkv()
    first = dispatcher.config_for(q, k)
    Store(store_path).merge([entry(h200, EXACT, cfg(32, 32, 4, 1))])
    assert dispatcher.config_for(q, k) == first  # no re-read on the hot path
    dispatcher.reload()
    assert dispatcher.config_for(q, k) == cfg(32, 32, 4, 1)
    # Another length of the same bucket shares the entry.
    q2, k2, _ = _qkv(q_len=65, kv_len=128)
    assert dispatcher.config_for(q2, k2) == cfg(32, 32, 4, 1)


def test_cpu_without_a_spec_uses_the_safe_default(store_path, recorder):
    plain = Dispatcher(store_path)  # live hardware: a CPU tensor has no GPU spec
    q, k, v = _qkv()
    plain(q, k, v)
    assert recorder.configs == [SAFE_DEFAULT]
    assert plain.explain(q, k).origin == "default"


def test_a_corrupt_store_warns_on_a_cpu_too(store_path, recorder):
    """A broken file is reported where it is first used, not only once a GPU reads it."""
    store_path.write_bytes(b'{"format": "flashtune.configs", "version": 1, "entries": [')
    plain = Dispatcher(store_path)  # a CPU tensor has no GPU spec
    with store_warnings() as caught:
        for causal in (False, True):
            plain(*_qkv(), causal=causal)
    assert len(caught) == 1 and "not valid JSON" in str(caught[0].message)
    assert recorder.configs == [SAFE_DEFAULT, SAFE_DEFAULT]


def test_store_location_env_and_set_store(monkeypatch, tmp_path):
    monkeypatch.setenv("FLASHTUNE_STORE", str(tmp_path / "env.json"))
    assert default_store_path() == tmp_path / "env.json"
    assert Dispatcher().store.path == tmp_path / "env.json"
    monkeypatch.delenv("FLASHTUNE_STORE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert default_store_path() == tmp_path / "cache" / "flashtune" / "configs.json"
    d = Dispatcher()
    d.set_store(tmp_path / "explicit.json")
    assert d.store.path == tmp_path / "explicit.json"
    with pytest.raises(TypeError, match="store"):
        d.set_store(3)  # type: ignore[arg-type]


def test_module_level_api(monkeypatch, tmp_path, h200, recorder):
    import flashtune.runtime.dispatching.dispatch as dispatch

    monkeypatch.setattr(dispatch, "_DEFAULT", None)
    runtime.set_store(tmp_path / "configs.json")
    runtime.set_hardware(h200)
    q, k, v = _qkv()
    runtime.flash_attention(q, k, v, causal=True)
    assert runtime.explain(q, k, causal=True).origin == "baseline"
    runtime.set_hardware(None)
    runtime.reload_store()
    assert runtime.explain(q, k, causal=True).origin == "default"


def test_a_failing_spec_reader_warns_and_uses_the_safe_default(store_path, recorder):
    def broken(device):
        raise RuntimeError("no driver")

    d = Dispatcher(store_path, hardware=broken)
    q, k, v = _qkv()
    with pytest.warns(RuntimeWarning, match="no driver"):
        d(q, k, v)
    assert recorder.configs == [SAFE_DEFAULT]


BAD_INPUTS = [
    (lambda q, k, v: ([1.0], k, v, {}), TypeError, "q must be a torch.Tensor"),
    (lambda q, k, v: (q[0], k, v, {}), ValueError, "q must have rank 4"),
    (lambda q, k, v: (q.to(torch.int32), k, v, {}), TypeError, "q.dtype"),
    (lambda q, k, v: (q, k.float(), v, {}), TypeError, "share one dtype"),
    (lambda q, k, v: (q, k[:, :, :50], v, {}), ValueError, "k and v"),
    (lambda q, k, v: (q[:, :1].expand(1, 3, 100, 64).contiguous(), k.expand(1, 2, 100, 64), v.expand(1, 2, 100, 64), {}), ValueError, "multiple of k/v heads"),
    (lambda q, k, v: (q[..., :48].contiguous(), k[..., :48].contiguous(), v[..., :48].contiguous(), {}), ValueError, "head_dim"),
    (lambda q, k, v: (q, k, v, {"causal": 1}), TypeError, "causal"),
    (lambda q, k, v: (q, k, v, {"scale": -1.0}), ValueError, "scale"),
    (lambda q, k, v: (q, k, v, {"scale": float("nan")}), ValueError, "scale"),
    (lambda q, k, v: (q, None, v, {}), TypeError, "k must be a torch.Tensor"),
]


@pytest.mark.parametrize("make, error, message", BAD_INPUTS, ids=[m for _, _, m in BAD_INPUTS])
def test_bad_inputs_raise_naming_the_argument(dispatcher, make, error, message):
    q, k, v, kwargs = make(*_qkv())
    with pytest.raises(error, match=message):
        dispatcher(q, k, v, **kwargs)


@pytest.mark.parametrize(
    "shape, causal, dtype",
    [
        ((1, 2, 1, 33, 47, 32), True, torch.float16),  # GQA, q_len != kv_len, ragged tiles
        ((2, 2, 2, 16, 16, 64), False, torch.float32),
    ],
)
def test_real_kernel_through_dispatch_matches_the_reference(store_path, h200, shape, causal, dtype):
    # A simulated H200 picks a non-default config; the interpreter runs it on the CPU.
    d = Dispatcher(store_path, hardware=lambda device: h200)
    batch, heads, kv_heads, q_len, kv_len, head_dim = shape
    q, k, v = _qkv(batch, heads, kv_heads, q_len, kv_len, head_dim, dtype)
    out = d(q, k, v, causal=causal, scale=0.3)
    assert d.explain(q, k, causal=causal).config != SAFE_DEFAULT
    assert out.shape == q.shape and out.dtype == dtype
    ref = reference_attention(q, k, v, causal=causal, scale=0.3)
    assert relative_error(out, ref) < 5e-3


class _Failing:
    """A launcher that rejects some configs (a wrong store entry) or every call (bad inputs)."""

    def __init__(self, bad=None, always: bool = False) -> None:
        self.bad, self.always, self.configs = bad, always, []

    def __call__(self, q, k, v, *, causal=False, scale=None, config=None):
        self.configs.append(config)
        if self.always:
            raise ValueError("q must be something else")
        if config == self.bad:
            raise RuntimeError("OutOfResources: shared memory")
        return torch.empty_like(q)


def test_a_config_that_fails_to_launch_is_replaced_by_the_safe_default(monkeypatch, dispatcher, store_path, h200):
    import flashtune.runtime.dispatching.dispatch as dispatch

    Store(store_path).merge([entry(h200, EXACT, cfg(128, 64, 4, 2))])
    launcher = _Failing(bad=cfg(128, 64, 4, 2))
    monkeypatch.setattr(dispatch, "_launcher", launcher)
    q, k, v = _qkv()
    with pytest.warns(RuntimeWarning, match="failed for float16_full_d64"):
        out = dispatcher(q, k, v)
    assert out.shape == q.shape
    dispatcher(q, k, v)  # no second failure: the bucket now serves the safe default
    assert launcher.configs == [cfg(128, 64, 4, 2), None, SAFE_DEFAULT]


def test_input_errors_still_propagate_through_the_recovery(monkeypatch, dispatcher):
    import flashtune.runtime.dispatching.dispatch as dispatch

    monkeypatch.setattr(dispatch, "_launcher", _Failing(always=True))
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="q must be something else"):
        dispatcher(q, k, v)


needs_fp8_knob = pytest.mark.skipif("use_fp8" not in __import__("flashtune.kernels.space", fromlist=["TUNABLES"]).TUNABLES,
                                    reason="the kernel declares no use_fp8 tunable")


@needs_fp8_knob
def test_fp8_entries_are_served_only_when_allowed(store_path, h200, recorder):
    fp8 = cfg(128, 64, 4, 2).replace(use_fp8=True)
    Store(store_path).merge([entry(h200, EXACT, fp8)])
    q, k, v = _qkv()
    strict = Dispatcher(store_path, hardware=lambda device: h200)
    assert strict.explain(q, k).origin == "baseline" and "fp8" in strict.explain(q, k).detail
    allowed = Dispatcher(store_path, hardware=lambda device: h200, allow_fp8=True)
    assert allowed.explain(q, k).config == fp8
    with pytest.raises(TypeError, match="allow_fp8"):
        Dispatcher(store_path, allow_fp8="yes")  # type: ignore[arg-type]


def test_key_ranges_for_a_bucket_whose_config_cannot_take_them_get_a_baseline_that_can(dispatcher, store_path, h200):
    # The store's config for this bucket is the lean kernel (no per-sequence ranges): a call
    # with ranges runs the architecture's first baseline that takes them, and matches the
    # reference over each sequence's keys (the interpreter, fp32).
    lean = validate_config(cfg(64, 64, 4, 2).replace(loads="lean"))
    bucket = Bucket("float32", True, 64, 2, 128, 128)
    Store(store_path).merge([entry(h200, bucket, lean)])
    q, k, v = _qkv(batch=2, q_len=100, kv_len=100, dtype=torch.float32)
    assert dispatcher.explain(q, k, causal=True).config == lean
    ends = torch.tensor([100, 60], dtype=torch.int32)
    starts = torch.tensor([0, 9], dtype=torch.int32)
    out = dispatcher(q, k, v, causal=True, cache_seqlens=ends, kv_start=starts)
    for b, (s, e) in enumerate(((0, 100), (9, 60))):
        ref = reference_attention(q[b:b + 1], k[b:b + 1, :, s:e], v[b:b + 1, :, s:e], causal=True)
        assert relative_error(out[b:b + 1], ref) < 1e-4
    served = next(state.ranged for state in dispatcher._keys.values() if state.ranged is not None)
    assert takes_key_ranges(served) and served == fallback_config(h200, bucket.representative(),
                                                                  accept=takes_key_ranges)
