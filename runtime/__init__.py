"""Serving tuned configs: store, dispatch with fallback, online re-tuning.

``flashtune.runtime.flash_attention`` is the op a model calls. The torch-facing parts
(dispatch, the ``torch.library`` op, online tuning) load on first use, so that the store,
the buckets and the baselines import without torch.

Rooms, one job each: ``storage`` (``store``, the JSON file, its ``store_schema``, the
``buckets`` it keys on, ``export`` (``export_best``)); ``dispatching`` (``dispatch``, the op,
``resolve``: exact -> nearest -> baseline, ``baselines``: the hardware feature library,
``prepared`` calls, ``packed``: the varlen and paged ops with their classes' store entries); ``retuning`` (``online`` with ``online_options``, ``monitor``,
``timing``, ``candidates``, ``worker`` and ``mlflow_callback``: opt-in re-tuning);
``integrations`` (``torch_op``: ``torch.ops.flashtune.flash_attention``, ``hf_attention``:
transformers). The rooms are named apart from the modules they hold, so no package shadows
a module of its own name. ``flashtune.runtime.hf_attention`` stays importable as the README
documents it. The benchmarks live in ``flashtune.experiments.benchmarks`` (``flashtune bench NAME``).

Usage::

    import flashtune.runtime as rt

    rt.set_store("configs.json")  # else $FLASHTUNE_STORE, else ~/.cache/flashtune/configs.json
    out = rt.flash_attention(q, k, v, causal=True)
    rt.explain(q, k, causal=True)  # Resolution(config, origin="exact"|"nearest"|"sibling"|"baseline", detail)

    from flashtune.runtime.hf_attention import register
    model.set_attn_implementation(register())  # transformers, name "tuned_attention"

    from flashtune.runtime.retuning.mlflow_callback import MlflowMetrics
    tuner = rt.enable_online(callbacks=[MlflowMetrics()])  # opt-in; tuner.metrics(), tuner.close()
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "flash_attention", "explain", "flash_attention_varlen", "flash_attention_with_kvcache", "explain_varlen",
    "explain_paged", "set_store", "set_hardware", "reload_store", "get_dispatcher",
    "export_best", "Store", "StoreWarning", "baseline_priors", "fallback_config",
    "enable_online", "OnlineTuner", "OnlineOptions",
]

_LAZY = {
    "flash_attention": "flashtune.runtime.dispatching.dispatch",
    "explain": "flashtune.runtime.dispatching.dispatch",
    "flash_attention_varlen": "flashtune.runtime.dispatching.packed",
    "flash_attention_with_kvcache": "flashtune.runtime.dispatching.packed",
    "explain_varlen": "flashtune.runtime.dispatching.packed",
    "explain_paged": "flashtune.runtime.dispatching.packed",
    "set_store": "flashtune.runtime.dispatching.dispatch",
    "set_hardware": "flashtune.runtime.dispatching.dispatch",
    "reload_store": "flashtune.runtime.dispatching.dispatch",
    "get_dispatcher": "flashtune.runtime.dispatching.dispatch",
    "export_best": "flashtune.runtime.storage.export",
    "Store": "flashtune.runtime.storage.store",
    "StoreWarning": "flashtune.runtime.storage.store",
    "baseline_priors": "flashtune.runtime.dispatching.baselines",
    "fallback_config": "flashtune.runtime.dispatching.baselines",
    "enable_online": "flashtune.runtime.retuning.online",
    "OnlineTuner": "flashtune.runtime.retuning.online",
    "OnlineOptions": "flashtune.runtime.retuning.online_options",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'flashtune.runtime' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
