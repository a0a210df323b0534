"""The import paths users call (README, ``flashtune.runtime.__all__``) survive the runtime's
move into rooms (storage, dispatching, retuning, integrations)."""

from __future__ import annotations

import importlib

import flashtune.runtime as runtime


def test_every_public_name_resolves_to_its_room() -> None:
    for name in runtime.__all__:
        value = getattr(runtime, name)
        assert value.__module__.startswith("flashtune.runtime."), (name, value.__module__)
        room = value.__module__.split(".")[2]
        assert room in {"storage", "dispatching", "retuning"}, (name, value.__module__)


def test_readme_hf_attention_path_is_the_integrations_module_itself() -> None:
    from flashtune.runtime.hf_attention import register  # the README's line

    documented = importlib.import_module("flashtune.runtime.hf_attention")
    room = importlib.import_module("flashtune.runtime.integrations.hf_attention")
    assert documented is room  # one module: monkeypatches and private names are shared
    assert register is room.register
    assert runtime.hf_attention is room


def test_every_kernel_op_the_readme_names_imports_from_flashtune_kernels() -> None:
    import flashtune.kernels as kernels

    # flash_attention_with_kvcache was named in the README but not exported (2026-12-07).
    for name in ("flash_attention", "flash_attention_varlen", "flash_attention_with_kvcache"):
        assert name in kernels.__all__
        op = getattr(kernels, name)
        assert callable(op) and op.__name__ == name and op.__module__.startswith("flashtune.kernels.")
