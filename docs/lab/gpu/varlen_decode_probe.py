"""2026-12-07 lab probe: do a continuous batch's decode rows cost the varlen path its lead?

On the H200 (2026-12-07, third session) transformers' continuous batching ran at 2038 tokens/s
with the op's varlen path and 2300 with torch's ``varlen_attn`` on the same path, though our
varlen kernel's mixed-length prefill is 1.65x faster than torch's, and the block-table path
(which gives decode steps the decode kernel) ran at 3972. The guess: in a decode step (one query
a sequence) the varlen kernel's tile holds 1 useful row of BLOCK_M and each of a KV head's query
heads reads its keys again. This probe times one decode-shaped packed step (64 sequences, one
query each, cached lengths log-uniform 64..8192, bf16, 32/8 heads, D128) four ways:

- ``varlen``: ``flashtune.kernels.flash_attention_varlen`` as the op serves it (its default tile);
- ``decode_ranges``: the dense decode kernel on the same packed keys, each sequence's keys given as
  a key range of one shared buffer (K viewed as (batch, kv_heads, total_k, dim) with a batch stride
  of 0, ``kv_start = cu_seqlens_k[:-1]``, ``cache_seqlens = cu_seqlens_k[1:]``): what a varlen
  decode path could call without copying;
- ``torch_varlen``: torch's ``varlen_attn`` through the benchmark's peer wrapper;
- ``paged``: ``flash_attention_with_kvcache`` on the same keys in pages of 256, for scale.

    python docs/lab/gpu/varlen_decode_probe.py [--out varlen_decode.json]
    TRITON_INTERPRET=1 python docs/lab/gpu/varlen_decode_probe.py --check   (CPU: the mapping's numerics)

Prints each way's median ms and its largest difference to ``varlen``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys

import torch

Q_HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128


def packed_step(lengths: list[int], device: str, dtype: torch.dtype, heads=(Q_HEADS, KV_HEADS), head_dim=HEAD_DIM):
    """One decode step: a query a sequence, each sequence's cached keys packed end to end."""
    q_heads, kv_heads = heads
    total = sum(lengths)
    q = torch.randn(len(lengths), q_heads, head_dim, device=device, dtype=dtype)
    k, v = (torch.randn(total, kv_heads, head_dim, device=device, dtype=dtype) for _ in "kv")
    cu_k = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=device)
    cu_q = torch.arange(len(lengths) + 1, dtype=torch.int32, device=device)
    return q, k, v, cu_q, cu_k


def varlen(q, k, v, cu_q, cu_k, max_k):
    from flashtune.kernels import flash_attention_varlen

    return flash_attention_varlen(q, k, v, cu_q, cu_k, 1, max_k, causal=True)


def decode_ranges(q, k, v, cu_q, cu_k, max_k):
    """The decode kernel over key ranges of the packed buffer (no copy): (batch, q_heads, head_dim)."""
    from flashtune.kernels import flash_attention

    batch = q.shape[0]
    shared = [t.permute(1, 0, 2).unsqueeze(0).expand(batch, -1, -1, -1) for t in (k, v)]  # stride 0 on batch
    out = flash_attention(q.unsqueeze(2), *shared, causal=True, cache_seqlens=cu_k[1:].contiguous(),
                          kv_start=cu_k[:-1].contiguous())
    return out.squeeze(2)


def torch_varlen(q, k, v, cu_q, cu_k, max_k):
    """torch's varlen attention as the benchmark's peer calls it (GQA and causal by this torch's signature)."""
    from flashtune.experiments.benchmarks.torch_varlen import torch_varlen_attention

    return torch_varlen_attention(q, k, v, cu_q, cu_k, 1, max_k, causal=True)


def paged(q, k, v, cu_q, cu_k, max_k, page=256):
    from flashtune.kernels import flash_attention_with_kvcache

    lengths = (cu_k[1:] - cu_k[:-1]).tolist()
    pages = [-(-n // page) for n in lengths]
    table = torch.zeros(len(lengths), max(pages), dtype=torch.int32, device=q.device)
    pool_k = torch.zeros(sum(pages), page, k.shape[1], k.shape[2], device=q.device, dtype=q.dtype)
    pool_v = torch.zeros_like(pool_k)
    at = 0
    for b, (n, start) in enumerate(zip(lengths, cu_k[:-1].tolist())):
        for p in range(pages[b]):
            table[b, p] = at
            rows = slice(start + p * page, start + min(n, (p + 1) * page))
            pool_k[at, : rows.stop - rows.start] = k[rows]
            pool_v[at, : rows.stop - rows.start] = v[rows]
            at += 1
    seqlens = torch.tensor(lengths, dtype=torch.int32, device=q.device)
    return lambda: flash_attention_with_kvcache(q.unsqueeze(1), pool_k, pool_v, cache_seqlens=seqlens,
                                                block_table=table, causal=True).squeeze(1)


def check() -> int:
    """CPU, interpreter, float32: the key-range mapping gives the varlen kernel's answer."""
    torch.manual_seed(0)
    lengths = [1, 17, 40, 0, 64]
    q, k, v, cu_q, cu_k = packed_step(lengths, "cpu", torch.float32, heads=(4, 2), head_dim=32)
    want = varlen(q, k, v, cu_q, cu_k, max(lengths))
    got = decode_ranges(q, k, v, cu_q, cu_k, max(lengths))
    paged_out = paged(q, k, v, cu_q, cu_k, max(lengths), page=16)()
    diff = float((got - want).abs().max())
    print(f"decode over key ranges against varlen: max |diff| {diff:.2e}; paged {float((paged_out - want).abs().max()):.2e}")
    return 0 if diff < 1e-4 else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT", "/tmp"), "varlen_decode.json"))
    parser.add_argument("--sequences", type=int, default=64)
    parser.add_argument("--check", action="store_true", help="CPU: check the key-range mapping in the interpreter")
    args = parser.parse_args(argv)
    if args.check:
        return check()
    if not torch.cuda.is_available():
        print("varlen_decode_probe times GPU kernels: it needs a CUDA GPU (or --check)", file=sys.stderr)
        return 2
    from flashtune.objectives.bench import time_call

    rng = random.Random(0)
    lengths = [int(math.exp(rng.uniform(math.log(64), math.log(8192)))) for _ in range(args.sequences)]
    q, k, v, cu_q, cu_k = packed_step(lengths, "cuda", torch.bfloat16)
    inputs = (q, k, v, cu_q, cu_k, max(lengths))
    want = varlen(*inputs)
    ways = {"varlen": lambda: varlen(*inputs), "decode_ranges": lambda: decode_ranges(*inputs),
            "torch_varlen": lambda: torch_varlen(*inputs), "paged": paged(*inputs)}
    report = {"device": torch.cuda.get_device_name(), "lengths": lengths, "ways": {}}
    for name, fn in ways.items():
        try:
            diff = float((fn().float() - want.float()).abs().max())
            ms = round(time_call(fn, torch.device("cuda"), rep_ms=60)[0], 4)
            report["ways"][name] = {"ms": ms, "max_abs_diff_vs_varlen": diff}
        except Exception as exc:  # a peer this torch lacks: recorded, not fatal
            report["ways"][name] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"}
        print(name, report["ways"][name], flush=True)
    with open(args.out, "w") as sink:
        json.dump(report, sink, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
