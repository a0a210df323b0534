"""``flashtune bench NAME [ARGS]``: the benchmarks a user runs, each a module of
``flashtune.experiments.benchmarks`` with its own arguments (``flashtune bench NAME --help``).

The arguments after NAME go to the module's ``main`` as they are; the module is imported only
when its benchmark is asked for (they import torch, transformers and the GPU kernels).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import sys
from collections.abc import Iterator

_PACKAGE = "flashtune.experiments.benchmarks"

#: Benchmark name -> (module in :data:`_PACKAGE`, what it measures in one line).
BENCHMARKS: dict[str, tuple[str, str]] = {
    "peers": ("bench_peers", "the best recorded configs against SDPA's cuDNN and flash backends"),
    "decode": ("bench_decode", "the decode kernel's space swept per shape, the best against SDPA"),
    "generate": ("bench_generate", "greedy generation of a random Llama with the op against SDPA"),
    "serving": ("bench_serving", "the serving modes (static, eager, padded) with the op against SDPA"),
    "online-serving": ("bench_online_serving", "the online re-tuner inside a generate loop: tokens/s, rollback"),
    "host-time": ("bench_host_time", "host microseconds per decode call: the op's paths against SDPA"),
    "continuous-batching": ("bench_continuous_batching",
                            "transformers' continuous batching on the op against its sdpa"),
}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "bench", help="run a benchmark against the peers (flashtune bench NAME --help for its arguments)",
        description="Run one benchmark; the arguments after NAME are the benchmark's own "
                    "(flashtune bench NAME --help).",
        epilog=listing(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", nargs="?", metavar="NAME", help="the benchmark (listed below)")
    p.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="the benchmark's own arguments")
    p.set_defaults(func=run_bench)


def listing() -> str:
    """The benchmarks, one line each."""
    width = max(map(len, BENCHMARKS))
    return "benchmarks:\n" + "\n".join(f"  {name:<{width}}  {what}" for name, (_, what) in BENCHMARKS.items())


def run_bench(args: argparse.Namespace) -> int:
    if args.name is None:
        print(listing())
        return 0
    if args.name not in BENCHMARKS:
        print(f"flashtune bench: error: unknown benchmark {args.name!r}\n{listing()}", file=sys.stderr)
        return 2
    try:
        module = importlib.import_module(f"{_PACKAGE}.{BENCHMARKS[args.name][0]}")
    except ImportError as exc:  # transformers for the model benchmarks: an extra, not a dependency
        print(f"flashtune bench {args.name}: needs a package that is not installed: {exc}", file=sys.stderr)
        return 2
    with _program(f"flashtune bench {args.name}"):
        return int(module.main(list(args.args)) or 0)


@contextlib.contextmanager
def _program(name: str) -> Iterator[None]:
    """``sys.argv[0]`` as ``name`` while a module runs: its parser's usage line names the
    command the user typed, not the ``flashtune`` script alone."""
    saved = sys.argv[0] if sys.argv else None
    if sys.argv:
        sys.argv[0] = name
    else:
        sys.argv.append(name)
    try:
        yield
    finally:
        if saved is None:
            sys.argv.clear()
        else:
            sys.argv[0] = saved
