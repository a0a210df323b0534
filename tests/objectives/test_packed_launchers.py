"""The packed kernels' sweep launchers keep one packed layout while the inputs are the same and unwritten."""

from __future__ import annotations

import torch

from flashtune.objectives import packed_launchers


def test_a_layout_is_built_once_for_the_same_inputs_and_again_for_new_or_written_ones() -> None:
    builds = []

    def layout(tensors, key=("varlen",)):
        return packed_launchers._layout_of(tensors, key, lambda: builds.append(1) or len(builds))

    q, k = torch.zeros(2), torch.zeros(2)
    assert layout((q, k)) == layout((q, k)) == 1  # the timed calls reuse the first call's layout
    assert layout((q, torch.zeros(2))) == 2  # other tensors (a new trial's inputs)
    assert layout((q, k)) == 3 and layout((q, k), ("paged", 16)) == 4  # the held ones went; another key
    q.add_(1)
    assert layout((q, k), ("paged", 16)) == 5  # written since: its version counter moved
