"""The serving table: a random-init Llama generating the ways models are served,
SDPA against the tuned op as its attention, in one run.

Modes:

* ``eager``: ``model.generate`` with transformers' default dynamic cache, no padding;
* ``padded``: the same with a left-padded batch (sequence b has ``b / (2 x batch)`` of the
  prompt as padding: the 2-D padding mask becomes per-sequence key ranges);
* ``static``: ``generate(cache_implementation="static")``, which transformers runs with
  its forward compiled (``torch.compile``, CUDA graphs) for the decode steps.

tokens/s = batch x new tokens / wall time of the whole ``generate`` (prefill included),
median of ``--rounds``, SDPA and the op interleaved (``paired``: the median of each round's
own ratio, what drifts between rounds left out). Agreement is teacher-forced: the
prompt and SDPA's greedy tokens are fed to both implementations (the prompt at once, then
one token a step through the cache of the mode: dynamic, or a static cache, with the
padding mask), and the logits of every step are compared (max absolute difference, argmax
agreement). ``fallback`` lists the op's SDPA fallback lines (none expected).

Usage (a few minutes on an H200)::

    flashtune bench serving --json serving.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from flashtune.experiments.benchmarks.bench_generate import build_model, positive_ints
from flashtune.kernels.launch_support import ENV_BIND
from flashtune.runtime.dispatching.dispatch import flash_attention, reload_store
from flashtune.runtime.integrations.hf_attention import FallbackLog, register, set_attention

SDPA = "sdpa"
MODES = ("eager", "padded", "static")


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def prompt_batch(batch: int, prompt: int, vocab: int, padded: bool, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, attention mask); with ``padded`` sequence b's first b * prompt // (2 * batch) tokens are padding."""
    gen = torch.Generator().manual_seed(batch * 100_003 + prompt)
    ids = torch.randint(1, vocab, (batch, prompt), generator=gen)
    mask = torch.ones(batch, prompt, dtype=torch.long)
    if padded:
        for b in range(batch):
            pads = b * prompt // (2 * batch)
            mask[b, :pads] = 0
            ids[b, :pads] = 0
    return ids.to(device), mask.to(device)


def generate(model: Any, ids: torch.Tensor, mask: torch.Tensor, new_tokens: int, static: bool) -> tuple[torch.Tensor, float]:
    """Greedy generation: (new tokens, wall seconds)."""
    extra = {"cache_implementation": "static"} if static else {}
    _sync()
    began = time.perf_counter()
    with torch.no_grad():
        out = model.generate(ids, attention_mask=mask, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                             do_sample=False, use_cache=True, **extra)
    _sync()
    return out[:, ids.shape[1]:], time.perf_counter() - began


def teacher_forced(model: Any, ids: torch.Tensor, mask: torch.Tensor, tokens: torch.Tensor, static: bool) -> torch.Tensor:
    """Logits (batch, steps, vocab) of the prompt's last position, then of each fed token
    (all but the last) one a step through the cache, with the padding mask."""
    import transformers

    cache = (transformers.StaticCache(config=model.config, max_cache_len=ids.shape[1] + tokens.shape[1])
             if static else transformers.DynamicCache(config=model.config))
    with torch.no_grad():
        out = model(ids, attention_mask=mask, past_key_values=cache, use_cache=True, logits_to_keep=1)
        logits = [out.logits[:, -1].float()]
        for step in range(tokens.shape[1] - 1):
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            position = torch.tensor([ids.shape[1] + step], device=ids.device)
            out = model(tokens[:, step:step + 1], attention_mask=mask, past_key_values=cache, use_cache=True,
                        cache_position=position)
            logits.append(out.logits[:, -1].float())
    return torch.stack(logits, dim=1)


def profile_generate(model: Any, ids: torch.Tensor, mask: torch.Tensor, new_tokens: int, static: bool,
                     top: int = 14) -> dict[str, Any]:
    """Where one (warm) ``generate`` spends its host time, for telling a host-bound step from
    CUDA graphs that are skipped or re-recorded: the CUDA API calls by name with their counts
    (kernel launches, graph launches, captures and instantiations, synchronizations and
    copies to the host) and the ``top`` operators by self CPU time (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=activities) as prof:
        _, seconds = generate(model, ids, mask, new_tokens, static)
    events = prof.key_averages()
    api = sorted(((e.key, e.count) for e in events if e.key.startswith(("cuda", "cu"))), key=lambda kv: -kv[1])
    cpu = sorted(events, key=lambda e: -e.self_cpu_time_total)[:top]
    kernels = sorted((e for e in events if _device_us(e) > 0), key=lambda e: -_device_us(e))
    return {"wall_s": seconds, "cuda_api_calls": dict(api[:top]),
            "self_cpu_top": [{"op": e.key, "self_cpu_us": round(e.self_cpu_time_total, 1), "count": e.count}
                             for e in cpu],
            # What ran on the GPU (graph replays included): a kernel's launches per generate
            # tell a fused decode step from split + combine, and copies or casts per step.
            "device_top": [{"kernel": e.key, "device_us": round(_device_us(e), 1), "count": e.count}
                           for e in kernels[:top]],
            "device_us_total": round(sum(_device_us(e) for e in kernels), 1),
            "kernel_launches": sum(e.count for e in kernels),
            # Compiled regions run and CUDA-graph recordings or replays (a missing replay: eager).
            "graph_markers": {e.key: e.count for e in events
                              if any(m in e.key for m in ("Compiled Region", "CUDAGraph", "cudaGraph"))}}


def _device_us(event: Any) -> float:
    """An averaged profiler event's own device microseconds (0 for host-only operators)."""
    return float(getattr(event, "self_device_time_total", 0.0) or 0.0)


def compile_counters() -> dict[str, Any]:
    """torch.compile's counters (inductor's cudagraph skips, dynamo's graphs and recompiles)."""
    from torch._dynamo.utils import counters

    return {group: dict(counters[group]) for group in ("inductor", "stats", "recompiles", "graph_break")
            if counters.get(group)}


def fresh_compiled_state() -> None:
    """Forget torch.compile's graphs and the CUDA-graph trees recorded from them."""
    torch._dynamo.reset()
    if torch.cuda.is_available():
        from torch._inductor import cudagraph_trees

        cudagraph_trees.reset_cudagraph_trees()


def run_case(model: Any, name: str, *, mode: str, batch: int, prompt: int, new_tokens: int, rounds: int,
             vocab: int, profiled: bool = False) -> dict[str, Any]:
    """One mode x batch x prompt cell: both implementations' tokens/s and the agreement
    (``profiled``: also :func:`profile_generate` of one more generate per implementation)."""
    device = next(model.parameters()).device
    static = mode == "static"
    ids, mask = prompt_batch(batch, prompt, vocab, mode == "padded", device)
    impls = (SDPA, name)
    times: dict[str, list[float]] = {impl: [] for impl in impls}
    tokens: dict[str, torch.Tensor] = {}
    with FallbackLog() as log:
        if static:
            # Implementation by implementation, each from a fresh compiled state, as a server
            # runs one: the two share transformers' compiled forward, so interleaving them
            # recompiles it for each (the masks' dtypes differ) and stacks CUDA-graph trees
            # of both, which torch 2.11 failed on at batch 8 ("length mismatch between
            # inputs, recorded_data_ptr, and placeholders", 2026-12-02).
            for impl in impls:
                fresh_compiled_state()
                set_attention(model, impl)
                generate(model, ids, mask, new_tokens, static)  # warm-up: compiles and records
                for _ in range(rounds):
                    tokens[impl], seconds = generate(model, ids, mask, new_tokens, static)
                    times[impl].append(seconds)
        else:
            for impl in impls:  # warm-up: compiles (Triton kernels, cuDNN plans)
                set_attention(model, impl)
                generate(model, ids, mask, new_tokens, static)
            for _ in range(rounds):
                for impl in impls:
                    set_attention(model, impl)
                    tokens[impl], seconds = generate(model, ids, mask, new_tokens, static)
                    times[impl].append(seconds)
        profiles = {}
        if profiled:
            for impl in impls:
                set_attention(model, impl)
                try:  # a diagnostic: its failure must not cost the cell
                    if static:  # a fresh compiled state, warmed (compiled, recorded) before the profile
                        fresh_compiled_state()
                        generate(model, ids, mask, new_tokens, static)
                    profiles[impl] = profile_generate(model, ids, mask, new_tokens, static)
                except Exception as exc:
                    profiles[impl] = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
        logits = {}
        for impl in impls:
            if static:
                fresh_compiled_state()
            set_attention(model, impl)
            logits[impl] = teacher_forced(model, ids, mask, tokens[SDPA], static)
    tps = {impl: batch * new_tokens / statistics.median(t) for impl, t in times.items()}
    # Interleaved, each round's two generates ran minutes apart at most: the median of the
    # rounds' own ratios leaves out what drifts between rounds (the host's load, the clock).
    paired = None if static else statistics.median(s / o for s, o in zip(times[SDPA], times[name]))
    diff = logits[name] - logits[SDPA]
    return {
        "mode": mode, "batch": batch, "prompt": prompt, "new_tokens": new_tokens,
        "tokens_per_s": tps, "ratio": tps[name] / tps[SDPA], "paired_ratio": paired, "generate_s": times,
        "teacher_forced": {"max_abs": float(diff.abs().max()),
                           "logit_scale": float(logits[SDPA].abs().max()),
                           "argmax_agree": float((logits[name].argmax(-1) == logits[SDPA].argmax(-1)).float().mean())},
        "greedy_tokens_agree": float((tokens[name] == tokens[SDPA]).float().mean()),
        "fallback": sorted(set(log.lines)),
        **({"profile": profiles} if profiled else {}),
        **({"compile_counters": compile_counters()} if static else {}),
    }


def run_alone(model: Any, impl: str, *, mode: str, batch: int, prompt: int, new_tokens: int, rounds: int,
              vocab: int) -> dict[str, Any]:
    """One implementation alone in its process, as a server runs one (``--only``): a
    warm-up generate (compiles, records the CUDA graphs), ``rounds`` timed ones, then the
    profile of one more (:func:`profile_generate`) and torch.compile's counters. No
    agreement (the other implementation is not in the process)."""
    device = next(model.parameters()).device
    static = mode == "static"
    ids, mask = prompt_batch(batch, prompt, vocab, mode == "padded", device)
    set_attention(model, impl)
    times = []
    with FallbackLog() as log:
        generate(model, ids, mask, new_tokens, static)
        for _ in range(rounds):
            _, seconds = generate(model, ids, mask, new_tokens, static)
            times.append(seconds)
        profile = profile_generate(model, ids, mask, new_tokens, static)
    return {"mode": mode, "batch": batch, "prompt": prompt, "new_tokens": new_tokens, "attention": impl,
            "tokens_per_s": batch * new_tokens / statistics.median(times), "generate_s": times,
            "fallback": sorted(set(log.lines)), "profile": {impl: profile}, "compile_counters": compile_counters()}


def alone_lines(case: dict[str, Any]) -> str:
    """An ``--only`` cell: tokens/s, then the profile's GPU kernels by device time."""
    (impl, p), = case["profile"].items()
    lines = [f"alone {case['mode']} {case['batch']} {case['prompt']} {impl}: {case['tokens_per_s']:.1f} tok/s "
             f"(generate s {', '.join(f'{t:.4f}' for t in case['generate_s'])}); profiled {p['wall_s'] * 1e3:.1f} ms, "
             f"{p['kernel_launches']} kernels, {p['device_us_total']:.0f} us on the GPU; "
             f"markers {p['graph_markers']}; counters {case['compile_counters']}"]
    lines.extend(f"    {r['device_us']:>10.1f} us x{r['count']:<6} {r['kernel'][:90]}" for r in p["device_top"])
    lines.append(profile_lines(case))
    return "\n".join(lines)


def host_time(*, batch: int, kv_len: int, calls: int = 200, repeats: int = 9) -> dict[str, dict[str, float]]:
    """Host and device microseconds per call of decode (batch, 32/8, 1 query, kv_len, 128, bf16):
    the runtime op (prepared, bound launch), the same through Triton's jit dispatcher
    (``$FLASHTUNE_BIND_LAUNCH=0``), the op with per-sequence key ranges (a static cache),
    and SDPA's cuDNN and flash backends (heads expanded, as transformers' sdpa path does).

    Host: wall time of ``calls`` calls issued back to back without a synchronization (few
    enough that the launch queue never fills), median of ``repeats``. Device: CUDA events
    around the same loop after a synchronization (the larger of the two bounds a call).
    """
    from torch.nn.attention import SDPBackend, sdpa_kernel

    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(batch, 32, 1, 128, device="cuda", generator=g, dtype=torch.bfloat16)
    k = torch.randn(batch, 8, kv_len, 128, device="cuda", generator=g, dtype=torch.bfloat16)
    v = torch.randn_like(k)
    k_x, v_x = k.repeat_interleave(4, 1), v.repeat_interleave(4, 1)
    ends = torch.full((batch,), kv_len - 7, dtype=torch.int32, device="cuda")
    starts = torch.zeros(batch, dtype=torch.int32, device="cuda")

    def sdpa() -> Any:
        return torch.nn.functional.scaled_dot_product_attention(q, k_x, v_x)

    # (call, backend context): the context is entered once around the timed loops, not per
    # call (the 2026-12-01 run entered sdpa_kernel per call, which added its own host time).
    cases = {
        "op (bound launch)": (lambda: flash_attention(q, k, v, causal=True), None),
        "op (jit dispatcher)": (lambda: flash_attention(q, k, v, causal=True), None),
        "op + key ranges (bound)": (lambda: flash_attention(q, k, v, causal=True, cache_seqlens=ends,
                                                            kv_start=starts), None),
        "sdpa cudnn": (sdpa, SDPBackend.CUDNN_ATTENTION),
        "sdpa flash": (sdpa, SDPBackend.FLASH_ATTENTION),
    }
    result = {}
    for label, (call, backend) in cases.items():
        os.environ[ENV_BIND] = "0" if "jit" in label else "1"
        reload_store()  # prepared calls are rebuilt, binding or not
        context = sdpa_kernel(backend) if backend is not None else contextlib.nullcontext()
        with context:
            result[label] = _time_calls(call, calls, repeats)
    os.environ.pop(ENV_BIND, None)
    reload_store()
    return result


def _time_calls(call: Any, calls: int, repeats: int) -> dict[str, float]:
    """Host and wall microseconds per call (see :func:`host_time`)."""
    for _ in range(20):
        call()
    torch.cuda.synchronize()
    host, device = [], []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        began = time.perf_counter()
        for _ in range(calls):
            call()
        host.append((time.perf_counter() - began) / calls * 1e6)
        stop.record()
        torch.cuda.synchronize()
        device.append(start.elapsed_time(stop) / calls * 1e3)
    return {"host_us": statistics.median(host), "wall_us": statistics.median(device)}


def table(result: dict[str, Any]) -> str:
    lines = [f"{'mode':>7} {'batch':>5} {'prompt':>6} {'SDPA tok/s':>11} {'op tok/s':>10} {'op/SDPA':>8} "
             f"{'paired':>7} {'TF max|dlogit|':>15} {'TF argmax':>10} fallback"]
    for c in result["cases"]:
        if "error" in c:
            lines.append(f"{c['mode']:>7} {c['batch']:>5} {c['prompt']:>6} error: {c['error'][:80]}")
            continue
        tf = c["teacher_forced"]
        lines.append(f"{c['mode']:>7} {c['batch']:>5} {c['prompt']:>6} {c['tokens_per_s'][SDPA]:>11.1f} "
                     f"{c['tokens_per_s'][c['attention']]:>10.1f} {c['ratio']:>8.3f} "
                     f"{'-' if c.get('paired_ratio') is None else format(c['paired_ratio'], '.3f'):>7} {tf['max_abs']:>15.4f} "
                     f"{tf['argmax_agree']:>10.3f} {len(c['fallback'])}")
    return "\n".join(lines)


def profile_lines(case: dict[str, Any]) -> str:
    """A profiled cell's CUDA API counts and top operators, one block per implementation."""
    lines = []
    for impl, p in case.get("profile", {}).items():
        if "error" in p:
            lines.append(f"profile {case['mode']} {case['batch']} {case['prompt']} {impl}: {p['error']}")
            continue
        lines.append(f"profile {case['mode']} {case['batch']} {case['prompt']} {impl}: {p['wall_s'] * 1e3:.1f} ms; "
                     + ", ".join(f"{k} x{n}" for k, n in p["cuda_api_calls"].items()))
        lines.extend(f"    {r['self_cpu_us']:>10.1f} us x{r['count']:<6} {r['op'][:70]}" for r in p["self_cpu_top"])
    return "\n".join(lines)


def _modes(text: str) -> list[str]:
    modes = text.split(",")
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown mode(s) {bad}: pick from {list(MODES)}")
    return modes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", type=_modes, default=list(MODES))
    parser.add_argument("--batches", type=positive_ints, default=[1, 8])
    parser.add_argument("--prompts", type=positive_ints, default=[512, 2048, 8192])
    parser.add_argument("--static-prompts", type=positive_ints, default=[512],
                        help="prompts of the static mode (each shape compiles the model anew)")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--budget-s", type=float, default=1e9, help="skip the cells left after this many seconds")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--host-time", action="store_true", help="first, host us per decode call: op vs SDPA")
    parser.add_argument("--profile", action="store_true",
                        help="profile one more generate per implementation in each mode's first cell")
    parser.add_argument("--only", choices=("sdpa", "op"),
                        help="one implementation alone in this process, every cell profiled (run_alone)")
    args = parser.parse_args(argv)
    import transformers

    name = register()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    longest = max(args.prompts + args.static_prompts)
    model = build_model(layers=args.layers, hidden=args.hidden, heads=args.heads, kv_heads=args.kv_heads,
                        vocab=args.vocab, max_len=longest + args.new_tokens, device=device, dtype=torch.bfloat16)
    host = {}
    if args.host_time and device.type == "cuda":
        for batch, kv_len in ((1, 4096), (8, 8192)):
            host[f"{batch},32/8,1/{kv_len},128"] = rows = host_time(batch=batch, kv_len=kv_len)
            print(f"host time, decode {batch},32/8,1/{kv_len},128 bf16 (us per call: host / wall)")
            for label, r in rows.items():
                print(f"  {label:<26} {r['host_us']:>7.1f} / {r['wall_us']:>7.1f}", flush=True)
    began = time.perf_counter()
    result: dict[str, Any] = {"host_time": host, "cases": [], "setup": {
        "layers": args.layers, "hidden": args.hidden, "heads": args.heads, "kv_heads": args.kv_heads,
        "vocab": args.vocab, "new_tokens": args.new_tokens, "rounds": args.rounds, "dtype": "bfloat16",
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "torch": torch.__version__, "transformers": transformers.__version__}}
    for mode in args.modes:
        profiled = args.profile
        for batch in args.batches:
            if mode == "padded" and batch == 1:
                continue  # one sequence has no padding
            for prompt in (args.static_prompts if mode == "static" else args.prompts):
                if time.perf_counter() - began > args.budget_s:
                    result["cases"].append({"mode": mode, "batch": batch, "prompt": prompt, "error": "skipped: budget"})
                    continue
                try:
                    if args.only:
                        if mode == "static":
                            fresh_compiled_state()
                        case = run_alone(model, SDPA if args.only == SDPA else name, mode=mode, batch=batch,
                                         prompt=prompt, new_tokens=args.new_tokens, rounds=args.rounds,
                                         vocab=args.vocab)
                        print(alone_lines(case), flush=True)
                    else:
                        case = run_case(model, name, mode=mode, batch=batch, prompt=prompt,
                                        new_tokens=args.new_tokens, rounds=args.rounds, vocab=args.vocab,
                                        profiled=profiled)
                        case["attention"] = name
                        if profiled:
                            print(profile_lines(case), flush=True)
                        profiled = False
                except Exception as exc:  # one cell's failure is its row, not the table's end
                    case = {"mode": mode, "batch": batch, "prompt": prompt, "error": f"{type(exc).__name__}: {exc}"}
                result["cases"].append(case)
                if not args.only:
                    print(table({"cases": [case]}).splitlines()[-1], flush=True)
                if args.json:
                    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["setup"]))
    if not args.only:
        print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
