"""The package's import graph: no cycles (dodged ones included), few imports inside functions.

Read from the source with ``ast`` (nothing is imported), so an import inside a function or
under ``TYPE_CHECKING`` counts like any other: a cycle dodged that way is still a cycle.
"""

from __future__ import annotations

from import_graph import ROOT, cycles, imports, package_files

#: Imports of the package's own modules inside functions allowed in all (issue 12: < 20).
MAX_IN_FUNCTION = 19
#: Modules at the top of experiments/ (the rest lives in its subpackages).
MAX_EXPERIMENTS_TOP = 12


def test_no_import_cycles() -> None:
    found = cycles(imports())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_few_in_function_imports_each_with_a_reason() -> None:
    statements = {(i.path, i.line): i for i in imports() if i.in_function}
    listing = "\n".join(f"{i.path.relative_to(ROOT)}:{i.line} {i.imported}  # {i.reason}"
                        for i in sorted(statements.values(), key=lambda i: (str(i.path), i.line)))
    assert len(statements) <= MAX_IN_FUNCTION, f"{len(statements)} in-function imports:\n{listing}"
    unexplained = [i for i in statements.values() if not i.reason]
    assert not unexplained, "in-function imports need a comment saying why (a heavy dependency kept lazy):\n" + \
        "\n".join(f"{i.path.relative_to(ROOT)}:{i.line} {i.imported}" for i in unexplained)


def test_experiments_top_is_small() -> None:
    top = [name for name in package_files() if name.startswith("flashtune.experiments.")
           and name.count(".") == 2]
    assert len(top) <= MAX_EXPERIMENTS_TOP, top


def test_the_graph_is_read() -> None:
    # Guards the test itself: a parser that found nothing would pass the cycle test.
    edges = imports()
    assert any(e.importer == "flashtune.search.loop" and e.imported == "flashtune.search.strategy" for e in edges)
    assert len(package_files()) > 60


def test_tracking_does_not_import_the_study() -> None:
    # The study drives the tracker (a callback of its loop): the arrow points one way only.
    upward = [f"{i.path.relative_to(ROOT)}:{i.line} {i.imported}" for i in imports()
              if i.importer.startswith("flashtune.experiments.tracking")
              and i.imported.startswith("flashtune.experiments.study")]
    assert not upward, upward
