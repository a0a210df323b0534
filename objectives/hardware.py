"""HardwareSpec: what flashtune knows about a GPU, read from the device or from JSON.

A spec loaded from JSON lets a CPU machine simulate another GPU's limits (feasibility,
priors). Shipped specs live in ``objectives/specs``; their figures are public datasheet
numbers and say so in ``source``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

# Fields that decide which configs fit and how they behave; the fingerprint hashes these
# and the software versions, never free text such as ``source``.
_FINGERPRINT_FIELDS = (
    "name", "compute_capability", "sm_count", "shared_memory_per_block_bytes",
    "registers_per_sm", "l2_bytes", "driver", "cuda", "torch", "triton",
)


@dataclass(frozen=True)
class HardwareSpec:
    name: str
    compute_capability: tuple[int, int]
    sm_count: int
    shared_memory_per_block_bytes: int
    registers_per_sm: int = 65536
    registers_per_thread_max: int = 255
    l2_bytes: int = 0
    memory_bandwidth_gbs: float = 0.0
    bf16_dense_tflops: float = 0.0
    driver: str = ""
    cuda: str = ""
    torch: str = ""
    triton: str = ""
    source: str = "read from the device"
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        cc = tuple(self.compute_capability)
        if len(cc) != 2 or not all(isinstance(x, int) for x in cc):
            raise ValueError(f"HardwareSpec.compute_capability must be (major, minor), got {self.compute_capability!r}")
        object.__setattr__(self, "compute_capability", cc)
        for name in ("sm_count", "shared_memory_per_block_bytes", "registers_per_sm"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"HardwareSpec.{name} must be a positive int, got {value!r}")

    @property
    def arch(self) -> str:
        """``sm90`` style architecture tag."""
        return f"sm{self.compute_capability[0]}{self.compute_capability[1]}"

    @property
    def fingerprint(self) -> str:
        """Stable 16-hex-digit hash of the GPU model, its limits and the software stack."""
        payload = {name: getattr(self, name) for name in _FINGERPRINT_FIELDS}
        payload["compute_capability"] = list(self.compute_capability)
        text = json.dumps(payload, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["compute_capability"] = list(self.compute_capability)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HardwareSpec:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"HardwareSpec: unknown field(s) {sorted(unknown)}")
        values = dict(data)
        values["compute_capability"] = tuple(values["compute_capability"])
        return cls(**values)

    @classmethod
    def from_json(cls, path: str | Path) -> HardwareSpec:
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"hardware spec file {path}: {exc}") from None
        return cls.from_dict(data)

    def to_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def from_device(cls, device: int = 0) -> HardwareSpec:
        """Read the spec of a CUDA device (only in a process that may touch CUDA)."""
        import torch
        import triton

        props = torch.cuda.get_device_properties(device)
        shared = getattr(props, "shared_memory_per_block_optin", 0) or props.shared_memory_per_block
        return cls(
            name=props.name,
            compute_capability=(props.major, props.minor),
            sm_count=props.multi_processor_count,
            shared_memory_per_block_bytes=int(shared),
            registers_per_sm=int(getattr(props, "regs_per_multiprocessor", 65536)),
            l2_bytes=int(getattr(props, "L2_cache_size", 0)),
            driver=_driver_version(),
            cuda=str(torch.version.cuda or ""),
            torch=torch.__version__,
            triton=triton.__version__,
            source="read from the device",
        )


def _driver_version() -> str:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # nvidia-ml-py missing or no driver: the version is then unknown
        return ""


def known_specs() -> dict[str, HardwareSpec]:
    """Shipped specs by short name (``h200``, ``a100``, ...)."""
    specs = {}
    for entry in resources.files("flashtune.objectives").joinpath("specs").iterdir():
        if entry.name.endswith(".json"):
            specs[entry.name[: -len(".json")]] = HardwareSpec.from_dict(json.loads(entry.read_text()))
    return specs


def load_spec(name_or_path: str) -> HardwareSpec:
    """A shipped spec by short name, or a spec JSON file by path."""
    specs = known_specs()
    if name_or_path.lower() in specs:
        return specs[name_or_path.lower()]
    path = Path(name_or_path)
    if path.suffix == ".json" or path.exists():
        return HardwareSpec.from_json(path)
    raise ValueError(f"unknown hardware {name_or_path!r}: use one of {sorted(specs)} or a JSON file")
