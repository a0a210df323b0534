"""2026-12-07 lab probe: the varlen kernel with a K/V group's query heads packed into a tile's rows
(pack-GQA, ``launch_varlen(pack_gqa=True)``) against one query head a tile (``pack_gqa=False``, what
the op launches while ``kernels.varlen.PACK_GQA`` is off), on what a continuous batch hands it.

Why: a decode step gives each sequence one query, so a tile of one query head fills 1 of its
BLOCK_M rows and every query head reads its group's K/V again; packed, the group's 4 heads (32/8)
fill 4 rows and read K/V once. transformers' CUDA graphs pad ``max_length_q``, so a decode-only
route keyed on it never fires under graphs (lab log, third session): the gain has to come from the
kernel. Prefill should not care (a tile's rows are still BLOCK_M, its K/V reads per row the same).

Cells (bf16, 32/8 heads, D128, causal), each kernel through ``launch_varlen`` with the same tile:
- prefill: 8 tiles x 3 equal-length packs (16k tokens each, as cb_kernels.py);
- mixed lengths: 16 sequences, log-uniform 64..8192, 8 tiles;
- decode step: 64 sequences x 1 query against 2,048 cached keys each, the Hopper tile and the safe one;
- mixed step: 4 chunks of 512 queries (2,048 keys each) and 60 decode rows (2,048 keys), both tiles.
Three rounds, the order rotated, median; the packed output against the unpacked (max |diff|).

    python docs/lab/gpu/varlen_pack_probe.py [--out FILE] [--rounds 3]     (a CUDA GPU)
"""

import argparse
import json
import math
import os
import random

import torch
from varlen_regs_probe import EQUAL, HEAD_DIM, KV_HEADS, Q_HEADS, TILES, rounds, tile_config

from flashtune.kernels.varlen import launch_varlen

HOPPER, SAFE = (64, 64, 4, 3), (64, 32, 4, 2)


def packed_batch(q_lens, k_lens):
    q = torch.randn(sum(q_lens), Q_HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(sum(k_lens), KV_HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16) for _ in "kv")
    cu = [torch.tensor([0, *torch.tensor(n).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
          for n in (q_lens, k_lens)]
    return q, k, v, cu[0], cu[1], max(q_lens)


def cell(name, batch, tile, count):
    q, k, v, cu_q, cu_k, longest = batch
    out = {pack: torch.empty_like(q) for pack in (False, True)}

    def run(pack):
        return lambda: launch_varlen(q, k, v, out[pack], cu_q, cu_k, longest, causal=True, scale=HEAD_DIM ** -0.5,
                                     config=tile_config(tile), pack_gqa=pack)
    run(False)()
    run(True)()
    diff = float((out[True].float() - out[False].float()).abs().max())
    return {"cell": name, "tile": tile, "max_abs_diff": diff,
            **rounds({"one_head": run(False), "packed": run(True)}, count)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT", "/tmp"), "varlen_pack.jsonl"))
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    rng = random.Random(0)
    mixed = [int(math.exp(rng.uniform(math.log(64), math.log(8192)))) for _ in range(16)]
    plan = [("decode 64x1/2048", packed_batch([1] * 64, [2048] * 64), [HOPPER, SAFE]),
            ("step 4x512+60x1", packed_batch([512] * 4 + [1] * 60, [2048] * 64), [HOPPER, SAFE])]
    plan += [(f"prefill {n}x{length}", packed_batch([length] * n, [length] * n), TILES) for n, length in EQUAL]
    plan += [("mixed 16 (64..8192)", packed_batch(mixed, mixed), TILES)]
    rows = []
    with open(args.out, "a") as sink:
        sink.write(json.dumps({"device": torch.cuda.get_device_name()}) + "\n")
        for name, batch, tiles in plan:
            for tile in tiles:
                row = cell(name, batch, tile, args.rounds)
                print(json.dumps(row), flush=True)
                sink.write(json.dumps(row) + "\n")
                sink.flush()
                rows.append(row)
    print(f"\n{'cell':>22} {'tile':>16} {'one head ms':>12} {'packed ms':>10} {'packed speed':>13}")
    by_kind = {}
    for r in rows:
        if not all(isinstance(r[n], float) for n in ("one_head", "packed")):
            print(f"{r['cell']:>22} {str(tuple(r['tile'])):>16} {r['one_head']!s:>12} {r['packed']!s:>10}")
            continue
        speed = r["one_head"] / r["packed"]
        by_kind.setdefault(r["cell"].split()[0], []).append(speed)
        print(f"{r['cell']:>22} {str(tuple(r['tile'])):>16} {r['one_head']:>12.4f} {r['packed']:>10.4f} {speed:>13.3f}")
    for kind, speeds in by_kind.items():
        print(f"geomean packed/one head, {kind}: {math.exp(sum(map(math.log, speeds)) / len(speeds)):.3f} "
              f"over {len(speeds)} cells ({sum(s >= 1.0 for s in speeds)} at or above 1.0)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
