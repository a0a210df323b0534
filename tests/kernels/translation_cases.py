"""What the launchers make of a config: the kernel they call and the constexprs, compile
options and host-side choices they pass it, for a few fixed shapes.

``tests/kernels/data/translation_before.json.gz`` holds these as the launchers made them
before one translator (kernels/launch_plan.py) replaced their own knob reads (commit
117b5b4: ``attention.compile_options``, ``lean.variant_for``, ``decode.split_options``
each read the config its own way); test_translator.py holds the translator to them.
Regenerate only on purpose: ``python tests/kernels/translation_cases.py`` rewrites it.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import random
from pathlib import Path
from typing import Any

import torch

from flashtune.kernels.config import Config
from flashtune.kernels.space import DECODE_TUNABLES, all_configs

FIXTURE = Path(__file__).with_name("data") / "translation_before.json.gz"
#: Configs of each space recorded in full (the rest only in their group's digest).
SAMPLE = {"prefill": 700, "decode": 300}

#: (head_dim, causal, has_seqlens, has_kv_start) of the prefill launch; q, k, v, out
#: contiguous (flat descriptors) or with (batch, heads, len) not collapsing (rank-4 ones).
PREFILL_CASES = ((128, True, False, False), (64, False, True, True))
#: (head_dim, kv_group, q_len, causal, has_seqlens, has_kv_start) of the decode launch.
DECODE_CASES = ((128, 4, 1, True, False, False), (64, 8, 4, False, True, True))


def _tensors(flat: bool) -> tuple[torch.Tensor, ...]:
    q = torch.empty(2, 3, 50, 64)
    if not flat:
        q = torch.empty(2, 50, 3, 64).transpose(1, 2)  # (batch, heads, len) do not collapse
    return q, q, q, q


def _fields(variant: Any) -> dict[str, Any]:
    # ``extra`` (constexprs of knobs declared since) and ``options`` (compile options beyond
    # num_warps/num_stages) joined LeanVariant after the fixture: empty, they are what was.
    fields = dataclasses.asdict(variant)
    for name in ("extra", "options"):
        if not fields.get(name, True):
            del fields[name]
    return fields


def prefill_translation(config: Config) -> dict[str, Any]:
    """The prefill launcher's kernel and arguments for ``config`` in each case."""
    from flashtune.kernels import attention, lean

    route = launched_kernel(config)
    record: dict[str, Any] = {"kernel": route}
    if route == "gluon":  # joined after the fixture (no digest before): its launcher's variant
        from flashtune.kernels.gluon import gluon_variant_for

        try:
            record["variant"] = dataclasses.asdict(gluon_variant_for(config))
        except ValueError as exc:  # a split of rows over warps the launcher refuses
            record["refused"] = str(exc)
        return record
    if route in ("lean", "oneloop"):
        try:
            record["variant"] = [_fields(lean.variant_for(config, *_tensors(flat))) for flat in (True, False)]
        except ValueError as exc:  # a combination the lean launcher refuses (oneloop's persistent grid)
            record["refused"] = str(exc)
        record["fp8_scales"] = bool(config["use_fp8"])
        return record
    record["options"] = [attention.compile_options(config, head_dim=d, causal=c, has_seqlens=s, has_kv_start=kv)
                         for d, c, s, kv in PREFILL_CASES]
    record["grid"] = list(attention.launch_grid(config, q_len=300, batch_heads=6, device=torch.device("cpu")))
    record["quantize"] = bool(config["use_fp8"])
    record["descriptor_scratch"] = descriptor_scratch(config)
    return record


def decode_translation(config: Config) -> dict[str, Any]:
    """The decode launcher's split-kernel options and host choices for ``config`` in each case."""
    from flashtune.kernels import decode

    cases = []
    for d, group, q_len, causal, seqlens, kv_start in DECODE_CASES:
        splits, fused = decode_host(config)
        cases.append({"options": decode.split_options(config, head_dim=d, kv_group=group, q_len=q_len, causal=causal,
                                                      has_seqlens=seqlens, fused_combine=fused,
                                                      has_kv_start=kv_start),
                      "num_splits": splits, "combine_launch": splits > 1 and not fused})
    return {"kernel": "decode", "cases": cases, "descriptor_scratch": decode.uses_tma(config)}


# Recorded at 117b5b4 from the launchers' own reads (loads == "lean_ws_oneloop" is the
# one-loop kernel, other lean* loads the lean one; descriptor scratch for loads other than
# pointer; num_splits and combine read from the config); now from the translator, as the
# launchers read it.

def launched_kernel(config: Config) -> str:
    """Which prefill kernel ``attention.launch`` calls for ``config``."""
    from flashtune.kernels.launch_plan import launch_plan

    return launch_plan(config).variant


def descriptor_scratch(config: Config) -> bool:
    """Whether the forward kernel's launch installs the device-descriptor allocator."""
    from flashtune.kernels.launch_plan import launch_plan

    return bool(launch_plan(config).constexprs["USE_TMA"])


def decode_host(config: Config) -> tuple[int, bool]:
    """(num_splits, fused combine) as ``launch_decode`` derives them."""
    from flashtune.kernels.launch_plan import launch_plan

    host = launch_plan(config).host
    splits = int(host["num_splits"])
    return splits, host["combine"] == "fused" and splits > 1


def recorded() -> dict[str, Any]:
    """The fixture, as :func:`translations` wrote it."""
    return json.loads(gzip.decompress(FIXTURE.read_bytes()))


def _canonical(record: dict[str, Any]) -> str:
    return json.dumps(record, sort_keys=True, separators=(",", ":"))


def translation(config: Config) -> dict[str, Any]:
    """What the launcher of ``config``'s kernel makes of it."""
    return decode_translation(config) if config["kernel"] == "decode" else prefill_translation(config)


#: Values of knobs other than ``loads`` added since the fixture: configs with one have no
#: record before, and stay out of the digests (a ``loads`` value added since gets a group of its own).
ADDED_SINCE = {"grid": ("persistent_zigzag",)}


def translations() -> dict[str, Any]:
    """Every config of both spaces translated: full records of a seeded sample, and one
    digest per kernel and ``loads`` value over all of them (in enumeration order)."""
    out: dict[str, Any] = {"sample": {}, "digests": {}}
    for kernel, configs, translate in (("prefill", list(all_configs()), prefill_translation),
                                       ("decode", list(all_configs(DECODE_TUNABLES)), decode_translation)):
        picked = set(random.Random(22).sample(range(len(configs)), SAMPLE[kernel]))
        digests: dict[str, Any] = {}
        for number, config in enumerate(configs):
            if any(config.get(name) in values for name, values in ADDED_SINCE.items()):
                continue
            record = translate(config)
            text = _canonical(record)
            group = f"{kernel}/{config['loads']}"
            digests.setdefault(group, hashlib.sha256()).update(text.encode() + b"\n")
            if number in picked:
                out["sample"][config.key()] = record
        out["digests"].update({group: digest.hexdigest() for group, digest in digests.items()})
    return out


if __name__ == "__main__":
    text = json.dumps(translations(), sort_keys=True, indent=0) + "\n"
    FIXTURE.write_bytes(gzip.compress(text.encode(), mtime=0))
    print(f"wrote {FIXTURE}")
