"""Kernel-level timing of the continuous-batching kernels on a GPU, one run, peers beside them.

1. Packed prefill: the varlen kernel on equal-length sequences against the dense prefill kernel
   on the same tokens with the same tile (pointer loads, both), for a handful of tiles (does the
   packed kernel's best tile differ from the dense one's?), beside the dense op's own default.
   The dense kernel runs twice: on contiguous (batch, heads, length, dim) tensors, and on the
   packed buffers viewed as (batch, length, heads, dim), the layout a model's projections hand
   it and the packed kernel reads, so the layout's cost and the packing's cost are told apart.
2. Mixed lengths (log-uniform 64..8192): the varlen kernel's tiles against torch's varlen
   attention (``torch.nn.attention.varlen``, where the installed torch has it) on the same
   packed batch.
3. Paged decode: ``flash_attention_with_kvcache`` through shuffled block tables (page sizes 16,
   64, 256) against the contiguous decode kernel (``flash_attention`` with ``cache_seqlens``)
   at the same lengths, each with its default config.

    python docs/lab/tools/cb_kernels.py --out cb_kernels.json      (bf16, GQA 32/8, head dim 128)

Times: median milliseconds (CUDA events, L2 flushed: ``objectives.bench.time_call``).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from pathlib import Path
from typing import Any

import torch

Q_HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128
#: (BLOCK_M, BLOCK_N, num_warps, num_stages): the safe default first, then tiles a Hopper
#: pointer-load kernel is usually best at.
TILES = [(64, 32, 4, 2), (64, 64, 4, 2), (64, 64, 4, 3), (128, 32, 4, 2), (128, 64, 4, 2), (128, 64, 8, 2),
         (128, 64, 8, 3), (128, 128, 8, 2)]
EQUAL = [(64, 256), (16, 1024), (4, 4096)]  # (sequences, length): 16k tokens each
PAGES = [16, 64, 256]


def tile_config(tile: tuple[int, int, int, int]) -> dict[str, Any]:
    from flashtune.kernels.space import SAFE_DEFAULT

    block_m, block_n, warps, stages = tile
    return {**SAFE_DEFAULT, "BLOCK_M": block_m, "BLOCK_N": block_n, "num_warps": warps, "num_stages": stages}


def timed(fn) -> float | str:
    """Median ms of ``fn``, or the first line of its error (a tile that does not fit)."""
    from flashtune.objectives.bench import time_call

    try:
        fn()
        torch.cuda.synchronize()
        return round(time_call(fn, torch.device("cuda"), rep_ms=60)[0], 4)
    except Exception as exc:  # a tile out of shared memory or registers: recorded, not fatal
        torch.cuda.synchronize()
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"


def cumulative(lengths: list[int]) -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device="cuda")


def packed_vs_dense(report: dict[str, Any]) -> None:
    from flashtune.kernels import flash_attention, flash_attention_varlen

    for sequences, length in EQUAL:
        q = torch.randn(sequences, Q_HEADS, length, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(sequences, KV_HEADS, length, HEAD_DIM, device="cuda", dtype=torch.bfloat16) for _ in "kv")
        pq, pk, pv = (x.transpose(1, 2).reshape(-1, x.shape[1], HEAD_DIM).contiguous() for x in (q, k, v))
        cu = cumulative([length] * sequences)
        vq, vk, vv = (x.view(sequences, length, x.shape[1], HEAD_DIM).transpose(1, 2) for x in (pq, pk, pv))
        row = {"sequences": sequences, "length": length, "dense_default_ms": timed(
            lambda: flash_attention(q, k, v, causal=True)), "tiles": {}}
        for tile in TILES:
            config = tile_config(tile)
            row["tiles"][str(tile)] = {
                "varlen_ms": timed(lambda: flash_attention_varlen(pq, pk, pv, cu, cu, length, length, causal=True,
                                                                  config=config, check_lengths=False)),
                "dense_ms": timed(lambda: flash_attention(q, k, v, causal=True, config=config)),
                "dense_packed_layout_ms": timed(lambda: flash_attention(vq, vk, vv, causal=True, config=config))}
            print(f"  packed {sequences}x{length} {tile}: {row['tiles'][str(tile)]}", flush=True)
        report["packed_vs_dense"].append(row)


def mixed_lengths(report: dict[str, Any], sequences: int = 16) -> None:
    from flashtune.kernels import flash_attention_varlen

    rng = random.Random(0)
    lengths = [int(math.exp(rng.uniform(math.log(64), math.log(8192)))) for _ in range(sequences)]
    total, longest = sum(lengths), max(lengths)
    q = torch.randn(total, Q_HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(total, KV_HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16) for _ in "kv")
    cu = cumulative(lengths)
    row: dict[str, Any] = {"lengths": lengths, "tiles": {}}
    for tile in TILES:
        config = tile_config(tile)
        row["tiles"][str(tile)] = timed(lambda: flash_attention_varlen(
            q, k, v, cu, cu, longest, longest, causal=True, config=config, check_lengths=False))
    from flashtune.experiments.benchmarks.torch_varlen import available, torch_varlen_attention

    row["torch_varlen_attn_ms"] = available() or timed(
        lambda: torch_varlen_attention(q, k, v, cu, cu, longest, longest, causal=True))
    print(f"  mixed {sequences} sequences, {total} tokens: {row}", flush=True)
    report["mixed_lengths"] = row


def paged_vs_contiguous(report: dict[str, Any], batch: int = 64) -> None:
    from flashtune.kernels import flash_attention
    from flashtune.kernels.paged import flash_attention_with_kvcache

    rng = random.Random(1)
    for label, lengths in (("uniform 4096", [4096] * batch),
                           ("log-uniform 512..8192", [int(math.exp(rng.uniform(math.log(512), math.log(8192))))
                                                      for _ in range(batch)])):
        capacity = max(lengths)
        seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
        k, v = (torch.randn(batch, KV_HEADS, capacity, HEAD_DIM, device="cuda", dtype=torch.bfloat16) for _ in "kv")
        q = torch.randn(batch, Q_HEADS, 1, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
        row: dict[str, Any] = {"lengths": label, "contiguous_ms": timed(
            lambda: flash_attention(q, k, v, causal=True, cache_seqlens=seqlens)), "paged_ms": {}}
        for page in PAGES:
            need = [-(-n // page) for n in lengths]
            order = torch.randperm(sum(need), generator=torch.Generator().manual_seed(page)).int()
            table = torch.full((batch, max(need)), -1, dtype=torch.int32)
            pool_k = torch.empty(sum(need), page, KV_HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
            pool_v = torch.empty_like(pool_k)
            taken = 0
            for b, n in enumerate(need):
                pages = order[taken:taken + n]
                table[b, :n] = pages
                for source, pool in ((k, pool_k), (v, pool_v)):
                    keys = source[b, :, :n * page].transpose(0, 1)  # (n*page, kv_heads, dim); past length: unread
                    padded = torch.zeros(n * page, KV_HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
                    padded[:keys.shape[0]] = keys
                    pool[pages.long().cuda()] = padded.view(n, page, KV_HEADS, HEAD_DIM)
                taken += n
            table = table.cuda()
            pq = q.transpose(1, 2).contiguous()
            out = flash_attention_with_kvcache(pq, pool_k, pool_v, cache_seqlens=seqlens, block_table=table)
            same = (out.transpose(1, 2) - flash_attention(q, k, v, causal=True, cache_seqlens=seqlens)).abs().max()
            row["paged_ms"][page] = timed(lambda: flash_attention_with_kvcache(
                pq, pool_k, pool_v, cache_seqlens=seqlens, block_table=table, check_values=False))
            row.setdefault("max_abs_diff_vs_contiguous", {})[page] = float(same)
        print(f"  paged {label}: {row}", flush=True)
        report["paged_vs_contiguous"].append(row)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the report here as JSON (after each part)")
    parser.add_argument("--parts", default="packed,mixed,paged")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("cb_kernels times GPU kernels: it needs a CUDA GPU", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    report: dict[str, Any] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                              "packed_vs_dense": [], "paged_vs_contiguous": []}
    parts = {"packed": packed_vs_dense, "mixed": mixed_lengths, "paged": paged_vs_contiguous}
    for name in args.parts.split(","):
        parts[name](report)
        if args.out:
            args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
