"""2026-12-07 (sixth session) lab probe: the varlen kernel's grid sized by the packed rows
(``launch_varlen(grid_by="tokens")``: total_q // tile + batch slots, each tile finding its sequence in
the cumulative lengths) against the grid sized by the longest sequence (``"longest"``: cdiv(max_seqlen_q,
tile) tiles for every sequence, what the op launches while ``kernels.varlen.GRID_BY`` is "longest").

Why: a continuous batch's step that prefills a chunk beside decoding sequences launches, by the
longest, a chunk's worth of tiles for every decoding sequence, nearly all of which exit at once; with
CUDA graphs transformers pads ``max_length_q`` to the step's rows, so every step pays it. 64 sequences,
one chunk of 2,048 queries, the Hopper tile: 2,048 programs a head by the longest, 96 by the rows. Each
program that exits still holds its shared memory (114,688 B at the Hopper tile: two an SM) while it
reads its lengths. The rows cost one more read in every tile's prologue (a coalesced read of up to
128 sequences' lengths and a sum), so the cells where "auto" keeps the longest (equal lengths, a
decode step) are timed with both too, to price it.

Cells (bf16, 32/8 heads, D128, causal), each through ``launch_varlen`` with the same tile, the Hopper
tile and the safe one; with pack-GQA too on the steps:
- steps: 4 chunks of 512 among 60 decoding sequences; 1 chunk of 2,048 among 63; the first padded
  as a CUDA-graph step (``max_seqlen_q`` = its rows);
- a decode step (64 x 1 query, 2,048 cached keys), prefill 64 x 256 and 16 x 1,024, mixed lengths.
Three rounds, the order rotated, median; outputs against the longest's (max |diff|, 0 expected).

    python docs/lab/gpu/varlen_grid_probe.py [--out FILE] [--rounds 3]     (a CUDA GPU)
"""

import argparse
import json
import math
import os
import random

import torch
from varlen_pack_probe import HOPPER, SAFE, packed_batch
from varlen_regs_probe import HEAD_DIM, rounds, tile_config

from flashtune.kernels.varlen import launch_varlen, packed_group, tiles_by


def cell(name, batch, tile, count, pack, max_q=None):
    q, k, v, cu_q, cu_k, longest = batch
    max_q = max_q or longest
    out = {grid: torch.empty_like(q) for grid in ("longest", "tokens")}

    def run(grid):
        return lambda: launch_varlen(q, k, v, out[grid], cu_q, cu_k, max_q, causal=True, scale=HEAD_DIM ** -0.5,
                                     config=tile_config(tile), pack_gqa=pack, grid_by=grid)
    for grid in out:
        run(grid)()
    rows = int(cu_q[-1])
    diff = float((out["tokens"][:rows].float() - out["longest"][:rows].float()).abs().max())
    queries = tile[0] // (packed_group(4, tile[0]) if pack else 1)
    programs = {grid: tiles_by(grid, max_q, q.shape[0], cu_q.numel() - 1, queries)[0] for grid in out}
    return {"cell": name, "tile": tile, "pack_gqa": pack, "tiles_a_head": programs, "max_abs_diff": diff,
            "auto": "tokens" if tiles_by("auto", max_q, q.shape[0], cu_q.numel() - 1, queries)[1] else "longest",
            **rounds({grid: run(grid) for grid in out}, count)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT", "/tmp"), "varlen_grid.jsonl"))
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    rng = random.Random(0)
    mixed = [int(math.exp(rng.uniform(math.log(64), math.log(8192)))) for _ in range(16)]
    step4 = packed_batch([512] * 4 + [1] * 60, [2048] * 64)
    plan = [("step 4x512+60x1", step4, None, (False, True)),
            ("step 4x512+60x1 padded", step4, 4 * 512 + 60, (False, True)),
            ("step 1x2048+63x1", packed_batch([2048] + [1] * 63, [4096] * 64), None, (False, True)),
            ("decode 64x1/2048", packed_batch([1] * 64, [2048] * 64), None, (False,)),
            ("prefill 64x256", packed_batch([256] * 64, [256] * 64), None, (False,)),
            ("prefill 16x1024", packed_batch([1024] * 16, [1024] * 16), None, (False,)),
            ("mixed 16 (64..8192)", packed_batch(mixed, mixed), None, (False,))]
    rows = []
    with open(args.out, "a") as sink:
        sink.write(json.dumps({"device": torch.cuda.get_device_name()}) + "\n")
        for name, batch, max_q, packs in plan:
            for tile in (HOPPER, SAFE):
                for pack in packs:
                    row = cell(name, batch, tile, args.rounds, pack, max_q)
                    print(json.dumps(row), flush=True)
                    sink.write(json.dumps(row) + "\n")
                    sink.flush()
                    rows.append(row)
    print(f"\n{'cell':>24} {'tile':>14} {'pack':>5} {'auto':>8} {'longest ms':>11} {'tokens ms':>10} {'tokens speed':>13}")
    for r in rows:
        if not all(isinstance(r[n], float) for n in ("longest", "tokens")):
            print(f"{r['cell']:>24} {str(tuple(r['tile'])):>14} {r['longest']!s:>11} {r['tokens']!s:>10}")
            continue
        print(f"{r['cell']:>24} {str(tuple(r['tile'])):>14} {r['pack_gqa']!s:>5} {r['auto']:>8} {r['longest']:>11.4f} "
              f"{r['tokens']:>10.4f} {r['longest'] / r['tokens']:>13.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
