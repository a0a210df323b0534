"""2026-12-07 lab probe: where the packed prefill kernel's 4 % against dense prefill goes.

On the H100 (2026-12-07, cb_kernels) the varlen kernel ran at 0.958x the dense kernel with the
same tile on the same tokens, and the dense kernel on the packed layout at 0.963x... of which the
layout costs nothing. SASS (``docs/lab/tools/varlen_sass.py``) put the difference in the per-tile
prologue and the masked band, not the key loop. The prologue waits on two dependent global
loads before Q's: the query lengths (then the early exit), then the key lengths. Variants here,
each a copy of ``kernels/_flash_fwd_varlen.py``'s kernel with one change, timed beside the
product kernel and the dense kernel with the same tile, equal lengths (16k tokens a cell):

- ``product``: kernels/_flash_fwd_varlen.py as shipped;
- ``eager_k``: the key lengths loaded with the query lengths, before the early exit (one round
  trip of latency less per tile);
- ``eager_k_i32``: as eager_k, with 32-bit row offsets (the 64-bit fix's cost, for scale).

    python docs/lab/gpu/varlen_prologue_probe.py [--out FILE]     (a CUDA GPU; bf16, 32/8 heads, D128)

Prints one line a cell and a table last; writes JSON lines to --out as it goes.
"""

import argparse
import json
import os

import torch
import triton
import triton.language as tl

from flashtune.kernels import flash_attention, flash_attention_varlen
from flashtune.kernels._flash_fwd import _attend_tiles, key_ranges, normalize, tile_coords
from flashtune.kernels._flash_fwd_varlen import row_of_head, sequence_rows
from flashtune.kernels.launch_support import LOG2_E
from flashtune.kernels.space import SAFE_DEFAULT
from flashtune.objectives.bench import time_call

Q_HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128
TILES = [(64, 64, 4, 3), (64, 32, 4, 2), (128, 64, 8, 2)]
EQUAL = [(64, 256), (16, 1024), (4, 4096)]


@triton.jit(do_not_specialize=["batch", "total_q", "total_k", "max_seqlen_q"])
def eager_k_kernel(
    Q, K, V, Out, CuSeqlensQ, CuSeqlensK,
    stride_qm, stride_qh, stride_km, stride_kh, stride_vm, stride_vh, stride_om, stride_oh,
    batch, q_heads, kv_group, total_q, total_k, max_seqlen_q, qk_scale,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, IS_CAUSAL: tl.constexpr,
    WIDE: tl.constexpr,
):
    num_m_blocks = tl.cdiv(max_seqlen_q, BLOCK_M)
    pid_m, pid_zh = tile_coords(tl.program_id(0), num_m_blocks, batch * q_heads, IS_CAUSAL, False)
    off_z = pid_zh // q_heads
    off_h = pid_zh % q_heads
    off_kv_h = off_h // kv_group
    # The change: both sequences' rows in one round trip, before the early exit.
    q_start, q_len = sequence_rows(CuSeqlensQ, off_z, total_q)
    k_start, kv_len = sequence_rows(CuSeqlensK, off_z, total_k)
    start_m = pid_m * BLOCK_M
    if start_m >= q_len:
        return
    if WIDE:
        stride_qm, stride_km = stride_qm.to(tl.int64), stride_km.to(tl.int64)
        stride_vm, stride_om = stride_vm.to(tl.int64), stride_om.to(tl.int64)
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    if WIDE:
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
    out = normalize(acc, l_i, Out, False)
    tl.store(o_base + offs_m[:, None] * stride_om + offs_d[None, :], out.to(Out.dtype.element_ty), mask=row_ok)


def launch_variant(q, k, v, cu, max_len, tile, wide):
    block_m, block_n, warps, stages = tile
    out = torch.empty_like(q)
    batch = cu.numel() - 1
    grid = (triton.cdiv(max_len, block_m) * batch * Q_HEADS,)
    eager_k_kernel[grid](
        q, k, v, out, cu, cu,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), out.stride(0), out.stride(1),
        batch, Q_HEADS, Q_HEADS // KV_HEADS, q.shape[0], k.shape[0], max_len, HEAD_DIM ** -0.5 * LOG2_E,
        HEAD_DIM=HEAD_DIM, BLOCK_M=block_m, BLOCK_N=block_n, IS_CAUSAL=True, WIDE=wide,
        num_warps=warps, num_stages=stages)
    return out


def ms(fn):
    fn()
    torch.cuda.synchronize()
    return round(time_call(fn, torch.device("cuda"), rep_ms=80)[0], 4)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT", "/tmp"), "varlen_prologue.jsonl"))
    args = parser.parse_args(argv)
    rows = []
    with open(args.out, "a") as sink:
        for sequences, length in EQUAL:
            q = torch.randn(sequences, Q_HEADS, length, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
            k, v = (torch.randn(sequences, KV_HEADS, length, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
                    for _ in "kv")
            pq, pk, pv = (x.transpose(1, 2).reshape(-1, x.shape[1], HEAD_DIM).contiguous() for x in (q, k, v))
            cu = torch.arange(0, sequences + 1, dtype=torch.int32, device="cuda") * length
            for tile in TILES:
                config = {**SAFE_DEFAULT, "BLOCK_M": tile[0], "BLOCK_N": tile[1], "num_warps": tile[2],
                          "num_stages": tile[3]}
                want = flash_attention_varlen(pq, pk, pv, cu, cu, length, length, causal=True, config=config)
                errors = {wide: float((launch_variant(pq, pk, pv, cu, length, tile, wide) - want).abs().max())
                          for wide in (True, False)}
                row = {"sequences": sequences, "length": length, "tile": tile, "max_abs_diff": errors,
                       "dense_ms": ms(lambda: flash_attention(q, k, v, causal=True, config=config)),
                       "product_ms": ms(lambda: flash_attention_varlen(pq, pk, pv, cu, cu, length, length, causal=True,
                                                                        config=config, check_lengths=False)),
                       "eager_k_ms": ms(lambda: launch_variant(pq, pk, pv, cu, length, tile, True)),
                       "eager_k_i32_ms": ms(lambda: launch_variant(pq, pk, pv, cu, length, tile, False))}
                print(json.dumps(row), flush=True)
                sink.write(json.dumps(row) + "\n")
                sink.flush()
                rows.append(row)
    print(f"\n{'cell':>10} {'tile':>16} {'product/dense':>14} {'eager_k/dense':>14} {'eager_k_i32/dense':>18}")
    for r in rows:
        d = r["dense_ms"]
        print(f"{r['sequences']}x{r['length']:<7} {str(tuple(r['tile'])):>16} {d / r['product_ms']:>14.3f} "
              f"{d / r['eager_k_ms']:>14.3f} {d / r['eager_k_i32_ms']:>18.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
