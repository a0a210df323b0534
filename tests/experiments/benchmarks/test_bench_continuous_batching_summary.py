"""The continuous-batching benchmark's summary: greedy agreement with sdpa per round and the
control (sdpa against itself batched otherwise), from runs as the benchmark records them."""

from flashtune.experiments.benchmarks.bench_continuous_batching import agreement, summary


def _run(mode, implementation, generated, rate=100.0):
    return dict(mode=mode, implementation=implementation, round=1, tokens_per_s=rate, ttft_median_s=0.5,
                ttft_p90_s=0.9, generated=generated)


def test_agreement_counts_equal_requests_and_the_first_difference():
    expected = {"r0": [1, 2, 3, 4], "r1": [5, 6, 7], "r2": [8, 9]}
    got = {"r0": [1, 2, 3, 4], "r1": [5, 0, 7], "r2": [8, 9, 10]}
    # r0 equal (first difference: its length, 4), r1 differs at 1, r2 longer: differs at its end, 2.
    assert agreement(expected, got) == (1, 2)
    assert agreement(expected, {}) == (0, 0)


def test_summary_reports_the_ratio_agreement_and_the_control():
    runs = [_run("at-once", "sdpa", {"r0": [1, 2], "r1": [3, 4]}, 100.0),
            _run("at-once", "op", {"r0": [1, 2], "r1": [3, 9]}, 250.0),
            _run("stream", "sdpa", {"r0": [1, 2], "r1": [7, 4]}, 80.0),
            _run("stream", "op", {"r0": [1, 2], "r1": [7, 4]}, 200.0)]
    text = summary(runs)
    lines = text.splitlines()
    at_once_op = next(line for line in lines if line.startswith("at-once") and " op " in line)
    assert "2.50x" in at_once_op and "1-1 of 2, token 1.5" in at_once_op
    stream_op = next(line for line in lines if line.startswith("stream") and " op " in line)
    assert "2.50x" in stream_op and "2-2 of 2" in stream_op
    assert lines[-1] == ("control: sdpa at-once against sdpa stream: 1 of 2 requests equal, "
                         "first difference at token 1 (median)")
