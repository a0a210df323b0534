"""The knee: the tuned kernel over batch size x sequence length at head_dim 128, against
SDPA cuDNN, so the plot shows where it turns from launch- or occupancy-bound (too few
programs for 132 SMs) to compute-bound.

Why one config: the knee is a property of the kernel at its tuned config (the best D128
non-causal row of the recorded tables), not of re-tuning per point. Each point times ours
and cuDNN interleaved. ``plot`` needs only the JSON, so the PNG is drawn on any machine::

    python docs/lab/tools/bench_knee.py run --json knee.json          # GPU
    python docs/lab/tools/bench_knee.py plot knee.json --png knee.png  # anywhere
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

from best_configs import best_configs

from flashtune.kernels.attention import launch

BATCHES = (1, 2, 4, 8, 16)
SEQS = (256, 512, 1024, 2048, 4096, 8192, 16384)
HEADS, HEAD_DIM = 32, 128
CONFIG_TABLE = "b4_h32_n4096_d128_full_bfloat16"


def grid(batches=BATCHES, seqs=SEQS, max_tokens: int = 32768) -> list[tuple[int, int]]:
    """(batch, seq) points with batch*seq <= max_tokens: the large corner adds time, not shape."""
    return [(b, n) for b in batches for n in seqs if b * n <= max_tokens]


def flops(batch: int, seq: int, heads: int = HEADS, head_dim: int = HEAD_DIM) -> float:
    return 4.0 * batch * heads * seq * seq * head_dim


def run(points: list[tuple[int, int]], *, rounds: int, json_path: Path | None = None) -> dict:
    """Time every point; with ``json_path``, rewrite the JSON after each point (a killed call keeps them)."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from triton.testing import do_bench


    (config, _), = best_configs(CONFIG_TABLE, top=1)
    rows: list[dict] = []
    data = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "heads": HEADS, "head_dim": HEAD_DIM,
            "causal": False, "dtype": "bfloat16", "config": config.to_dict(), "config_table": CONFIG_TABLE, "rows": rows}
    for batch, seq in points:
        shape = (batch, HEADS, seq, HEAD_DIM)
        q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        out = torch.empty_like(q)
        scale = 1.0 / math.sqrt(HEAD_DIM)

        def cudnn():
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                F.scaled_dot_product_attention(q, k, v)

        fns = {"flashtune": lambda: launch(q, k, v, out, causal=False, scale=scale, config=config), "sdpa_cudnn": cudnn}
        ms: dict[str, list[float]] = {n: [] for n in fns}
        for _ in range(rounds):
            for name, fn in fns.items():
                ms[name].append(float(do_bench(fn, warmup=5, rep=25, return_mode="median")))
        row = {"batch": batch, "seq": seq, "programs": batch * HEADS * math.ceil(seq / int(config["BLOCK_M"]))}
        for name, values in ms.items():
            med = statistics.median(values)
            row[f"{name}_ms"] = med
            row[f"{name}_tflops"] = flops(batch, seq) / (med * 1e-3) / 1e12
        rows.append(row)
        print(f"B={batch:2d} N={seq:5d}: flashtune {row['flashtune_tflops']:6.1f}  cuDNN {row['sdpa_cudnn_tflops']:6.1f} TFLOP/s")
        if json_path:
            json_path.write_text(json.dumps(data, indent=2) + "\n")
    return data


def plot(data: dict, png: Path) -> None:
    """TFLOP/s against sequence length, one colour per batch; ours solid, cuDNN dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    batches = sorted({r["batch"] for r in data["rows"]})
    for i, b in enumerate(batches):
        rows = sorted((r for r in data["rows"] if r["batch"] == b), key=lambda r: r["seq"])
        x = [r["seq"] for r in rows]
        ax.plot(x, [r["flashtune_tflops"] for r in rows], "-o", color=f"C{i}", label=f"flashtune B={b}")
        ax.plot(x, [r["sdpa_cudnn_tflops"] for r in rows], "--", color=f"C{i}", alpha=0.6, label=f"cuDNN B={b}")
        ax2.plot([r["programs"] for r in rows], [r["flashtune_tflops"] / r["sdpa_cudnn_tflops"] for r in rows],
                 "o", color=f"C{i}", label=f"B={b}")
    ax.set(xscale="log", xlabel="sequence length (q = kv)", ylabel="TFLOP/s",
           title=f"{data['gpu']}: H={data['heads']}, D={data['head_dim']}, bf16, non-causal")
    ax.set_xscale("log", base=2)
    ax.legend(fontsize=7, ncol=2)
    ax2.axhline(1.0, color="grey", lw=0.8)
    ax2.axvline(132, color="grey", lw=0.8, ls=":")
    ax2.set(xscale="log", xlabel="programs (B*H*ceil(N/BLOCK_M)); dotted: 132 SMs", ylabel="flashtune / cuDNN",
            title=f"ratio; config {data['config']['BLOCK_M']}x{data['config']['BLOCK_N']}, {data['config']['loads']}")
    ax2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="time the grid on the GPU")
    r.add_argument("--rounds", type=int, default=2)
    r.add_argument("--max-tokens", type=int, default=32768)
    r.add_argument("--json", type=Path, required=True)
    p = sub.add_parser("plot", help="draw the PNG from a run's JSON")
    p.add_argument("json", type=Path)
    p.add_argument("--png", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.cmd == "run":
        run(grid(max_tokens=args.max_tokens), rounds=args.rounds, json_path=args.json)
    else:
        plot(json.loads(args.json.read_text()), args.png)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
