"""transformers' continuous batching on the op against transformers' ``sdpa``, as a server runs it.

A random Llama-shaped model (bf16, grouped-query heads) serves N requests with mixed prompt
lengths (log-uniform between --min-prompt and --max-prompt) and mixed output lengths, through
transformers' ``ContinuousBatchingManager``: all arriving at once, and arriving in a stream
(exponential gaps at --rate requests a second). Per implementation and arrival mode: generated
tokens a second (wall, first request added to last finished), time to first token (median,
p90: the request's first token's timestamp minus its creation), and whether the greedy tokens
equal sdpa's, request by request. The implementations take turns, --rounds times, in one
process; a warm-up round first.

    flashtune bench continuous-batching --requests 64 --out cb.json

Needs transformers (``.[hf]``) and, for meaningful times, a GPU; on the CPU (``--tiny``) it runs
a small model in Triton's interpreter as a smoke test.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from flashtune.experiments.benchmarks import torch_varlen
from flashtune.runtime.integrations.hf_continuous_batching import register

#: Model shapes: Llama-3-8B's attention (32 query heads, 8 KV heads, head dim 128) with
#: fewer layers, so a 64-request run fits a few minutes; and a tiny one for the CPU.
SHAPES = {
    "llama8b-4layers": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=4, num_attention_heads=32,
                            num_key_value_heads=8, vocab_size=32000),
    "tiny": dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=256),
}


#: The attention implementations the benchmark can set, each made when asked for (the paged
#: one and torch's varlen attention need CUDA): transformers' own sdpa, the op on packed varlen
#: steps, the op reading the paged cache through its block table, torch's varlen attention on
#: the packed steps through the op's path (the peer, experiments/benchmarks/torch_varlen.py).
IMPLEMENTATIONS = {"sdpa": lambda: "sdpa", "op": register, "op-paged": lambda: register(paged=True),
                   "torch-varlen": lambda: register(torch_varlen.NAME, varlen=torch_varlen.torch_varlen_attention)}


def workload(requests: int, *, min_prompt: int, max_prompt: int, min_new: int, max_new: int, vocab: int,
             seed: int) -> list[tuple[list[int], int]]:
    """(prompt, max_new_tokens) per request: log-uniform prompt lengths, uniform output lengths."""
    rng = random.Random(seed)
    out = []
    for _ in range(requests):
        length = int(math.exp(rng.uniform(math.log(min_prompt), math.log(max_prompt))))
        out.append(([rng.randrange(1, vocab) for _ in range(length)], rng.randint(min_new, max_new)))
    return out


def serve(model: Any, requests: list[tuple[list[int], int]], *, rate: float | None, seed: int) -> dict[str, Any]:
    """Serve ``requests`` through one manager; ``rate`` None: all at once, else a Poisson stream."""
    from transformers import GenerationConfig

    config = GenerationConfig(do_sample=False, eos_token_id=-1, pad_token_id=0, max_new_tokens=max(
        n for _, n in requests))
    manager = model.init_continuous_batching(generation_config=config)
    manager.start()
    rng = random.Random(seed)
    ids = []
    start = time.perf_counter()
    try:
        for number, (prompt, new_tokens) in enumerate(requests):
            ids.append(manager.add_request(prompt, request_id=f"r{number}", max_new_tokens=new_tokens,
                                           record_timestamps=True))
            if rate:
                time.sleep(rng.expovariate(rate))
        results = {}
        while len(results) < len(ids):
            result = manager.get_result(timeout=600)
            if result is None:
                raise RuntimeError(f"no result in 600 s ({len(results)} of {len(ids)} done)")
            if result.is_finished():
                results[result.request_id] = result
        wall = time.perf_counter() - start
    finally:
        manager.stop(block=True)
    tokens = sum(len(r.generated_tokens) for r in results.values())
    ttft = sorted(r.timestamps[0] - r.created_time for r in results.values() if r.timestamps)
    return {"tokens": tokens, "wall_s": wall, "tokens_per_s": tokens / wall,
            "ttft_median_s": statistics.median(ttft) if ttft else None,
            "ttft_p90_s": ttft[int(0.9 * (len(ttft) - 1))] if ttft else None,
            "generated": {rid: r.generated_tokens for rid, r in results.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="llama8b-4layers")
    parser.add_argument("--min-prompt", type=int, default=64)
    parser.add_argument("--max-prompt", type=int, default=8192)
    parser.add_argument("--min-new", type=int, default=16)
    parser.add_argument("--max-new", type=int, default=256)
    parser.add_argument("--rate", type=float, default=8.0, help="stream arrivals a second")
    parser.add_argument("--modes", default="at-once,stream")
    parser.add_argument("--implementations", default="sdpa,op",
                        help=f"comma-separated, sdpa first (of: {', '.join(IMPLEMENTATIONS)})")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    try:
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError:
        print("bench_continuous_batching needs transformers: pip install -e '.[hf]'", file=sys.stderr)
        return 2
    cuda = torch.cuda.is_available()
    torch.manual_seed(args.seed)
    shape = SHAPES[args.shape]
    model = LlamaForCausalLM(LlamaConfig(**shape, max_position_embeddings=args.max_prompt + args.max_new + 8))
    model = model.to("cuda", torch.bfloat16).eval() if cuda else model.eval()
    requests = workload(args.requests, min_prompt=args.min_prompt, max_prompt=args.max_prompt, min_new=args.min_new,
                        max_new=args.max_new, vocab=shape["vocab_size"], seed=args.seed)
    names = args.implementations.split(",")
    if names[0] != "sdpa" or not set(names) <= set(IMPLEMENTATIONS):
        parser.error(f"--implementations must start with sdpa and name only {', '.join(IMPLEMENTATIONS)}")
    if "torch-varlen" in names and torch_varlen.available():
        print(f"torch-varlen left out: {torch_varlen.available()}", flush=True)
        names.remove("torch-varlen")
    implementations = {name: IMPLEMENTATIONS[name]() for name in names}
    report: dict[str, Any] = {"shape": args.shape, "requests": args.requests, "device": torch.cuda.get_device_name()
                              if cuda else "cpu", "prompt_tokens": sum(len(p) for p, _ in requests), "runs": []}
    print(f"{args.requests} requests, {report['prompt_tokens']} prompt tokens, {args.shape}, {report['device']}",
          flush=True)
    for mode in args.modes.split(","):
        rate = None if mode == "at-once" else args.rate
        for round_number in range(args.rounds + 1):  # round 0 warms up (compiles, caches)
            for name, implementation in implementations.items():
                model.set_attn_implementation(implementation)
                run = serve(model, requests, rate=rate, seed=args.seed + round_number)
                run.update(mode=mode, implementation=name, round=round_number)
                if round_number:
                    report["runs"].append(run)
                    if args.out:  # after every run: a call cut short keeps what it measured
                        args.out.write_text(json.dumps(report, indent=1) + "\n")
                print(f"  {mode:8} {name:8} round {round_number}: {run['tokens_per_s']:8.1f} tokens/s, TTFT median "
                      f"{run['ttft_median_s'] or float('nan'):.3f} s, p90 {run['ttft_p90_s'] or float('nan'):.3f} s",
                      flush=True)
    print(summary(report["runs"]))
    return 0


def agreement(expected: dict[str, list[int]], got: dict[str, list[int]]) -> tuple[int, float]:
    """(requests whose greedy tokens all equal, median index of the first token that differs)."""
    firsts = []
    for rid, tokens in expected.items():
        other = got.get(rid, [])
        firsts.append(next((i for i, (a, b) in enumerate(zip(tokens, other)) if a != b), min(len(tokens), len(other))))
    same = sum(tokens == got.get(rid) for rid, tokens in expected.items())
    return same, statistics.median(firsts) if firsts else float("nan")


def summary(runs: list[dict[str, Any]]) -> str:
    """Per mode: median tokens/s of each implementation and over sdpa's, TTFT, and how its greedy
    tokens compare with sdpa's in the same round (requests equal throughout; the median token
    where they first differ). Last, the control: sdpa against itself in the other mode (the same
    requests batched differently), since in bf16 a near-tie flips a token whatever computes it."""
    lines = ["mode      impl      tokens/s  vs sdpa  TTFT med  TTFT p90  equal requests, first difference (median)"]
    modes = list(dict.fromkeys(r["mode"] for r in runs))
    for mode in modes:
        by_impl = {name: [r for r in runs if r["mode"] == mode and r["implementation"] == name]
                   for name in dict.fromkeys(r["implementation"] for r in runs)}
        for name, mine in by_impl.items():
            if not mine:
                continue
            same = ""
            if name != "sdpa" and by_impl.get("sdpa"):
                pairs = [agreement(a["generated"], b["generated"]) for a, b in zip(by_impl["sdpa"], mine)]
                same = (f"{min(p[0] for p in pairs)}-{max(p[0] for p in pairs)} of {len(mine[0]['generated'])}, "
                        f"token {statistics.median(p[1] for p in pairs):g}")
            rate = statistics.median(r["tokens_per_s"] for r in mine)
            base = statistics.median(r["tokens_per_s"] for r in by_impl["sdpa"]) if by_impl.get("sdpa") else None
            lines.append(f"{mode:9} {name:8} {rate:9.1f}  {rate / base if base else float('nan'):7.2f}x  "
                         f"{statistics.median(r['ttft_median_s'] or 0 for r in mine):8.3f}  "
                         f"{statistics.median(r['ttft_p90_s'] or 0 for r in mine):8.3f}  {same}")
    sdpa = {mode: next((r for r in runs if r["mode"] == mode and r["implementation"] == "sdpa"), None) for mode in modes}
    if len(modes) > 1 and all(sdpa.values()):
        same, first = agreement(sdpa[modes[0]]["generated"], sdpa[modes[1]]["generated"])
        lines.append(f"control: sdpa {modes[0]} against sdpa {modes[1]}: {same} of {len(sdpa[modes[0]]['generated'])} "
                     f"requests equal, first difference at token {first:g} (median)")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
