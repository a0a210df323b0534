"""What priors say: which configs did well on other GPUs or workloads.

A prior's time was measured on another workload or GPU, so its milliseconds do not
mix with this study's: a 4096-token workload takes four times a 2048-token one. The
book keeps each source (workload and hardware fingerprint) apart and ranks configs by
how close each came to its own source's best. Strategies measure the top of that ranking
first: another GPU's best config reaches only 58.5-99.9 % of the optimum (BAT, see
docs/reference.md), so priors are re-measured here, never copied.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence

import numpy as np

from flashtune.values.config import Config
from flashtune.values.types import Measurement, Status, Workload

Source = tuple[Workload, str]

#: Measurements here of configs the priors rank before their agreement is judged: fewer
#: pairs make a rank correlation noise (three points agree by chance one time in six).
MIN_CHECKS = 5
#: Spearman correlation between the priors' relative slowdowns and this study's times
#: below which the priors are no longer followed. 0.3 keeps a prior that orders the
#: space roughly right (as another head dim's table does here) and drops one that does
#: no better than chance.
MIN_AGREEMENT = 0.3
#: Failures that say the config did not fit the source's workload or GPU (rejected by the static
#: model, out of resources at launch), not that the config is broken: another head dim or GPU
#: may run it. A compile error, a crash or a wrong result are the config's own and fail here too.
RESOURCE_FAILURES = (Status.INFEASIBLE, Status.OUT_OF_RESOURCES)


class PriorBook:
    """Prior measurements grouped by source, ranked by relative slowdown."""

    def __init__(self) -> None:
        self._by_source: dict[Source, dict[Config, float]] = defaultdict(dict)
        self._did_not_fit: set[Config] = set()  # configs a source failed for its resources
        # Built once per change: every strategy of a portfolio reads them.
        self._scores: dict[Config, float] | None = None  # every config's score
        self._ranked: list[Config] | None = None

    def __len__(self) -> int:
        return sum(len(table) for table in self._by_source.values())

    @property
    def n_sources(self) -> int:
        """How many sources (workload and hardware fingerprint) the priors come from."""
        return len(self._by_source)

    def add(self, measurement: Measurement) -> None:
        """Keep a prior; failures are kept too (they say what not to try first)."""
        ok = measurement.ok and math.isfinite(measurement.median_ms) and measurement.median_ms > 0
        table = self._by_source[(measurement.workload, measurement.fingerprint)]
        value = measurement.median_ms if ok else math.inf
        if not ok and measurement.status in RESOURCE_FAILURES:
            self._did_not_fit.add(measurement.config)
        table[measurement.config] = min(value, table.get(measurement.config, math.inf))
        self._scores = self._ranked = None

    def score(self, config: Config) -> float | None:
        """How close ``config`` came to its source's best, in the source where it came closest.

        1.0 is a source's best; inf means it failed wherever it was tried; None means no
        source tried it.
        """
        return self.scores().get(config)

    def scores(self) -> dict[Config, float]:
        """``score`` of every config a source tried, in one pass over the sources.

        Why one pass: a strategy scores every prior it ranks, and scoring each by rescanning
        its source's table made a warm start quadratic (10 s for 18,000 priors).
        """
        if self._scores is None:
            scores: dict[Config, float] = {}
            for table in self._by_source.values():
                best = min((v for v in table.values() if math.isfinite(v)), default=math.inf)
                for config, time_ms in table.items():
                    value = time_ms / best if math.isfinite(best) and math.isfinite(time_ms) else math.inf
                    scores[config] = min(value, scores.get(config, math.inf))
            self._scores = scores
        return self._scores

    def did_not_fit(self) -> list[Config]:
        """Configs that failed wherever they were tried, for the resources of a source at least once
        (``RESOURCE_FAILURES``): the priors say nothing of how they run where they fit."""
        scores = self.scores()
        return [c for c in self._did_not_fit if math.isinf(scores.get(c, math.inf))]

    def source_scores(self) -> list[dict[Config, float]]:
        """Each source's own ``score`` of every config it tried (1.0: that source's best; inf: failed)."""
        tables = []
        for table in self._by_source.values():
            best = min((v for v in table.values() if math.isfinite(v)), default=math.inf)
            tables.append({c: v / best if math.isfinite(best) and math.isfinite(v) else math.inf
                           for c, v in table.items()})
        return tables

    def ranked(self) -> list[Config]:
        """Configs that ran somewhere, best first.

        Sources take turns: each contributes its best config before any contributes its
        second, so one source's near-ties cannot crowd out another source's winner
        (another head dim or causality often wins with another config). Within a turn,
        configs that more sources rank there come first; a config comes once, at its
        first turn.
        """
        if self._ranked is None:
            self._ranked = self._rank()
        return list(self._ranked)

    def _rank(self) -> list[Config]:
        rankings: list[list[Config]] = []
        for table in self._by_source.values():
            ok = {c: v for c, v in table.items() if math.isfinite(v)}
            rankings.append(sorted(ok, key=lambda c: (ok[c], c.key())))
        order: list[Config] = []
        seen: set[Config] = set()
        for depth in range(max((len(r) for r in rankings), default=0)):
            turn = [r[depth] for r in rankings if depth < len(r) and r[depth] not in seen]
            # Configs that lead more rankings at this depth go first.
            for config in sorted(set(turn), key=lambda c: (-turn.count(c), c.key())):
                seen.add(config)
                order.append(config)
        return order


class PriorGuide:
    """The priors' ranking, handed out while it agrees with what the study measures.

    A strategy asks ``next_open`` for the best-ranked config it has not tried yet; the
    guide answers only while ``trusted``: until ``min_checks`` configs with a prior score
    were measured here, and afterwards while the rank correlation between their prior
    scores and their times here is at least ``min_agreement``. A prior that misleads is
    dropped after a few trials, and picked up again if later measurements (the model's
    own asks) show that it orders the space after all.

    With priors from several sources, once ``min_checks`` measurements judge them, the
    guide follows the source whose own ranking agrees best with the times here (the
    leader), not the sources' merged turns: the merged order gives every source a turn at
    each depth, so the source that orders this space right gets one ask in as many as
    there are sources, and its fourth-best config (held-out D64 causal B8, whose
    optimum is the D64 full table's fourth and the merged order's sixteenth) comes after
    a dozen configs of sources that do not. The leader is judged again at every ask; the
    guide is trusted while the leader agrees (a single source: exactly as before).

    Args:
        book: the priors.
        complete: maps a prior's config to a config of the search space (fills knobs the
            prior predates), or None when it names none.
        min_checks: measurements before the agreement is judged.
        min_agreement: lowest Spearman correlation that keeps the priors followed.
    """

    def __init__(self, book: PriorBook, complete: Callable[[Config], Config | None], *,
                 min_checks: int = MIN_CHECKS, min_agreement: float = MIN_AGREEMENT) -> None:
        self._book = book
        self._complete = complete
        self._min_checks = min_checks
        self._min_agreement = min_agreement
        self._ranking: list[Config] | None = None
        self._scores: dict[Config, float] = {}
        self._checks: dict[Config, tuple[float, float]] = {}  # config -> (prior score, cost here)
        # Per source, built at the first judgement of several sources: each source's score of
        # the space's configs, and its open-to-be ranking of them (best first).
        self._source_scores: list[dict[Config, float]] | None = None
        self._source_rankings: list[list[Config]] | None = None

    def ranking(self) -> list[Config]:
        """Configs of the space the priors ranked, best first (fixed at the first call:
        priors are told before the first ask)."""
        if self._ranking is None:
            ranking: dict[Config, None] = {}
            for prior in self._book.ranked():
                config = self._complete(prior)
                if config is not None and config not in ranking:
                    ranking[config] = None
                    self._scores[config] = self._book.score(prior) or math.inf
            self._ranking = list(ranking)
        return self._ranking

    def tried(self) -> list[Config]:
        """Configs of the space some source ran or saw fail for its own sake (a compile error,
        a wrong result): all it tried but ``did_not_fit``, in a fixed order (``Config.key``)."""
        configs = {self._complete(prior) for prior in self._book.scores()} - self.did_not_fit()
        return sorted((c for c in configs if c is not None), key=Config.key)

    def did_not_fit(self) -> set[Config]:
        """Configs of the space that did not fit any source that tried them (``PriorBook.did_not_fit``)."""
        ranked = set(self.ranking())
        configs = {self._complete(prior) for prior in self._book.did_not_fit()}
        return {c for c in configs if c is not None and c not in ranked}

    def observe(self, config: Config, cost_ms: float) -> None:
        """A measurement here (``inf`` for a failure); configs the priors never scored are ignored."""
        self.ranking()
        score = self._scores.get(config)
        if score is not None:
            self._checks[config] = (score, cost_ms)

    def agreement(self) -> float | None:
        """Spearman correlation of prior score and time here over the checked configs (None: too few).

        With several sources, the leading source's (``leader``)."""
        if self._book.n_sources > 1:
            leader = self.leader()
            return None if leader is None else leader[1]
        if len(self._checks) < self._min_checks:
            return None
        scores, costs = zip(*self._checks.values())
        return spearman(scores, costs)

    def source_agreements(self) -> list[float | None]:
        """Per source, the Spearman correlation of its own scores with the times here, over
        the checked configs it tried (None: fewer than ``min_checks`` of them)."""
        agreements: list[float | None] = []
        for scores in self._per_source()[0]:
            pairs = [(scores[c], cost) for c, (_, cost) in self._checks.items() if c in scores]
            agreements.append(spearman(*zip(*pairs)) if len(pairs) >= self._min_checks else None)
        return agreements

    def leader(self) -> tuple[int, float] | None:
        """The source (its position) whose ranking agrees best with the times here, and its
        agreement; None until a source has been judged (or with a single source)."""
        if self._book.n_sources < 2 or len(self._checks) < self._min_checks:
            return None
        judged = [(a, i) for i, a in enumerate(self.source_agreements()) if a is not None]
        if not judged:
            return None
        best = max(a for a, _ in judged)
        # Ties (small samples agree perfectly more than once) go to the first source in the
        # merged order's terms: the one whose best open config the merged ranking puts first.
        tied = [i for a, i in judged if a >= best - 1e-12]
        return (tied[0] if len(tied) == 1 else self._first_in_merged(tied)), best

    @property
    def trusted(self) -> bool:
        if not self.ranking():
            return False
        agreement = self.agreement()
        return agreement is None or agreement >= self._min_agreement

    def next_open(self, is_open: Callable[[Config], bool]) -> Config | None:
        """The best-ranked config ``is_open`` accepts, while the priors are trusted: in the
        leading source's ranking once sources are judged, else in the merged one."""
        if not self.trusted:
            return None
        leader = self.leader()
        if leader is not None:
            config = next((c for c in self._per_source()[1][leader[0]] if is_open(c)), None)
            if config is not None:
                return config
        return next((c for c in self.ranking() if is_open(c)), None)

    def _per_source(self) -> tuple[list[dict[Config, float]], list[list[Config]]]:
        if self._source_scores is None:
            completed: dict[Config, Config | None] = {}
            self._source_scores, self._source_rankings = [], []
            for table in self._book.source_scores():
                scores: dict[Config, float] = {}
                for prior, score in table.items():
                    if prior not in completed:
                        completed[prior] = self._complete(prior)
                    config = completed[prior]
                    if config is not None:
                        scores[config] = min(score, scores.get(config, math.inf))
                self._source_scores.append(scores)
                finite = [c for c, v in scores.items() if math.isfinite(v)]
                self._source_rankings.append(sorted(finite, key=lambda c: (scores[c], c.key())))
        assert self._source_rankings is not None
        return self._source_scores, self._source_rankings

    def _first_in_merged(self, sources: list[int]) -> int:
        position = {c: i for i, c in enumerate(self.ranking())}
        rankings = self._per_source()[1]
        checked = self._checks.keys()

        def first_open(i: int) -> int:
            return next((position.get(c, len(position)) for c in rankings[i] if c not in checked), len(position))
        return min(sources, key=lambda i: (first_open(i), i))


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation; ties (infinities included) share their mean rank.

    Returns 0.0 when either side is constant (no order to agree with).
    """
    rx, ry = _ranks(x), _ranks(y)
    if rx.std() == 0 or ry.std() == 0:
        return 0.0
    return float(np.corrcoef(rx, ry)[0, 1])


def _ranks(values: Sequence[float]) -> np.ndarray:
    data = np.asarray(values, dtype=float)
    order = np.argsort(data, kind="stable")
    ranks = np.empty(len(data))
    ranks[order] = np.arange(len(data), dtype=float)
    for value in np.unique(data):
        tied = data == value
        ranks[tied] = ranks[tied].mean()
    return ranks
