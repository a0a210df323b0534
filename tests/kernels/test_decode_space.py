"""The two declared spaces: the kernel knob, validation per kernel, tunables_for, and the
prefill space's enumeration unchanged by the decode kernel's arrival. Pure Python."""

import itertools

import pytest

from flashtune.kernels import Config, validate_config
from flashtune.kernels.space import (
    DECODE_MAX_Q_LEN,
    DECODE_TUNABLES,
    IMPLIED,
    SAFE_DEFAULT,
    TUNABLES,
    all_configs,
    decode_block_h,
    tunables_for,
)
from flashtune.objectives import Workload

DECODE = {"kernel": "decode", "BLOCK_N": 64, "num_splits": 8, "num_warps": 4, "num_stages": 2}


def test_prefill_space_enumerates_as_before_plus_the_kernel_knob():
    # The order and content recorded tables replay against: the prefill knobs' product, the
    # decode kernel's arrival adding only the one-valued kernel knob, last.
    before = tuple(name for name in TUNABLES if name != "kernel")
    assert list(TUNABLES)[-1] == "kernel"
    expected = [dict(zip(before, values), kernel="prefill")
                for values in itertools.product(*(TUNABLES[n] for n in before))]
    assert [c.to_dict() for c in all_configs()] == expected
    assert TUNABLES["kernel"] == ("prefill",) and IMPLIED["kernel"] == "prefill"
    assert SAFE_DEFAULT["kernel"] == "prefill"


def test_a_recorded_config_without_the_knob_means_prefill():
    cfg = validate_config({"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2})
    assert cfg["kernel"] == "prefill" and cfg in set(all_configs())


def test_decode_configs_validate_against_their_own_space():
    cfg = validate_config(DECODE)
    # A decode config without the loads knob means pointer loads, as a prefill one does.
    # Nor the combine knob: the launched combine, what configs recorded before it were timed with.
    assert cfg == Config(DECODE, loads="pointer", combine="launch") and cfg in set(all_configs(DECODE_TUNABLES))
    assert "use_fp8" not in cfg and "grid" not in cfg  # prefill's other implied knobs are not decode's
    with pytest.raises(ValueError, match="loads='tma_ws' is not one of"):
        validate_config({**DECODE, "loads": "tma_ws"})


@pytest.mark.parametrize(
    "config,match",
    [
        ({**DECODE, "BLOCK_M": 64}, r"unknown key\(s\) \['BLOCK_M'\] for kernel='decode'"),
        ({k: v for k, v in DECODE.items() if k != "num_splits"}, r"missing key\(s\) \['num_splits'\]"),
        ({**DECODE, "num_splits": 3}, "num_splits=3 is not one of"),
        ({**DECODE, "num_splits": True}, "num_splits=True"),
        ({**DECODE, "kernel": "persistent"}, "kernel='persistent' is not one of"),
        ({"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2, "num_splits": 4}, "unknown key"),
    ],
)
def test_bad_configs_name_the_knob(config, match):
    with pytest.raises(ValueError, match=match):
        validate_config(config)


def test_tunables_for_picks_the_kernel_by_query_length():
    assert tunables_for(Workload(1, 32, 8, 1, 32768, 128)) is DECODE_TUNABLES
    assert tunables_for(Workload(1, 32, 8, DECODE_MAX_Q_LEN, 4096, 128)) is DECODE_TUNABLES
    assert tunables_for(Workload(1, 32, 8, DECODE_MAX_Q_LEN + 1, 4096, 128)) is TUNABLES


def test_parsed_decode_workload_gets_the_decode_space():
    assert tunables_for(Workload.parse("1,32/8,1/32768,128")) is DECODE_TUNABLES


@pytest.mark.parametrize("group,q_len,rows", [(4, 1, 16), (1, 1, 16), (8, 4, 32), (32, 1, 32), (4, 16, 64),
                                              (32, 16, 64)])
def test_packed_query_tile(group, q_len, rows):
    assert decode_block_h(group, q_len) == rows
