"""One translator (kernels/launch_plan.py) turns a config into what the launchers pass:
the same kernels with the same constexprs, compile options and host-side choices as the
launchers' own knob reads made before it (recorded at commit 117b5b4)."""

from __future__ import annotations

import json

from translation_cases import recorded, translation, translations

from flashtune.kernels.space import validate_config


def test_every_config_of_both_spaces_launches_as_before() -> None:
    before = recorded()
    # The sample first: a difference there names the config and the argument.
    for key, record in before["sample"].items():
        assert translation(validate_config(json.loads(key))) == record, key
    # Then every config, a digest per kernel and loads value (a value added since has none before).
    now = translations()["digests"]
    assert {group: now.get(group) for group in before["digests"]} == before["digests"]
