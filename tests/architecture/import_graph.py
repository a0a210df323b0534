"""The package's import graph read from the source (ast, nothing imported): every import of a
``flashtune`` module, at the top of a module or inside a function, as an edge."""

from __future__ import annotations

import ast
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Import:
    importer: str  # dotted module name
    imported: str  # dotted module name (a package's __init__ counts as the package)
    path: Path
    line: int
    in_function: bool
    reason: str  # the comment on the import's line or the line above ("" if none)


def package_files() -> dict[str, Path]:
    """Every module of the package, by dotted name, from pyproject's package-dir map."""
    with (ROOT / "pyproject.toml").open("rb") as f:
        package_dir = tomllib.load(f)["tool"]["setuptools"]["package-dir"]
    modules: dict[str, Path] = {}
    for package, folder in package_dir.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join([package, *parts])] = path
    return modules


def _comment(lines: list[str], lineno: int) -> str:
    """The comment on the import's line, or the one heading its block of imports."""
    here = lines[lineno - 1]
    if "#" in here:
        return here.split("#", 1)[1].strip()
    for above in reversed(lines[: lineno - 1]):
        above = above.strip()
        if above.startswith("#"):
            return above[1:].strip()
        if not above.startswith(("from ", "import ")):
            return ""
    return ""


def imports() -> list[Import]:
    """Every import of a flashtune module by a flashtune module."""
    modules = package_files()
    found: list[Import] = []
    for name, path in modules.items():
        source = path.read_text()
        lines = source.splitlines()
        tree = ast.parse(source)
        functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        inside = {id(n) for f in functions for n in ast.walk(f) if n is not f}
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # ``from a.b import c``: c may be a module itself.
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                           for a in node.names]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name and target.startswith("flashtune."):
                    found.append(Import(name, target, path, node.lineno, id(node) in inside,
                                        _comment(lines, node.lineno)))
    return found


def cycles(edges: list[Import]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each a cycle."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        graph.setdefault(e.importer, set()).add(e.imported)
        graph.setdefault(e.imported, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found
