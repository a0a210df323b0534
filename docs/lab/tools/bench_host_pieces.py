"""CPU microseconds of each piece of an eager decode call's host path, up to the launch.

What ``flashtune.runtime.flash_attention`` and the transformers function
(``runtime.integrations.hf_attention.attention_forward``) do per decode call before the
CUDA launch, timed on the CPU (no GPU needed) with bf16 CPU tensors of the decode shapes of
``bench_host_time`` and the H200's default decode config (132 SMs). The launch itself (the
compiled kernel's ``run``, the stream query) is left out: it needs a GPU, and
``bench_host_time`` measures the whole call there. What stops the path before the launch is
:class:`DryBound`, a ``BoundDecode`` whose call does all of ``BoundDecode.__call__``'s host
work except the stream query and ``run``.

With ``--against REF`` the same pieces of the tree at git ``REF`` (its ``kernels/decode.py``,
``runtime/dispatching/prepared.py``, ``dispatch.py`` and ``integrations/hf_attention.py``,
loaded from ``git show``) are timed interleaved with this tree's: the box may be loaded, so
only medians of interleaved rounds compare. Usage::

    python docs/lab/tools/bench_host_pieces.py --against 1864018
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from flashtune.experiments.benchmarks.bench_host_time import (
    HEAD_DIM,
    KV_HEADS,
    Q_HEADS,
    SHAPES,
    _CausalLayer,
    decode_inputs,
)
from flashtune.kernels.decode import decode_default_for

#: The H200's SM count: the default config (split count, combine) the GPU would run.
H200_SMS = 132
#: The modules whose host path is timed, as (repository path, module name).
MODULES = (("kernels/decode.py", "flashtune.kernels.decode"),
           ("runtime/dispatching/prepared.py", "flashtune.runtime.dispatching.prepared"),
           ("runtime/dispatching/dispatch.py", "flashtune.runtime.dispatching.dispatch"),
           ("runtime/integrations/hf_attention.py", "flashtune.runtime.integrations.hf_attention"))
ROOT = Path(__file__).resolve().parents[3]  # the repository (this file: docs/lab/tools/)


def load_tree(ref: str | None) -> dict[str, types.ModuleType]:
    """Fresh copies of :data:`MODULES`, from the working tree (None) or git ``ref``, each
    importing the rest of flashtune as installed (so only these four differ)."""
    loaded = {}
    for path, name in MODULES:
        source = ((ROOT / path).read_text() if ref is None
                  else subprocess.run(["git", "show", f"{ref}:{path}"], cwd=ROOT, check=True, capture_output=True,
                                      text=True).stdout)
        module = types.ModuleType(f"{name}__{ref or 'tree'}")
        module.__file__ = str(ROOT / path)
        sys.modules[module.__name__] = module  # dataclasses look their module up
        exec(compile(source, f"{ref or 'tree'}:{path}", "exec"), module.__dict__)
        loaded[path] = module
    return loaded


def dry_bound(decode: types.ModuleType) -> type:
    """``decode.BoundDecode`` with a call that stops before the CUDA launch."""

    import inspect

    # The launch form of the arguments where the tree has one (pointers as addresses).
    extra = {"addresses": True} if "addresses" in inspect.signature(decode.BoundDecode.arguments).parameters else {}

    class DryBound(decode.BoundDecode):  # type: ignore[name-defined, misc]
        __slots__ = ()

        def __call__(self, q, k, v, out, cache_seqlens, kv_start, workspace, stream=None):
            args, key = self.arguments(q, k, v, out, cache_seqlens, kv_start, workspace, **extra)
            if self.tma:
                decode.use_descriptor_scratch()
            self.kernels.get(key)
            decode.launch_hooks_set()
            return args

    return DryBound


def paths(tree: dict[str, types.ModuleType], t: dict[str, torch.Tensor]) -> dict[str, Callable[[], Any]]:
    """piece label -> a call of this tree's code on the inputs ``t``, stopping before the launch."""
    decode, prepared, dispatch, hf = (tree[p] for p, _ in MODULES)
    q, k, v, ends, starts, ranges = (t[n] for n in ("q", "k", "v", "ends", "starts", "ranges"))
    batch, kv_len = q.shape[0], k.shape[2]
    config = decode_default_for(batch=batch, q_heads=Q_HEADS, kv_heads=KV_HEADS, q_len=1, kv_len=kv_len,
                                head_dim=HEAD_DIM, sm_count=H200_SMS)
    ranged = decode_default_for(batch=batch, q_heads=Q_HEADS, kv_heads=KV_HEADS, q_len=1, kv_len=kv_len,
                                head_dim=HEAD_DIM, sm_count=H200_SMS, per_sequence_lengths=True)
    dispatcher = dispatch.Dispatcher(ROOT / "nonexistent-store.json")
    dispatch._DEFAULT = dispatcher
    dry = dry_bound(decode)
    calls = {}
    # The transformers function hands the op q as a (batch, heads, 1, head_dim) transposed view.
    q_hf = q.transpose(1, 2).contiguous().transpose(1, 2)
    for query in (q, q_hf):
        for seqlens, first, cfg in ((None, None, config), (ends, starts, ranged),
                                    (ranges[1, :, 0, 0], ranges[0, :, 0, 0], ranged)):
            call = prepared.PreparedDecode(query, k, causal=True, scale=None, config=cfg,
                                           with_seqlens=seqlens is not None, with_kv_start=first is not None)
            call.bound = dry(query, k, causal=True, scale=call.scale, config=cfg, has_seqlens=seqlens is not None,
                             has_kv_start=first is not None)
            for scale in (None, HEAD_DIM ** -0.5):
                calls[dispatch.call_key(query, k, v, True, scale, seqlens, first)] = call
    dispatcher._calls.update(calls)
    hf._tuned = dispatch.flash_attention
    layer = _CausalLayer()
    prepared_call = dispatcher._calls[dispatch.call_key(q, k, v, True, None, None, None)]
    out = q.new_empty(q.shape)
    kwargs = {"position_ids": None, "cache_position": None}  # what a Llama layer passes along
    return {
        "dispatcher front (call key, lookup)": lambda: dispatcher._calls.get(dispatch.call_key(q, k, v, True, None,
                                                                                              None, None)),
        "BoundDecode arguments + key": lambda: prepared_call.bound.arguments(q, k, v, out, None, None, None),
        "prepared call (checks, output, bound)": lambda: prepared_call(q, k, v),
        "op, whole path": lambda: dispatch.flash_attention(q, k, v, causal=True),
        "op + key ranges, whole path": lambda: dispatch.flash_attention(q, k, v, causal=True, cache_seqlens=ends,
                                                                        kv_start=starts),
        "transformers fn, no mask": lambda: hf.attention_forward(layer, q_hf, k, v, None, scaling=HEAD_DIM ** -0.5,
                                                                 **kwargs),
        "transformers fn, ranges": lambda: hf.attention_forward(layer, q_hf, k, v, ranges, scaling=HEAD_DIM ** -0.5,
                                                                **kwargs),
    }


def sdpa_fn_prelude(t: dict[str, torch.Tensor]) -> Callable[[], Any]:
    """transformers' own ``sdpa_attention_forward`` Python before its SDPA call (the peer):
    the same function with SDPA itself replaced by a no-op for the timing."""
    import transformers.integrations.sdpa_attention as sdpa_module

    q_hf = t["q"].transpose(1, 2).contiguous().transpose(1, 2)
    layer = _CausalLayer()
    source = Path(sdpa_module.__file__).read_text()
    module = types.ModuleType("sdpa_attention__dry")
    module.__dict__.update({"__package__": "transformers.integrations", "__name__": "transformers.integrations.sdpa_dry"})
    exec(compile(source, sdpa_module.__file__, "exec"), module.__dict__)
    module.torch = types.SimpleNamespace(**{**vars(torch), "nn": types.SimpleNamespace(
        functional=types.SimpleNamespace(scaled_dot_product_attention=lambda q, *a, **kw: q))})
    return lambda: module.sdpa_attention_forward(layer, q_hf, t["k"], t["v"], None, scaling=HEAD_DIM ** -0.5,
                                                 position_ids=None, cache_position=None)


def measure(trees: dict[str, dict[str, types.ModuleType]], calls: int, rounds: int) -> dict[str, dict[str, dict[str, float]]]:
    """shape -> piece -> tree label -> median µs a call (rounds interleaved across trees)."""
    results: dict[str, dict[str, dict[str, float]]] = {}
    for batch, kv_len in SHAPES:
        t = decode_inputs(batch, kv_len, device="cpu")
        per_tree = {label: paths(tree, t) for label, tree in trees.items()}
        pieces = list(next(iter(per_tree.values())))
        samples: dict[tuple[str, str], list[float]] = {}
        try:
            peer = sdpa_fn_prelude(t)
        except Exception as exc:  # transformers missing or changed: reported, not fatal
            print(f"transformers sdpa fn: not timed ({exc})", file=sys.stderr)
            peer = None
        for round_ in range(rounds):
            for piece in pieces:
                # Trees in turn, the order reversed every other round (no position bias).
                for label, fns in (list(per_tree.items()) if round_ % 2 else list(per_tree.items())[::-1]):
                    samples.setdefault((piece, label), []).append(_time(fns[piece], calls))
            if peer is not None:
                samples.setdefault(("transformers sdpa fn (before SDPA)", "peer"), []).append(_time(peer, calls))
        shape = f"{batch},{Q_HEADS}/{KV_HEADS},1/{kv_len}"
        results[shape] = {}
        for (piece, label), values in samples.items():
            results[shape].setdefault(piece, {})[label] = statistics.median(values)
    return results


def _time(call: Callable[[], Any], calls: int) -> float:
    call()
    began = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - began) / calls * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--against", help="a git ref whose host path is timed beside this tree's")
    parser.add_argument("--calls", type=int, default=2000, help="calls per round (default 2000)")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds, median taken (default 7)")
    args = parser.parse_args(argv)
    # The transformers function takes CPU tensors only for the interpreter (it runs SDPA
    # otherwise); its check then reads the environment, which a GPU call skips.
    os.environ.setdefault("TRITON_INTERPRET", "1")
    if args.calls < 1 or args.rounds < 1:
        parser.error(f"--calls and --rounds must be positive, got {args.calls} and {args.rounds}")
    trees = {"tree": load_tree(None)}
    if args.against:
        trees = {args.against: load_tree(args.against), **trees}
    results = measure(trees, args.calls, args.rounds)
    for shape, pieces in results.items():
        print(f"\n{shape} (CPU us a call, median of {args.rounds} x {args.calls})")
        for piece, by_tree in pieces.items():
            print(f"  {piece:40s}" + "".join(f"{label:>10s} {us:7.2f}" for label, us in by_tree.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
