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
               "flash_attention", "flash_attention_varlen", "tunables_for", "validate_config"]

    def __getattr__(name: str):
        if name == "flash_attention":
            # Lazy: importing flashtune.kernels (configs, the space) must not pull in torch and Triton.
            from flashtune.kernels.attention import flash_attention

            return flash_attention
        if name == "flash_attention_varlen":
            # Lazy, as flash_attention: it imports torch and Triton.
            from flashtune.kernels.varlen import flash_attention_varlen

            return flash_attention_varlen
        raise AttributeError(f"module 'flashtune.kernels' has no attribute {name!r}")
