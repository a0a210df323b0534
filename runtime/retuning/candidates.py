"""Candidates for an online re-tune: store priors, one-step neighbours, baselines.

Store priors first (what was measured best for this bucket and the nearest ones on this
GPU), then the incumbent's neighbours (one step in one tunable: where a drifted optimum
most likely moved), then the architecture's baselines. The tuner filters them for
feasibility, for the dispatcher's precision policy and for configs already rejected.
"""

from __future__ import annotations

import itertools

from flashtune.kernels.config import Config
from flashtune.kernels.space import KERNEL_TUNABLES, kernel_of
from flashtune.objectives.types import Workload
from flashtune.runtime.dispatching.baselines import baseline_priors
from flashtune.runtime.dispatching.dispatch import CacheKey, Dispatcher

#: Nearest-bucket store entries taken as priors, beyond the bucket's own.
NEAREST_PRIORS = 3


def neighbours(config: Config) -> list[Config]:
    """Configs one step away in one tunable (the declared order of its values, in the
    space of the config's kernel)."""
    result = []
    for name, values in KERNEL_TUNABLES[kernel_of(config)].items():
        if name not in config or config[name] not in values:
            continue
        i = values.index(config[name])
        for j in (i - 1, i + 1):
            if 0 <= j < len(values):
                result.append(config.replace(**{name: values[j]}))
    return result


def default_candidates(dispatcher: Dispatcher, key: CacheKey, incumbent: Config, workload: Workload) -> list[Config]:
    """Store priors (this bucket, then the nearest), neighbours, then baselines; unfiltered."""
    spec, store_key = dispatcher.hardware_for(key[0])
    bucket = dispatcher.bucket_of(key)
    result: list[Config] = []
    if spec is not None and store_key is not None and bucket is not None:
        snapshot = dispatcher.store.snapshot()
        exact = snapshot.exact(store_key, bucket)
        result += [exact.config] if exact else []
        result += [e.config for e in itertools.islice(snapshot.nearest(store_key, bucket), NEAREST_PRIORS)]
    result += neighbours(incumbent)
    if spec is not None:
        result += [m.config for m in baseline_priors(spec, workload)]
    return result
