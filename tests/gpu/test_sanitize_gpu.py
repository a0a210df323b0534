"""compute-sanitizer on the GPU (issue 44): the runtime's Hopper defaults (the packed ops'
too) are clean under all four tools, and a deliberately out-of-bounds Triton kernel is found by memcheck (the check
can fail). Needs a CUDA GPU and compute-sanitizer (on PATH or in /usr/local/cuda/bin).

    python -m pytest -m gpu tests/gpu/test_sanitize_gpu.py -q
"""

from __future__ import annotations

import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from flashtune.objectives import sanitize as sz
from flashtune.objectives.types import Workload
from flashtune.runtime.dispatching.baselines import decode_default, fallback_config
from flashtune.runtime.storage.sanitized import SanitizedCache, checked, checked_many

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(sz.find_sanitizer() is None, reason="needs compute-sanitizer"),
]

HEAD_DIMS = (64, 128, 256)


def hopper_defaults(hardware) -> list[tuple[dict, int]]:
    """The configs the runtime serves without a store on this GPU: (config, head_dim), unique."""
    seen, out = set(), []
    for head_dim in HEAD_DIMS:
        for causal in (False, True):
            workload = Workload(4, 32, 8, 4096, 4096, head_dim, "bfloat16", causal)
            prefill = fallback_config(hardware, workload)
            ranged = fallback_config(hardware, workload, accept=sz.takes_key_ranges)  # calls with key ranges
            decode = decode_default(hardware, Workload(4, 32, 8, 1, 8192, head_dim, "bfloat16", causal))[0]
            for config in (prefill, ranged, decode):
                key = (config, head_dim)
                if key not in seen:
                    seen.add(key)
                    out.append((config.to_dict(), head_dim))
    return out


@pytest.fixture(scope="module")
def hardware():
    from flashtune.objectives.hardware import HardwareSpec

    spec = HardwareSpec.from_device()
    if spec.compute_capability[0] != 9:
        pytest.skip(f"the Hopper defaults: this is {spec.name} ({spec.arch})")
    return spec


def test_the_hopper_defaults_are_clean_under_every_tool(hardware, tmp_path) -> None:
    cache = SanitizedCache(tmp_path / "sanitized.json")
    found = []
    items = hopper_defaults(hardware)
    with ThreadPoolExecutor(5) as pool:  # child processes: the GPU runs several at a time
        verdicts = list(pool.map(lambda item: checked(item[0], head_dim=item[1], gpu=hardware.fingerprint,
                                                      cache=cache), items))
    for (config, head_dim), verdict in zip(items, verdicts):
        print(f"{'safe' if verdict.safe else 'UNSAFE'} {verdict.seconds:5.1f} s d{head_dim} {config} {verdict.reason or verdict.waived}")
        if not verdict.safe:
            found.append(f"d{head_dim} {config}: {verdict.reason}")
    assert not found, "\n".join(found)


def test_the_hopper_defaults_are_clean_in_batches(hardware) -> None:
    """The batch path on the same configs: every tool once a batch, its seconds a config printed
    (docs/sanitizer.md's figure, for the defaults alone)."""
    items = hopper_defaults(hardware)
    start = time.monotonic()
    verdicts = sz.sanitize_many([sz.Check(config, head_dim) for config, head_dim in items], gpu=hardware.fingerprint)
    elapsed = time.monotonic() - start
    print(f"batched: {len(items)} configs in {elapsed:.1f} s, {elapsed / len(items):.1f} s a config")
    found = [f"d{head_dim} {config}: {v.reason}" for (config, head_dim), v in zip(items, verdicts) if not v.safe]
    assert not found, "\n".join(found)


def test_a_verdict_is_cached_per_config_kernel_and_gpu(hardware, tmp_path) -> None:
    cache = SanitizedCache(tmp_path / "sanitized.json")
    config, head_dim = hopper_defaults(hardware)[0]
    first = checked(config, head_dim=head_dim, gpu=hardware.fingerprint, cache=cache, tools=("memcheck",))
    again = checked(config, head_dim=head_dim, gpu=hardware.fingerprint, cache=cache, tools=("memcheck",))
    assert not first.cached and again.cached and again.to_dict() == first.to_dict()


OUT_OF_BOUNDS = textwrap.dedent("""
    import torch, triton, triton.language as tl

    @triton.jit
    def read_past_the_end(x_ptr, y_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs))  # no mask: x holds fewer than BLOCK

    x = torch.randn(1000, device="cuda")
    y = torch.empty(1024, device="cuda")
    read_past_the_end[(1,)](x, y, BLOCK=1024)
    torch.cuda.synchronize()
""")


def test_an_out_of_bounds_kernel_is_found_by_memcheck(tmp_path) -> None:
    script = tmp_path / "oob.py"
    script.write_text(OUT_OF_BOUNDS)
    result = sz.run_tool("memcheck", None, sanitizer=sz.find_sanitizer(), target=[sys.executable, str(script)],
                         timeout_s=300)
    print(result)
    assert result.outcome == "finding" and result.errors >= 1
    assert "Invalid __global__ read" in result.finding and "read_past_the_end" in result.finding


def test_a_clean_kernel_is_clean_under_memcheck(tmp_path) -> None:
    script = tmp_path / "ok.py"
    script.write_text(OUT_OF_BOUNDS.replace("torch.randn(1000,", "torch.randn(1024,"))
    result = sz.run_tool("memcheck", None, sanitizer=sz.find_sanitizer(), target=[sys.executable, str(script)],
                         timeout_s=300)
    assert result.clean, result


def test_the_packed_defaults_are_clean_under_every_tool(hardware, tmp_path) -> None:
    """What the runtime serves under continuous batching without a store: the varlen tile and
    the paged defaults (one split and several, pages of 16 and 256), as sanitize.sh plans them,
    on the packed kernels' own cases (packed sequences with empty and one-row ones, padded rows;
    block tables with -1 entries, lengths mid-page)."""
    import sanitize_tables  # docs/gpu/: the plan of bash docs/gpu/sanitize.sh

    items = [i for i in sanitize_tables.default_items(hardware) if i["config"].get("kernel") in ("varlen", "paged")]
    assert {i["config"]["kernel"] for i in items} == {"varlen", "paged"}
    cache = SanitizedCache(tmp_path / "sanitized.json")
    verdicts = checked_many([sz.Check(i["config"], i["head_dim"]) for i in items], gpu=hardware.fingerprint,
                            cache=cache)
    found = []
    for item, verdict in zip(items, verdicts):
        print(f"{'safe' if verdict.safe else 'UNSAFE'} {verdict.seconds:5.1f} s d{item['head_dim']} {item['why']} "
              f"{item['config']} {verdict.reason or verdict.waived}")
        if not verdict.safe:
            found.append(f"d{item['head_dim']} {item['why']}: {verdict.reason}")
    assert not found, "\n".join(found)
