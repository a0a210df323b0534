"""The package's layers: each top-level folder imports only the folders below it.

Read from the source like the cycle test (test_imports.py), so an import inside a function
or under ``TYPE_CHECKING`` counts like any other: a layer crossed lazily is still crossed.
"""

from __future__ import annotations

from import_graph import ROOT, Import, imports, package_files

#: Bottom first. A module may import its own layer and the ones before it, never one after.
#:
#: - values: the types every layer shares (Config, Workload, Measurement, Status) and the
#:   facts they check; nothing else of flashtune.
#: - search: strategies over a space of knobs with a feasibility predicate; it knows no kernel,
#:   GPU or objective, so it sits right on the values (a space for a workload is built in
#:   objectives.feasibility.for_workload).
#: - kernels: the Triton kernels, their launchers and their declared spaces.
#: - objectives: hardware, feasibility and measuring a config, on the kernels.
#: - runtime: the store, dispatch and re-tuning that serve tuned configs, on the kernels and
#:   objectives.
#: - experiments: the CLI, studies, tracking and evaluations, on everything.
LAYERS = ("values", "search", "kernels", "objectives", "runtime", "experiments")

#: Imports from a layer to a later one that are allowed, as (importer, imported) module
#: names, each with why. None today; an entry here is a debt, not a rule.
KNOWN_EXCEPTIONS: dict[tuple[str, str], str] = {}


def _layer(module: str) -> str:
    return module.split(".")[1]


def upward(edges: list[Import]) -> list[Import]:
    """The imports of a layer after the importer's own."""
    rank = {layer: i for i, layer in enumerate(LAYERS)}
    return [e for e in edges if rank[_layer(e.imported)] > rank[_layer(e.importer)]
            and (e.importer, e.imported) not in KNOWN_EXCEPTIONS]


def test_every_module_is_in_a_layer() -> None:
    # A new top-level folder fails here until it is placed in the order.
    unplaced = sorted({_layer(m) for m in package_files()} - set(LAYERS))
    assert not unplaced, f"top-level packages missing from LAYERS: {unplaced}"


def test_no_import_from_a_lower_layer_to_a_higher_one() -> None:
    found = upward(imports())
    listing = "\n".join(f"{e.path.relative_to(ROOT)}:{e.line} {e.importer} -> {e.imported}"
                        + (" (in a function)" if e.in_function else "") for e in found)
    assert not found, f"imports against the layer order {' < '.join(LAYERS)}:\n{listing}"


def test_known_exceptions_are_still_needed() -> None:
    # An exception whose import is gone is dropped, so the list only shrinks.
    edges = {(e.importer, e.imported) for e in imports()}
    stale = sorted(set(KNOWN_EXCEPTIONS) - edges)
    assert not stale, f"known exceptions no longer imported: {stale}"


def test_search_imports_only_the_values() -> None:
    # Said on its own as well as by the order: a strategy sees knobs and a predicate, and a
    # space for a workload on a GPU is built outside search/.
    found = sorted({e.imported for e in imports() if _layer(e.importer) == "search"
                    and _layer(e.imported) not in ("search", "values")})
    assert not found, found


def test_a_violation_is_caught() -> None:
    # Guards the test itself: an upward edge, in a function or not, is reported.
    edges = imports()
    lowest = next(e for e in edges if _layer(e.importer) == "values")
    fake = [Import(lowest.importer, "flashtune.kernels.space", lowest.path, lowest.line, True, ""),
            Import("flashtune.search.space", "flashtune.objectives.feasibility", lowest.path, 1, False, "")]
    assert upward(fake) == fake
