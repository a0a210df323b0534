"""The tuned op: look the config up, check it fits the live GPU, call the kernels' launcher.

``flash_attention`` here has the launcher's signature without ``config``. The first call
of a (device, bucket) walks the fallback chain (:mod:`flashtune.runtime.dispatching.resolve`) and
caches the answer. The first call of a *call key* (the bucket's inputs plus q's exact
shape and strides, the scale) runs the launcher, which validates every input and names
the bad argument, and keeps what it derived (:mod:`flashtune.runtime.dispatching.prepared`); every
later call is one dictionary lookup, the checks the key does not cover, an allocation
and the kernel's launch (``docs/lab/tools/bench_dispatch.py`` measures it against a bare launch).

Where the store lives: :func:`set_store`, else ``$FLASHTUNE_STORE``, else
``$XDG_CACHE_HOME/flashtune/configs.json`` (``~/.cache/flashtune/configs.json``).
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from flashtune.kernels.attention import TORCH_DTYPES, takes_key_ranges
from flashtune.kernels.attention import flash_attention as _launcher
from flashtune.kernels.config import Config
from flashtune.kernels.decode import default_combine, default_decode_config
from flashtune.kernels.source_hash import kernel_source_hash
from flashtune.kernels.space import SAFE_DEFAULT, uses_decode_kernel
from flashtune.objectives.hardware import HardwareSpec
from flashtune.runtime.dispatching.baselines import fallback_config
from flashtune.runtime.dispatching.prepared import PreparedCall
from flashtune.runtime.dispatching.prepared import prepare as _prepare
from flashtune.runtime.dispatching.resolve import Resolution, resolve, uses_fp8
from flashtune.runtime.storage.buckets import Bucket, kind_of
from flashtune.runtime.storage.store import (  # noqa: F401 - ENV_STORE, default_store_path re-exported
    ENV_STORE,
    Key,
    Store,
    default_store_path,
    source_hash_of,
    triton_version,
)

#: Resolution origins whose config was measured for its bucket (kept as recorded).
STORE_ORIGINS = ("exact", "nearest", "sibling")
#: Set to 1 to let the store serve fp8 configs (other numerics than the inputs' dtype).
ENV_ALLOW_FP8 = "FLASHTUNE_ALLOW_FP8"

#: The config cache key: (device, dtype, causal, gqa, head_dim, q_len bucket, kv_len bucket,
#: batch x KV heads bucket); one per store bucket and device.
CacheKey = tuple[torch.device, torch.dtype, bool, int, int, int, int, int]
#: The prepared-call key: what fixes a call's validation, grid and compile options.
CallKey = tuple[Any, ...]


class CallRouter(Protocol):
    """What the dispatcher routes its calls through when attached (``online.OnlineTuner``).

    A protocol, not an import: online.py builds on this module, so importing it here would
    close a cycle (dispatch -> online -> candidates -> dispatch).
    """

    def run(self, key: CacheKey, config: Config, call: Callable[[Config], torch.Tensor],
            q: torch.Tensor, k: torch.Tensor) -> torch.Tensor: ...

    def launch_failed(self, key: CacheKey, config: Config) -> Config | None: ...


HardwareProvider = Callable[[torch.device], "HardwareSpec | None"]


@dataclass(slots=True)
class _KeyState:
    """What the dispatcher keeps per cache key (one device and bucket)."""

    #: The config its calls launch now; a swap replaces it (a call in flight keeps the one it read).
    config: Config
    #: How the store answered for its bucket (``explain``); None while only a swap served the key.
    resolution: Resolution | None = None
    #: The config that serves its calls with key ranges when ``config`` cannot take them
    #: (:meth:`Dispatcher._launch_ranged`); None until the first such call.
    ranged: Config | None = None


#: What the dispatcher keeps per call key while an online tuner is attached (the tuner still
#: sees, and may time, every call): (cache key, the config the tuner tracks, the one launched
#: for it (its combine adjusted for key ranges), the launched one's prepared call, causal,
#: scale). A plain tuple, not a named one: every routed call unpacks it, and unpacking a
#: tuple subclass takes the slow path (~40 ns a call).
_Routed = tuple[CacheKey, Config, Config, PreparedCall, bool, float | None]


_DTYPE_NAMES = {dtype: name for name, dtype in TORCH_DTYPES.items()}


def live_hardware(device: torch.device) -> HardwareSpec | None:
    """The spec of a CUDA device, read once; None for other devices (CPU, interpreter)."""
    if device.type != "cuda":
        return None
    return HardwareSpec.from_device(device.index if device.index is not None else torch.cuda.current_device())


def cache_key(q: torch.Tensor, k: torch.Tensor, causal: bool) -> CacheKey:
    """The config-cache key of a call (its device and bucket); raises (any error) on inputs
    that are not attention inputs."""
    shape_q, shape_k = q.shape, k.shape
    return (
        q.device, q.dtype, causal, shape_q[1] // shape_k[1], shape_q[3],
        1 << (shape_q[2] - 1).bit_length(), 1 << (shape_k[2] - 1).bit_length(),
        1 << (shape_q[0] * shape_k[1] - 1).bit_length(),
    )


def safe_default(q: torch.Tensor, k: torch.Tensor) -> Config:
    """The config the launcher runs for these inputs without one (the fallback of a
    config that failed): the decode kernel's default for short queries, else the safe
    prefill tile."""
    if uses_decode_kernel(q.shape[2]):
        return default_decode_config(q, k)
    return SAFE_DEFAULT


def call_key(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float | None, seqlens: Any,
             kv_start: Any = None) -> CallKey:
    """The prepared-call key; raises (any error) on inputs that are not attention inputs.

    Holds everything the launcher's checks, the grid and the compile options depend on,
    except K and V's length, strides and shape, which a growing KV cache changes on every
    decoding step: :class:`~flashtune.runtime.dispatching.prepared.PreparedCall` re-checks those
    (the kv_len bucket is in, because it picks the config).
    """
    shape_k = k.shape
    return (q.device, q.dtype, q.shape, q.stride(), k.device, k.dtype, shape_k[1], (shape_k[2] - 1).bit_length(),
            v.device, v.dtype, causal, scale, seqlens is None, kv_start is None)


class Dispatcher:
    """Serves configs per (device, bucket) from a store, with the fallback chain.

    Args:
        store: the store, its path, or None for the default location (read lazily).
        hardware: device -> spec (or None for "no GPU"); defaults to :func:`live_hardware`.
            Pass a function returning a shipped spec to simulate a GPU on a CPU.
        allow_fp8: serve store configs that compute in fp8 (lower precision than the
            inputs); None reads ``$FLASHTUNE_ALLOW_FP8`` (default off).
    """

    def __init__(
        self,
        store: Store | str | os.PathLike[str] | None = None,
        *,
        hardware: HardwareProvider | None = None,
        allow_fp8: bool | None = None,
    ) -> None:
        if allow_fp8 is None:
            allow_fp8 = os.environ.get(ENV_ALLOW_FP8, "0").lower() in ("1", "true", "yes")
        if not isinstance(allow_fp8, bool):
            raise TypeError(f"allow_fp8 must be a bool or None, got {type(allow_fp8).__name__}")
        self.allow_fp8 = allow_fp8
        self._lock = threading.RLock()
        self._store: Store | None = None
        self._hardware = hardware or live_hardware
        self._specs: dict[torch.device, tuple[HardwareSpec | None, Key | None]] = {}
        self._keys: dict[CacheKey, _KeyState] = {}
        # The packed ops' resolutions (runtime/dispatching/packed.py), per their own keys.
        self._packed: dict[tuple[Any, ...], Resolution] = {}
        # Per call key, one of two forms: prepared calls while no tuner is attached (the hot
        # path reads them with one lookup), routed ones while one is (:meth:`attach` drops both).
        self._calls: dict[CallKey, PreparedCall] = {}
        self._routed: dict[CallKey, _Routed] = {}
        self._online: CallRouter | None = None
        self.set_store(store)

    # --- configuration --------------------------------------------------------------------

    def set_store(self, store: Store | str | os.PathLike[str] | None) -> None:
        """Use another store (None: the default location, resolved now) and forget cached configs."""
        if store is not None and not isinstance(store, (Store, str, os.PathLike)):
            raise TypeError(f"store must be a Store, a path or None, got {type(store).__name__}")
        with self._lock:
            self._store = store if isinstance(store, Store) else Store(store if store is not None else default_store_path())
            self._forget()

    def _forget(self) -> None:
        """Drop every cached config and prepared call (under the lock)."""
        self._keys.clear()
        self._packed.clear()
        self._calls.clear()
        self._routed.clear()

    @property
    def store(self) -> Store:
        assert self._store is not None
        return self._store

    def set_hardware(self, hardware: HardwareProvider | HardwareSpec | None) -> None:
        """Replace the spec provider (a spec: use it for every device; None: the live GPU)."""
        if isinstance(hardware, HardwareSpec):
            spec = hardware
            hardware = lambda _device: spec  # noqa: E731 - a constant provider
        if hardware is not None and not callable(hardware):
            raise TypeError(f"hardware must be a HardwareSpec, a callable or None, got {type(hardware).__name__}")
        with self._lock:
            self._hardware = hardware or live_hardware
            self._specs.clear()
            self._forget()

    def reload(self) -> None:
        """Forget cached configs; the next call of each bucket re-reads the store."""
        with self._lock:
            self._forget()

    # --- lookup ---------------------------------------------------------------------------

    def config_for(self, q: torch.Tensor, k: torch.Tensor, causal: bool = False) -> Config:
        """The config a call with these inputs launches (cached)."""
        try:
            key = cache_key(q, k, causal)
        except Exception:  # not attention inputs; the launcher will say why
            return SAFE_DEFAULT
        state = self._keys.get(key)
        if state is None:
            state = self._miss(key)
            if state is None:
                return SAFE_DEFAULT
        return state.config

    def explain(self, q: torch.Tensor, k: torch.Tensor, causal: bool = False) -> Resolution:
        """The cached resolution (config, origin, detail) for these inputs."""
        key = cache_key(q, k, causal)
        state = self._keys.get(key)
        if state is None or state.resolution is None:
            state = self._miss(key)
        if state is None or state.resolution is None:
            raise KeyError(key)  # no bucket describes these inputs
        return state.resolution

    def bucket_of(self, key: CacheKey) -> Bucket | None:
        """The store bucket of a cache key, None for inputs no bucket describes."""
        _, dtype, causal, gqa, head_dim, q_len, kv_len, batch_kv_heads = key
        try:
            return Bucket(_DTYPE_NAMES[dtype], causal, head_dim, gqa, q_len, kv_len, kind_of(q_len), batch_kv_heads)
        except (KeyError, ValueError):
            return None

    def hardware_for(self, device: torch.device) -> tuple[HardwareSpec | None, Key | None]:
        """The device's spec and store key, read once per device."""
        cached = self._specs.get(device)
        if cached is not None:
            return cached
        try:
            spec = self._hardware(device)
        except Exception as exc:  # no spec means the safe default, not a crash
            warnings.warn(f"flashtune: cannot read the spec of {device} ({exc}); using the safe default", RuntimeWarning, stacklevel=2)
            spec = None
        key = (spec.fingerprint, kernel_source_hash(), triton_version()) if spec is not None else None
        with self._lock:
            self._specs[device] = (spec, key)
        return spec, key

    def _miss(self, key: CacheKey) -> _KeyState | None:
        """Resolve the key's bucket and keep the answer; None (nothing kept) for inputs no
        bucket describes: the safe default serves them and the launcher rejects them."""
        bucket = self.bucket_of(key)
        if bucket is None:
            return None
        spec, store_key = self.hardware_for(key[0])
        # Read on a CPU too, though only a GPU spec picks configs from it: a corrupt file
        # then warns where it is first used, not at deployment on the GPU.
        snapshot = self.store.snapshot()
        resolution = resolve(bucket, snapshot, spec, store_key, self.accepts)
        with self._lock:
            state = self._keys.get(key)
            if state is None:
                state = self._keys[key] = _KeyState(resolution.config, resolution)
            else:  # served by a swap before the store was read: the store's answer replaces it
                state.config, state.resolution = resolution.config, resolution
        return state

    def packed_resolution(self, key: tuple[Any, ...], bucket_of: Callable[[tuple[Any, ...]], Bucket]) -> Resolution:
        """The resolution of a packed op's call key (its device first), resolved through the
        fallback chain on its first call and kept, as a dense key's (``bucket_of`` builds
        the key's bucket: packed.py's key functions)."""
        found = self._packed.get(key)
        if found is not None:
            return found
        bucket = bucket_of(key)
        spec, store_key = self.hardware_for(key[0])
        if store_key is not None:  # the packed kernel's own source hash
            store_key = (store_key[0], source_hash_of(bucket.kind), store_key[2])
        resolution = resolve(bucket, self.store.snapshot(), spec, store_key, self.accepts)
        with self._lock:
            return self._packed.setdefault(key, resolution)

    def packed_failed(self, key: tuple[Any, ...], failed: Resolution, default: Config, exc: Exception) -> None:
        """A packed op's served config failed to launch where its default ran: serve the
        default for the key from now on (``explain`` says why), with one warning."""
        detail = (f"{failed.detail}; its config {failed.config.key()} failed here ({type(exc).__name__}: "
                  f"{str(exc)[:200]}): the kernel's default instead")
        with self._lock:
            self._packed[key] = Resolution(default, "default", detail, failed.bucket)
        name = failed.bucket.name if failed.bucket is not None else key
        warnings.warn(f"flashtune: config {failed.config.key()} failed for {name} ({type(exc).__name__}: "
                      f"{str(exc)[:200]}); serving the kernel's default instead", RuntimeWarning, stacklevel=4)

    def accepts(self, config: Config) -> bool:
        """Whether this dispatcher may serve ``config`` (fp8 only when allowed)."""
        return self.allow_fp8 or not uses_fp8(config)

    def current(self, key: CacheKey) -> Config | None:
        """The config served for ``key`` now (None before its first call)."""
        state = self._keys.get(key)
        return state.config if state is not None else None

    def swap(self, key: CacheKey, config: Config) -> Config | None:
        """Serve ``config`` for ``key`` from the next call on; returns the one it replaces.

        One assignment: a call in flight keeps the config it read.
        """
        with self._lock:
            state = self._keys.get(key)
            if state is None:
                old, self._keys[key] = None, _KeyState(config)
            else:
                old, state.config = state.config, config
            self._calls.clear()  # prepared with the old config; rebuilt on their next call
            self._routed.clear()
        return old

    # --- the op ---------------------------------------------------------------------------

    def attach(self, tuner: CallRouter | None) -> None:
        """Route calls through an online tuner (None detaches)."""
        with self._lock:
            self._online = tuner
            self._calls.clear()  # prepared calls bypass the tuner; none is kept while one is attached
            self._routed.clear()  # the ones routed through a tuner are kept per tuner

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                 scale: float | None = None, cache_seqlens: torch.Tensor | None = None,
                 kv_start: torch.Tensor | None = None) -> torch.Tensor:
        """Attention with the tuned config; see :func:`flash_attention`."""
        # The hot path: a prepared call of this key (none while an online tuner times calls).
        try:
            ckey = call_key(q, k, v, causal, scale, cache_seqlens, kv_start)
            prepared = self._calls.get(ckey)
        except Exception:  # not attention inputs (or an unhashable scale): the slow path says why
            ckey, prepared = None, None
        if prepared is not None:
            if cache_seqlens is None and kv_start is None:
                out = prepared(q, k, v)
            else:
                out = prepared(q, k, v, cache_seqlens, kv_start)
            if out is not None:
                return out
        elif ckey is not None and self._online is not None:
            routed = self._routed.get(ckey)
            if routed is not None:
                return self._route(routed, q, k, v, cache_seqlens, kv_start)
        return self._call(ckey, q, k, v, causal, scale, cache_seqlens, kv_start)

    def _route(self, routed: _Routed, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               cache_seqlens: torch.Tensor | None, kv_start: torch.Tensor | None) -> torch.Tensor:
        """A call through the attached tuner that launches the served config's prepared call
        (the launcher, with every check, when the prepared call hands it back)."""
        key, served, launched, prepared, causal, scale = routed
        extra = {name: t for name, t in (("cache_seqlens", cache_seqlens), ("kv_start", kv_start)) if t is not None}

        def launch(config: Config) -> torch.Tensor:
            if config == served:
                out = prepared(q, k, v) if not extra else prepared(q, k, v, cache_seqlens, kv_start)
                if out is not None:
                    return out
                config = launched
            return self._launch(key, config, q, k, v, causal, scale, extra)

        online = self._online
        if online is None:  # detached meanwhile
            return launch(served)
        return online.run(key, served, launch, q, k)

    def _call(self, ckey: CallKey | None, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
              scale: float | None, cache_seqlens: torch.Tensor | None,
              kv_start: torch.Tensor | None = None) -> torch.Tensor:
        """A call without a prepared form: resolve, run the launcher (every check), prepare."""
        extra = {name: t for name, t in (("cache_seqlens", cache_seqlens), ("kv_start", kv_start)) if t is not None}
        try:
            key = cache_key(q, k, causal)
        except Exception:  # the launcher raises the TypeError/ValueError naming the argument
            return _launcher(q, k, v, causal=causal, scale=scale, config=None, **extra)
        state = self._keys.get(key)
        if state is None:
            state = self._miss(key)
        config = state.config if state is not None else SAFE_DEFAULT
        if extra and state is not None and not takes_key_ranges(config):
            # Per-sequence ranges with a config whose kernel cannot take them (fp8, the lean
            # and Gluon kernels): the architecture's first baseline that takes them serves.
            return self._launch_ranged(state, key, q, k, v, causal, scale, extra)
        served = config
        resolution = state.resolution if state is not None else None
        measured = resolution is not None and resolution.origin in STORE_ORIGINS
        if (extra and config.get("combine") == "fused" and not measured
                and default_combine(batch=q.shape[0], kv_len=k.shape[2], per_sequence_lengths=True) == "launch"):
            # The default's fused combine is slower with per-sequence lengths in a long
            # cache (its last split waits for the longest sequence: kernels.decode.default_combine).
            config = config.replace(combine="launch")
        online = self._online
        if online is not None:
            # The tuner tracks the served config; what runs for it is the one adjusted above.
            launched = config
            out = online.run(key, served, lambda c: self._launch(key, launched if c == served else c, q, k, v,
                                                                 causal, scale, extra), q, k)
            if ckey is not None and self.current(key) == served:  # not swapped meanwhile
                prepared = _prepare(q, k, causal=causal, scale=scale, config=launched, **extra)
                if prepared is not None:
                    self._routed[ckey] = (key, served, launched, prepared, causal, scale)
            return out
        out = self._launch(key, config, q, k, v, causal, scale, extra)
        if ckey is not None and self.current(key) == served:  # not replaced by a recovery
            prepared = _prepare(q, k, causal=causal, scale=scale, config=config, **extra)
            if prepared is not None:
                self._calls[ckey] = prepared
        return out

    def _launch_ranged(self, state: _KeyState, key: CacheKey, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       causal: bool, scale: float | None, extra: dict[str, Any]) -> torch.Tensor:
        """A call with per-sequence key ranges for a bucket whose config cannot take them."""
        config = state.ranged
        if config is None:
            bucket = self.bucket_of(key)
            spec = self.hardware_for(key[0])[0]
            config = (fallback_config(spec, bucket.representative(), accept=takes_key_ranges)
                      if bucket is not None else SAFE_DEFAULT)
            state.ranged = config
        try:
            return _launcher(q, k, v, causal=causal, scale=scale, config=config, **extra)
        except Exception:
            if config == SAFE_DEFAULT:
                raise
            # A baseline these inputs do not suit: the launcher's default from now on (and
            # its error naming the argument, when the inputs are at fault).
            state.ranged = SAFE_DEFAULT
            return _launcher(q, k, v, causal=causal, scale=scale, config=None, **extra)

    def _launch(self, key: CacheKey, config: Config, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                causal: bool, scale: float | None, extra: dict[str, Any]) -> torch.Tensor:
        try:
            return _launcher(q, k, v, causal=causal, scale=scale, config=config, **extra)
        except Exception as exc:  # a tuned config's failure of any kind falls back (the default's is raised)
            if config == safe_default(q, k):
                raise
            return self._recover(key, config, exc, q, k, v, causal, scale, extra)

    def _recover(self, key: CacheKey, config: Config, exc: Exception, q: torch.Tensor, k: torch.Tensor,
                 v: torch.Tensor, causal: bool, scale: float | None, extra: dict[str, Any]) -> torch.Tensor:
        """A served config failed to launch: if the safe default runs, serve that instead.

        The store and the feasibility model can be wrong about a GPU (a static model's
        miss, ``OutOfResources``), and some configs need properties of the inputs (TMA
        loads need 16-byte aligned strides): a bad entry must cost a warning, not the
        model's forward pass. When the safe default fails too, the inputs are at fault and
        its error (naming the argument) propagates.
        """
        out = _launcher(q, k, v, causal=causal, scale=scale, config=None, **extra)
        online = self._online
        replacement = (online.launch_failed(key, config) if online is not None else None) or safe_default(q, k)
        self.swap(key, replacement)
        bucket = self.bucket_of(key)
        warnings.warn(
            f"flashtune: config {config.key()} failed for {bucket.name if bucket else key} "
            f"({type(exc).__name__}: {str(exc)[:200]}); serving {replacement.key()} instead",
            RuntimeWarning, stacklevel=4,
        )
        return out


_DEFAULT: Dispatcher | None = None
_DEFAULT_LOCK = threading.Lock()


def get_dispatcher() -> Dispatcher:
    """The process-wide dispatcher behind :func:`flash_attention` (created on first use)."""
    global _DEFAULT
    if _DEFAULT is None:
        with _DEFAULT_LOCK:
            if _DEFAULT is None:
                _DEFAULT = Dispatcher()
    return _DEFAULT


def set_store(path: str | os.PathLike[str] | None) -> None:
    """Serve configs from the store at ``path`` (None: ``$FLASHTUNE_STORE`` or the default)."""
    get_dispatcher().set_store(path)


def set_hardware(spec: HardwareSpec | None) -> None:
    """Pretend every device is ``spec`` (simulate a GPU on a CPU); None restores the live GPU."""
    get_dispatcher().set_hardware(spec)


def reload_store() -> None:
    """Re-read the store on the next call of each bucket (after an export, for instance)."""
    get_dispatcher().reload()


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False, scale: float | None = None,
                    cache_seqlens: torch.Tensor | None = None, kv_start: torch.Tensor | None = None) -> torch.Tensor:
    """Scaled dot-product attention, forward, with the tuned config for this GPU and shape.

    Args:
        q: (batch, q_heads, q_len, head_dim), float16/bfloat16 (float32 for the interpreter).
        k: (batch, kv_heads, kv_len, head_dim); q_heads must be a multiple of kv_heads.
        v: same shape as k.
        causal: mask future keys, aligned bottom-right when q_len != kv_len.
        scale: softmax scale; 1/sqrt(head_dim) when None.
        cache_seqlens: optional int32 (batch,) tensor on q's device: the number of cached
            keys of each sequence (<= kv_len); None when every sequence uses all kv_len.
            Causal is aligned bottom-right against it (a static cache's filled part).
        kv_start: optional int32 (batch,) tensor on q's device: the first key of each
            sequence (left padding), <= its length; None: keys from 0.

    Returns:
        (batch, q_heads, q_len, head_dim) in q's dtype.

    Raises:
        TypeError, ValueError: bad inputs, naming the argument (never for a bad store:
            that is one warning and the fallback).
    """
    dispatcher = _DEFAULT if _DEFAULT is not None else get_dispatcher()  # a decode step's host time
    return dispatcher(q, k, v, causal=causal, scale=scale, cache_seqlens=cache_seqlens, kv_start=kv_start)


def explain(q: torch.Tensor, k: torch.Tensor, *, causal: bool = False) -> Resolution:
    """Which config :func:`flash_attention` uses for these inputs, and why."""
    return get_dispatcher().explain(q, k, causal)
