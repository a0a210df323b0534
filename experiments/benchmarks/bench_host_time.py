"""Host microseconds per decode call: the runtime op, its key-range and transformers paths, SDPA.

For decode shapes (batch, 32 query heads / 8 KV heads, 1 query, kv_len, head_dim 128,
bf16), per op: ``calls`` calls issued back to back with no synchronization, then one
(``host_us``: the loop's wall time before that sync, a call's host cost while the GPU keeps
up; ``wall_us``: the same loop to the end of the sync). The ops:

- ``op (bound launch)``: ``flashtune.runtime.flash_attention`` (a prepared call, the
  compiled kernels launched directly: ``kernels.decode.BoundDecode``);
- ``op + key ranges``: the same with ``cache_seqlens`` / ``kv_start`` tensors (a static
  cache, left padding);
- ``transformers eager``: ``runtime.integrations.hf_attention.attention_forward`` with
  :func:`~flashtune.runtime.integrations.hf_attention.key_range_mask`'s ranges, as a transformers layer
  calls it eagerly (output transposed to (batch, seq, heads, head_dim));
- ``transformers fn, no mask``: the same function with no mask, as an unpadded
  dynamic-cache decode step calls it (the mask builder answers None there);
- ``transformers sdpa fn, eager``: transformers' own ``sdpa_attention_forward`` with no
  mask and PyTorch's default backend choice: the peer of the two rows above, what a model
  with ``attn_implementation="sdpa"`` runs per layer;
- ``sdpa cudnn`` / ``sdpa flash``: PyTorch SDPA with the KV heads expanded (transformers'
  sdpa path), ``sdpa_kernel(backend)`` entered once outside the loop.

Each output is first checked against SDPA's math backend in float32 (bf16 tolerance), and
each of our ops for a host synchronization (none may wait for the GPU once warmed up).
Prints one line per op and a table last; ``--json`` writes the result. Usage::

    flashtune bench host-time --json host_time.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from flashtune.runtime.dispatching.dispatch import flash_attention, get_dispatcher
from flashtune.runtime.integrations.hf_attention import attention_forward

#: (batch, kv_len) of the decode shapes measured (32 query heads, 8 KV heads, head_dim 128):
#: one sequence; a batch in a long cache (its kernel outlasts the host work); a batch in a
#: short one (key ranges keep the fused combine there: kernels.decode.default_combine).
SHAPES = ((1, 4096), (8, 8192), (8, 2048))
Q_HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128
#: bf16 tolerance of an output against the float32 reference (max absolute difference).
TOLERANCE = 2e-2


class _CausalLayer(torch.nn.Module):
    """What transformers' attention functions read from their layer: ``is_causal`` and (sdpa's)
    ``num_key_value_groups``."""

    is_causal = True
    num_key_value_groups = Q_HEADS // KV_HEADS


def decode_inputs(batch: int, kv_len: int, device: str = "cuda", dtype: torch.dtype = torch.bfloat16,
                  seed: int = 0) -> dict[str, torch.Tensor]:
    """q, k, v of a decode step, every sequence using all ``kv_len`` keys, with the key-range
    tensors (``ends``, ``starts``) and transformers' (2, batch, 1, 1) ranges mask that say so."""
    g = torch.Generator(device=device).manual_seed(seed)
    q = torch.randn(batch, Q_HEADS, 1, HEAD_DIM, device=device, generator=g, dtype=dtype)
    k = torch.randn(batch, KV_HEADS, kv_len, HEAD_DIM, device=device, generator=g, dtype=dtype)
    v = torch.randn(batch, KV_HEADS, kv_len, HEAD_DIM, device=device, generator=g, dtype=dtype)
    ends = torch.full((batch,), kv_len, dtype=torch.int32, device=device)
    starts = torch.zeros(batch, dtype=torch.int32, device=device)
    ranges = torch.stack([starts, ends])[:, :, None, None]
    return {"q": q, "k": k, "v": v, "ends": ends, "starts": starts, "ranges": ranges}


def cases(t: dict[str, torch.Tensor]) -> dict[str, tuple[Callable[[], torch.Tensor], Any]]:
    """label -> (call returning (batch, heads, 1, head_dim), SDPA backend or None)."""
    from torch.nn.attention import SDPBackend

    q, k, v = t["q"], t["k"], t["v"]
    group = Q_HEADS // KV_HEADS
    k_x, v_x = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    layer = _CausalLayer()
    scaling = HEAD_DIM ** -0.5

    def hf() -> torch.Tensor:
        return attention_forward(layer, q, k, v, t["ranges"], scaling=scaling)[0]

    def hf_no_mask() -> torch.Tensor:
        return attention_forward(layer, q, k, v, None, scaling=scaling)[0]

    def hf_sdpa() -> torch.Tensor:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(layer, q, k, v, None, scaling=scaling)[0]

    def sdpa() -> torch.Tensor:
        return torch.nn.functional.scaled_dot_product_attention(q, k_x, v_x)

    return {
        "op (bound launch)": (lambda: flash_attention(q, k, v, causal=True), None),
        "op + key ranges": (lambda: flash_attention(q, k, v, causal=True, cache_seqlens=t["ends"],
                                                    kv_start=t["starts"]), None),
        "transformers eager": (hf, None),
        "transformers fn, no mask": (hf_no_mask, None),
        "transformers sdpa fn, eager": (hf_sdpa, None),
        "sdpa cudnn": (sdpa, SDPBackend.CUDNN_ATTENTION),
        "sdpa flash": (sdpa, SDPBackend.FLASH_ATTENTION),
    }


def reference(t: dict[str, torch.Tensor]) -> torch.Tensor:
    """float32 SDPA (math backend) of the inputs: the correctness reference."""
    group = Q_HEADS // KV_HEADS
    q, k, v = (t[n].float() for n in ("q", "k", "v"))
    return torch.nn.functional.scaled_dot_product_attention(q, k.repeat_interleave(group, 1),
                                                            v.repeat_interleave(group, 1))


def time_calls(call: Callable[[], Any], calls: int, sync: Callable[[], None]) -> dict[str, float]:
    """Host and wall microseconds per call of ``calls`` asynchronous calls, then one sync;
    and ``idle_us``, the median host time of ``calls`` calls each issued to an idle GPU (a
    sync before each): a call's own host cost, whatever its kernel's length. Back to back,
    a call whose kernel outlasts its host work queues behind the GPU, and its host time can
    then include waits for the driver's queue (decode 8,32/8,8192: about 60 us of kernel)."""
    for _ in range(50):
        call()
    sync()
    began = time.perf_counter()
    for _ in range(calls):
        call()
    issued = time.perf_counter()
    sync()
    done = time.perf_counter()
    alone = []
    for _ in range(calls):
        sync()
        start = time.perf_counter()
        call()
        alone.append(time.perf_counter() - start)
    sync()
    return {"host_us": (issued - began) / calls * 1e6, "wall_us": (done - began) / calls * 1e6,
            "idle_us": statistics.median(alone) * 1e6}


def synchronizes(call: Callable[[], Any]) -> bool:
    """Whether a warmed-up call waits for the GPU (``torch.cuda.set_sync_debug_mode``): a
    prepared call must not, with or without key ranges (it would serialize a decode step)."""
    call()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        call()
    except RuntimeError as exc:
        return "synchroniz" in str(exc)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return False


def measure(batch: int, kv_len: int, calls: int) -> dict[str, dict[str, float]]:
    """Every case on one decode shape: its error against the reference, host and wall µs."""
    from torch.nn.attention import sdpa_kernel

    t = decode_inputs(batch, kv_len)
    ref = reference(t)
    result: dict[str, dict[str, float]] = {}
    for label, (call, backend) in cases(t).items():
        context = sdpa_kernel(backend) if backend is not None else contextlib.nullcontext()
        try:
            with context:  # entered once: its own host time stays outside the loop
                out = call()
                if out.shape != ref.shape:  # transformers' (batch, seq, heads, head_dim)
                    out = out.transpose(1, 2)
                error = (out.float() - ref).abs().max().item()
                synced = backend is None and synchronizes(call)
                timing = time_calls(call, calls, torch.cuda.synchronize)
        except RuntimeError as exc:  # a backend this GPU or build lacks: reported, not fatal
            result[label] = {"error": str(exc)[:200]}
            print(f"{batch},{Q_HEADS}/{KV_HEADS},1/{kv_len} {label}: {exc}", flush=True)
            continue
        result[label] = {"max_abs_error": error, "correct": error <= TOLERANCE and not synced,
                         "host_sync": synced, **timing}
        print(f"{batch},{Q_HEADS}/{KV_HEADS},1/{kv_len} {label}: host {timing['host_us']:.1f} us, "
              f"to an idle GPU {timing['idle_us']:.1f} us, wall {timing['wall_us']:.1f} us, "
              f"max |err| {error:.2e}{', SYNCS WITH THE GPU' if synced else ''}",
              flush=True)
    return result


def table(results: dict[str, dict[str, dict[str, float]]], measure: str = "host_us") -> str:
    """µs per call of ``measure`` (``host_us`` back to back, ``idle_us`` to an idle GPU), one
    row per op, one column per shape (ratios to sdpa cudnn after)."""
    shapes = list(results)
    labels = list(next(iter(results.values())))
    title = {"host_us": "host us / call, back to back", "idle_us": "host us / call, idle GPU"}[measure]
    lines = [f"{title:30s}" + "".join(f"{s:>26s}" for s in shapes)]
    for label in labels:
        row = f"{label:30s}"
        for s in shapes:
            r, peer = results[s][label], results[s].get("sdpa cudnn", {})
            if measure not in r:
                row += f"{'failed':>26s}"
                continue
            ratio = f" ({r[measure] / peer[measure]:.2f}x cudnn)" if measure in peer else ""
            row += f"{r[measure]:>8.1f}{ratio:>18s}" + ("" if r["correct"] else " WRONG")
        lines.append(row)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per timed loop (default 2000)")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    if args.calls < 1:
        parser.error(f"--calls must be positive, got {args.calls}")
    if not torch.cuda.is_available():
        print("bench_host_time needs a CUDA GPU", file=sys.stderr)
        return 2
    get_dispatcher()  # the store is read on the first call of each shape, outside the loops
    results = {f"{b},{Q_HEADS}/{KV_HEADS},1/{n}": measure(b, n, args.calls) for b, n in SHAPES}
    print(table(results))
    print(table(results, "idle_us"))
    if args.json:
        payload = {"date": time.strftime("%Y-%m-%d"), "gpu": torch.cuda.get_device_name(),
                   "torch": torch.__version__, "python": platform.python_version(), "calls": args.calls,
                   "results": results}
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    return 0 if all(r.get("correct", False) for shape in results.values() for r in shape.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
