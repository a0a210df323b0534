"""Triton FlashAttention kernels, their launcher and the space they declare.

``flash_attention`` (the op) is imported lazily, so that the pure-data parts
(``Config``, the tunable space, the resource model) load without torch or triton.
"""

if __name__ == "kernels":
    # This folder was found as the top-level package `kernels`: Python put the checkout on
    # sys.path (`python -m pytest` or `python -m flashtune...` run from its root), and it
    # shadows PyPI's `kernels`, which transformers (5.25 on) imports whenever it is installed.
    # This package is only ever `flashtune.kernels`; hand the name to the real one.
    from ._top_level_name import import_the_installed_kernels

    import_the_installed_kernels()
else:
    import importlib

    from flashtune.kernels.config import Config
    from flashtune.kernels.space import (
        DECODE_MAX_Q_LEN,
        DECODE_TUNABLES,
        SAFE_DEFAULT,
        TUNABLES,
        all_configs,
        tunables_for,
        validate_config,
    )

    __all__ = ["Config", "DECODE_MAX_Q_LEN", "DECODE_TUNABLES", "SAFE_DEFAULT", "TUNABLES", "all_configs",
               "flash_attention", "flash_attention_varlen", "flash_attention_with_kvcache", "tunables_for",
               "validate_config"]

    # The ops, by the module that defines each: imported on first use, so that importing
    # flashtune.kernels (configs, the space) does not pull in torch and Triton.
    _LAZY_OPS = {"flash_attention": "flashtune.kernels.attention", "flash_attention_varlen": "flashtune.kernels.varlen",
                 "flash_attention_with_kvcache": "flashtune.kernels.paged"}

    def __getattr__(name: str):
        if name in _LAZY_OPS:
            return getattr(importlib.import_module(_LAZY_OPS[name]), name)
        raise AttributeError(f"module 'flashtune.kernels' has no attribute {name!r}")
