"""End-to-end: forward time of a small, randomly initialised Llama-style model with the
tuned op against SDPA (needs a GPU and transformers).

The same weights and inputs run under ``attn_implementation="sdpa"`` and under the
flashtune attention function (:mod:`flashtune.runtime.integrations.hf_attention`); logits are
compared, then each is timed with ``triton.testing.do_bench`` (CUDA events, L2 flushed),
interleaved A B A B so drift hits both. Usage::

    python docs/lab/tools/bench_model.py --batch 4 --seq 4096 --json model.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any


def run(*, batch: int, seq: int, layers: int, hidden: int, heads: int, kv_heads: int, rounds: int) -> dict[str, Any]:
    """Build the model, check agreement, time both attention implementations."""
    import torch
    import transformers
    from triton.testing import do_bench

    # GPU-only script: transformers and the runtime op load when it runs, not on import.
    from flashtune.kernels.reference import relative_error
    from flashtune.runtime.dispatching.dispatch import explain
    from flashtune.runtime.integrations.hf_attention import register, set_attention

    name = register()
    config = transformers.LlamaConfig(
        vocab_size=32000, hidden_size=hidden, intermediate_size=hidden * 4, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=max(seq, 2048),
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).to("cuda", torch.bfloat16).eval()
    ids = torch.randint(0, config.vocab_size, (batch, seq), device="cuda")

    def forward() -> Any:
        with torch.no_grad():
            return model(ids, use_cache=False).logits

    set_attention(model, "sdpa")
    ref = forward().float()
    set_attention(model, name)
    out = forward().float()
    error = relative_error(out, ref)
    head_dim = hidden // heads
    q = torch.empty(batch, heads, seq, head_dim, device="cuda", dtype=torch.bfloat16)
    k = torch.empty(batch, kv_heads, seq, head_dim, device="cuda", dtype=torch.bfloat16)
    resolution = explain(q, k, causal=True)

    times: dict[str, list[float]] = {"sdpa": [], name: []}
    for _ in range(rounds):
        for impl in times:
            set_attention(model, impl)
            times[impl].append(float(do_bench(forward, warmup=5, rep=200)))
    medians = {impl: statistics.median(v) for impl, v in times.items()}
    return {
        "forward_ms": medians,
        "speedup_vs_sdpa": medians["sdpa"] / medians[name],
        "rounds_ms": times,
        "logits_rel_error_vs_sdpa": error,
        "attention_config": resolution.config.to_dict(),
        "config_origin": resolution.origin,
        "setup": {
            "batch": batch, "seq": seq, "layers": layers, "hidden": hidden, "heads": heads, "kv_heads": kv_heads,
            "dtype": "bfloat16", "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "transformers": transformers.__version__,
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    for name in ("batch", "seq", "layers", "hidden", "heads", "kv_heads", "rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    if args.hidden % args.heads or args.heads % args.kv_heads:
        parser.error("--hidden must be a multiple of --heads, and --heads of --kv-heads")
    result = run(batch=args.batch, seq=args.seq, layers=args.layers, hidden=args.hidden, heads=args.heads,
                 kv_heads=args.kv_heads, rounds=args.rounds)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
