"""bench_host_pieces runs this tree's real host path (dispatcher, prepared decode call, the
bound launch's host work, the transformers function) on CPU tensors up to the launch."""

from __future__ import annotations

import bench_host_pieces
import pytest
import torch

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="CPU benchmark of the host path")


def test_every_piece_runs_the_prepared_path_and_stops_before_the_launch(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    tree = bench_host_pieces.load_tree(None)
    t = bench_host_pieces.decode_inputs(1, 256, device="cpu")
    pieces = bench_host_pieces.paths(tree, t)
    dispatcher = tree["runtime/dispatching/dispatch.py"]._DEFAULT
    prepared = len(dispatcher._calls)
    for label, call in pieces.items():
        call()
    assert len(dispatcher._calls) == prepared  # every call hit a prepared key: none ran the launcher
    out = pieces["prepared call (checks, output, bound)"]()
    assert out.shape == t["q"].shape and out.dtype == torch.bfloat16  # the output, allocated; no launch
    args, key = pieces["BoundDecode arguments + key"]()
    assert args[0] is t["q"] and args[1] is t["k"] and isinstance(key, bool)  # the common case's key
    hf_out = pieces["transformers fn, ranges"]()
    assert hf_out[1] is None and hf_out[0].shape == (1, 1, bench_host_pieces.Q_HEADS, bench_host_pieces.HEAD_DIM)


def test_main_prints_each_piece(capsys):
    assert bench_host_pieces.main(["--calls", "3", "--rounds", "1"]) == 0
    text = capsys.readouterr().out
    assert "op + key ranges, whole path" in text and "transformers fn, no mask" in text
