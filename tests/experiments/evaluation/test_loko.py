"""Leave one kernel out (``loko``): small hit-rate tables with known answers."""

from __future__ import annotations

import pytest

from flashtune.experiments.evaluation.loko import format_loko, group_by_kernel, hit_table, kernel_of, loko, peer_rows

DEV = ["convolution_RTX_3090", "convolution_milo_A4000", "dedispersion_A100", "dedispersion_MI250X",
       "gemm_RTX_2080_Ti", "gemm_RTX_3090", "pnpoly_RTX_3090", "pnpoly_RTX_3090_T4"]


def test_the_kernel_is_the_name_before_the_gpu() -> None:
    assert [kernel_of(s) for s in DEV] == ["convolution", "convolution_milo", "dedispersion", "dedispersion",
                                           "gemm", "gemm", "pnpoly", "pnpoly"]
    assert kernel_of("b4_h32_n4096_d128_causal_bfloat16") == "b4_h32_n4096_d128_causal_bfloat16"
    groups = group_by_kernel(DEV)
    assert list(groups) == ["convolution", "convolution_milo", "dedispersion", "gemm", "pnpoly"]
    assert groups["gemm"] == ["gemm_RTX_2080_Ti", "gemm_RTX_3090"]
    assert group_by_kernel(["x_A", "y_B"], {"x_A": "k", "y_B": "k"}) == {"k": ["x_A", "y_B"]}


def _table(rows: dict[str, list[float]], spaces: list[str]) -> dict[str, dict[str, float]]:
    return {name: dict(zip(spaces, rates)) for name, rates in rows.items()}


SPACES = ["a_G1", "a_G2", "b_G1", "c_G1"]  # kernels a (two spaces), b, c


def test_a_setting_that_wins_everywhere_is_picked_every_fold_and_replaces_the_default() -> None:
    table = _table({"default": [0.5, 0.5, 0.4, 0.6], "better": [0.7, 0.7, 0.6, 0.8]}, SPACES)
    report = loko(table, "default")
    assert [f["pick"] for f in report["folds"]] == ["better"] * 3
    assert report["settings"]["better"]["in_sample"] == pytest.approx(0.7)
    assert report["settings"]["better"]["held_out"] == pytest.approx((0.7 + 0.6 + 0.8) / 3)
    assert report["settings"]["default"]["held_out"] == pytest.approx(0.5)
    assert report["selection"]["held_out"] == pytest.approx((0.7 + 0.6 + 0.8) / 3)
    # Fold a: in sample is b and c's spaces only.
    assert report["folds"][0]["pick_in_sample"] == pytest.approx(0.7)
    assert report["changes"]["better"]["held_out_gain"] == pytest.approx(0.2)
    assert report["keep_default"] is False and report["replacement"] == "better"


def test_a_change_that_raises_one_kernel_only_is_not_kept() -> None:
    # "spike" is far better on kernel b, equal elsewhere: in sample it wins on every fold but
    # b's, so where it would have been picked it gains nothing held out.
    table = _table({"default": [0.5, 0.5, 0.2, 0.6], "spike": [0.5, 0.5, 0.9, 0.6]}, SPACES)
    report = loko(table, "default")
    picks = {f["kernel"]: f["pick"] for f in report["folds"]}
    assert picks == {"a": "spike", "b": "default", "c": "spike"}
    assert report["settings"]["spike"]["in_sample"] > report["settings"]["default"]["in_sample"]
    assert report["changes"]["spike"]["held_out_gain"] == pytest.approx(0.0)
    assert report["changes"]["spike"]["kept"] is False
    assert report["keep_default"] is True and report["replacement"] is None
    # Picked on a and c, where it ties the default: the selection's in-sample mean overstates it.
    assert report["selection"]["in_sample"] > report["selection"]["held_out"]


def test_a_change_fitted_to_one_kernel_loses_held_out() -> None:
    # "fitted" gains a lot on a's two spaces and loses a little on b and c: in sample (per space)
    # it looks better, held out it is worse.
    table = _table({"default": [0.5, 0.5, 0.6, 0.6], "fitted": [0.9, 0.9, 0.5, 0.5]}, SPACES)
    report = loko(table, "default")
    assert report["settings"]["fitted"]["in_sample"] == pytest.approx(0.7)
    assert report["settings"]["default"]["in_sample"] == pytest.approx(0.55)
    # Held out a: b and c say default (0.5 for a). Held out b: a + c say fitted (0.5 < 0.6 on b). Same for c.
    assert {f["kernel"]: f["pick"] for f in report["folds"]} == {"a": "default", "b": "fitted", "c": "fitted"}
    assert report["selection"]["held_out"] == pytest.approx((0.5 + 0.5 + 0.5) / 3)
    assert report["changes"]["fitted"]["held_out_gain"] == pytest.approx((0 - 0.1 - 0.1) / 3)
    assert report["keep_default"] is True


def test_ties_in_sample_go_to_the_default_and_a_margin_must_be_beaten() -> None:
    table = _table({"other": [0.5, 0.5, 0.5, 0.5], "default": [0.5, 0.5, 0.5, 0.5]}, SPACES)
    assert {f["pick"] for f in loko(table, "default")["folds"]} == {"default"}
    assert {f["pick"] for f in loko(table)["folds"]} == {"other"}  # no default: the first given
    close = _table({"default": [0.5, 0.5, 0.5, 0.5], "other": [0.55, 0.55, 0.55, 0.55]}, SPACES)
    assert loko(close, "default", margin=0.1)["keep_default"] is True
    assert loko(close, "default")["keep_default"] is False


def test_without_a_default_there_is_no_verdict() -> None:
    report = loko(_table({"x": [0.1, 0.2, 0.3, 0.4], "y": [0.4, 0.3, 0.2, 0.1]}, SPACES))
    assert report["keep_default"] is None and report["changes"] == {}
    assert report["selection"]["gap"] == pytest.approx(report["selection"]["in_sample"] - report["selection"]["held_out"])


@pytest.mark.parametrize("table, default, message", [
    ({}, None, "no settings"),
    ({"x": {"a_G1": 0.1, "a_G2": 0.2}}, None, "two kernels"),
    ({"x": {"a_G1": 0.1, "b_G1": 0.2}, "y": {"a_G1": 0.1}}, None, "judged on"),
    ({"x": {"a_G1": 0.1, "b_G1": 0.2}}, "z", "not among"),
])
def test_bad_tables_are_named(table, default, message) -> None:
    with pytest.raises(ValueError, match=message):
        loko(table, default)


def test_a_compare_report_reads_as_a_table_and_prints_with_peers() -> None:
    def entry(rates: dict[str, float]) -> dict:
        return {"workloads": {w: {"evals_to_2pct": {"reached": r}} for w, r in rates.items()}}

    compare_report = {"strategies": {"portfolio": entry({"a_G1": 0.6, "b_G1": 0.4}),
                                     "gp": entry({"a_G1": 0.6, "b_G1": 0.2})}}
    table = hit_table(compare_report)
    assert table == {"portfolio": {"a_G1": 0.6, "b_G1": 0.4}, "gp": {"a_G1": 0.6, "b_G1": 0.2}}
    report = loko(table, "portfolio")
    peers = peer_rows({"kt random_sample": {"a_G1": 0.2}}, report["kernels"])
    assert peers["kt random_sample"]["per_kernel"] == {"a": 0.2, "b": None}
    text = format_loko(report, peers=peers)
    assert text.startswith("== LEAVE ONE KERNEL OUT")
    assert "default portfolio: kept" in text and "(peer, not picked)" in text


def _cache(path, seed: int):
    """A small Kernel Tuner cache of 12 configs, named kernel_GPU."""
    import json

    import numpy as np

    rng = np.random.default_rng(seed)
    cache = {f"{x},{y}": {"x": x, "y": y, "time": float(1.0 + abs(x - 3) + abs(y - 16) / 8 + rng.uniform(0, 0.3))}
             for x in (1, 2, 3, 4) for y in (8, 16, 32)}
    path.write_text(json.dumps({"device_name": "Synthetic GPU", "kernel_name": "toy", "problem_size": 1,
                                "tune_params_keys": ["x", "y"], "tune_params": {"x": [1, 2, 3, 4], "y": [8, 16, 32]},
                                "objective": "time", "cache": cache}))
    return path


def _has_kernel_tuner() -> bool:
    import importlib.util

    return importlib.util.find_spec("kernel_tuner") is not None


def test_compare_on_several_kernels_leads_with_leave_one_kernel_out(tmp_path, capsys) -> None:
    import json

    from flashtune.experiments.cli.main import main

    tables = [_cache(tmp_path / f"{name}.json", seed) for seed, name in
              enumerate(("toya_GPU1", "toya_GPU2", "toyb_GPU1", "toyc_GPU1"))]
    out = tmp_path / "report.json"
    peer = ["--kernel-tuner", "random_sample", "--kernel-tuner-seeds", "1"] if _has_kernel_tuner() else []
    assert main(["compare", "--tables", *map(str, tables), "--seeds", "2", "--budget", "4",
                 "--strategies", "portfolio,random", "--priors", "none", "--jobs", "1", "--json", str(out), *peer]) == 0
    report = json.loads(out.read_text())
    assert list(report["loko"]["kernels"]) == ["toya", "toyb", "toyc"]
    if peer:  # Kernel Tuner's strategies stay in the same run, scored beside ours, never picked
        row = report["loko"]["peers"]["KT random_sample"]
        assert set(row["per_kernel"]) == {"toya", "toyb", "toyc"} and 0.0 <= row["held_out"] <= 1.0
        assert report["kernel_tuner"]["spaces"] == [t.stem for t in tables]
    assert report["loko"]["default"] == "portfolio" and isinstance(report["loko"]["keep_default"], bool)
    for name, entry in report["strategies"].items():
        assert report["loko"]["settings"][name]["in_sample"] == pytest.approx(entry["hit_rate_2pct"])
    printed = capsys.readouterr().out
    assert printed.startswith("== LEAVE ONE KERNEL OUT") and printed.index("== LEAVE ONE") < printed.index("== COLD")


def test_compare_on_one_kernel_has_no_loko_table(tmp_path, capsys) -> None:
    import json

    from flashtune.experiments.cli.main import main

    tables = [_cache(tmp_path / f"toya_GPU{n}.json", n) for n in (1, 2)]
    out = tmp_path / "report.json"
    assert main(["compare", "--tables", *map(str, tables), "--seeds", "1", "--budget", "3", "--strategies", "random",
                 "--priors", "none", "--jobs", "1", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["loko"] is None
    assert capsys.readouterr().out.startswith("== COLD")
