"""Serving tuned configs: store, dispatch with fallback, online re-tuning.

``flashtune.runtime.flash_attention`` is the op a model calls. The torch-facing parts
(dispatch, the ``torch.library`` op, online tuning) load on first use, so that the store,
the buckets and the baselines import without torch.

Modules: ``store`` (the JSON file), ``buckets``, ``baselines`` (the hardware feature
library), ``resolve`` (exact -> nearest -> baseline), ``dispatch`` (the op),
``torch_op`` (``torch.ops.flashtune.flash_attention``), ``hf_attention`` (transformers),
``online`` with ``monitor``, ``timing``, ``candidates`` and ``worker`` (opt-in
re-tuning), ``mlflow_callback``, ``export`` (``export_best``), and the benchmarks
``bench_dispatch`` and ``bench_model``.

Usage::

    import flashtune.runtime as rt

    rt.set_store("configs.json")  # else $FLASHTUNE_STORE, else ~/.cache/flashtune/configs.json
    out = rt.flash_attention(q, k, v, causal=True)
    rt.explain(q, k, causal=True)  # Resolution(config, origin="exact"|"nearest"|"baseline", detail)

    from flashtune.runtime.hf_attention import register
    model.set_attn_implementation(register())  # transformers, name "tuned_attention"

    from flashtune.runtime.mlflow_callback import MlflowMetrics
    tuner = rt.enable_online(callbacks=[MlflowMetrics()])  # opt-in; tuner.metrics(), tuner.close()
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "flash_attention", "explain", "set_store", "set_hardware", "reload_store", "get_dispatcher",
    "export_best", "Store", "StoreWarning", "baseline_priors", "fallback_config",
    "enable_online", "OnlineTuner", "OnlineOptions",
]

_LAZY = {
    "flash_attention": "flashtune.runtime.dispatch",
    "explain": "flashtune.runtime.dispatch",
    "set_store": "flashtune.runtime.dispatch",
    "set_hardware": "flashtune.runtime.dispatch",
    "reload_store": "flashtune.runtime.dispatch",
    "get_dispatcher": "flashtune.runtime.dispatch",
    "export_best": "flashtune.runtime.export",
    "Store": "flashtune.runtime.store",
    "StoreWarning": "flashtune.runtime.store",
    "baseline_priors": "flashtune.runtime.baselines",
    "fallback_config": "flashtune.runtime.baselines",
    "enable_online": "flashtune.runtime.online",
    "OnlineTuner": "flashtune.runtime.online",
    "OnlineOptions": "flashtune.runtime.online_options",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'flashtune.runtime' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
