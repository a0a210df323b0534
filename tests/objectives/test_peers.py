"""The SDPA peers as users call them, timed side by side with what they are compared to
(CPU: SDPA's flash backend has a CPU kernel, cuDNN refuses; the protocol is the GPU's)."""

from __future__ import annotations

import pytest
import torch

from flashtune.kernels.reference import reference_attention, relative_error
from flashtune.objectives.bench import make_inputs
from flashtune.objectives.peers import (
    GQA_FORMS,
    PEERS,
    SideBySide,
    best_peers,
    gqa_forms,
    peer_calls,
    sdpa_call,
    time_peers,
    time_side_by_side,
)
from flashtune.objectives.types import Workload

CPU = torch.device("cpu")
GQA = Workload(1, 4, 2, 48, 48, 64, "float32", True)


@pytest.mark.parametrize("form", GQA_FORMS)
def test_both_gqa_forms_compute_grouped_query_attention(form: str) -> None:
    q, k, v = make_inputs(GQA, seed=3, dev=CPU)
    out = sdpa_call(PEERS["SDPA flash"], q, k, v, causal=True, form=form)()
    ref = reference_attention(q, k, v, causal=True, scale=GQA.head_dim ** -0.5)
    assert out.shape == q.shape and relative_error(out, ref) < 1e-5


def test_a_gqa_workload_times_each_peer_in_both_forms_equal_heads_in_one() -> None:
    assert gqa_forms(GQA) == ("enable_gqa", "expanded")
    assert gqa_forms(Workload.parse("1,4,64,64")) == ("expanded",)
    q, k, v = make_inputs(GQA, seed=3, dev=CPU)
    assert sorted(peer_calls(GQA, q, k, v)) == sorted(f"{p} [{f}]" for p in PEERS for f in GQA_FORMS)


def test_unknown_form_is_refused_by_name() -> None:
    q, k, v = make_inputs(GQA, seed=3, dev=CPU)
    with pytest.raises(ValueError, match="form must be one of .*'expand'"):
        sdpa_call(PEERS["SDPA flash"], q, k, v, causal=True, form="expand")


def test_the_peer_is_its_fastest_form_that_ran() -> None:
    timed = SideBySide(
        median_ms={"SDPA cuDNN [enable_gqa]": 1.04, "SDPA cuDNN [expanded]": 1.06,
                   "SDPA flash [enable_gqa]": None, "SDPA flash [expanded]": 1.8},
        errors={"SDPA flash [enable_gqa]": "No available kernel"}, sm_clock_mhz=None)
    cudnn, flash = best_peers(GQA, timed)
    assert (cudnn.name, cudnn.median_ms, cudnn.form) == ("SDPA cuDNN", 1.04, "enable_gqa")
    assert (flash.name, flash.median_ms, flash.form) == ("SDPA flash", 1.8, "expanded")


def test_time_peers_on_a_cpu_reports_refusals_and_times_the_rest_beside_a_config() -> None:
    calls = []

    def beside(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
        def run() -> None:
            calls.append(q.shape)
        return run

    peers, timed = time_peers(GQA, CPU, rep_ms=1, rounds=2, beside={"tuned": beside})
    assert [p.name for p in peers] == list(PEERS)
    cudnn, flash = peers
    # cuDNN has no CPU kernel: both forms refused with torch's reason, said once.
    assert cudnn.median_ms is None and cudnn.error.startswith("No viable backend") and ";" not in cudnn.error
    assert flash.median_ms is not None and flash.form in GQA_FORMS and flash.error == ""
    assert flash.median_ms == min(timed.median_ms[f"SDPA flash [{f}]"] for f in GQA_FORMS)
    # The function timed beside the peers ran in every round (3 calls a round on a CPU).
    assert timed.median_ms["tuned"] is not None and len(calls) == 6 and calls[0] == (1, 4, 48, 64)
    assert timed.sm_clock_mhz is None  # no NVML reading without a GPU


def test_a_refusing_function_is_not_timed_again_and_rounds_are_checked() -> None:
    tries = []

    def refuses() -> None:
        tries.append(1)
        raise RuntimeError("No available kernel. Aborting execution.\ndetails")

    timed = time_side_by_side({"refuses": refuses, "runs": lambda: None}, CPU, rounds=3, rep_ms=1)
    assert timed.median_ms == {"refuses": None, "runs": timed.median_ms["runs"]} and timed.median_ms["runs"] is not None
    assert timed.errors == {"refuses": "No available kernel. Aborting execution."} and len(tries) == 1
    with pytest.raises(ValueError, match="rounds must be >= 1, got 0"):
        time_side_by_side({"runs": lambda: None}, CPU, rounds=0)
