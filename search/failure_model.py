"""A learned model of where configs fail, so a search stops paying for failures it can foresee.

Compile and runtime failures cluster: a kernel runs out of registers, shared memory or
threads per block once its tiles or blocks grow past a limit, so on a recorded space the
failing configs are those at or above some failing config in every ordered tunable (the
development set: convolution RTX 3090 fails on 23 % of its configs, pnpoly on 8 %,
convolution_milo A4000 on 4 %, all towards the large end). This model learns that region
from the failures a study has seen, as *failure cones*: a config at or above a failed one
in every tunable (equal in every unordered one) is predicted to fail too.

Why cones and not a classifier: on the development set's spaces with failures, from 15-50
random measured configs (``docs/lab/tools/failure_rules.py``), a "k nearest all failed" vote
was right 0.36-0.88 of the time it ruled a config out (k = 3), an L2 logistic regression at
p >= 0.95 ruled out little (recall <= 0.006) and was right 0.62 of the time on convolution from
15 configs, and cones needing two failures were right 0.95-1.00 of the time, never ruling out a
config within 2 % of the optimum; learning each tunable's direction instead of "larger fails"
did worse (0.30-0.94).

It rules a config out only with evidence, and its own record decides how far to trust it:

- cold start: no failure seen, nothing ruled out;
- a cone holding a measured success is dropped (the data says failure is not monotone
  there), so one success in a region frees it;
- the rule as a whole must have held on the study's own measurements: of the measured
  configs that lie in another measured failure's cone, the share that failed, as a Beta(1, 1)
  posterior mean, must reach ``confidence`` (the default 0.8 needs three such failures
  and no success, or seven against one), and a config must lie in ``evidence`` live cones;
- ``FailureModel`` only predicts; the strategy decides what to do with it
  (``PooledStrategy``: sets the configs aside, never all of them, and now and then asks
  as if it had no model, so a wrong rule cannot trap a study).
"""

from __future__ import annotations

import numpy as np

from flashtune.search.space import SearchSpace
from flashtune.values.types import Status

#: Failures that are a property of the config (resources, code paths), and so cluster. A
#: timeout or a crash can be the machine's (a busy GPU, a lost worker), and teaches nothing
#: about the config's neighbours.
LEARNED_FAILURES = frozenset({Status.INFEASIBLE, Status.OUT_OF_RESOURCES, Status.COMPILE_ERROR,
                              Status.RUNTIME_ERROR, Status.WRONG_RESULT, Status.UNSAFE})


class FailureModel:
    """Failure cones learned from a study's measurements, over a space's value indices.

    Args:
        space: the search space (which tunables are ordered).
        confidence: the least Beta(1, 1) posterior mean of the cone rule's own hit rate on
            the measurements (see the module docstring) before it rules anything out.
        evidence: how many live failure cones a config must lie in to be ruled out.
    """

    def __init__(self, space: SearchSpace, *, confidence: float = 0.8, evidence: int = 2) -> None:
        if not 0.0 < confidence < 1.0:
            raise ValueError(f"FailureModel: confidence must be in (0, 1), got {confidence!r}")
        if evidence < 1:
            raise ValueError(f"FailureModel: evidence must be >= 1, got {evidence!r}")
        self.confidence = confidence
        self.evidence = evidence
        #: Per tunable: whether its values have an order (a cone extends up it) or are
        #: choices (a cone keeps the failing config's choice).
        self._ordered = np.array([space.is_ordered(n) for n in space.names], dtype=bool)
        self._failed: list[np.ndarray] = []
        self._succeeded: list[np.ndarray] = []

    @property
    def n_failed(self) -> int:
        return len(self._failed)

    def observe(self, indices: np.ndarray | tuple[int, ...], failed: bool) -> None:
        """One measured config (``SearchSpace.to_indices``) and whether it failed."""
        (self._failed if failed else self._succeeded).append(np.asarray(indices, dtype=np.int64))

    def trust(self) -> float:
        """The cone rule's record on the measurements: Beta(1, 1) posterior mean of the share
        of measured configs inside another measured failure's cone that failed."""
        if not self._failed:
            return 0.5
        failed = np.array(self._failed)
        hits = _inside(failed, failed, self._ordered)
        np.fill_diagonal(hits, False)  # a failure does not confirm its own cone
        confirmed = int(hits.any(axis=1).sum())
        refuted = int(_inside(np.array(self._succeeded), failed, self._ordered).any(axis=1).sum()) \
            if self._succeeded else 0
        return (confirmed + 1) / (confirmed + refuted + 2)

    def ruled_out(self, indices: np.ndarray) -> np.ndarray:
        """Mask over the rows of ``indices`` (configs as value indices): predicted to fail
        with near certainty. All False until the evidence and the rule's record are there."""
        out = np.zeros(len(indices), dtype=bool)
        if len(self._failed) < self.evidence or self.trust() < self.confidence:
            return out
        failed = np.array(self._failed)
        if self._succeeded:
            # A cone with a success in it is refuted: failure is not monotone there.
            refuted = _inside(np.array(self._succeeded), failed, self._ordered).any(axis=0)
            failed = failed[~refuted]
        if len(failed) < self.evidence:
            return out
        return _inside(np.asarray(indices, dtype=np.int64), failed, self._ordered).sum(axis=1) >= self.evidence


def _inside(configs: np.ndarray, apexes: np.ndarray, ordered: np.ndarray) -> np.ndarray:
    """inside[i, j]: config i lies in apex j's cone (at or above it in every ordered tunable,
    equal in every unordered one)."""
    difference = configs[:, None, :] - apexes[None, :, :]
    return np.where(ordered[None, None, :], difference >= 0, difference == 0).all(axis=2)
