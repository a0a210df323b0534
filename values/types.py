"""The values that flow between objectives, strategies and experiments.

Pure Python and JSON-ready: strategies and stores read them without torch.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import re
from dataclasses import dataclass, field
from typing import Any

from flashtune.values.config import Config
from flashtune.values.inputs import DTYPE_ALIASES, DTYPES, SUPPORTED_HEAD_DIMS


class Status(str, enum.Enum):
    """How a trial ended. Only ``ok`` carries a time; every other one is a failure value."""

    OK = "ok"
    INFEASIBLE = "infeasible"  # rejected by the static model before compiling
    OUT_OF_RESOURCES = "out_of_resources"  # Triton's OutOfResources at launch
    COMPILE_ERROR = "compile_error"
    WRONG_RESULT = "wrong_result"
    TIMEOUT = "timeout"
    CRASHED = "crashed"
    #: Failed while running, for a kernel that is not ours (Kernel Tuner's "RuntimeFailedConfig"):
    #: no finer cause is known.
    RUNTIME_ERROR = "runtime_error"
    #: Ran, but compute-sanitizer found an error in it (an out-of-bounds access, a
    #: shared-memory race, a bad barrier, an uninitialized read: objectives/sanitize.py).
    #: Its ``error`` names the tool and the first finding. A failure like every status but
    #: ``ok``: never served, never a winner, whatever its time.
    UNSAFE = "unsafe"


@dataclass(frozen=True)
class Workload:
    """One attention problem: the shapes, dtype and masking a config is tuned for."""

    batch: int
    q_heads: int
    kv_heads: int
    q_len: int
    kv_len: int
    head_dim: int
    dtype: str = "bfloat16"
    causal: bool = False

    def __post_init__(self) -> None:
        for name in ("batch", "q_heads", "kv_heads", "q_len", "kv_len", "head_dim"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"Workload.{name} must be a positive int, got {value!r}")
        if self.q_heads % self.kv_heads:
            raise ValueError(f"Workload.q_heads ({self.q_heads}) must be a multiple of kv_heads ({self.kv_heads})")
        if self.dtype not in DTYPES:
            raise ValueError(f"Workload.dtype must be one of {DTYPES}, got {self.dtype!r}")
        if not isinstance(self.causal, bool):
            raise ValueError(f"Workload.causal must be a bool, got {self.causal!r}")

    @property
    def name(self) -> str:
        heads = f"h{self.q_heads}" if self.q_heads == self.kv_heads else f"hq{self.q_heads}kv{self.kv_heads}"
        length = f"n{self.q_len}" if self.q_len == self.kv_len else f"q{self.q_len}k{self.kv_len}"
        mask = "causal" if self.causal else "full"
        return f"b{self.batch}_{heads}_{length}_d{self.head_dim}_{mask}_{self.dtype}"

    @property
    def flops(self) -> float:
        """Forward FLOPs: two matmuls of 2*Nq*Nk*D each per (batch, head); about half when causal."""
        pairs = float(self.q_len) * self.kv_len
        if self.causal:
            # Pairs (i, j) with j <= i + (kv_len - q_len), counted exactly.
            offset = self.kv_len - self.q_len
            pairs = float(sum(max(0, min(self.kv_len, i + offset + 1)) for i in range(self.q_len)))
        return 4.0 * self.batch * self.q_heads * pairs * self.head_dim

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Workload:
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - fields
        if unknown:
            raise ValueError(f"Workload: unknown field(s) {sorted(unknown)}")
        return cls(**data)

    @classmethod
    def parse(cls, text: str) -> Workload:
        """Parse ``B,H,N,D[,causal]`` or ``B,HQ/HKV,NQ/NK,D[,causal][,dtype]`` (the CLI form),
        or a workload's :attr:`name` (``b8_h16_n2048_d64_causal_bfloat16``, as tables are named).

        Raises:
            ValueError: naming the text and the bad field, including a head dim the kernel
                does not compile for.
        """
        named = _NAME.fullmatch(text.strip())
        if named:
            hq, hkv = named["h"] or named["hq"], named["h"] or named["hkv"]
            nq, nk = named["n"] or named["q"], named["n"] or named["k"]
            text = f"{named['b']},{hq}/{hkv},{nq}/{nk},{named['d']},{named['mask']},{named['dtype']}"
        parts = [p.strip() for p in text.split(",")]
        if len(parts) < 4:
            raise ValueError(f"workload {text!r}: expected B,H,N,D[,causal][,dtype]")
        try:
            batch = int(parts[0])
            hq, _, hkv = parts[1].partition("/")
            nq, _, nk = parts[2].partition("/")
            head_dim = int(parts[3])
            q_heads, kv_heads = int(hq), int(hkv or hq)
            q_len, kv_len = int(nq), int(nk or nq)
        except ValueError as exc:
            raise ValueError(f"workload {text!r}: {exc}") from None
        causal, dtype = False, "bfloat16"
        for extra in parts[4:]:
            if extra in ("causal", "yes", "true"):
                causal = True
            elif extra in ("full", "no", "false"):
                causal = False
            elif extra in DTYPES or extra in DTYPE_ALIASES:
                dtype = DTYPE_ALIASES.get(extra, extra)
            else:
                raise ValueError(f"workload {text!r}: unknown field {extra!r}; accepted: causal or full, "
                                 f"a dtype ({', '.join(DTYPES + tuple(DTYPE_ALIASES))})")
        # Checked here, not in __post_init__: a Workload also describes buckets and recorded
        # problems of any head dim; a workload typed at the CLI is one the kernel must run.
        if head_dim not in SUPPORTED_HEAD_DIMS:
            raise ValueError(f"workload {text!r}: head_dim must be one of {list(SUPPORTED_HEAD_DIMS)}, got {head_dim}")
        try:
            return cls(batch, q_heads, kv_heads, q_len, kv_len, head_dim, dtype, causal)
        except ValueError as exc:
            raise ValueError(f"workload {text!r}: {exc}") from None


#: :attr:`Workload.name`, read back by :meth:`Workload.parse`.
_NAME = re.compile(r"b(?P<b>\d+)_(?:h(?P<h>\d+)|hq(?P<hq>\d+)kv(?P<hkv>\d+))_(?:n(?P<n>\d+)|q(?P<q>\d+)k(?P<k>\d+))"
                   r"_d(?P<d>\d+)_(?P<mask>causal|full)_(?P<dtype>[a-z0-9]+)")


@dataclass(frozen=True)
class Measurement:
    """The outcome of one config on one workload on one GPU; failures included.

    ``workload`` is None for a kernel that is not our attention kernel (a recorded space of
    another kernel, a user's own objective): its problem is part of what was recorded.
    """

    config: Config
    workload: Workload | None
    status: Status
    fingerprint: str = ""
    hardware: str = ""
    median_ms: float = math.inf
    p20_ms: float = math.inf
    p80_ms: float = math.inf
    tflops: float = 0.0
    compile_s: float = math.nan
    registers: int | None = None
    spills: int | None = None
    shared_bytes: int | None = None
    rel_error: float = math.nan
    sm_clock_mhz: float | None = None
    temperature_c: float | None = None
    error: str = ""
    #: What the compiler printed while this config failed to build (Triton's MLIR
    #: reproducer, LLVM or ptxas messages), clipped; "" otherwise. Kept for the trial's
    #: artifacts: ``error`` carries its first meaningful line.
    compiler_output: str = ""
    source: str = "measured"  # measured | replayed | prior
    versions: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["config"] = self.config.to_dict()
        data["workload"] = None if self.workload is None else self.workload.to_dict()
        data["status"] = self.status.value
        # JSON has no inf/nan: store them as null.
        for key, value in data.items():
            if isinstance(value, float) and not math.isfinite(value):
                data[key] = None
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Measurement:
        known = {f.name: f for f in dataclasses.fields(cls)}
        unknown = set(data) - set(known)
        if unknown:
            raise ValueError(f"Measurement: unknown field(s) {sorted(unknown)}")
        missing = [name for name, f in known.items() if name not in data
                   and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        if missing:  # a KeyError would say only 'config'
            raise ValueError(f"Measurement: missing field(s) {missing}")
        values = dict(data)
        values["config"] = Config.from_dict(values["config"])
        values["workload"] = None if values["workload"] is None else Workload.from_dict(values["workload"])
        values["status"] = Status(values["status"])
        for name in ("median_ms", "p20_ms", "p80_ms"):
            if values.get(name) is None:
                values[name] = math.inf
        for name in ("compile_s", "rel_error"):
            if values.get(name) is None:
                values[name] = math.nan
        if values.get("tflops") is None:
            values["tflops"] = 0.0
        _check_times(values)
        return cls(**values)

    @classmethod
    def failure(cls, config: Config, workload: Workload | None, status: Status, error: str = "", **extra: Any) -> Measurement:
        return cls(config=config, workload=workload, status=status, error=error[:2000], **extra)


def _check_times(values: dict[str, Any]) -> None:
    """Recorded numbers checked at the door (a 0 or -5 ms median was stored as a
    success and broke every later read; ``"fast"`` failed mid-study)."""
    for name in ("median_ms", "p20_ms", "p80_ms", "tflops", "compile_s", "rel_error"):
        value = values[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"Measurement: {name} must be a number, got {value!r}")
    if values["status"] is Status.OK:
        median = values["median_ms"]
        if not (math.isfinite(median) and median > 0):
            raise ValueError(f"Measurement: a successful (ok) median_ms must be a finite positive number of ms, "
                             f"got {median!r}")

