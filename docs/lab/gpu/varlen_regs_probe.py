"""2026-12-07 lab probe: the packed prefill kernel with its output rows re-read after the key loops
("product", kernels/_flash_fwd_varlen.py) against the kernel before ("held": the rows loaded once and
kept in registers through both loops, copied below as it was at 4764413), and the dense kernel with
the same tile on the same tokens.

Why: compiled for sm90 here, the held kernel takes 14-24 more registers than the dense one (144 against
126 at 64x32 w4 s2: 3 programs an SM where dense runs 4); the product takes 128 (4 programs), 168 at
64x64 w4 s3 (dense 176). Chosen from registers on the CPU, so judged here on every cell: the 24
equal-length cells (8 tiles x 3 shapes, 16k tokens each) and, held out, mixed lengths (16 sequences,
log-uniform 64..8192) with torch's varlen attention beside.

Both varlen kernels run through the same op (``flash_attention_varlen``; the held one swapped in), the
dense one through ``flash_attention``; three rounds, the order rotated each round, median of the rounds.

    python docs/lab/gpu/varlen_regs_probe.py [--out FILE] [--rounds 3]     (a CUDA GPU; bf16, 32/8 heads, D128)

Prints one line a cell and a table last; writes JSON lines to --out as it goes.
"""

import argparse
import contextlib
import json
import math
import os
import random
import statistics

import torch
import triton
import triton.language as tl

import flashtune.kernels.varlen as varlen_op
from flashtune.kernels import flash_attention, flash_attention_varlen
from flashtune.kernels._flash_fwd import _attend_tiles, key_ranges, normalize, tile_coords
from flashtune.kernels._flash_fwd_varlen import row_of_head, sequence_rows
from flashtune.kernels.space import SAFE_DEFAULT
from flashtune.objectives.bench import time_call

Q_HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128
TILES = [(64, 32, 4, 2), (64, 64, 4, 2), (64, 64, 4, 3), (128, 32, 4, 2), (128, 64, 4, 2), (128, 64, 8, 2),
         (128, 64, 8, 3), (128, 128, 8, 2)]
EQUAL = [(64, 256), (16, 1024), (4, 4096)]


@triton.jit(do_not_specialize=["batch", "total_q", "total_k", "max_seqlen_q"])
def held_rows_kernel(
    Q, K, V, Out, CuSeqlensQ, CuSeqlensK,
    stride_qm, stride_qh, stride_km, stride_kh, stride_vm, stride_vh, stride_om, stride_oh,
    batch, q_heads, kv_group, total_q, total_k, max_seqlen_q, qk_scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    WIDE_OFFSETS: tl.constexpr,
):
    num_m_blocks = tl.cdiv(max_seqlen_q, BLOCK_M)
    pid_m, pid_zh = tile_coords(tl.program_id(0), num_m_blocks, batch * q_heads, IS_CAUSAL, False)
    off_z = pid_zh // q_heads
    off_h = pid_zh % q_heads
    off_kv_h = off_h // kv_group  # grouped-query: kv_group query heads share one K/V head

    # Both sequences' rows at once, before the early exit: one round trip to memory, not two.
    q_start, q_len = sequence_rows(CuSeqlensQ, off_z, total_q)
    k_start, kv_len = sequence_rows(CuSeqlensK, off_z, total_k)
    start_m = pid_m * BLOCK_M
    if start_m >= q_len:
        # A block past this sequence's queries (the grid is sized for the longest one), or
        # an empty sequence: nothing to write.
        return

    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    if WIDE_OFFSETS:
        # A buffer of 2**31 elements or more: one sequence's keys x the packed row stride
        # (kv_heads x head_dim) pass it at about 2M keys of 8 x 128 (transformers' CUDA-graph
        # warm-up hands one sequence the whole paged cache), where int32 would wrap.
        stride_qm, stride_km = stride_qm.to(tl.int64), stride_km.to(tl.int64)
        stride_vm, stride_om = stride_vm.to(tl.int64), stride_om.to(tl.int64)
        q_base = row_of_head(Q, q_start, stride_qm, off_h, stride_qh)
        k_base = row_of_head(K, k_start, stride_km, off_kv_h, stride_kh)
        v_base = row_of_head(V, k_start, stride_vm, off_kv_h, stride_vh)
        o_base = row_of_head(Out, q_start, stride_om, off_h, stride_oh)
    else:
        q_base = Q + q_start * stride_qm + off_h * stride_qh
        k_base = K + k_start * stride_km + off_kv_h * stride_kh
        v_base = V + k_start * stride_vm + off_kv_h * stride_vh
        o_base = Out + q_start * stride_om + off_h * stride_oh

    row_ok = offs_m[:, None] < q_len
    q = tl.load(q_base + offs_m[:, None] * stride_qm + offs_d[None, :], mask=row_ok, other=0.0)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    causal_offset, unmasked_end, masked_end = key_ranges(start_m, q_len, kv_len, BLOCK_M, BLOCK_N, IS_CAUSAL)

    # The key loops take V's column stride 1 (the launcher checks head_dim is contiguous)
    # and the bases as descriptors, which pointer loads (USE_TMA off) never read.
    acc, l_i, m_i = _attend_tiles(
        acc, l_i, m_i, q, k_base, v_base, stride_km, stride_vm, 1, k_base, v_base,
        offs_m, offs_d, 0, unmasked_end, kv_len, causal_offset, qk_scale,
        BLOCK_N, False, IS_CAUSAL, False, False, False,
    )
    acc, l_i, m_i = _attend_tiles(
        acc, l_i, m_i, q, k_base, v_base, stride_km, stride_vm, 1, k_base, v_base,
        offs_m, offs_d, unmasked_end, masked_end, kv_len, causal_offset, qk_scale,
        BLOCK_N, True, IS_CAUSAL, False, False, False,
    )

    # A sequence with no keys (or rows before its first visible key) kept l = 0: zeros.
    out = normalize(acc, l_i, Out, False)
    tl.store(o_base + offs_m[:, None] * stride_om + offs_d[None, :], out.to(Out.dtype.element_ty), mask=row_ok)


def tile_config(tile) -> dict:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) as a config of pointer loads."""
    return {**SAFE_DEFAULT, "BLOCK_M": tile[0], "BLOCK_N": tile[1], "num_warps": tile[2], "num_stages": tile[3]}


@contextlib.contextmanager
def held_kernel():
    """The op with the held kernel launched in place of the product one."""
    product = varlen_op.varlen_forward_kernel
    varlen_op.varlen_forward_kernel = held_rows_kernel
    try:
        yield
    finally:
        varlen_op.varlen_forward_kernel = product


def ms(fn) -> float | str:
    try:
        fn()
        torch.cuda.synchronize()
        return round(time_call(fn, torch.device("cuda"), rep_ms=60)[0], 4)
    except Exception as exc:  # a tile out of resources: recorded
        torch.cuda.synchronize()
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:100]}"


def held(fn):
    def run():
        with held_kernel():
            return fn()
    return run


def rounds(calls: dict, count: int) -> dict:
    """Median ms of each call over ``count`` rounds, the order rotated each round."""
    names, samples = list(calls), {name: [] for name in calls}
    for r in range(count):
        for name in names[r % len(names):] + names[:r % len(names)]:
            samples[name].append(ms(calls[name]))
    return {name: (statistics.median(s) if all(isinstance(x, float) for x in s) else s[0])
            for name, s in samples.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT", "/tmp"), "varlen_regs.jsonl"))
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    rows = []
    with open(args.out, "a") as sink:
        def record(row):
            print(json.dumps(row), flush=True)
            sink.write(json.dumps(row) + "\n")
            sink.flush()
            rows.append(row)

        sink.write(json.dumps({"device": torch.cuda.get_device_name()}) + "\n")
        for sequences, length in EQUAL:
            q = torch.randn(sequences, Q_HEADS, length, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
            k, v = (torch.randn(sequences, KV_HEADS, length, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
                    for _ in "kv")
            pq, pk, pv = (x.transpose(1, 2).reshape(-1, x.shape[1], HEAD_DIM).contiguous() for x in (q, k, v))
            cu = torch.arange(0, sequences + 1, dtype=torch.int32, device="cuda") * length
            for tile in TILES:
                config = tile_config(tile)

                def packed():
                    return flash_attention_varlen(pq, pk, pv, cu, cu, length, length, causal=True, config=config,
                                                  check_lengths=False)
                try:
                    diff = float((packed() - held(packed)()).abs().max())
                except Exception as exc:
                    diff = f"{type(exc).__name__}"
                times = rounds({"dense": lambda: flash_attention(q, k, v, causal=True, config=config),
                                "held": held(packed), "product": packed}, args.rounds)
                record({"sequences": sequences, "length": length, "tile": tile, "max_abs_diff": diff, **times})
        rng = random.Random(0)
        lengths = [int(math.exp(rng.uniform(math.log(64), math.log(8192)))) for _ in range(16)]
        total, longest = sum(lengths), max(lengths)
        q = torch.randn(total, Q_HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(total, KV_HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16) for _ in "kv")
        cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
        from flashtune.experiments.benchmarks.torch_varlen import available, torch_varlen_attention
        for tile in TILES:
            config = tile_config(tile)

            def mixed():
                return flash_attention_varlen(q, k, v, cu, cu, longest, longest, causal=True, config=config,
                                              check_lengths=False)
            calls = {"held": held(mixed), "product": mixed}
            if available() is None:
                calls["torch_varlen_attn"] = lambda: torch_varlen_attention(q, k, v, cu, cu, longest, longest,
                                                                            causal=True)
            record({"sequences": 16, "length": "mixed 64..8192", "tokens": total, "tile": tile,
                    **rounds(calls, args.rounds)})

    print(f"\n{'cell':>16} {'tile':>16} {'held/dense':>11} {'product/dense':>14} {'product/held':>13}")
    speeds = {"held/dense": [], "product/dense": [], "product/held": []}
    for r in rows:
        if not all(isinstance(r.get(n), float) for n in ("held", "product")):
            continue
        ph = r["held"] / r["product"]
        if isinstance(r.get("dense"), float):
            hd, pd = r["dense"] / r["held"], r["dense"] / r["product"]
            speeds["held/dense"].append(hd)
            speeds["product/dense"].append(pd)
        else:
            hd = pd = float("nan")
        speeds["product/held"].append(ph)
        print(f"{r['sequences']}x{str(r['length'])[:10]:<12} {str(tuple(r['tile'])):>16} {hd:>11.3f} {pd:>14.3f} {ph:>13.3f}")
    for name, values in speeds.items():
        if values:
            print(f"geomean {name}: {math.exp(sum(map(math.log, values)) / len(values)):.3f} over {len(values)} cells, "
                  f"{sum(v >= 1.0 for v in values)} at or above 1.0")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
