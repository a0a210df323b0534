"""Workload, Measurement, Config and HardwareSpec: parsing, JSON round trips, errors."""

import json
import math

import pytest

from flashtune.kernels import Config
from flashtune.objectives import HardwareSpec, Measurement, Status, Workload, known_specs, load_spec
from flashtune.objectives.types import SUITE


def test_workload_parse_and_name():
    w = Workload.parse("4,32/8,4096,128,causal")
    assert (w.q_heads, w.kv_heads, w.causal, w.dtype) == (32, 8, True, "bfloat16")
    assert w.name == "b4_hq32kv8_n4096_d128_causal_bfloat16"
    assert Workload.parse("1,2,10/20,64,float16").kv_len == 20


@pytest.mark.parametrize("text", ["4,32,4096", "4,x,4096,128", "4,32,4096,128,maybe", "4,3/2,8,64"])
def test_workload_parse_errors_name_the_input(text):
    with pytest.raises(ValueError, match="4"):
        Workload.parse(text)


def test_workload_parse_rejects_a_head_dim_the_kernel_does_not_compile_for():
    # Before: head_dim 100 parsed, and the CLI then said "no recorded table" for it.
    with pytest.raises(ValueError, match=r"'1,8,1024,100': head_dim must be one of \[32, 64, 128, 256\], got 100"):
        Workload.parse("1,8,1024,100")


def test_the_parser_and_the_launcher_accept_the_same_head_dims():
    from flashtune.kernels import attention, space

    assert attention.SUPPORTED_HEAD_DIMS == space.SUPPORTED_HEAD_DIMS


def test_causal_flops_count_visible_pairs():
    full = Workload(1, 1, 1, 8, 8, 64)
    causal = Workload(1, 1, 1, 8, 8, 64, causal=True)
    assert causal.flops == full.flops * (8 * 9 / 2) / 64


def test_measurement_round_trips_through_json_with_failures():
    w = Workload(1, 2, 2, 16, 16, 32)
    c = Config(BLOCK_M=64, BLOCK_N=32, num_warps=4, num_stages=2)
    m = Measurement.failure(c, w, Status.TIMEOUT, "hung")
    back = Measurement.from_dict(json.loads(json.dumps(m.to_dict())))
    assert back == m or (back.status is Status.TIMEOUT and math.isinf(back.median_ms) and back.config == c)
    with pytest.raises(ValueError, match="unknown field"):
        Measurement.from_dict({**m.to_dict(), "bogus": 1})


def test_config_is_hashable_and_equal_across_paths():
    a = Config(BLOCK_M=64, BLOCK_N=32)
    b = Config.from_dict(json.loads(json.dumps(a.to_dict())))
    assert a == b and hash(a) == hash(b) and {a: 1}[b] == 1
    with pytest.raises(TypeError, match="BLOCK_M"):
        Config(BLOCK_M=[64])  # floats are values now (other kernels' spaces); a list is not
    with pytest.raises(ValueError, match="BLOCK_M"):
        Config(BLOCK_M=float("inf"))


def test_hardware_specs_ship_and_fingerprints_are_stable(tmp_path):
    specs = known_specs()
    assert set(specs) >= {"a100", "h100", "h200", "l40s", "rtx4090"}
    assert len({s.fingerprint for s in specs.values()}) == len(specs)
    h200 = specs["h200"]
    path = tmp_path / "h200.json"
    h200.to_json(path)
    assert HardwareSpec.from_json(path).fingerprint == h200.fingerprint
    assert h200.arch == "sm90" and specs["a100"].arch == "sm80"
    smaller = HardwareSpec.from_dict({**h200.to_dict(), "shared_memory_per_block_bytes": 101376})
    assert smaller.fingerprint != h200.fingerprint


def test_bad_spec_files_raise_naming_the_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="bad.json"):
        load_spec(str(bad))
    with pytest.raises(ValueError, match="unknown hardware"):
        load_spec("tpu9")
    with pytest.raises(ValueError, match="unknown field"):
        HardwareSpec.from_dict({**known_specs()["h200"].to_dict(), "colour": "green"})


@pytest.mark.parametrize("alias, dtype", [("bf16", "bfloat16"), ("fp16", "float16"), ("half", "float16"),
                                          ("fp32", "float32"), ("float16", "float16")])
def test_workload_dtype_aliases(alias: str, dtype: str) -> None:
    assert Workload.parse(f"1,8,1024,64,causal,{alias}").dtype == dtype


def test_unknown_workload_field_lists_what_is_accepted() -> None:
    with pytest.raises(ValueError) as info:
        Workload.parse("1,8,1024,64,bfloat")
    assert "'bfloat'" in str(info.value) and "bf16" in str(info.value) and "float16" in str(info.value)


@pytest.mark.parametrize("workload", [*SUITE, Workload(2, 8, 2, 16, 512, 64, "float16", True),
                                      Workload(1, 4, 4, 7, 9, 32, "float32", False)])
def test_a_workload_name_parses_back(workload: Workload) -> None:
    # Tables and error messages name workloads this way: --workload takes the name too.
    assert Workload.parse(workload.name) == workload
