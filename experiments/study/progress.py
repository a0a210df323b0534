"""A tqdm progress bar as a loop callback: trials done, best time and TFLOP/s so far."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import IO

from flashtune.search.loop import Trial


class ProgressBar:
    """Loop callback drawing ``[study] 12/50 best 1.234 ms 456.7 TFLOP/s``.

    Args:
        total: the study's trial budget.
        initial: trials already done (a resumed study starts there).
        description: the bar's label (the study name).
        best_ms, best_tflops: best so far of the resumed trials.
        disable: None lets tqdm decide (off when the stream is not a terminal).
        stream: where to draw (stderr, so stdout stays for the summary).
    """

    def __init__(
        self,
        total: int,
        *,
        initial: int = 0,
        description: str = "",
        best_ms: float = math.inf,
        best_tflops: float = 0.0,
        disable: bool | None = None,
        stream: IO[str] | None = None,
    ) -> None:
        from tqdm import tqdm

        self._best_ms = best_ms
        self._best_tflops = best_tflops
        self._bar = tqdm(total=total, initial=min(initial, total), desc=description, unit="trial",
                         disable=disable, file=stream or sys.stderr, dynamic_ncols=True)
        self._show()

    def __call__(self, trial: Trial, trials: Sequence[Trial]) -> None:
        if trial.cost_ms < self._best_ms:
            self._best_ms = trial.cost_ms
            self._best_tflops = trial.measurement.tflops
        self._show()
        self._bar.update(1)

    def _show(self) -> None:
        if math.isfinite(self._best_ms):
            self._bar.set_postfix_str(f"best {self._best_ms:.4f} ms {self._best_tflops:.1f} TFLOP/s", refresh=False)
        else:
            self._bar.set_postfix_str("best -", refresh=False)

    def close(self) -> None:
        self._bar.close()
