"""The one translator from a config to what the launchers pass: which kernel function runs,
its constexprs, its compile options and the launcher's own host-side arguments.

Every knob declares what it becomes at launch (``Knob.launch`` in kernels/knobs.py); this
module reads those declarations and nothing else of a knob, so the prefill launchers
(kernels/attention.py, kernels/lean.py), the decode launcher (kernels/decode.py), the
compile pool (objectives/precompile.py) and the feasibility model agree on one reading.
The shape-dependent constexprs (HEAD_DIM, IS_CAUSAL, HAS_SEQLENS, ...) are the launchers':
they come from the call, not the config.

Pure Python, no torch: the compile pool's parent and the feasibility model read it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

from flashtune.kernels.config import Config, Value
from flashtune.kernels.knobs import KERNEL_KNOBS, Choice, CompileOption, Constexpr, HostArg, Knob
from flashtune.kernels.space import kernel_of, setting


@dataclass(frozen=True)
class LaunchPlan:
    """What a config becomes at launch.

    Attributes:
        variant: The kernel function that runs (``forward``, ``lean``, ``oneloop`` of the
            prefill kernel; ``decode``): the launchers' tables map it to a function.
        constexprs: The config's constexprs of that kernel, by name.
        options: Triton compile options (``num_warps``, ``num_stages``, ...).
        host: The launcher's own arguments (``num_splits``, ``combine``, ...).
    """

    variant: str
    constexprs: Mapping[str, Value]
    options: Mapping[str, Value]
    host: Mapping[str, Value]

    @property
    def descriptor_q(self) -> bool:
        """Whether Q (and O) go through tensor descriptors too: every variant but the forward
        kernel's and decode's (which read Q by pointers, K/V by descriptors with USE_TMA)."""
        return self.variant not in ("forward", "decode")

    @property
    def reads_descriptors(self) -> bool:
        """Whether the kernel reads through tensor descriptors (TMA: Hopper and newer, 16-byte
        aligned tensors)."""
        return self.descriptor_q or bool(self.constexprs.get("USE_TMA", False))


def launch_plan(config: Mapping[str, Value]) -> LaunchPlan:
    """Translate a config of a declared space (omitted knobs mean their implied values).

    Cached per config: the op translates on every call, whose host time is measured.

    Raises:
        KeyError: the config omits a knob that declares no implied value.
        ValueError: no knob of the config's kernel picks a variant.
    """
    return _plan(config if isinstance(config, Config) else Config(config))


@functools.lru_cache(maxsize=4096)
def _plan(config: Config) -> LaunchPlan:
    variant: str | None = None
    constexprs: dict[str, Value] = {}
    options: dict[str, Value] = {}
    host: dict[str, Value] = {}
    for knob in KERNEL_KNOBS[kernel_of(config)]:
        value = setting(config, knob.name)
        launch = knob.launch
        if isinstance(launch, Constexpr):
            constexprs[launch.name] = value
        elif isinstance(launch, CompileOption):
            options[launch.name] = value
        elif isinstance(launch, HostArg):
            host[launch.name] = value
        elif isinstance(launch, Choice):
            chosen = launch.by_value[value]
            variant = chosen.variant if chosen.variant is not None else variant
            constexprs.update(chosen.constexprs)
    if variant is None:
        raise ValueError(f"config {dict(config)}: no knob of kernel {kernel_of(config)!r} picks a kernel variant")
    return LaunchPlan(variant, constexprs, options, host)


def _switches(knob: Knob) -> set[str]:
    """Every name a knob can set at launch (``variant`` for the choice of kernel)."""
    launch = knob.launch
    if isinstance(launch, Choice):
        names = {name for chosen in launch.by_value.values() for name in chosen.constexprs}
        return names | ({"variant"} if any(c.variant is not None for c in launch.by_value.values()) else set())
    return {launch.name} if launch is not None else set()


def check_declarations(kernel_knobs: Mapping[str, tuple[Knob, ...]] = KERNEL_KNOBS) -> None:
    """Refuse declarations two knobs of one kernel would both set a switch of (one switch,
    one knob: the translation would depend on the knobs' order).

    Raises:
        ValueError: naming the switch and the two knobs.
    """
    for kernel, knobs in kernel_knobs.items():
        owner: dict[str, str] = {}
        for knob in knobs:
            for name in _switches(knob):
                if owner.setdefault(name, knob.name) != knob.name:
                    raise ValueError(f"kernel {kernel!r}: knobs {owner[name]!r} and {knob.name!r} both set {name!r}")


check_declarations()
