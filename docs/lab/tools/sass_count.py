"""Count the SASS instructions of configs compiled for a GPU model on this machine (no GPU).

Why: a change to a kernel's inner loop (a multiply folded away, shuffles replaced by
in-thread permutes) shows in the instruction mix before any device time is spent. Each
config is compiled as ``objectives.aot`` compiles it, its cubin disassembled with the
``cuobjdump`` Triton's wheel carries, and the opcodes (``FMUL``, ``SHFL``, ``PRMT``,
``MUFU``, ...; modifiers dropped) counted over the whole kernel.

    python docs/lab/tools/sass_count.py --workload 2,32,8192,128 \
        --config '{"loads": "gluon_pingpong", "BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 4,
                   "num_stages": 2, "use_fp8": true}' --fp8-p multiply --json counts.json

``--extra NAME=VALUE`` (repeatable) adds a constexpr to a Gluon config's kernel variant, one the
space does not declare (``LAZY_RESCALE=1``, ``EXP2_POLY=3``), as docs/gpu/variants_probe.py times them.

Run without ``TRITON_INTERPRET`` (the interpreter's kernels do not compile).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

import torch

from flashtune.kernels.attention import TORCH_DTYPES, quantize_fp8
from flashtune.kernels.config import Value
from flashtune.kernels.gluon import fp8_p_v_order, gluon_variant_for, launch_gluon
from flashtune.kernels.space import validate_config
from flashtune.objectives.aot import _triton_tool, compiling_for, resource_usage
from flashtune.objectives.hardware import HardwareSpec, load_spec
from flashtune.objectives.precompile import compile_config
from flashtune.objectives.types import Workload

#: One instruction line of ``cuobjdump -sass``: ``/*0a30*/  @!P0 FMUL.FTZ R3, R4, 448 ;``.
_INSTRUCTION = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)")


def opcode_counts(sass: str) -> collections.Counter[str]:
    """Opcodes (without modifiers) of a ``cuobjdump -sass`` listing, counted."""
    return collections.Counter(match.group(1) for match in _INSTRUCTION.finditer(sass))


#: An instruction with its address and text (predicate included, encoding dropped).
_ADDRESSED = re.compile(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);")
#: What a block loop's schedule shows: the waits, barriers and releases (their order is what
#: ptxas keeps), and the GEMM that closes each wgmma group.
_SYNC = ("WARPGROUP.DEPBAR", "BAR.SYNC", "SYNCS.ARRIVE")


def _opcodes_first(lines: list[tuple[int, str]]) -> list[str]:
    """The instructions without their predicates (``@!P0 BRA ...`` -> ``BRA ...``)."""
    return [re.sub(r"^@!?U?P\w+\s+", "", text.strip()) for _, text in lines]


def block_loops(lines: list[tuple[int, str]]) -> list[tuple[int, int]]:
    """The Gluon block loops of a kernel's instructions ((address, text) in address order: a
    cuobjdump listing or Nsight Compute's source page) as (first, last) indices: the innermost
    loops closed by a backward branch whose body closes two wgmma groups (QK^T and PV) and
    takes 16 exponentials or more. A backward jump over an ``EXIT`` is not one: it is an
    out-of-line stub (an mbarrier wait's retry) going back into a loop."""
    at = {address: i for i, (address, _) in enumerate(lines)}
    spans = []
    for i, (address, text) in enumerate(lines):
        branch = re.search(r"\bBRA\s+(0x[0-9a-f]+)", text)
        if branch and int(branch.group(1), 16) < address and int(branch.group(1), 16) in at:
            first = at[int(branch.group(1), 16)]
            ops = _opcodes_first(lines[first:i + 1])
            closing = sum("GMMA" in op.split()[0] and "gsb0" in op for op in ops)
            if (closing >= 2 and sum(op.startswith("MUFU") for op in ops) >= 16
                    and not any(op.startswith("EXIT") for op in ops)):
                spans.append((first, i))
    return sorted(s for s in spans if not any(o != s and s[0] <= o[0] and o[1] <= s[1] for o in spans))


def block_loop_schedule(sass: str) -> list[tuple[int, str]]:
    """The Gluon block loop of a listing (the smallest of ``block_loops``) as (position in the
    loop, what): its waits, barriers, mbarrier arrivals and group-closing GEMMs in order, and
    its first and last ``MUFU``. Why: ptxas keeps the synchronization in program order but
    moves arithmetic across it, so where a wgmma wait lands against the exponentials is read
    here, not in the source (BENCHMARKS.md, 2026-12-05)."""
    lines = [(int(m.group(1), 16), m.group(2).strip()) for m in _ADDRESSED.finditer(sass)]
    spans = block_loops(lines)
    if not spans:
        return []
    first, last = min(spans, key=lambda span: span[1] - span[0])
    body = _opcodes_first(lines[first:last + 1])
    mufu = [k for k, op in enumerate(body) if op.startswith("MUFU")]
    events = [(k, op) for k, op in enumerate(body)
              if op.startswith(_SYNC) or ("GMMA" in op.split()[0] and "gsb0" in op)]
    events += [(mufu[0], f"first MUFU (of {len(mufu)})"), (mufu[-1], "last MUFU")]
    return sorted(events)


def pv_wait_follows_the_exponentials(sass: str) -> bool:
    """Whether the block loop's last full wgmma wait (``DEPBAR.LE gsb0, 0x0``: the PV product's)
    comes after its last exponential (``block_loop_schedule``)."""
    events = block_loop_schedule(sass)
    waits = [k for k, what in events if what.startswith("WARPGROUP.DEPBAR.LE gsb0, 0x0")]
    last_mufu = [k for k, what in events if what == "last MUFU"]
    return bool(waits and last_mufu) and waits[-1] > last_mufu[0]


def compiled_sass(config: Mapping[str, Value], workload: Workload, hardware: HardwareSpec,
                  fp8_p: str | None = None, extra: Mapping[str, Value] | None = None) -> tuple[str, dict[str, int]]:
    """(the SASS listing, cuobjdump's resource usage) of ``config`` compiled for ``hardware``
    (``fp8_p``: an fp8 Gluon config's P form, kernels/gluon.py; None: the op's; ``extra``:
    constexprs added to a Gluon config's kernel variant)."""
    with compiling_for(hardware):
        if extra:
            kernel = _gluon_variant_kernel(validate_config(config), workload, extra, fp8_p)
        else:
            kernel = compile_config(validate_config(config), workload, device="cpu", fp8_p=fp8_p)
    cubin = kernel.asm["cubin"]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "kernel.cubin"
        path.write_bytes(cubin)
        sass = subprocess.run([str(_triton_tool("cuobjdump")), "-sass", str(path)], capture_output=True, text=True,
                              check=True).stdout
    return sass, resource_usage(cubin)


def _gluon_variant_kernel(config, workload: Workload, extra: Mapping[str, Value], fp8_p: str | None):
    """The Gluon kernel of ``config``'s variant with ``extra`` constexprs, compiled (warm-up
    through ``launch_gluon`` on CPU stand-ins of the workload's shapes)."""
    variant = gluon_variant_for(config)
    variant = dataclasses.replace(variant, extra=tuple({**dict(variant.extra), **extra}.items()))
    w, dtype = workload, TORCH_DTYPES[workload.dtype]
    q, out = (torch.zeros(w.batch, w.q_heads, w.q_len, w.head_dim, dtype=dtype) for _ in range(2))
    k, v = (torch.zeros(w.batch, w.kv_heads, w.kv_len, w.head_dim, dtype=dtype) for _ in range(2))
    scales = None
    if dict(variant.extra).get("FP8"):
        q, k, v, scales = quantize_fp8(q, k, v, v_order=fp8_p_v_order(fp8_p or "permuted"))
    # programs: any count; the persistent grid's compile does not depend on it.
    return launch_gluon(q, k, v, out, causal=w.causal, scale=w.head_dim ** -0.5, variant=variant, programs=1,
                        scales=scales, fp8_p=fp8_p, warmup=True)


def _constexpr(text: str) -> tuple[str, Value]:
    """``NAME=VALUE`` -> (NAME, VALUE as an int, or a bool for true/false)."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"--extra takes NAME=VALUE, got {text!r}")
    if value.lower() in ("true", "false"):
        return name, value.lower() == "true"
    try:
        return name, int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--extra {text!r}: VALUE must be an integer, true or false") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", required=True, help="B,HQ[/HKV],NQ[/NK],D[,causal] as flashtune tune takes it")
    parser.add_argument("--config", action="append", required=True, help="a config as JSON (repeatable)")
    parser.add_argument("--fp8-p", default=None, help="an fp8 Gluon config's P form (kernels/gluon.py FP8_P_FORMS)")
    parser.add_argument("--gpu", default="h200", help="a shipped hardware spec (objectives/specs)")
    parser.add_argument("--ops", default="FMUL,FADD,FFMA,MUFU,SHFL,PRMT,F2FP,F2F,FSEL,FMNMX,HGMMA,QGMMA,BAR,SYNCS",
                        help="opcodes printed per config (all of them go to --json)")
    parser.add_argument("--json", type=Path, help="write every config's full counts and resources here")
    parser.add_argument("--extra", type=_constexpr, action="append", default=[], metavar="NAME=VALUE",
                        help="a constexpr added to a Gluon config's kernel variant (repeatable)")
    parser.add_argument("--schedule", action="store_true",
                        help="also print the block loop's waits, barriers and exponentials in order (Gluon)")
    args = parser.parse_args(argv)
    workload, hardware = Workload.parse(args.workload), load_spec(args.gpu)
    ops = args.ops.split(",")
    print("\t".join(["total", *ops, "REG", "spills", "config"]))
    rows = []
    for text in args.config:
        config = json.loads(text)
        sass, usage = compiled_sass(config, workload, hardware, args.fp8_p, dict(args.extra))
        counts = opcode_counts(sass)
        spills = (usage.get("STACK", 0) + usage.get("LOCAL", 0)) // 4
        print("\t".join([str(sum(counts.values())), *(str(counts.get(op, 0)) for op in ops), str(usage["REG"]),
                         str(spills), text]))
        if args.schedule:
            for position, what in block_loop_schedule(sass):
                print(f"    {position:4d}  {what}")
        rows.append({"config": config, "workload": args.workload, "fp8_p": args.fp8_p, "extra": dict(args.extra),
                     "total": sum(counts.values()),
                     "counts": dict(sorted(counts.items())), "registers": usage["REG"], "spills": spills})
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
