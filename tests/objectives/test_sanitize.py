"""The sanitized check on the CPU: compute-sanitizer's reports parsed, its runs driven
through a real fake executable, the verdict cache, and the child's edge cases run for real
in Triton's interpreter. The tools themselves run in tests/gpu/test_sanitize_gpu.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import sanitizer_fake  # tests/ is on sys.path (its conftest's folder)

from flashtune.kernels.config import Config
from flashtune.kernels.knobs import KERNEL_KNOBS
from flashtune.kernels.space import SAFE_DEFAULT, TUNABLES, validate_config
from flashtune.objectives import sanitize as sz
from flashtune.runtime.storage.sanitized import SanitizedCache, checked, checked_many, try_in_rounds, verdict_key

#: Packed rows as their tables and the store's screening give them: the kernel named, a paged
#: row with its cache's page size (a tile inside one page, and one over several).
PACKED_ROWS = [Config(kernel="varlen", BLOCK_M=32, BLOCK_N=64, num_warps=4, num_stages=2),
               Config(kernel="paged", page_size=32, BLOCK_N=16, num_splits=2, num_warps=4, num_stages=2),
               Config(kernel="paged", page_size=16, BLOCK_N=64, num_splits=1, num_warps=4, num_stages=2)]
PACKED_IDS = ["varlen", "paged-tile-in-a-page", "paged-tile-over-pages"]

# Modelled on the reports NVIDIA's Compute Sanitizer documentation shows (its memcheck,
# racecheck, initcheck and synccheck examples), with Triton kernel names and the Python
# child's own lines mixed in as they are on a real run.
MEMCHECK = """\
========= COMPUTE-SANITIZER
/usr/lib/python3/site-packages/torch/cuda/__init__.py:61: UserWarning: something torch said
========= Invalid __global__ read of size 4 bytes
=========     at _attn_fwd+0x1f70 in /work/kernels/_flash_fwd.py:212
=========     by thread (31,0,0) in block (1,0,0)
=========     Address 0x7f3a5e000c04 is out of bounds
=========     and is 5 bytes after the nearest allocation at 0x7f3a5e000000 of size 3071 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: [0x2f0d31] in libcuda.so.1
=========
========= Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure" on CUDA API call to cudaStreamSynchronize.
=========
========= ERROR SUMMARY: 2 errors
"""
RACECHECK = """\
========= COMPUTE-SANITIZER
========= Warning: Race reported between Write access at _attn_fwd+0x300 in _flash_fwd.py:140
=========     and Write access at _attn_fwd+0x300 in _flash_fwd.py:140 [64 hazards]
=========
========= Error: Race reported between Write access at _attn_fwd+0x580 in _flash_fwd.py:142
=========     and Read access at _attn_fwd+0x6a0 in _flash_fwd.py:150 [1024 hazards]
=========
========= RACECHECK SUMMARY: 2 hazards displayed (1 error, 1 warning)
"""
INITCHECK = """\
========= COMPUTE-SANITIZER
========= Uninitialized __global__ memory read of size 4 bytes
=========     at _decode_combine+0x100 in /work/kernels/_flash_decode.py:355
=========     by thread (0,0,0) in block (3,0,0)
=========     Address 0x7f1c2a0004f0
=========
========= ERROR SUMMARY: 1 error
"""
SYNCCHECK = """\
========= COMPUTE-SANITIZER
========= Barrier error detected. Divergent thread(s) in warp
=========     at _attn_fwd_ws+0x2c0 in _flash_fwd.py:301
=========     by thread (37,0,0) in block (0,0,0)
=========
========= ERROR SUMMARY: 1 error
"""
CLEAN = """\
========= COMPUTE-SANITIZER
sanitize child: 5 case(s) ran on cuda:0
========= ERROR SUMMARY: 0 errors
"""
CRASH = """\
========= COMPUTE-SANITIZER
Traceback (most recent call last):
  File "_sanitize_child.py", line 60, in main
ValueError: config {'BLOCK_M': 256} cannot run: shared memory
========= ERROR SUMMARY: 0 errors
"""


@pytest.mark.parametrize(("text", "errors", "finding"), [
    (MEMCHECK, 2, "Invalid __global__ read of size 4 bytes at _attn_fwd+0x1f70 in /work/kernels/_flash_fwd.py:212"),
    (RACECHECK, 1, "Error: Race reported between Write access at _attn_fwd+0x580 in _flash_fwd.py:142"),
    (INITCHECK, 1, "Uninitialized __global__ memory read of size 4 bytes at _decode_combine+0x100 in "
                   "/work/kernels/_flash_decode.py:355"),
    (SYNCCHECK, 1, "Barrier error detected. Divergent thread(s) in warp at _attn_fwd_ws+0x2c0 in _flash_fwd.py:301"),
    (CLEAN, 0, ""),
    ("no report at all\n", None, ""),
], ids=["memcheck", "racecheck", "initcheck", "synccheck", "clean", "none"])
def test_the_report_gives_the_error_count_and_the_first_finding(text, errors, finding) -> None:
    assert sz.parse_report(text) == (errors, finding)


def test_exit_codes_decide_the_outcome() -> None:
    found = sz.interpret("memcheck", sz.ERROR_EXITCODE, MEMCHECK, 1.5)
    assert (found.outcome, found.errors, found.seconds) == ("finding", 2, 1.5) and not found.clean
    assert found.finding.startswith("Invalid __global__ read of size 4 bytes")
    assert sz.interpret("memcheck", 0, CLEAN, 0.1).clean
    crash = sz.interpret("memcheck", 3, CRASH, 0.1)
    assert crash.outcome == "crashed" and crash.finding == (
        "exit code 3: ValueError: config {'BLOCK_M': 256} cannot run: shared memory")
    assert sz.interpret("memcheck", -9, CLEAN, 0.1).finding.startswith("killed by signal 9")
    # A zero exit without the sanitizer's header did not run under it: not clean.
    assert sz.interpret("memcheck", 0, "hello\n", 0.1).outcome == "crashed"


def test_the_unsafe_reason_names_the_tool_and_reads_back() -> None:
    result = sz.interpret("racecheck", sz.ERROR_EXITCODE, RACECHECK, 1.0)
    reason = sz.unsafe_reason(result)
    assert reason == "compute-sanitizer racecheck: Error: Race reported between Write access at _attn_fwd+0x580 " \
                     "in _flash_fwd.py:142"
    assert sz.parse_unsafe_reason(reason) == ("racecheck", result.finding)
    assert sz.parse_unsafe_reason("relative error 0.3") is None
    timeout = sz.ToolResult("initcheck", "timeout", "no end within 5 s")
    assert sz.unsafe_reason(timeout) == "compute-sanitizer initcheck: timeout: no end within 5 s"


# racecheck on the H100 (2026-12-06, docs/lab/gpu/sanitize_probe.py): the Gluon Hopper default's
# whole report, every error's read side the worker warps' state read in the kernel's prologue.
WARP_SPECIALIZED_RACECHECK = """\
========= COMPUTE-SANITIZER
========= Error: Race reported between Read access at gluon_attention_kernel+0x110 in _flash_fwd_gluon.py:{line}
=========     and Write access at gluon_attention_kernel+0x8420 in _flash_fwd_gluon.py:{line} [59 hazards]
=========     and Write access at gluon_attention_kernel+0xf3a0 in _flash_fwd_gluon.py:753 [64 hazards]
=========
========= Error: Race reported between Read access at gluon_attention_kernel+0x120 in _flash_fwd_gluon.py:{line}
=========     and Write access at gluon_attention_kernel+0x7de0 in _flash_fwd_gluon.py:{line} [20 hazards]
=========
========= RACECHECK SUMMARY: 2 hazards displayed ({errors} errors, 0 warnings)
"""


def _kernel_def_line(file: str, kernel: str) -> int:
    from pathlib import Path

    import flashtune.kernels
    lines = Path(flashtune.kernels.__file__).parent.joinpath(file).read_text().splitlines()
    return next(n for n, text in enumerate(lines, 1) if text.startswith(f"def {kernel}("))


def test_racecheck_on_the_warp_specialization_handoff_is_waived_and_kept() -> None:
    line = _kernel_def_line("_flash_fwd_gluon.py", "gluon_attention_kernel")
    result = sz.interpret("racecheck", sz.ERROR_EXITCODE, WARP_SPECIALIZED_RACECHECK.format(line=line, errors=2), 7.0)
    assert result.outcome == sz.WAIVED and result.clean and result.errors == 2
    assert "warp-specialization barrier" in result.finding and "+0x110" in result.finding
    assert sz.ToolResult.from_dict(result.to_dict()) == result  # cached as it was seen


@pytest.mark.parametrize("why", ["a source line", "more errors than printed", "one real race beside it"])
def test_anything_else_in_a_racecheck_report_is_a_finding(why) -> None:
    line = _kernel_def_line("_flash_fwd_gluon.py", "gluon_attention_kernel")
    report = WARP_SPECIALIZED_RACECHECK.format(line=line, errors=2)
    if why == "a source line":  # the read is code of ours, not the compiler's prologue
        report = WARP_SPECIALIZED_RACECHECK.format(line=line + 1, errors=2)
    elif why == "more errors than printed":
        report = WARP_SPECIALIZED_RACECHECK.format(line=line, errors=3)
    else:
        report = report.replace("========= RACECHECK", "========= Error: Race reported between Write access at "
                                "_attn_fwd+0x580 in _flash_fwd.py:142\n========= RACECHECK")
    result = sz.interpret("racecheck", sz.ERROR_EXITCODE, report, 7.0)
    assert result.outcome == sz.FINDING and not result.clean


def test_other_tools_waive_nothing() -> None:
    line = _kernel_def_line("_flash_fwd_gluon.py", "gluon_attention_kernel")
    report = WARP_SPECIALIZED_RACECHECK.format(line=line, errors=2)
    assert sz.interpret("synccheck", sz.ERROR_EXITCODE, report, 1.0).outcome == sz.FINDING


def _variants() -> list[Config]:
    """One config per kernel variant (every ``loads`` value of prefill, and decode)."""
    loads = next(k for k in KERNEL_KNOBS["prefill"] if k.name == "loads").values
    prefill = [Config(BLOCK_M=128, BLOCK_N=64, num_warps=4, num_stages=2, loads=value) for value in loads]
    return [*prefill, Config(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=2, use_fp8=True, loads="gluon_pingpong"),
            Config(kernel="decode", BLOCK_N=64, num_splits=4, num_warps=4, num_stages=2, loads="tma")]


@pytest.mark.parametrize("config", _variants(), ids=lambda c: f"{c['loads']}{'-fp8' if c.get('use_fp8') else ''}"
                                                             f"{'-decode' if c.get('kernel') == 'decode' else ''}")
def test_every_variant_gets_its_edge_cases(config) -> None:
    cases = sz.edge_cases(config)
    assert cases
    decode = config.get("kernel") == "decode"
    for case in cases:
        assert (case["q_len"] <= 16) == decode
        assert case["q_heads"] % case["kv_heads"] == 0
    assert any(c["q_heads"] > c["kv_heads"] for c in cases)  # GQA
    assert any(c["causal"] and c["q_len"] != c["kv_len"] for c in cases)  # the causal diagonal, off the corner
    assert any(c["kv_len"] % 16 for c in cases)  # a ragged last key tile
    ranged = [c for c in cases if "cache_seqlens" in c]
    assert bool(ranged) == sz.takes_key_ranges(config)
    for c in ranged:
        assert 0 in c["cache_seqlens"] and any(s > 0 for s in c["kv_start"])
        assert all(0 <= s <= e <= c["kv_len"] for s, e in zip(c["kv_start"], c["cache_seqlens"]))
    if not decode:
        tile = max(config["BLOCK_M"], config["BLOCK_N"])
        assert any(c["q_len"] > tile and c["q_len"] % tile for c in cases)  # a ragged last query tile
    json.dumps(sz.request(config, head_dim=128))  # the child's request is JSON


def test_the_key_range_rule_matches_the_launcher() -> None:
    from flashtune.kernels.attention import takes_key_ranges

    for config in _variants():
        assert sz.takes_key_ranges(config) == takes_key_ranges(config), config


@pytest.mark.parametrize("config", [Config(BLOCK_M=32, BLOCK_N=32, num_warps=4, num_stages=2),
                                    Config(kernel="decode", BLOCK_N=32, num_splits=4, num_warps=4, num_stages=2,
                                           loads="pointer"), *PACKED_ROWS], ids=["prefill", "decode", *PACKED_IDS])
def test_the_child_runs_every_case_in_the_interpreter(config) -> None:
    """The cases are valid calls of the op (the GPU runs them under the sanitizer)."""
    request = json.dumps(sz.request(config, head_dim=32))
    done = subprocess.run([sys.executable, "-m", sz.CHILD_MODULE, request], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "TRITON_INTERPRET": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"{len(sz.edge_cases(config))} case(s) ran on cpu" in done.stderr


def test_a_failing_case_is_exit_code_3_with_its_reason() -> None:
    request = sz.request(SAFE_DEFAULT, head_dim=32)
    request["cases"] = [dict(batch=1, q_heads=3, kv_heads=2, q_len=20, kv_len=20, causal=False)]  # 3 % 2 heads
    done = subprocess.run([sys.executable, "-m", sz.CHILD_MODULE, json.dumps(request)], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "TRITON_INTERPRET": "1"})
    assert done.returncode == 3 and "case 0" in done.stderr.splitlines()[-1]


def test_the_probe_says_null_without_a_gpu() -> None:
    done = subprocess.run([sys.executable, "-m", sz.CHILD_MODULE, "--probe"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and done.stdout.strip().splitlines()[-1] == "null"


# --- through a real (fake) compute-sanitizer ----------------------------------------------


def test_a_finding_through_the_executable(tmp_path, monkeypatch) -> None:
    folder = tmp_path / "bin"
    sanitizer_fake.install(folder, report=MEMCHECK, exitcode=sz.ERROR_EXITCODE)
    sanitizer_fake.on_path(monkeypatch, folder)
    monkeypatch.delenv(sz.ENV_BIN, raising=False)
    assert sz.find_sanitizer() == str(folder / "compute-sanitizer")
    verdict = sz.sanitize(SAFE_DEFAULT, head_dim=64, gpu="g1")
    assert not verdict.safe and [r.tool for r in verdict.results] == list(sz.TOOLS)
    assert verdict.reason.startswith("compute-sanitizer memcheck: Invalid __global__ read of size 4 bytes")
    runs = sanitizer_fake.calls(folder)
    tools = [r[r.index("--tool") + 1] for r in runs]
    assert sorted(tools) == sorted(sz.TOOLS)  # one tool a run, every one run (side by side: any order)
    first = runs[tools.index("memcheck")]
    assert first[first.index("--error-exitcode") + 1] == "86" and first[first.index("--print-limit") + 1] == str(sz.PRINT_LIMIT)
    child = first[first.index("--print-limit") + 2:]
    assert child[:3] == [sys.executable, "-m", sz.CHILD_MODULE]
    assert json.loads(child[3])["config"] == SAFE_DEFAULT.to_dict()


def test_a_clean_run_of_the_real_child_under_the_executable(tmp_path, monkeypatch) -> None:
    """The whole chain on the CPU: sanitizer process -> child process -> the op in the interpreter."""
    folder = tmp_path / "bin"
    fake = sanitizer_fake.install(folder, run_child=True)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    config = Config(BLOCK_M=32, BLOCK_N=32, num_warps=4, num_stages=2)
    verdict = sz.sanitize(config, head_dim=32, tools=("memcheck",), sanitizer=str(fake))
    assert verdict.safe, verdict.results


def test_a_hang_is_a_timeout_finding_and_its_process_group_is_killed(tmp_path) -> None:
    fake = sanitizer_fake.install(tmp_path / "bin", report=CLEAN, sleep_s=60)
    result = sz.run_tool("synccheck", sz.request(SAFE_DEFAULT, head_dim=64), sanitizer=str(fake), timeout_s=1)
    assert result.outcome == "timeout" and result.seconds < 30
    assert sz.unsafe_reason(result) == "compute-sanitizer synccheck: timeout: no end within 1 s"


def test_a_missing_executable_is_a_crash_not_an_exception(tmp_path) -> None:
    result = sz.run_tool("memcheck", sz.request(SAFE_DEFAULT, head_dim=64), sanitizer=str(tmp_path / "nope"))
    assert result.outcome == "crashed" and "cannot start" in result.finding


def test_no_sanitizer_found(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv(sz.ENV_BIN, raising=False)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setattr(sz, "CUDA_BINS", (str(tmp_path),))
    assert sz.find_sanitizer() is None
    with pytest.raises(FileNotFoundError, match="no compute-sanitizer"):
        sz.sanitize(SAFE_DEFAULT, head_dim=64)


# --- the cache ------------------------------------------------------------------------------


def test_a_second_check_reads_the_cache_and_runs_nothing(tmp_path) -> None:
    folder = tmp_path / "bin"
    fake = str(sanitizer_fake.install(folder, report=CLEAN, exitcode=0))
    cache = SanitizedCache(tmp_path / "cache" / "sanitized.json")
    config = Config(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3)
    first = checked(config, head_dim=128, gpu="gpu-a", cache=cache, sanitizer=fake)
    assert first.safe and not first.cached and len(sanitizer_fake.calls(folder)) == 4
    again = checked(dict(config), head_dim=128, gpu="gpu-a", cache=SanitizedCache(cache.path), sanitizer=fake)
    assert again.safe and again.cached and len(sanitizer_fake.calls(folder)) == 4  # not run again
    assert again.to_dict() == first.to_dict()
    # Another GPU, head dim or kernel variant is another check.
    checked(config, head_dim=128, gpu="gpu-b", cache=cache, sanitizer=fake)
    checked(config, head_dim=64, gpu="gpu-a", cache=cache, sanitizer=fake)
    assert len(sanitizer_fake.calls(folder)) == 12 and len(cache) == 3
    # A config spelt without its implied knobs is the same config.
    implied = {k: config[k] for k in ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages")}
    assert verdict_key(implied, head_dim=128, dtype="bfloat16", gpu="gpu-a") == \
        verdict_key(config, head_dim=128, dtype="bfloat16", gpu="gpu-a")
    assert verdict_key(config, head_dim=128, dtype="bfloat16", gpu="gpu-a", kernel_hash="other") != \
        verdict_key(config, head_dim=128, dtype="bfloat16", gpu="gpu-a")


def test_a_finding_is_cached_and_a_timeout_is_not(tmp_path) -> None:
    cache = SanitizedCache(tmp_path / "sanitized.json")
    found = str(sanitizer_fake.install(tmp_path / "found", report=INITCHECK, exitcode=sz.ERROR_EXITCODE))
    verdict = checked(SAFE_DEFAULT, head_dim=64, gpu="g", cache=cache, sanitizer=found, tools=("initcheck",))
    assert not verdict.safe
    assert checked(SAFE_DEFAULT, head_dim=64, gpu="g", cache=cache, sanitizer=found, tools=("initcheck",)).cached
    hang = str(sanitizer_fake.install(tmp_path / "hang", report=CLEAN, sleep_s=60))
    late = checked(SAFE_DEFAULT, head_dim=32, gpu="g", cache=cache, sanitizer=hang, tools=("memcheck",), timeout_s=1)
    assert late.results[0].outcome == "timeout" and len(cache) == 1


def test_an_unreadable_cache_is_empty_and_rewritten(tmp_path) -> None:
    path = tmp_path / "sanitized.json"
    path.write_text("{not json")
    cache = SanitizedCache(path)
    assert len(cache) == 0 and cache.get("x") is None
    fake = str(sanitizer_fake.install(tmp_path / "bin", report=CLEAN))
    checked(SAFE_DEFAULT, head_dim=64, gpu="g", cache=cache, sanitizer=fake)
    assert json.loads(path.read_text())["format"] == "flashtune-sanitized" and len(cache) == 1
    assert not list(tmp_path.glob(".sanitized.json.*.tmp"))  # written atomically, nothing left over


def test_tunables_cover_the_variants_tested() -> None:
    # Guards _variants(): a new loads value is sanitized like the others.
    assert set(TUNABLES["loads"]) <= {c["loads"] for c in _variants()}


# --- batches: one child run for many configs -------------------------------------------------

SMALL_PREFILL = Config(BLOCK_M=32, BLOCK_N=32, num_warps=4, num_stages=2)
SMALL_DECODE = Config(kernel="decode", BLOCK_N=32, num_splits=4, num_warps=4, num_stages=2, loads="pointer")


def _run_child(request: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", sz.CHILD_MODULE, json.dumps(request)], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "TRITON_INTERPRET": "1"})


def test_the_child_runs_a_batch_of_configs_in_the_interpreter() -> None:
    request = sz.batch_request([sz.Check(SMALL_PREFILL, 32), sz.Check(SMALL_DECODE, 32), sz.Check(SMALL_PREFILL, 64)])
    for one in request["batch"]:  # each config's smallest case (the interpreter is slow; every case runs above)
        one["cases"] = [min(one["cases"], key=lambda c: c["batch"] * c["q_heads"] * c["q_len"] * c["kv_len"])]
    done = _run_child(request)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "sanitize child: 3 config(s), 3 case(s) ran on cpu" in done.stderr


def test_a_failing_config_in_a_batch_is_exit_code_3_naming_it() -> None:
    request = sz.batch_request([sz.Check(SMALL_PREFILL, 32), sz.Check(SMALL_PREFILL, 32)])
    request["batch"][0]["cases"] = [dict(batch=1, q_heads=2, kv_heads=1, q_len=20, kv_len=20, causal=False)]
    request["batch"][1]["cases"] = [dict(batch=1, q_heads=3, kv_heads=2, q_len=20, kv_len=20, causal=False)]
    done = _run_child(request)
    assert done.returncode == 3 and done.stderr.splitlines()[-1].startswith("config 1 case 0 ")


def test_a_tool_result_reads_and_writes_as_before_batches() -> None:
    alone = sz.ToolResult("memcheck", sz.CLEAN, seconds=2.0)
    assert "batch" not in alone.to_dict()  # a one-config run's cache line is unchanged
    old = {"tool": "memcheck", "outcome": "clean", "finding": "", "errors": 0, "seconds": 2.0}
    assert sz.ToolResult.from_dict(old) == alone and alone.batch == 1
    shared = sz.ToolResult("memcheck", sz.CLEAN, seconds=0.5, batch=4)
    assert sz.ToolResult.from_dict(shared.to_dict()) == shared


def test_a_batch_gets_more_time_than_one_config() -> None:
    assert sz.batch_timeout(100.0, 1) == 100.0
    assert 100.0 < sz.batch_timeout(100.0, 2) < sz.batch_timeout(100.0, 8) < 800.0


def _tools_run(folder) -> list[str]:
    return [r[r.index("--tool") + 1] for r in sanitizer_fake.calls(folder)]


def _configs(n: int) -> list[Config]:
    return [Config(BLOCK_M=64, BLOCK_N=32 * (1 + i % 2), num_warps=4, num_stages=2 + i // 2) for i in range(n)]


def test_a_clean_batch_makes_every_config_clean_with_one_run_a_tool(tmp_path) -> None:
    folder = tmp_path / "bin"
    fake = str(sanitizer_fake.install(folder, report=CLEAN, exitcode=0))
    configs = _configs(3)
    verdicts = sz.sanitize_many([sz.Check(c, 64) for c in configs], gpu="g", sanitizer=fake, batch_size=8)
    assert sorted(_tools_run(folder)) == sorted(sz.TOOLS)  # one run a tool for all three
    assert [v.config for v in verdicts] == [validate_config(c) for c in configs]
    assert all(v.safe and v.gpu == "g" and v.head_dim == 64 for v in verdicts)
    for verdict in verdicts:
        assert [r.tool for r in verdict.results] == list(sz.TOOLS)
        assert all(r.outcome == sz.CLEAN and r.batch == 3 for r in verdict.results)
    batch = json.loads(sanitizer_fake.calls(folder)[0][-1])["batch"]
    assert [b["config"] for b in batch] == [validate_config(c).to_dict() for c in configs]


def test_batches_are_cut_at_the_batch_size(tmp_path) -> None:
    folder = tmp_path / "bin"
    fake = str(sanitizer_fake.install(folder, report=CLEAN, exitcode=0))
    verdicts = sz.sanitize_many([sz.Check(c, 64) for c in _configs(5)], tools=("memcheck",), sanitizer=fake,
                                batch_size=2)
    sizes = [len(json.loads(r[-1]).get("batch", [None])) for r in sanitizer_fake.calls(folder)]
    assert sizes == [2, 2, 1] and [r.batch for v in verdicts for r in v.results] == [2, 2, 2, 2, 1]


def test_a_finding_in_a_batch_has_each_config_checked_alone(tmp_path) -> None:
    folder = tmp_path / "bin"
    configs = _configs(3)
    marker = json.dumps(validate_config(configs[1]).to_dict(), sort_keys=True)  # as the child's request has it
    fake = str(sanitizer_fake.install(folder, report=MEMCHECK, exitcode=sz.ERROR_EXITCODE, unsafe_if=marker))
    verdicts = sz.sanitize_many([sz.Check(c, 64) for c in configs], sanitizer=fake)
    assert len(_tools_run(folder)) == 4 + 3 * 4  # the batch, then each config alone
    assert [v.safe for v in verdicts] == [True, False, True]
    assert verdicts[1].reason.startswith("compute-sanitizer memcheck: Invalid __global__ read of size 4 bytes")
    assert all(r.batch == 1 for v in verdicts for r in v.results)  # verdicts of their own runs


def test_a_batch_that_hangs_has_each_config_checked_alone(tmp_path) -> None:
    folder = tmp_path / "bin"
    fake = str(sanitizer_fake.install(folder, report=CLEAN, sleep_s=60))
    verdicts = sz.sanitize_many([sz.Check(c, 64) for c in _configs(2)], tools=("synccheck",), sanitizer=fake,
                                timeout_s=0.5)
    assert len(_tools_run(folder)) == 3
    assert [v.results[0].outcome for v in verdicts] == ["timeout", "timeout"]
    assert verdicts[0].reason.startswith("compute-sanitizer synccheck: timeout: no end within")


def test_cached_configs_are_not_checked_again_in_a_batch(tmp_path) -> None:
    folder = tmp_path / "bin"
    fake = str(sanitizer_fake.install(folder, report=CLEAN, exitcode=0))
    cache = SanitizedCache(tmp_path / "sanitized.json")
    a, b, c = _configs(3)
    assert checked(a, head_dim=64, gpu="g", cache=cache, sanitizer=fake).safe
    checks = [sz.Check(a, 64), sz.Check(b, 64), sz.Check(c, 64), sz.Check(dict(b), 64)]
    verdicts = checked_many(checks, gpu="g", cache=cache, sanitizer=fake)
    assert len(_tools_run(folder)) == 4 + 4  # a alone, then one batch of b and c
    assert [json.loads(r[-1]).get("batch") is not None for r in sanitizer_fake.calls(folder)[4:]] == [True] * 4
    assert [len(json.loads(r[-1])["batch"]) for r in sanitizer_fake.calls(folder)[4:]] == [2] * 4
    assert [v.cached for v in verdicts] == [True, False, False, True] and all(v.safe for v in verdicts)
    assert len(cache) == 3
    again = checked_many(checks, gpu="g", cache=SanitizedCache(cache.path), sanitizer=fake)
    assert all(v.cached for v in again) and len(_tools_run(folder)) == 8  # nothing run
    assert again[1].results[0].batch == 2  # the cache keeps where a verdict came from


def test_candidates_are_tried_in_rounds_until_one_is_safe() -> None:
    def verdict(safe: bool) -> sz.Verdict:
        outcome = sz.CLEAN if safe else sz.FINDING
        return sz.Verdict(SAFE_DEFAULT, 64, "bfloat16", (sz.ToolResult("memcheck", outcome),))

    safe = {"a1": False, "a2": True, "a3": True, "b1": True, "c1": False, "c2": False, "c3": False}
    rounds: list[list[str]] = []

    def check(candidates: list[str]) -> list[sz.Verdict]:
        rounds.append(candidates)
        return [verdict(safe[c]) for c in candidates]

    tried = try_in_rounds({"a": ["a1", "a2", "a3"], "b": ["b1"], "c": ["c1", "c2", "c3"]}, check)
    assert rounds == [["a1", "b1", "c1"], ["a2", "c2"], ["c3"]]
    assert {name: [c for c, _ in t] for name, t in tried.items()} == {"a": ["a1", "a2"], "b": ["b1"],
                                                                      "c": ["c1", "c2", "c3"]}


def test_only_the_tool_that_was_not_clean_runs_again_config_by_config(tmp_path) -> None:
    folder = tmp_path / "bin"
    configs = _configs(3)
    marker = json.dumps(validate_config(configs[2]).to_dict(), sort_keys=True)
    fake = str(sanitizer_fake.install(folder, report=RACECHECK, exitcode=sz.ERROR_EXITCODE, unsafe_if=marker,
                                      only_tool="racecheck"))
    verdicts = sz.sanitize_many([sz.Check(c, 64) for c in configs], sanitizer=fake)
    assert sorted(_tools_run(folder)) == sorted([*sz.TOOLS, *["racecheck"] * 3])  # the batch, then racecheck alone
    assert [v.safe for v in verdicts] == [True, True, False]
    for verdict in verdicts:
        assert [r.tool for r in verdict.results] == list(sz.TOOLS)
        assert [r.batch for r in verdict.results] == [3, 1, 3, 3]  # racecheck's verdicts are each config's own
    assert verdicts[2].reason.startswith("compute-sanitizer racecheck:")


def test_a_batch_holds_one_kernel_variant(tmp_path) -> None:
    """A warp-specialized config (racecheck waives it) never shares a batch with other variants."""
    folder = tmp_path / "bin"
    fake = str(sanitizer_fake.install(folder, report=CLEAN, exitcode=0))
    gluon = Config(BLOCK_M=128, BLOCK_N=128, grid="persistent_zigzag", kernel="prefill", loads="gluon_pingpong",
                   num_stages=2, num_warps=4, tile_order="head_major", use_fp8=False)
    configs = [_configs(1)[0], gluon, _configs(2)[1]]
    verdicts = sz.sanitize_many([sz.Check(c, 64) for c in configs], tools=("racecheck",), sanitizer=fake)
    batches = [[b["config"] for b in json.loads(r[-1]).get("batch", [json.loads(r[-1])])]
               for r in sanitizer_fake.calls(folder)]
    assert sorted(map(len, batches)) == [1, 2]
    assert [v.config for v in verdicts] == [validate_config(c) for c in configs]  # the callers' order
    assert [r.batch for v in verdicts for r in v.results] == [2, 1, 2]


# --- the packed kernels (varlen, paged): their own cases and cache keys ----------------------


@pytest.mark.parametrize("config", PACKED_ROWS, ids=PACKED_IDS)
def test_packed_kernels_get_their_own_edge_cases(config) -> None:
    cases = sz.edge_cases(config)
    assert {c["layout"] for c in cases} == {config["kernel"]}
    assert sz.variant_of(config) == config["kernel"] and not sz.takes_key_ranges(config)
    assert any(c["q_heads"] > c["kv_heads"] for c in cases) and all(c["q_heads"] % c["kv_heads"] == 0 for c in cases)
    assert {c["causal"] for c in cases} == {True, False}
    if config["kernel"] == "varlen":
        tile = max(config["BLOCK_M"], config["BLOCK_N"])
        q_lens = [n for c in cases for n in c["q_lens"]]
        assert {0, 1} <= set(q_lens) and any(n > tile and n % tile for n in q_lens)  # empty, one row, ragged tile
        assert any(sum(c["k_lens"]) > sum(c["q_lens"]) for c in cases)  # chunked prefill: cached keys first
        assert any(q == 0 < k for c in cases for q, k in zip(c["q_lens"], c["k_lens"]))  # keys, no queries
        assert any(c["pad_rows"] for c in cases)  # rows past the last sequence, as transformers pads a step
        assert any(c["causal"] and 0 < k < q for c in cases for q, k in zip(c["q_lens"], c["k_lens"]))  # unseeing rows
    else:
        page = config["page_size"]
        assert {c["page_size"] for c in cases} == {page}
        lengths = [n for c in cases for n in c["cache_seqlens"]]
        assert 0 in lengths and any(n % page for n in lengths) and any(n and n % page == 0 for n in lengths)
        assert {c["q_len"] == 1 for c in cases} == {True, False}  # decode and a chunk
        crossing = [c for c in cases if c["new_keys"]]  # the append, into a page it opens
        assert any((n + c["new_keys"] - 1) // page > (n - 1) // page for c in crossing for n in c["cache_seqlens"] if n)
        assert any(c["q_len"] == c["new_keys"] == 1 for c in cases)  # a decode step: one query, its key appended
        assert any(c["causal"] and 0 < n + c["new_keys"] < c["q_len"] for c in cases for n in c["cache_seqlens"])
    json.dumps(sz.request(config, head_dim=64))


def test_a_packed_rows_verdict_is_keyed_by_its_kernel_and_page_size() -> None:
    from flashtune.kernels.source_hash import packed_source_hash

    varlen, paged = PACKED_ROWS[0], PACKED_ROWS[1]
    key = dict(head_dim=64, dtype="bfloat16", gpu="gpu-a")
    assert verdict_key(varlen, **key) == verdict_key(varlen, **key, kernel_hash=packed_source_hash("varlen"))
    assert verdict_key(paged, **key) == verdict_key(paged, **key, kernel_hash=packed_source_hash("paged"))
    # The same tile as a dense prefill config is another kernel's verdict.
    dense = {**SAFE_DEFAULT, **{k: varlen[k] for k in ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages")}}
    assert verdict_key(dense, **key) != verdict_key(varlen, **key)
    assert verdict_key(paged, **key) != verdict_key({**paged, "page_size": 64}, **key)
    # What the sanitizer ran is part of a packed verdict: other cases, another key (a dense one keeps its own).
    before, dense_before, cases = verdict_key(paged, **key), verdict_key(dense, **key), sz.paged_cases
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sz, "paged_cases", lambda config: [dict(c, q_heads=16) for c in cases(config)])
        assert verdict_key(paged, **key) != before and verdict_key(dense, **key) == dense_before
    with pytest.raises(ValueError, match="page_size"):
        verdict_key({k: v for k, v in paged.items() if k != "page_size"}, **key)
