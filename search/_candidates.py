"""The feasible configs a strategy may still ask, as points of a unit cube.

Model-based strategies propose points of the whole product space; on this kernel's
space a fifth of those cannot run (shared memory) and late in a study most of the rest
were already measured. ``CandidatePool`` turns any proposal into a config worth a trial:
feasible by ``SearchSpace.is_feasible`` and not yet asked, the nearest one to what the
model wanted. It also draws the space-filling start designs.

Points are index vectors (``SearchSpace.to_indices``) scaled to [0, 1] per tunable, so
every knob weighs the same in a distance whatever its number of values, and ordered
values (block sizes, stages) stay ordered.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flashtune.search.space import SearchSpace
from flashtune.values.config import Config


class CandidatePool:
    """Every feasible config of a space, and which of them are still open to ask.

    Args:
        space: the search space; its feasible configs are enumerated once, here.
    """

    def __init__(self, space: SearchSpace) -> None:
        self.space = space
        self.configs: list[Config] = space.feasible_configs()
        self._position = {config: i for i, config in enumerate(self.configs)}
        spans = np.array([max(len(space.values(name)) - 1, 1) for name in space.names], dtype=float)
        self._spans = spans
        #: Each feasible config's value indices (``SearchSpace.to_indices``), one row each.
        self.indices: np.ndarray = space.feasible_indices()
        self.points: np.ndarray = self.indices / spans
        #: Asked or told: never offered again.
        self.closed: np.ndarray = np.zeros(len(self.configs), dtype=bool)
        #: Set aside for now (``set_aside``: predicted to fail), not closed: offered again
        #: once the prediction is withdrawn.
        self.aside: np.ndarray = np.zeros(len(self.configs), dtype=bool)
        #: What may be asked now: neither closed nor set aside.
        self.open: np.ndarray = np.ones(len(self.configs), dtype=bool)

    def __len__(self) -> int:
        return len(self.configs)

    def __contains__(self, config: object) -> bool:
        """Whether ``config`` is a feasible config of the space (open or not)."""
        return config in self._position

    @property
    def n_open(self) -> int:
        return int(self.open.sum())

    def is_open(self, config: Config) -> bool:
        """Feasible and never asked nor told."""
        i = self._position.get(config)
        return i is not None and bool(self.open[i])

    def close(self, config: Config) -> None:
        """Never offer ``config`` again (asked, or told by someone else)."""
        i = self._position.get(config)
        if i is not None:
            self.closed[i] = True
            self.open[i] = False
            if not self.open.any():
                self._release()

    def set_aside(self, mask: np.ndarray | None) -> None:
        """Offer none of the configs of ``mask`` (over ``configs``) until the next call; None
        offers them all again. Never every config still open: a prediction that would leave
        nothing to ask is ignored, so a space that is all failures is still searched out."""
        self.aside = np.zeros(len(self.configs), dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
        self.open = ~self.closed & ~self.aside
        if not self.open.any():
            self._release()

    def _release(self) -> None:
        self.aside = np.zeros(len(self.configs), dtype=bool)
        self.open = ~self.closed

    def complete(self, config: Config) -> Config | None:
        """``config`` with any tunable it lacks that has a single value filled in, or None.

        Priors recorded before the kernel declared a new knob lack it; while the knob has
        one value, they still name a config of this space.
        """
        if len(config) == len(self.space.names) and config in self.space:
            return config  # the common case, without building a new config
        if set(config) - set(self.space.names):
            return None
        values = dict(config)
        for name in self.space.names:
            if name not in values:
                if len(self.space.values(name)) != 1:
                    return None
                values[name] = self.space.values(name)[0]
        completed = Config(values)
        return completed if completed in self.space else None

    def point(self, config: Config) -> np.ndarray:
        """``config`` in the unit cube (any config of the space, feasible or not)."""
        return np.asarray(self.space.to_indices(config), dtype=float) / self._spans

    def open_configs(self) -> list[Config]:
        return [self.configs[i] for i in np.flatnonzero(self.open)]

    def open_points(self) -> tuple[np.ndarray, np.ndarray]:
        """Positions (into ``configs``) and unit-cube points of the open configs."""
        where = np.flatnonzero(self.open)
        return where, self.points[where]

    def open_near(self, centres: Sequence[Config], steps: int, *, or_all: bool = True,
                  repaired: bool = False) -> np.ndarray:
        """Positions of the open configs at most ``steps`` value steps from any of ``centres``.

        Steps are counted over all tunables together (one tunable one value up is one
        step), the neighbourhood a local search walks. All open configs if ``steps`` is 0
        or none is that close (the neighbourhoods were searched out; ``or_all=False``: none).

        ``repaired``: a step that leaves the feasible set counts as taken with the least
        change of the other tunables that makes it feasible (``_repaired_steps``).
        """
        where = np.flatnonzero(self.open)
        if steps <= 0 or not centres or len(where) == 0:
            return where
        anchors = np.array([self.space.to_indices(c) for c in centres], dtype=float)
        # Value steps from each config to each anchor (configs x anchors), once for both uses.
        distance = np.abs(self.indices[:, None, :] - anchors[None, :, :]).sum(axis=2)
        near = (distance <= steps).any(axis=1)
        if repaired:
            near |= self._repaired_steps(anchors, distance, steps)
        near = near[where]
        return where[near] if near.any() or not or_all else where

    def _repaired_steps(self, anchors: np.ndarray, distance: np.ndarray, steps: int) -> np.ndarray:
        """Mask over ``configs``: the repaired one-value steps from ``anchors`` (``distance``: value
        steps from each config to each anchor), widened by ``steps - 1``.

        On a kernel the limits couple the knobs: at head dim 128 a 128x128 tile fits at most
        two stages, so from a best at 128x64 with five stages the next BLOCK_N is infeasible
        at every stage count within one step, and a one-step region never shows the larger
        tile at all (the tuner target, D128 causal after D128 full: two seeds in ten
        spent 40 trials on 128x64 variants, 19 % from a 128x128 optimum). For each tunable and
        direction whose plain step is infeasible, this keeps the feasible configs that take
        the step with the fewest other value steps (and up to ``steps - 1`` more).
        """
        keep = np.zeros(len(self.configs), dtype=bool)
        for a, anchor in enumerate(anchors):
            for k in range(anchors.shape[1]):
                for target in (anchor[k] - 1, anchor[k] + 1):
                    taking = self.indices[:, k] == target
                    if not taking.any():
                        continue  # off the end of the tunable's values, or infeasible at every value
                    least = distance[taking, a].min()
                    if least > 1:  # a plain step (distance 1) is in the region already
                        keep |= taking & (distance[:, a] <= least + steps - 1)
        return keep

    def untried_steps(self, centre: Config, rng: np.random.Generator) -> list[Config]:
        """One open config for each one-value step of an ordered tunable from ``centre`` that no
        closed config has taken: the step with the fewest other value steps (repaired where the
        plain step is infeasible), ties broken at random."""
        anchor = np.asarray(self.space.to_indices(centre), dtype=float)
        distance = np.abs(self.indices - anchor).sum(axis=1)
        steps: list[Config] = []
        for k, name in enumerate(self.space.names):
            if not self.space.is_ordered(name):
                continue
            for target in (anchor[k] - 1, anchor[k] + 1):
                taking = self.indices[:, k] == target
                if not taking.any():
                    continue
                least = taking & (distance == distance[taking].min())
                if (least & ~self.open).any() or not (least & self.open).any():
                    continue  # taken already (asked or told), or nothing left to take it
                steps.append(self.configs[int(rng.choice(np.flatnonzero(least & self.open)))])
        return steps

    def nearest_open(self, point: Sequence[float] | np.ndarray, rng: np.random.Generator) -> Config | None:
        """The open config closest to ``point`` (unit cube); ties broken at random.

        A random tie-break matters: a deterministic one would walk every seed and every
        repeated proposal towards the same corner of the space.
        """
        where, points = self.open_points()
        if len(where) == 0:
            return None
        distance = np.sqrt(((points - np.asarray(point, dtype=float)) ** 2).sum(axis=1))
        ties = np.flatnonzero(distance <= distance.min() + 1e-12)
        return self.configs[int(where[rng.choice(ties)])]

    def random_open(self, rng: np.random.Generator) -> Config | None:
        where = np.flatnonzero(self.open)
        return None if len(where) == 0 else self.configs[int(rng.choice(where))]

    def spread_open(self, n: int, rng: np.random.Generator, *, around: Sequence[np.ndarray] = ()) -> list[Config]:
        """Up to ``n`` open configs far from each other and from ``around`` (greedy maximin).

        Random search's first picks cluster by chance; a spread design sees every region
        of a small space once, which is what a surrogate model needs first.

        Args:
            n: how many configs.
            rng: picks the first config (when ``around`` is empty) and breaks ties.
            around: points already known (priors measured, history); the design avoids them.
        """
        where, points = self.open_points()
        chosen: list[int] = []
        if len(where) == 0 or n <= 0:
            return []
        if around:
            known = np.asarray(list(around), dtype=float)
            nearest = np.sqrt(((points[:, None, :] - known[None, :, :]) ** 2).sum(axis=2)).min(axis=1)
        else:
            first = int(rng.integers(len(where)))
            chosen.append(first)
            nearest = np.sqrt(((points - points[first]) ** 2).sum(axis=1))
        while len(chosen) < min(n, len(where)):
            candidates = np.flatnonzero(nearest >= nearest.max() - 1e-12)
            candidates = np.setdiff1d(candidates, chosen)
            pick = int(rng.choice(candidates))
            chosen.append(pick)
            nearest = np.minimum(nearest, np.sqrt(((points - points[pick]) ** 2).sum(axis=1)))
        return [self.configs[int(where[i])] for i in chosen]

    def cover_open(self, rng: np.random.Generator, *, seen: Sequence[Config] = ()) -> list[Config]:
        """A few open configs that together show every landmark value not ``seen`` yet.

        Landmarks (``SearchSpace.landmarks``) are every choice of an unordered tunable
        and both ends of an ordered one, shown in two parts:

        - every choice of the unordered tunables at the middle of the ordered ranges: a
          greedy set cover of those choices, each pick the open config nearest the center
          (over the ordered tunables) among those that show the most choices still unseen;
        - then both ends of every ordered tunable: a greedy set cover of the ends, ties
          broken at random.

        Why apart: a choice seen only once, at an end of the other knobs, is confounded with
        that end. One cover of both (before the second round of search work) showed each of this kernel's
        ten load modes once, mostly at BLOCK_N 32, so both Gluon kernels were first measured
        at a tile a third slower than their best, and GP never went back to them. A strategy
        that starts from the middle of every range never measures one stage or the largest
        tile until its model asks for them, and a model fitted on middles rarely does; the
        ends part is the cheapest way to put no bet on where the optimum is.

        A config in ``seen`` with an ordered tunable of three or more values at an end (one
        stage, the largest tile) does not count as showing its unordered choices, for the same
        reason: D256 in a run, the earlier studies' best configs that fit were a Gluon
        tile at one stage (0.61 of the optimum, that tile at two stages); counted as showing the
        Gluon loads, they kept them out of the cover, and one seed in ten ended at 0.725 where
        cold runs reached the optimum in two trials.

        Args:
            rng: breaks ties between equally covering (and equally central) configs.
            seen: configs measured or planned already; their values count as seen (as above)
                and they are not picked.
        """
        names = self.space.names
        taken = set(seen)
        blocked = np.array([self._position.get(c, -1) for c in taken], dtype=np.int64)
        where = np.setdiff1d(np.flatnonzero(self.open), blocked)
        ordered = np.array([self.space.is_ordered(n) for n in names], dtype=bool)
        # Squared distance of each open config to the center, over the ordered tunables only
        # (an unordered tunable's index is a listing order, not a position).
        off_center = ((self.points[where][:, ordered] - 0.5) ** 2).sum(axis=1)
        chosen: list[Config] = []
        for part, central in ((~ordered, True), (ordered, False)):
            # The center decides between the unordered part's picks; the ends part's ties are random.
            closeness = off_center if central else np.zeros(len(where))
            shown = [*taken, *chosen]
            if central:
                # A choice shown only at an end of a range that has a middle (one stage, the
                # largest tile) is confounded with that end: it has not been seen yet.
                shown = [c for c in shown if not self._at_an_end(c, ordered)]
            wanted = self._unseen_landmarks(part, shown)
            picks = self._greedy_cover(wanted, where, closeness, rng)
            chosen += [self.configs[int(where[i])] for i in picks]
            keep = np.setdiff1d(np.arange(len(where)), picks)
            where, off_center = where[keep], off_center[keep]
        return chosen

    def _at_an_end(self, config: Config, ordered: np.ndarray) -> bool:
        """Whether ``config`` has an ordered tunable of three or more values at its first or last."""
        for k, name in enumerate(self.space.names):
            values = self.space.values(name)
            if ordered[k] and len(values) >= 3 and config.get(name) in (values[0], values[-1]):
                return True
        return False

    def _unseen_landmarks(self, part: np.ndarray, seen: Sequence[Config]) -> np.ndarray:
        """wanted[k, j]: value j of tunable k (one of ``part``) is a landmark no config of
        ``seen`` shows (index arrays: a pass over 18,000 configs per pick costs milliseconds)."""
        names = self.space.names
        width = max(len(self.space.values(n)) for n in names)
        wanted = np.zeros((len(names), width), dtype=bool)
        for k, name in enumerate(names):
            values = self.space.values(name)
            if part[k] and len(values) > 1:
                wanted[k, [values.index(v) for v in self.space.landmarks(name)]] = True
        for config in seen:
            for k, name in enumerate(names):
                if name in config and config[name] in self.space.values(name):
                    wanted[k, self.space.values(name).index(config[name])] = False
        return wanted

    def _greedy_cover(self, wanted: np.ndarray, where: np.ndarray, closeness: np.ndarray,
                      rng: np.random.Generator) -> list[int]:
        """Indices into ``where`` of a greedy set cover of ``wanted``: each pick shows the most
        landmarks still wanted, then has the least ``closeness``; exact ties at random."""
        rows = self.indices[where]
        columns = np.arange(rows.shape[1])
        left = np.ones(len(where), dtype=bool)
        picks: list[int] = []
        while wanted.any() and left.any():
            gains = np.where(left, wanted[columns, rows].sum(axis=1), -1)
            if gains.max() <= 0:
                break  # the rest are infeasible everywhere (e.g. the largest tile with the most stages)
            best = np.flatnonzero(gains == gains.max())
            best = best[closeness[best] <= closeness[best].min() + 1e-12]
            pick = int(rng.choice(best))
            wanted[columns, rows[pick]] = False
            left[pick] = False
            picks.append(pick)
        return picks

    def latin_open(self, n: int, rng: np.random.Generator, *, exclude: Sequence[Config] = ()) -> list[Config]:
        """Up to ``n`` open configs whose values cover each tunable's range evenly (a Latin design).

        Each tunable's values are dealt out in turn, shuffled independently per tunable,
        and each resulting point is moved to its nearest open config. Unlike a maximin
        design, which starts in the corners (on a kernel's space, the worst configs),
        every value of every tunable is seen about equally often.
        """
        chosen: list[Config] = []
        if n <= 0:
            return chosen
        available = self.open.copy()
        for config in exclude:
            i = self._position.get(config)
            if i is not None:
                available[i] = False
        columns = []
        for name in self.space.names:
            count = len(self.space.values(name))
            levels = np.resize(rng.permutation(count), n)  # each value once before any twice
            columns.append(rng.permutation(levels) / max(count - 1, 1))
        for point in np.array(columns).T:
            where = np.flatnonzero(available)
            if len(where) == 0:
                break
            distance = np.sqrt(((self.points[where] - point) ** 2).sum(axis=1))
            ties = np.flatnonzero(distance <= distance.min() + 1e-12)
            pick = int(where[rng.choice(ties)])
            chosen.append(self.configs[pick])
            available[pick] = False
        return chosen


def take_unseen(queue: list[Config], seen: set[Config], *, index: int = 0) -> Config | None:
    """Pop configs from ``queue`` (at ``index``) until one is not in ``seen``; mark it seen."""
    while queue:
        config = queue.pop(index)
        if config not in seen:
            seen.add(config)
            return config
    return None
