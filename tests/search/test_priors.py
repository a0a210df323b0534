"""PriorBook: priors ranked by relative slowdown, each source apart."""

from __future__ import annotations

from flashtune.kernels.config import Config
from flashtune.objectives.types import Measurement, Status, Workload
from flashtune.search.priors import PriorBook

SMALL = Workload(1, 8, 8, 1024, 1024, 64)
LARGE = Workload(8, 32, 32, 8192, 8192, 128)


def _m(workload: Workload, a: int, ms: float | None, fingerprint: str = "gpu") -> Measurement:
    config = Config(a=a)
    if ms is None:
        return Measurement.failure(config, workload, Status.COMPILE_ERROR, source="prior", fingerprint=fingerprint)
    return Measurement(config=config, workload=workload, status=Status.OK, median_ms=ms, source="prior",
                       fingerprint=fingerprint)


def test_sources_take_turns_whatever_their_scale() -> None:
    book = PriorBook()
    # The large workload is 1000x slower: raw times would rank all its configs last.
    for a, ms in [(1, 1.0), (2, 1.01), (3, 2.0)]:
        book.add(_m(SMALL, a, ms))
    for a, ms in [(4, 1000.0), (5, 1500.0), (1, 3000.0)]:
        book.add(_m(LARGE, a, ms))
    # Each source's best, then each one's second, ...; a config ranked twice comes once.
    assert book.ranked() == [Config(a=1), Config(a=4), Config(a=2), Config(a=5), Config(a=3)]


def test_a_config_both_sources_rank_first_comes_first() -> None:
    book = PriorBook()
    for workload in (SMALL, LARGE):
        book.add(_m(workload, 7, 1.0))
        book.add(_m(workload, 8, 2.0))
    book.add(_m(LARGE, 9, 0.5, fingerprint="other-gpu"))
    # 7 leads two rankings, 9 one: 7 first, then 9, then the runners-up.
    assert book.ranked() == [Config(a=7), Config(a=9), Config(a=8)]


def test_failures_are_never_ranked() -> None:
    book = PriorBook()
    book.add(_m(SMALL, 1, None))
    book.add(_m(SMALL, 2, 3.0))
    assert book.ranked() == [Config(a=2)]
    assert len(book) == 2


def test_empty_book() -> None:
    assert PriorBook().ranked() == []
