"""How well simple rules foresee failures on the development set, from a few random measurements.

    nice -n 10 python docs/lab/tools/failure_rules.py --json docs/results/failure-model-2026-12-06/rules.json

For each development space with failures, ``--repeats`` times: measure ``n`` random configs
(15, 30, 50), let each rule predict which of the other configs fail, and count its precision
(of the configs it rules out, the share that fail: a wrong one can be the needle), its recall
(of the failing configs, the share it rules out) and the configs within 2 % of the optimum it
ruled out. Rules: every k nearest measured configs failed (k = 3, 5); an L2 logistic regression
on the scaled value indices at p >= 0.95; the failure cones of ``flashtune.search.failure_model``
(larger in every tunable), with one or two cones required, and with each tunable's direction
learned from the measurements instead. Random configs, not a search's: a proxy for what a
study has seen; the search runs themselves are ``loko_candidates.py``'s.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from flashtune.objectives.kernel_tuner_files import load_kernel_tuner

SPACES = Path(__file__).resolve().parents[3].parent / "shared" / "search-spaces"
WITH_FAILURES = ("convolution_RTX_3090", "convolution_milo_A4000", "pnpoly_RTX_3090")


def load(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Value indices, failed, and time (inf for a failure) of every recorded config."""
    recorded = load_kernel_tuner(path)
    names = list(recorded.tunables)
    rows = [[recorded.tunables[n].index(m.config[n]) for n in names] for m in recorded.measurements]
    failed = np.array([not m.ok for m in recorded.measurements])
    times = np.array([m.median_ms if m.ok else np.inf for m in recorded.measurements])
    return np.array(rows, dtype=float), failed, times


def cones(rest: np.ndarray, apexes: np.ndarray, sign: np.ndarray) -> np.ndarray:
    d = rest[:, None, :] - apexes[None, :, :]
    return np.where(sign > 0, d >= 0, np.where(sign < 0, d <= 0, d == 0)).all(axis=2)


def logistic(x: np.ndarray, y: np.ndarray, lam: float = 0.1, steps: int = 30) -> np.ndarray:
    xb = np.hstack([x, np.ones((len(x), 1))])
    w = np.zeros(xb.shape[1])
    for _ in range(steps):  # Newton steps on the L2-penalised log-likelihood
        p = 1 / (1 + np.exp(-xb @ w))
        w -= np.linalg.solve(xb.T @ (xb * (p * (1 - p))[:, None]) + lam * np.eye(len(w)), xb.T @ (p - y) + lam * w)
    return w


def predictions(x: np.ndarray, failed: np.ndarray, seen: np.ndarray, rest: np.ndarray) -> dict[str, np.ndarray]:
    bad, good = seen[failed[seen]], seen[~failed[seen]]
    none = np.zeros(len(rest), dtype=bool)
    out: dict[str, np.ndarray] = {}
    scaled = x / np.maximum(x.max(axis=0), 1)
    distance = np.abs(scaled[rest][:, None, :] - scaled[seen][None, :, :]).sum(axis=2)
    for k in (3, 5):
        out[f"knn k={k} all failed"] = failed[seen][np.argsort(distance, axis=1)[:, :k]].all(axis=1)
    if len(bad) and len(good):
        w = logistic(scaled[seen], failed[seen].astype(float))
        out["logistic p>=0.95"] = 1 / (1 + np.exp(-(np.hstack([scaled[rest], np.ones((len(rest), 1))]) @ w))) >= 0.95
    else:
        out["logistic p>=0.95"] = none
    for learned in (False, True):
        sign = np.ones(x.shape[1])
        if learned and len(bad) and len(good):
            diff = x[bad].mean(axis=0) - x[good].mean(axis=0)
            sign = np.sign(np.where(np.abs(diff) < 1e-9, 0, diff))
        live = bad if not len(good) or not len(bad) else bad[~cones(x[good], x[bad], sign).any(axis=0)]
        for evidence in (1, 2):
            name = f"cones ({'learned directions' if learned else 'larger fails'}), {evidence} needed"
            out[name] = none if not len(live) else cones(x[rest], x[live], sign).sum(axis=1) >= evidence
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    report: dict[str, dict] = {}
    for space in WITH_FAILURES:
        x, failed, times = load(SPACES / f"{space}.json.gz")
        needles = times <= times.min() * 1.02
        for n in (15, 30, 50):
            counts: dict[str, list[int]] = {}
            for _ in range(args.repeats):
                seen = rng.choice(len(x), n, replace=False)
                rest = np.setdiff1d(np.arange(len(x)), seen)
                for rule, out in predictions(x, failed, seen, rest).items():
                    c = counts.setdefault(rule, [0, 0, 0, 0])
                    c[0] += int((out & failed[rest]).sum())
                    c[1] += int((out & ~failed[rest]).sum())
                    c[2] += int((~out & failed[rest]).sum())
                    c[3] += int((out & needles[rest]).sum())
            for rule, (tp, fp, fn, lost) in counts.items():
                row = {"precision": tp / (tp + fp) if tp + fp else None, "recall": tp / (tp + fn) if tp + fn else None,
                       "ruled_out": tp + fp, "needles_ruled_out": lost}
                report.setdefault(space, {}).setdefault(str(n), {})[rule] = row
                precision = "-" if row["precision"] is None else f"{row['precision']:.2f}"
                print(f"{space:24s} n={n:2d} {rule:40s} precision {precision:>4s} recall {row['recall']:.3f} "
                      f"needles ruled out {lost}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"repeats": args.repeats, "spaces": report}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
