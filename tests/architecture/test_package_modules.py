"""What ships in the package: every module of experiments/benchmarks and experiments/evaluation
is used by the library or the CLI (imported from outside those two folders, directly or through
one another) or is a benchmark a user runs (``flashtune bench NAME``). A one-investigation
script belongs with the lab log (docs/lab/tools/), outside the installed package."""

from __future__ import annotations

from import_graph import imports, package_files

from flashtune.experiments.cli.bench import BENCHMARKS

_LAB_ROOMS = ("flashtune.experiments.benchmarks.", "flashtune.experiments.evaluation.")
#: The benchmarks a user runs: nothing in the package imports them, ``flashtune bench`` runs them by name.
USER_BENCHMARKS = frozenset(f"flashtune.experiments.benchmarks.{name}" for name in (
    "bench_peers", "bench_decode", "bench_generate", "bench_serving", "bench_online_serving", "bench_host_time",
    "bench_continuous_batching"))


def _used() -> set[str]:
    """Modules reachable by imports from the library, the CLI and the user's benchmarks."""
    modules = package_files()
    graph: dict[str, set[str]] = {}
    for edge in imports():
        graph.setdefault(edge.importer, set()).add(edge.imported)
    todo = [name for name in modules if not name.startswith(_LAB_ROOMS) or name in USER_BENCHMARKS]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(graph.get(name, ()))
    return seen


def test_every_benchmark_and_evaluation_module_is_used_or_a_user_benchmark() -> None:
    lab = [name for name in package_files() if name.startswith(_LAB_ROOMS) and name not in _used()]
    assert not lab, ("modules nothing in the package uses (a one-investigation script belongs in docs/lab/tools/, "
                     f"a benchmark users run in `flashtune bench`): {lab}")


def test_the_user_benchmarks_are_the_ones_flashtune_bench_runs() -> None:
    assert {f"flashtune.experiments.benchmarks.{module}" for module, _ in BENCHMARKS.values()} == USER_BENCHMARKS
    assert USER_BENCHMARKS <= set(package_files())


def test_the_check_sees_the_rooms() -> None:
    # Guards the test itself: the evaluation modules the CLI uses are found used, not skipped.
    used = _used()
    assert "flashtune.experiments.evaluation.compare" in used
    assert sum(name.startswith(_LAB_ROOMS) for name in package_files()) > len(USER_BENCHMARKS)
