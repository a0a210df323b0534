"""End to end: greedy generation of a random-init Llama (GQA) with the tuned op as its
attention against the same model on SDPA.

For each batch x prompt length of the grid, both implementations generate
``--new-tokens`` tokens greedily (``model.generate``, transformers' default dynamic KV
cache: the prompt runs the prefill kernel, every later token one decode call a layer),
interleaved A B A B so drift hits both; tokens/s = batch x new tokens / wall time of the
whole ``generate`` (prefill included; the prefill alone is timed too).

Agreement is checked teacher-forced: with random weights the top logits are near-ties, so
greedy tokens diverge even between two correct kernels. One token sequence (the prompt
and SDPA's generated tokens) is fed to both, the prompt at once and then one token a step
through the KV cache (the decode path), and the logits of every step are compared: max
absolute difference, and how often the argmax agrees. For prompts up to
``--eager-max-prompt`` transformers' eager attention is compared the same way, as the
scale of bf16 noise between two correct implementations.

Usage (an H200 runs the default grid in about two minutes)::

    flashtune bench generate --json generate.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from flashtune.runtime.dispatching.dispatch import explain, get_dispatcher
from flashtune.runtime.dispatching.prepared import PreparedDecode
from flashtune.runtime.integrations.hf_attention import FallbackLog, register, set_attention

SDPA = "sdpa"


def build_model(*, layers: int, hidden: int, heads: int, kv_heads: int, vocab: int, max_len: int,
                device: torch.device, dtype: torch.dtype) -> Any:
    """A randomly initialised LlamaForCausalLM (seed 0) in eval mode."""
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 4, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=max_len,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).to(device, dtype).eval()
    # Random weights emit any token, the end-of-sequence one included: never stop early.
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def generate(model: Any, ids: torch.Tensor, new_tokens: int) -> tuple[torch.Tensor, float]:
    """Greedy generation; returns (the new tokens, wall seconds)."""
    _sync(ids.device)
    began = time.perf_counter()
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                             min_new_tokens=new_tokens, do_sample=False, use_cache=True)
    _sync(ids.device)
    return out[:, ids.shape[1]:], time.perf_counter() - began


def prefill_seconds(model: Any, ids: torch.Tensor) -> float:
    """Wall time of one forward over the prompt with a cache (what generate's first step does)."""
    _sync(ids.device)
    began = time.perf_counter()
    with torch.no_grad():
        model(ids, use_cache=True, logits_to_keep=1)
    _sync(ids.device)
    return time.perf_counter() - began


def teacher_forced_logits(model: Any, ids: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Logits (batch, steps, vocab) of feeding ``ids`` then ``tokens`` one at a time through
    the KV cache: the prompt's last position, then one per fed token (all but the last)."""
    with torch.no_grad():
        out = model(ids, use_cache=True, logits_to_keep=1)
        logits, cache = [out.logits[:, -1].float()], out.past_key_values
        for step in range(tokens.shape[1] - 1):
            out = model(tokens[:, step:step + 1], past_key_values=cache, use_cache=True)
            logits.append(out.logits[:, -1].float())
            cache = out.past_key_values
    return torch.stack(logits, dim=1)


def _agreement(logits: torch.Tensor, ref: torch.Tensor) -> dict[str, float]:
    return {"max_abs": float((logits - ref).abs().max()),
            "argmax_agree": float((logits.argmax(-1) == ref.argmax(-1)).float().mean())}


def run_case(model: Any, name: str, *, batch: int, prompt: int, new_tokens: int, rounds: int, vocab: int,
             eager_max_prompt: int) -> dict[str, Any]:
    """One batch x prompt point: timings of both implementations and the logits agreement."""

    device = next(model.parameters()).device
    gen = torch.Generator(device="cpu").manual_seed(batch * 100_003 + prompt)
    ids = torch.randint(1, vocab, (batch, prompt), generator=gen).to(device)
    impls = (SDPA, name)
    times: dict[str, list[float]] = {impl: [] for impl in impls}
    prefill: dict[str, list[float]] = {impl: [] for impl in impls}
    tokens: dict[str, torch.Tensor] = {}
    with FallbackLog() as caught:
        for impl in impls:
            # Warm-up over every step's shape: Triton compiles per specialization and cuDNN
            # builds a plan per KV length, once a process; a shorter warm-up left SDPA's first
            # timed round ten times slower (5.8 s against 0.49 s, H200, 2026-12-01).
            set_attention(model, impl)
            generate(model, ids, new_tokens)
        for _ in range(rounds):
            for impl in impls:
                set_attention(model, impl)
                prefill[impl].append(prefill_seconds(model, ids))
                tokens[impl], seconds = generate(model, ids, new_tokens)
                times[impl].append(seconds)
        logits = {}
        for impl in impls + (("eager",) if prompt <= eager_max_prompt else ()):
            set_attention(model, impl)
            logits[impl] = teacher_forced_logits(model, ids, tokens[SDPA])
    fallbacks = sorted(set(caught.lines))
    decode_calls = sum(isinstance(p, PreparedDecode) for p in get_dispatcher()._calls.values())
    tps = {impl: batch * new_tokens / statistics.median(t) for impl, t in times.items()}
    result: dict[str, Any] = {
        "batch": batch, "prompt": prompt, "new_tokens": new_tokens,
        "tokens_per_s": tps, "speedup_vs_sdpa": tps[name] / tps[SDPA],
        "generate_s": times, "prefill_ms": {impl: 1e3 * statistics.median(t) for impl, t in prefill.items()},
        "teacher_forced": {impl: _agreement(logits[impl], logits[SDPA]) for impl in logits if impl != SDPA},
        "greedy_tokens_agree": float((tokens[name] == tokens[SDPA]).float().mean()),
        "fallback_warnings": fallbacks, "prepared_decode_keys": decode_calls,
    }
    return result


def run(*, batches: list[int], prompts: list[int], new_tokens: int, layers: int, hidden: int, heads: int,
        kv_heads: int, vocab: int, rounds: int, device: str, dtype: str, eager_max_prompt: int) -> dict[str, Any]:
    """The whole grid on one model."""
    import transformers


    name = register()
    dev = torch.device(device)
    torch_dtype = getattr(torch, dtype)
    model = build_model(layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, vocab=vocab,
                        max_len=max(prompts) + new_tokens, device=dev, dtype=torch_dtype)
    cases = [run_case(model, name, batch=b, prompt=p, new_tokens=new_tokens, rounds=rounds, vocab=vocab,
                      eager_max_prompt=eager_max_prompt) for b in batches for p in prompts]
    head_dim = hidden // heads
    configs = {}
    for b in batches:
        for p in prompts:
            q = torch.empty(b, heads, 1, head_dim, device=dev, dtype=torch_dtype)
            k = torch.empty(b, kv_heads, p + new_tokens, head_dim, device=dev, dtype=torch_dtype)
            res = explain(q, k, causal=True)
            configs[f"b{b}_decode_at_{p + new_tokens}"] = {"config": res.config.to_dict(), "why": res.detail}
    return {
        "cases": cases, "decode_configs": configs,
        "setup": {"layers": layers, "hidden": hidden, "heads": heads, "kv_heads": kv_heads, "vocab": vocab,
                  "rounds": rounds, "dtype": dtype, "attention": name,
                  "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
                  "torch": torch.__version__, "transformers": transformers.__version__},
    }


def table(result: dict[str, Any]) -> str:
    """The summary: one row per batch x prompt."""
    name = result["setup"]["attention"]
    lines = [f"{'batch':>5} {'prompt':>6} {'SDPA tok/s':>11} {'op tok/s':>10} {'op/SDPA':>8} "
             f"{'prefill ms SDPA/op':>19} {'TF max|dlogit|':>15} {'TF argmax':>10} {'eager max|d|':>13}"]
    for c in result["cases"]:
        tf = c["teacher_forced"][name]
        eager = c["teacher_forced"].get("eager", {}).get("max_abs")
        lines.append(
            f"{c['batch']:>5} {c['prompt']:>6} {c['tokens_per_s'][SDPA]:>11.1f} {c['tokens_per_s'][name]:>10.1f} "
            f"{c['speedup_vs_sdpa']:>8.3f} {c['prefill_ms'][SDPA]:>9.2f}/{c['prefill_ms'][name]:<9.2f} "
            f"{tf['max_abs']:>15.4f} {tf['argmax_agree']:>10.3f} {'-' if eager is None else f'{eager:.4f}':>13}")
    return "\n".join(lines)


def positive_ints(text: str) -> list[int]:
    """An argparse type: positive integers separated by commas (batches, prompt lengths)."""
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers separated by commas, got {text!r}")
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=positive_ints, default=[1, 8])
    parser.add_argument("--prompts", type=positive_ints, default=[512, 2048, 8192])
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--kv-heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--rounds", type=int, default=3, help="timed generate calls per implementation")
    parser.add_argument("--eager-max-prompt", type=int, default=2048, help="compare eager attention up to this prompt")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args(argv)
    for flag in ("new_tokens", "layers", "hidden", "heads", "kv_heads", "vocab", "rounds"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be positive")
    if args.hidden % args.heads or args.heads % args.kv_heads:
        parser.error("--hidden must be a multiple of --heads, and --heads of --kv-heads")
    result = run(batches=args.batches, prompts=args.prompts, new_tokens=args.new_tokens, layers=args.layers,
                 hidden=args.hidden, heads=args.heads, kv_heads=args.kv_heads, vocab=args.vocab, rounds=args.rounds,
                 device=args.device, dtype=args.dtype, eager_max_prompt=args.eager_max_prompt)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "cases"}, indent=2))
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
