"""The spaces built from kernels/knobs.py's declarations are the tables every recorded
table, store and prior was made against: same knobs, same values, same order."""

from __future__ import annotations

import pytest

from flashtune.kernels.knobs import Choice, Constexpr, HostArg, Knob, implied_of, sets, space_of
from flashtune.kernels.launch_plan import check_declarations
from flashtune.kernels.space import DECODE_TUNABLES, IMPLIED, KERNEL_TUNABLES, TUNABLES, all_configs

# The literal tables as they stood before the declarations (commit b281700), with the values
# added since last in their knob (loads: the Gluon kernel's three, 2026-12-02; grid: its
# persistent_zigzag, 2026-12-03; loads: the ping-pong with a polynomial share of exp2, 2026-12-04b).
_PREFILL_BEFORE = {
    "BLOCK_M": (32, 64, 128, 256),
    "BLOCK_N": (32, 64, 128),
    "num_warps": (4, 8),
    "num_stages": (1, 2, 3, 4, 5),
    "loads": ("pointer", "tma", "tma_ws", "lean", "lean_ws", "lean_overlap", "lean_ws_oneloop", "gluon_ws",
              "gluon_pingpong", "gluon_pingpong_ordered", "gluon_pingpong_poly"),
    "use_fp8": (False, True),
    "grid": ("tiles", "persistent", "persistent_zigzag"),
    "tile_order": ("head_major", "longest_first"),
    "kernel": ("prefill",),
}
_DECODE_BEFORE = {
    "kernel": ("decode",),
    "BLOCK_N": (16, 32, 64, 128, 256),
    "num_splits": (1, 2, 4, 8, 16, 32, 64, 128),
    "num_warps": (1, 2, 4, 8),
    "num_stages": (1, 2, 3, 4, 5),
    "loads": ("pointer", "tma"),
    "combine": ("launch", "fused"),
}
_IMPLIED_BEFORE = {"loads": "pointer", "use_fp8": False, "grid": "tiles", "tile_order": "head_major",
                   "kernel": "prefill", "combine": "launch"}


def _typed(table):
    # (False == 0 and True == 1: compare the types too, a bool knob must stay bool.)
    return [(name, [(type(v), v) for v in values]) for name, values in table.items()]


def test_derived_tables_equal_the_literal_ones_in_order_and_type():
    assert _typed(TUNABLES) == _typed(_PREFILL_BEFORE)
    assert _typed(DECODE_TUNABLES) == _typed(_DECODE_BEFORE)
    assert list(IMPLIED.items()) == list(_IMPLIED_BEFORE.items())
    assert [type(v) for v in IMPLIED.values()] == [type(v) for v in _IMPLIED_BEFORE.values()]
    assert list(KERNEL_TUNABLES) == ["prefill", "decode"]
    assert KERNEL_TUNABLES["prefill"] is TUNABLES and KERNEL_TUNABLES["decode"] is DECODE_TUNABLES


def test_derived_tables_are_read_only():
    with pytest.raises(TypeError):
        TUNABLES["BLOCK_M"] = (64,)  # type: ignore[index]
    with pytest.raises(TypeError):
        IMPLIED["loads"] = "tma"  # type: ignore[index]


def test_enumeration_is_unchanged():
    before = list(all_configs(_PREFILL_BEFORE))
    assert list(all_configs()) == before and len(before) == 4 * 3 * 2 * 5 * 11 * 2 * 3 * 2
    assert list(all_configs(DECODE_TUNABLES)) == list(all_configs(_DECODE_BEFORE))


def test_bad_declarations_are_refused_naming_the_knob():
    arg = HostArg("k")
    with pytest.raises(ValueError, match="'k'.*no values"):
        Knob("k", (), launch=arg)
    with pytest.raises(ValueError, match="'k'.*not all of one type"):
        Knob("k", (1, "a"), launch=arg)
    with pytest.raises(ValueError, match="'k'.*implied 3"):
        Knob("k", (1, 2), implied=3, launch=arg)
    with pytest.raises(ValueError, match="'k'.*implied 0"):
        Knob("k", (False, True), implied=0, launch=arg)
    with pytest.raises(ValueError, match="'k'.*declares no launch"):
        Knob("k", (1, 2))
    with pytest.raises(ValueError, match="'k'.*choice covers \\[1\\], not its values \\[1, 2\\]"):
        Knob("k", (1, 2), launch=Choice({1: sets("forward")}))
    with pytest.raises(ValueError, match="declares a knob twice"):
        space_of((Knob("k", (1,), launch=arg), Knob("k", (2,), launch=arg)))
    with pytest.raises(ValueError, match="'k'.*disagree"):
        implied_of({"a": (Knob("k", (1, 2), implied=1, launch=arg),),
                    "b": (Knob("k", (1, 2), implied=2, launch=arg),)})
    # Two knobs of one kernel may not set one switch: the translation would hang on their order.
    with pytest.raises(ValueError, match="kernel 'x': knobs 'a' and 'b' both set 'FLAG'"):
        check_declarations({"x": (Knob.choice("a", {0: sets("forward", FLAG=False)}),
                                  Knob("b", (1,), launch=Constexpr("FLAG")))})


def test_setting_reads_an_omitted_knob_as_its_declared_implied_value():
    from flashtune.kernels.resources import registers_per_thread, shared_memory_bytes
    from flashtune.kernels.space import SAFE_DEFAULT, setting

    recorded_before = {"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2}  # no loads/fp8/grid/...
    assert [setting(recorded_before, name) for name in ("loads", "use_fp8", "grid", "kernel")] == \
        ["pointer", False, "tiles", "prefill"]
    assert setting(SAFE_DEFAULT.replace(loads="tma"), "loads") == "tma"
    with pytest.raises(KeyError):
        setting(recorded_before, "num_splits")  # no omission of it is declared
    for estimate in (shared_memory_bytes, registers_per_thread):
        kwargs = {"head_dim": 128, "dtype_bytes": 2, "block_h": 16}
        if estimate is shared_memory_bytes:
            kwargs["compute_capability"] = (9, 0)
        assert estimate(recorded_before, **kwargs) == estimate(SAFE_DEFAULT, **kwargs)


def test_lean_loads_are_read_from_the_loads_declaration():
    from flashtune.kernels.space import GLUON_LOADS, LEAN_LOADS

    # The literals they were (commits 117b5b4 and the Gluon kernel's).
    assert LEAN_LOADS == ("lean", "lean_ws", "lean_overlap", "lean_ws_oneloop", *GLUON_LOADS)
    assert GLUON_LOADS == ("gluon_ws", "gluon_pingpong", "gluon_pingpong_ordered", "gluon_pingpong_poly")
