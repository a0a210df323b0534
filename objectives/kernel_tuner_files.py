"""Other people's recorded spaces: Kernel Tuner cache files and T4 files, as measurements.

Kernel Tuner (``tune_kernel(..., cache=FILE)``) records every config it ran in a JSON cache
(``.json``, or gzipped ``.json.gz``): ``tune_params`` (each parameter's values),
``tune_params_keys`` (their order) and ``cache``: ``{"v1,v2,...": {param: value, ...,
"time": ms or an error string}}``. T4, the autotuning community's shared results schema,
holds ``results[]`` with a ``configuration``, ``times.runtimes``, ``invalidity`` and
``measurements`` named by ``objectives``. An exhaustive file is the whole space: its
configs are the space's members, its failures failed trials (never dropped: a search
that asks one learns it fails, as it would on the GPU).

Times: a cache's ``time`` (the mean of its ``times``, what Kernel Tuner minimizes); a T4
result's measurement named by its first objective (the schema's own value; it is not
always the mean of ``runtimes``). 20/80 % quantiles from the recorded repeats.

Every problem with a file is one ``ValueError`` naming the file: unreadable or truncated,
an unknown schema version, a config that breaks the file's own ``tune_params``.
"""

from __future__ import annotations

import gzip
import json
import math
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flashtune.kernels.config import Config
from flashtune.objectives.types import Measurement, Status

#: Suffixes of the files this module reads (``is_kernel_tuner_file``).
SUFFIXES = (".json", ".json.gz")
#: Schema versions read. Kernel Tuner's caches before 1.0 carry none.
CACHE_VERSIONS = (None, "1.0.0", "1.1.0", "1.2.0")
T4_VERSIONS = ("1.0.0",)
#: Kernel Tuner's failure strings (``kernel_tuner.util``: ErrorConfig and subclasses).
CACHE_FAILURES = {
    "InvalidConfig": Status.INFEASIBLE,
    "CompilationFailedConfig": Status.COMPILE_ERROR,
    "RuntimeFailedConfig": Status.RUNTIME_ERROR,
}
#: T4's ``invalidity`` values other than "correct".
T4_FAILURES = {
    "compile": Status.COMPILE_ERROR,
    "runtime": Status.RUNTIME_ERROR,
    "correctness": Status.WRONG_RESULT,
    "constraints": Status.INFEASIBLE,
}


@dataclass(frozen=True)
class RecordedSpace:
    """One file: its parameters (in declared order), every recorded config's measurement."""

    path: Path
    name: str  # the file's name without its suffixes: ``gemm_RTX_3090``
    tunables: dict[str, tuple]
    measurements: tuple[Measurement, ...]
    device: str
    kernel: str


def is_kernel_tuner_file(path: str | Path) -> bool:
    return str(path).endswith(SUFFIXES)


def space_name(path: str | Path) -> str:
    name = Path(path).name
    for suffix in sorted(SUFFIXES, key=len, reverse=True):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return Path(path).stem


def load_kernel_tuner(path: str | Path) -> RecordedSpace:
    """Read a Kernel Tuner cache or T4 file (found by its keys, not its name).

    Raises:
        ValueError: one line naming the file and its problem.
    """
    path = Path(path)
    data = read_json(path)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a Kernel Tuner cache or T4 file (top level is {type(data).__name__})")
    if "cache" in data:
        return _from_cache(path, data)
    if "results" in data:
        return _from_t4(path, data)
    raise ValueError(f"{path}: not a Kernel Tuner cache (no 'cache') nor a T4 file (no 'results')")


def read_json(path: Path) -> Any:
    """A JSON file, gzipped or not; a problem is one ``ValueError`` naming the file."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"{path}: {exc.strerror or exc}") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (EOFError, OSError, zlib.error) as exc:
            raise ValueError(f"{path}: truncated or corrupt gzip data ({exc})") from None
    try:
        return json.loads(raw)
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not text JSON ({exc.reason})") from None
    except json.JSONDecodeError as exc:
        # Kernel Tuner writes its cache as it tunes; a killed run leaves it unterminated.
        ends_early = exc.pos >= len(raw.rstrip()) - 1 or exc.msg.startswith("Unterminated")
        where = "truncated" if ends_early else "not valid JSON"
        raise ValueError(f"{path}: {where} (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"{path}: {json_problem(exc)}") from None


#: Python's words for an integer longer than it converts (``sys.get_int_max_str_digits``).
_TOO_MANY_DIGITS = re.compile(r"Exceeds the limit \((\d+) digits\).*value has (\d+) digits")


def json_problem(exc: ValueError | RecursionError) -> str:
    """What ``json.loads`` met, said for a user: a RecursionError or Python's advice to
    raise its digit limit name neither the file nor what is wrong with it."""
    if isinstance(exc, RecursionError):
        return "not valid JSON (nested too deeply)"
    digits = _TOO_MANY_DIGITS.search(str(exc))
    if digits:
        return f"not valid JSON (a number of {digits[2]} digits; Python reads at most {digits[1]})"
    return f"not valid JSON ({str(exc)[:200]})"


def _tunables(path: Path, data: dict[str, Any]) -> dict[str, tuple]:
    params = data.get("tune_params")
    if not isinstance(params, dict) or not params:
        raise ValueError(f"{path}: no tune_params")
    keys = data.get("tune_params_keys", list(params))
    if not isinstance(keys, list) or set(keys) != set(params):
        raise ValueError(f"{path}: tune_params_keys {keys} do not name the tune_params {sorted(params)}")
    tunables = {}
    for name in keys:
        values = params[name]
        if not isinstance(values, list) or not values:
            raise ValueError(f"{path}: tune_params[{name!r}] is not a non-empty list")
        try:
            for value in values:
                Config({name: value})
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{path}: tune_params[{name!r}]: {exc}") from None
        tunables[name] = tuple(values)
    return tunables


def _config(path: Path, where: str, values: Any, tunables: dict[str, tuple],
            allowed: dict[str, frozenset]) -> tuple[Config, dict[str, Any]]:
    """The config a record names, checked against the file's own tune_params (``allowed``:
    their values as sets), and its values in the file's parameter order."""
    if not isinstance(values, dict):
        raise ValueError(f"{path}: {where}: no parameter values")
    picked = {}
    for name in tunables:
        if name not in values:
            missing = [n for n in tunables if n not in values]
            raise ValueError(f"{path}: {where} lacks parameter(s) {missing}")
        value = values[name]
        if value not in allowed[name]:
            raise ValueError(f"{path}: {where} has {name}={value!r}, not one of its tune_params {list(tunables[name])}")
        picked[name] = value
    return Config(picked), picked


def _allowed(tunables: dict[str, tuple]) -> dict[str, frozenset]:
    return {name: frozenset(values) for name, values in tunables.items()}


def _quantiles(times: Any, fallback: float) -> tuple[float, float]:
    if isinstance(times, list) and times and all(isinstance(t, (int, float)) and math.isfinite(t) for t in times):
        ordered = sorted(float(t) for t in times)
        return _percentile(ordered, 0.2), _percentile(ordered, 0.8)
    return fallback, fallback


def _percentile(ordered: list[float], q: float) -> float:
    """numpy's default (linear) percentile of sorted values; in Python, as numpy's per-call
    cost would dominate reading a file of 18,000 configs."""
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _from_cache(path: Path, data: dict[str, Any]) -> RecordedSpace:
    version = data.get("schema_version")
    if version not in CACHE_VERSIONS:
        raise ValueError(f"{path}: unknown Kernel Tuner cache schema_version {version!r}; "
                         f"read: {[v for v in CACHE_VERSIONS if v]} or none")
    tunables = _tunables(path, data)
    objective = data.get("objective", "time")
    if objective != "time":
        raise ValueError(f"{path}: objective {objective!r}; only 'time' (minimized) is read")
    cache = data["cache"]
    if not isinstance(cache, dict) or not cache:
        raise ValueError(f"{path}: the cache holds no configs")
    device = str(data.get("device_name", ""))
    measurements = []
    allowed = _allowed(tunables)
    for key, record in cache.items():
        config, picked = _config(path, f"config {key!r}", record, tunables, allowed)
        if key != ",".join(map(str, picked.values())):
            raise ValueError(f"{path}: config {key!r} records other values {dict(config)}")
        value = record.get("time")
        compile_s = record.get("compile_time")
        compile_s = float(compile_s) / 1e3 if isinstance(compile_s, (int, float)) else math.nan
        measurements.append(_measurement(path, f"config {key!r}", config, value, CACHE_FAILURES,
                                         record.get("times"), device, compile_s))
    return RecordedSpace(path, space_name(path), tunables, tuple(measurements), device, str(data.get("kernel_name", "")))


def _from_t4(path: Path, data: dict[str, Any]) -> RecordedSpace:
    version = data.get("schema_version")
    if version not in T4_VERSIONS:
        raise ValueError(f"{path}: unknown T4 schema_version {version!r}; read: {list(T4_VERSIONS)}")
    results = data["results"]
    if not isinstance(results, list) or not results:
        raise ValueError(f"{path}: the T4 results hold no configs")
    # T4 files carry no tune_params: the recorded values are the space's.
    names: list[str] = []
    for result in results:
        configuration = result.get("configuration") if isinstance(result, dict) else None
        if not isinstance(configuration, dict):
            raise ValueError(f"{path}: a T4 result without a configuration")
        names.extend(n for n in configuration if n not in names)
    values: dict[str, list] = {name: [] for name in names}
    for result in results:
        for name in names:
            value = result["configuration"].get(name)
            if value is not None and value not in values[name]:
                values[name].append(value)
    tunables = {name: tuple(sorted(vals, key=lambda v: (isinstance(v, str), v if not isinstance(v, str) else 0,
                                                        str(v)))) for name, vals in values.items()}
    device = str(data.get("metadata", {}).get("device", ""))
    measurements = []
    allowed = _allowed(tunables)
    for number, result in enumerate(results):
        where = f"result {number}"
        config, _ = _config(path, where, result["configuration"], tunables, allowed)
        objectives = result.get("objectives") or ["time"]
        named = {m.get("name"): m.get("value") for m in result.get("measurements", []) if isinstance(m, dict)}
        invalidity = result.get("invalidity", "correct")
        if invalidity != "correct":
            value: Any = invalidity
        elif objectives[0] in named:
            value = named[objectives[0]]
        else:
            raise ValueError(f"{path}: {where} has no measurement of its objective {objectives[0]!r}")
        times = result.get("times", {}) or {}
        compile_ms = times.get("compilation")
        compile_s = float(compile_ms) / 1e3 if isinstance(compile_ms, (int, float)) else math.nan
        measurements.append(_measurement(path, where, config, value, {**T4_FAILURES, **CACHE_FAILURES},
                                         times.get("runtimes"), device, compile_s))
    return RecordedSpace(path, space_name(path), tunables, tuple(measurements), device, "")


def _measurement(path: Path, where: str, config: Config, value: Any, failures: dict[str, Status], times: Any,
                 device: str, compile_s: float) -> Measurement:
    common = {"fingerprint": device or space_name(path), "hardware": device, "compile_s": compile_s}
    if isinstance(value, str):
        # A failure string Kernel Tuner or T4 does not list is still a failure, kept as said.
        status = failures.get(value, Status.RUNTIME_ERROR)
        return Measurement.failure(config, None, status, value, **common)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{path}: {where} has time {value!r}, neither a positive number of ms nor a failure string")
    p20, p80 = _quantiles(times, float(value))
    return Measurement(config, None, Status.OK, median_ms=float(value), p20_ms=p20, p80_ms=p80, **common)
