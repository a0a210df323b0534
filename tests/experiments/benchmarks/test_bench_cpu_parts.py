"""CPU parts of the GPU benchmarks (bench_fp8, bench_knee, ncu_metrics, best_configs):
what they read from the recorded tables and how they turn timings and counters into figures."""

import json

import bench_fp8
import bench_knee
import ncu_metrics
import pytest
from best_configs import best_configs, table_files


def test_best_configs_merge_pointer_and_variant_tables():
    name = "b4_h32_n4096_d128_full_bfloat16"
    assert len(table_files(name)) >= 2
    (best, tflops), = best_configs(name, top=1)
    assert best["loads"] in ("tma", "tma_ws") and tflops > 500  # the variant tables' row wins
    fp8 = best_configs(name, fp8=True, top=3, distinct=("BLOCK_M", "BLOCK_N", "num_warps", "loads"))
    shapes = {(c["BLOCK_M"], c["BLOCK_N"], c["num_warps"], c["loads"]) for c, _ in fp8}
    assert len(fp8) == 3 == len(shapes) and all(c["use_fp8"] for c, _ in fp8)


def test_no_table_means_no_configs():
    assert best_configs("b1_h1_n16_d64_full_bfloat16") == []


def test_fp8_summary_and_ratios():
    t = bench_fp8.summarize({"bf16#0": [2.0, 2.0], "fp8_kernel#0": [1.0, float("inf")],
                             "fp8_kernel#1": [float("inf")], "sdpa_cudnn": [1.6]}, 2e12)
    assert t["bf16#0"]["tflops"] == pytest.approx(1000) and t["fp8_kernel#1"]["tflops"] == 0.0
    r = bench_fp8.ratios(t)
    assert r["fp8_kernel/bf16"] == pytest.approx(2.0) and r["fp8_with_quant/bf16"] == 0.0
    assert r["bf16/cudnn"] == pytest.approx(0.8)


def test_fp8_gate_picks_the_fastest_variant_inside_it_and_also_configs_take_fp8():
    t = bench_fp8.summarize({"fp8_kernel#0": [1.0], "fp8_kernel#1": [0.5], "fp8_kernel#2": [2.0], "bf16#0": [0.1]},
                            flops=1e12)
    # #1 is fastest but outside the gate (a broken fp8 kernel must not count); bf16 is not fp8.
    rel = {"fp8_kernel#0": 0.02, "fp8_kernel#1": 0.5, "fp8_kernel#2": 0.01, "bf16#0": 0.001}
    assert bench_fp8.best_within_gate(t, rel, 0.1) == ("fp8_kernel#0", pytest.approx(bench_fp8.TARGET_TFLOPS))
    assert bench_fp8.best_within_gate(t, {}, 0.1) == ("", 0.0)
    (c,) = bench_fp8.fp8_forms([{"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 4, "num_stages": 1,
                                 "loads": "lean_ws_oneloop"}])
    assert c["use_fp8"] and c["loads"] == "lean_ws_oneloop"
    # A case times the recorded best bf16 config, the recorded fp8 ones, then the --also ones.
    bf16, fp8 = bench_fp8.case_configs(bench_fp8.CASES[1][1], top_fp8=2, also=[c])
    assert len(bf16) == 1 and not bf16[0]["use_fp8"] and fp8[-1] == c and all(f["use_fp8"] for f in fp8)
    with pytest.raises(ValueError, match="BLOCK_M"):
        bench_fp8.fp8_forms([{"BLOCK_M": 100, "BLOCK_N": 64, "num_warps": 4, "num_stages": 1}])


def test_knee_grid_and_plot(tmp_path):
    points = bench_knee.grid(max_tokens=4096)
    assert (1, 4096) in points and (2, 4096) not in points
    rows = [{"batch": b, "seq": n, "programs": b * 32 * n // 128, "flashtune_tflops": 100.0 + n / 100,
             "sdpa_cudnn_tflops": 120.0 + n / 90} for b, n in points]
    data = {"gpu": "test", "heads": 32, "head_dim": 128, "rows": rows,
            "config": {"BLOCK_M": 128, "BLOCK_N": 128, "loads": "tma"}}
    (tmp_path / "k.json").write_text(json.dumps(data))
    bench_knee.main(["plot", str(tmp_path / "k.json"), "--png", str(tmp_path / "k.png")])
    assert (tmp_path / "k.png").stat().st_size > 1000


QUERY = """Device GH100 (name)
Metric Name                                   Metric Type  Metric Unit  Metric Description
dram__bytes                                   Counter      byte         # of bytes accessed in DRAM
sm__pipe_tensor_op_hmma_cycles_active         Counter      cycle        # of cycles where HMMA pipe was active
sm__throughput                                Throughput   %            SM throughput
"""

RAW = (
    '"ID","Kernel Name","dram__bytes.sum.per_second","sm__throughput.avg.pct_of_peak_sustained_elapsed",'
    '"sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active","launch__registers_per_thread",'
    '"smsp__warp_issue_stalled_barrier_per_warp_active.pct","smsp__warp_issue_stalled_math_pipe_throttle_per_warp_active.pct",'
    '"smsp__average_warps_issue_stalled_wait_per_issue_active.ratio","smsp__average_warps_issue_stalled_selected_per_issue_active.ratio"\n'
    '"","","Tbyte/s","%","%","register/thread","%","%","inst","inst"\n'
    '"0","attention_forward_kernel","1.23","71.5","55.0","168","3.5","20.25","1.5","1"\n'
    '"1","attention_forward_kernel","0.5","1,080.0","n/a","255","","","",""\n'
)


def test_ncu_metric_list_keeps_only_known_names():
    names = ncu_metrics.metrics_arg(QUERY).split(",")
    assert "dram__bytes.sum.per_second" in names and "sm__throughput.avg.pct_of_peak_sustained_elapsed" in names
    assert "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active" in names
    assert not any(n.startswith("sm__pipe_tensor_op_gmma") or n.startswith("launch__") for n in names)


def test_ncu_raw_csv_parses_to_named_figures():
    first, second = ncu_metrics.parse(RAW, ["a", "b"])
    assert first["label"] == "a" and first["metrics"]["dram_bandwidth"] == 1.23
    assert first["units"]["dram_bandwidth"] == "Tbyte/s" and first["metrics"]["tensor_pipe_pct"] == 55.0
    assert first["metrics"]["registers_per_thread"] == 168
    assert list(first["stalls"]) == ["smsp__warp_issue_stalled_math_pipe_throttle_per_warp_active.pct",
                                     "smsp__warp_issue_stalled_barrier_per_warp_active.pct",
                                     "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio"]
    assert second["metrics"]["sm_throughput_pct"] == 1080.0 and "tensor_pipe_pct" not in second["metrics"]
    assert ncu_metrics.parse("==PROF== nothing\n") == []


def test_ncu_figures_land_on_an_mlflow_run(tmp_path):
    mlflow = pytest.importorskip("mlflow")
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    record = ncu_metrics.parse(RAW, ["a"])[0]
    with mlflow.start_run() as run:
        pass
    ncu_metrics.log_to_mlflow(record, run.info.run_id)
    metrics = mlflow.tracking.MlflowClient().get_run(run.info.run_id).data.metrics
    assert metrics["ncu.dram_bandwidth"] == 1.23 and metrics["ncu.registers_per_thread"] == 168
    assert metrics["ncu.stall.math_pipe_throttle"] == 20.25 and metrics["ncu.stall.wait"] == 1.5
