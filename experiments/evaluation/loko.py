"""Leave one kernel out: a judge of search settings that cannot fit its own development set.

A *setting* is a strategy with its options ("gp", "portfolio policy=lead", ...). Its result
on the development set is a hit rate per space: the share of cold runs within 2 % of the
space's optimum in the budget. Spaces are grouped by kernel (``kernel_of``: the file
name's part before the GPU, so gemm on two GPUs and pnpoly in two formats are one kernel
each). For each kernel in turn the judge holds it out, picks the setting that scores best
on the other kernels (in sample), and scores that pick on the kernel held out. The mean of
those held-out scores is what choosing by the development set is worth on a kernel it has
not seen; the gap to the picks' in-sample mean is how much the choice fitted its judge.

Scores: a setting's score on a set of spaces is the mean of its hit rates over them (as
``flashtune compare``'s ``hit_rate_2pct``); its held-out mean is the mean over kernels of
its score on each kernel held out (each kernel once, however many files it has). Ties in
sample go to the default (staying costs nothing), then to the order the settings are given.

The default is kept unless a change of it wins held out: ``loko`` compares each challenger
with the default fold by fold (in sample decides, the kernel held out judges) and keeps a
change only if those decisions raise the held-out mean; a change that raises one kernel
only is never chosen where that kernel is held out, so it gains nothing held out.

Pure functions over tables ``{setting: {space: hit rate}}``; no runs here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

#: A space name's first token that names the GPU: one with a capital letter or a leading
#: digit (``RTX``, ``A100``, ``MI250X``, ``A4000``); the lower-case tokens before it name the kernel.
_GPU_TOKEN = re.compile(r"[A-Z]|^[0-9]")


def kernel_of(space: str) -> str:
    """The kernel of a space from its name: ``convolution_milo_A4000`` -> ``convolution_milo``,
    ``pnpoly_RTX_3090_T4`` -> ``pnpoly``; a name without a GPU token is its own kernel."""
    tokens = space.split("_")
    kernel: list[str] = []
    for token in tokens:
        if _GPU_TOKEN.search(token):
            break
        kernel.append(token)
    return "_".join(kernel) or space


def group_by_kernel(spaces: Sequence[str], kernels: Mapping[str, str] | None = None) -> dict[str, list[str]]:
    """``{kernel: [space, ...]}`` in first-seen order; ``kernels`` overrides ``kernel_of`` per space."""
    groups: dict[str, list[str]] = {}
    for space in spaces:
        groups.setdefault((kernels or {}).get(space) or kernel_of(space), []).append(space)
    return groups


def mean_over(rates: Mapping[str, float], spaces: Sequence[str]) -> float:
    """The mean hit rate over ``spaces``.

    Raises:
        ValueError: a space without a rate (every setting must be judged on the same spaces).
    """
    missing = [s for s in spaces if s not in rates]
    if missing or not spaces:
        raise ValueError(f"no hit rate for {missing or 'an empty set of spaces'}")
    return float(np.mean([rates[s] for s in spaces]))


def loko(table: Mapping[str, Mapping[str, float]], default: str | None = None, *,
         kernels: Mapping[str, str] | None = None, margin: float = 0.0) -> dict[str, Any]:
    """The leave-one-kernel-out report of ``table`` (``{setting: {space: hit rate}}``).

    Args:
        table: every setting's hit rate on every space (the same spaces for each).
        default: the setting in use now (None: no default to keep or replace).
        kernels: ``{space: kernel}`` where a name does not say it (``kernel_of`` otherwise).
        margin: how much a setting must win by, in sample and held out, to count as a win.

    Returns:
        ``kernels`` ({kernel: spaces}); ``settings`` ({setting: in_sample (mean over every
        space), held_out (mean over kernels of its score on each), per_kernel, wins_in_sample
        (folds where it is the pick)}); ``folds`` ([{kernel, pick, pick_in_sample,
        pick_held_out, best_held_out, default_held_out}]); ``selection`` ({in_sample,
        held_out, gap}: the picks' means); ``changes`` ({challenger: {decisions,
        held_out_gain, kept}} against the default); ``keep_default`` and ``replacement``
        (the challenger that would replace the default, or None).

    Raises:
        ValueError: no settings, fewer than two kernels, a default not in the table, or
            settings judged on different spaces.
    """
    names = list(table)
    if not names:
        raise ValueError("loko: no settings")
    spaces = list(table[names[0]])
    for name in names[1:]:
        if set(table[name]) != set(spaces):
            raise ValueError(f"loko: {name!r} was judged on {sorted(table[name])}, {names[0]!r} on {sorted(spaces)}")
    if default is not None and default not in table:
        raise ValueError(f"loko: default {default!r} is not among the settings {names}")
    groups = group_by_kernel(spaces, kernels)
    if len(groups) < 2:
        raise ValueError(f"loko: needs spaces of two kernels at least, got {list(groups)}")
    per_kernel = {n: {k: mean_over(table[n], members) for k, members in groups.items()} for n in names}
    # In sample: every space but the held-out kernel's.
    outside = {k: [s for s in spaces if s not in members] for k, members in groups.items()}
    in_sample = {k: {n: mean_over(table[n], outside[k]) for n in names} for k in groups}
    order = ([default] if default is not None else []) + [n for n in names if n != default]

    folds = []
    for k in groups:
        pick = _best(in_sample[k], order, margin)
        folds.append({"kernel": k, "spaces": groups[k], "pick": pick, "pick_in_sample": in_sample[k][pick],
                      "pick_held_out": per_kernel[pick][k], "best_held_out": max(per_kernel[n][k] for n in names),
                      "default_held_out": per_kernel[default][k] if default is not None else None})
    settings = {n: {"in_sample": mean_over(table[n], spaces),
                    "held_out": float(np.mean(list(per_kernel[n].values()))),
                    "per_kernel": per_kernel[n],
                    "wins_in_sample": sum(f["pick"] == n for f in folds)} for n in names}
    selection = {"in_sample": float(np.mean([f["pick_in_sample"] for f in folds])),
                 "held_out": float(np.mean([f["pick_held_out"] for f in folds]))}
    selection["gap"] = selection["in_sample"] - selection["held_out"]
    report: dict[str, Any] = {"kernels": groups, "default": default, "margin": margin, "settings": settings,
                              "folds": folds, "selection": selection, "changes": {},
                              "keep_default": None, "replacement": None}
    if default is None:
        return report
    for challenger in names:
        if challenger == default:
            continue
        # One change at a time: in sample decides between the default and the challenger.
        decisions = {k: _best({default: in_sample[k][default], challenger: in_sample[k][challenger]},
                              [default, challenger], margin) for k in groups}
        gain = float(np.mean([per_kernel[decisions[k]][k] - per_kernel[default][k] for k in groups]))
        report["changes"][challenger] = {"decisions": decisions, "held_out_gain": gain, "kept": gain > margin}
    kept = {n: c["held_out_gain"] for n, c in report["changes"].items() if c["kept"]}
    # What choosing on every kernel would pick now; it replaces the default only if that
    # change is kept (wins held out) and choosing this way beats staying, held out.
    pick_all = _best({n: settings[n]["in_sample"] for n in names}, order, margin)
    replace = (pick_all != default and pick_all in kept
               and selection["held_out"] > settings[default]["held_out"] + margin)
    report["keep_default"] = not replace
    report["replacement"] = pick_all if replace else None
    return report


def _best(scores: Mapping[str, float], order: Sequence[str], margin: float) -> str:
    """The first of ``order`` with the best score; a later one must beat it by more than ``margin``."""
    best = order[0]
    for name in order[1:]:
        if scores[name] > scores[best] + margin + 1e-12:
            best = name
    return best


def hit_table(report: Mapping[str, Any], spaces: Sequence[str] | None = None) -> dict[str, dict[str, float]]:
    """``{strategy: {space: hit rate}}`` from a ``flashtune compare`` report (its cold comparison)."""
    return {name: {w: float(entry["workloads"][w]["evals_to_2pct"]["reached"])
                   for w in (spaces if spaces is not None else entry["workloads"])}
            for name, entry in report["strategies"].items()}


def peer_rows(table: Mapping[str, Mapping[str, float]], groups: Mapping[str, Sequence[str]]) -> dict[str, dict[str, Any]]:
    """Other tuners' settings (Kernel Tuner's) scored beside the candidates but never picked:
    per kernel the mean over the spaces they ran on (a kernel without one is None), and the
    mean over the kernels they have."""
    rows = {}
    for name, rates in table.items():
        per_kernel = {k: (float(np.mean([rates[s] for s in members if s in rates]))
                          if any(s in rates for s in members) else None) for k, members in groups.items()}
        known = [v for v in per_kernel.values() if v is not None]
        rows[name] = {"per_kernel": per_kernel, "held_out": float(np.mean(known)) if known else None,
                      "in_sample": float(np.mean(list(rates.values()))) if rates else None}
    return rows


def format_loko(report: Mapping[str, Any], title: str = "LEAVE ONE KERNEL OUT (cold)",
                peers: Mapping[str, Mapping[str, Any]] | None = None) -> str:
    """The report as text: per setting in sample / held out and per kernel, the folds' picks, the verdict."""
    kernels = list(report["kernels"])
    width = max([9, *(len(k) for k in kernels)])
    label = max([12, *(len(n) for n in report["settings"]), *(len(n) for n in (peers or {}))])
    lines = [f"== {title}: each kernel held out in turn, the setting that wins on the others scored on it",
             "hit rate within 2 % of the optimum in budget; in sample = mean over every space, held out = mean "
             "over kernels of the score on each (each kernel once)",
             f"{'setting':>{label}s} {'in sample':>9s} {'held out':>9s} " + " ".join(f"{k:>{width}s}" for k in kernels)
             + "  picked"]
    lines.append(f"{'spaces':>{label}s} {'':>9s} {'':>9s} "
                 + " ".join(f"{len(report['kernels'][k]):>{width}d}" for k in kernels))
    for name, row in sorted(report["settings"].items(), key=lambda kv: -kv[1]["held_out"]):
        mark = " (default)" if name == report.get("default") else ""
        lines.append(f"{name:>{label}s} {row['in_sample']:>9.2f} {row['held_out']:>9.2f} "
                     + " ".join(f"{row['per_kernel'][k]:>{width}.2f}" for k in kernels)
                     + f"  {row['wins_in_sample']}/{len(kernels)}{mark}")
    for name, row in (peers or {}).items():
        cells = " ".join(f"{'-' if row['per_kernel'].get(k) is None else format(row['per_kernel'][k], '.2f'):>{width}s}"
                         for k in kernels)
        held = "-" if row["held_out"] is None else f"{row['held_out']:.2f}"
        inside = "-" if row["in_sample"] is None else f"{row['in_sample']:.2f}"
        lines.append(f"{name:>{label}s} {inside:>9s} {held:>9s} {cells}  (peer, not picked)")
    sel = report["selection"]
    lines.append("picks: " + ", ".join(f"{f['kernel']} held out -> {f['pick']} {f['pick_held_out']:.2f}"
                                        for f in report["folds"]))
    lines.append(f"choosing on the other kernels: in sample {sel['in_sample']:.2f}, held out {sel['held_out']:.2f} "
                 f"(gap {sel['gap']:+.2f})")
    default = report.get("default")
    if default is not None:
        changes = report["changes"]
        if changes:
            lines.append("each change against the default, decided in sample per fold, gain held out: "
                         + ", ".join(f"{n} {c['held_out_gain']:+.2f}{' (kept)' if c['kept'] else ''}"
                                     for n, c in sorted(changes.items(), key=lambda kv: -kv[1]["held_out_gain"])))
        lines.append(f"default {default}: " + ("kept" if report["keep_default"] else
                                                f"replaced by {report['replacement']} (wins held out)"))
    return "\n".join(lines)
