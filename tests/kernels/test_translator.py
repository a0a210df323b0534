"""One translator (kernels/launch_plan.py) turns a config into what the launchers pass:
the same kernels with the same constexprs, compile options and host-side choices as the
launchers' own knob reads made before it (recorded at commit 117b5b4)."""

from __future__ import annotations

from translation_cases import recorded, translations


def test_every_config_of_both_spaces_launches_as_before() -> None:
    before, now = recorded(), translations()
    # The sample first: a difference there names the config and the argument.
    for key, record in before["sample"].items():
        assert now["sample"][key] == record, key
    assert now["digests"] == before["digests"]
