"""fp8 kernel-only timing: e4m3 inputs quantized once, outside the timed region.

Why: the recorded fp8 rows (experiments/data/h200_variants/run4_fp8_*) time
``launch``, which quantizes Q, K, V on every call, so they mix two costs. Here each case
is timed as (a) our best bf16 config, (b) the best fp8 configs on pre-quantized inputs
(``launch_quantized``), (c) the best fp8 config with quantization in the call, (d)
``quantize_fp8`` alone, and (e) SDPA cuDNN, interleaved (A B C ... A B C) so all figures
of a case come from the same minutes of the card. Configs come from the recorded tables
(best_configs), plus any given with ``--also`` (the fp8 form of each is timed: the
recorded tables predate ``loads="lean_ws_oneloop"``). Each fp8 variant's error against
the float32 reference is checked against its accuracy gate (``FP8_TOLERANCE``) and the
table marks the fastest one inside it against the 1.0 PFLOP/s fp8 target.
``--gluon-fp8-forms multiply,exp2,permuted`` times each fp8 Gluon config in each P form
(kernels/gluon.py ``FP8_P_FORMS``: the first form, the stretch folded into exp2, and FA3's
in-thread permute on V^T in FA3's key order), named ``fp8_kernel#i/FORM``, side by side.
Usage on the GPU::

    python docs/lab/tools/bench_fp8.py --json fp8.json \
        --also '{"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 4, "num_stages": 2, "loads": "lean_ws_oneloop"}'
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path

from best_configs import best_configs

from flashtune.kernels.attention import fp8_v_order, launch, launch_quantized, quantize_fp8
from flashtune.kernels.config import Config
from flashtune.kernels.gluon import FP8_P_FORMS, fp8_p_v_order
from flashtune.kernels.launch_plan import launch_plan
from flashtune.kernels.reference import reference_attention, relative_error
from flashtune.kernels.space import validate_config
from flashtune.objectives.bench import FP8_TOLERANCE, make_inputs
from flashtune.objectives.precompile import CompilePool, compile_form
from flashtune.objectives.types import Workload

#: The fp8 target, TFLOP/s kernel-only within the accuracy gate.
TARGET_TFLOPS = 1000.0

#: Heads of batch 0 checked against the float32 reference (equal query and key heads here).
REFERENCE_HEADS = 4

#: (workload timed, table whose ranking picks its configs): head_dim 128 and 256, long sequences.
CASES: tuple[tuple[Workload, str], ...] = (
    (Workload(2, 32, 32, 8192, 8192, 128, "bfloat16", False), "b4_h32_n4096_d128_full_bfloat16"),
    (Workload(2, 16, 16, 8192, 8192, 256, "bfloat16", False), "b2_h16_n8192_d256_full_bfloat16"),
)


def fp8_forms(configs: list[dict]) -> list[Config]:
    """The fp8 form of each ``--also`` config (validated: a bad knob is named here, before
    any GPU time)."""
    return [validate_config({**c, "use_fp8": True}) for c in configs]


def best_within_gate(result: dict[str, dict[str, float]], rel: dict[str, float], tolerance: float) -> tuple[str, float]:
    """(name, TFLOP/s) of the fastest fp8 kernel-only variant whose error is inside the gate
    (("", 0.0) when none is)."""
    inside = [(v["tflops"], k) for k, v in result.items()
              if k.startswith("fp8_kernel") and math.isfinite(rel.get(k, math.inf)) and rel[k] < tolerance]
    if not inside:
        return "", 0.0
    tflops, name = max(inside)
    return name, tflops


def case_configs(table: str, *, top_fp8: int, also: Sequence[Config] = ()) -> tuple[list[Config], list[Config]]:
    """(bf16, fp8) configs a case times: the recorded best bf16 one, the ``top_fp8`` best
    recorded fp8 ones (distinct tiles and loads), then ``also``."""
    bf16 = [c for c, _ in best_configs(table, fp8=False, top=1)]
    fp8 = [c for c, _ in best_configs(table, fp8=True, top=top_fp8, distinct=("BLOCK_M", "BLOCK_N", "num_warps", "loads"))]
    return bf16, fp8 + [c for c in also if c not in fp8]


def gluon_forms(config: Config, forms: Sequence[str]) -> list[str | None]:
    """The P forms an fp8 config is timed in: each of ``forms`` for the Gluon kernel, else
    (or with no forms asked) the op's own (None)."""
    return list(forms) if forms and launch_plan(config).variant == "gluon" else [None]


def parse_forms(text: str) -> list[str]:
    """``--gluon-fp8-forms``: a comma list of FP8_P_FORMS (checked before any GPU time)."""
    forms = [f for f in text.split(",") if f]
    bad = [f for f in forms if f not in FP8_P_FORMS]
    if bad:
        raise SystemExit(f"--gluon-fp8-forms: {bad} not among {list(FP8_P_FORMS)}")
    return forms


def precompile(cases: Sequence[tuple[Workload, str]], *, top_fp8: int, also: Sequence[Config],
               forms: Sequence[str] = ()) -> None:
    """Compile every case's configs ahead in a pool of processes (Triton compiles one kernel
    at a time in this one), and each fp8 Gluon config in each of ``forms``; a config that
    does not compile fails again when timed, by name."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    pool = CompilePool()
    jobs = [(c, w) for w, table in cases for group in case_configs(table, top_fp8=top_fp8, also=also) for c in group]
    for c, w in jobs:
        pool.submit(c, w)
    form_jobs = [(c, w, f) for c, w in jobs if launch_plan(c).constexprs["FP8"]
                 for f in gluon_forms(c, forms) if f is not None]
    with ProcessPoolExecutor(pool.processes or 1, mp_context=multiprocessing.get_context("spawn")) as forms_pool:
        futures = [forms_pool.submit(compile_form, c.to_dict(), w.to_dict(), f) for c, w, f in form_jobs]
        for c, w in jobs:
            pool.wait(c, w)
        for future in futures:
            future.result()
    pool.close()


def summarize(samples_ms: dict[str, list[float]], flops: float) -> dict[str, dict[str, float]]:
    """Median ms and TFLOP/s of each timed variant (inf/NaN samples mean 'did not run')."""
    out = {}
    for name, values in samples_ms.items():
        finite = [v for v in values if math.isfinite(v)]
        med = statistics.median(finite) if finite else math.nan
        out[name] = {"ms": med, "tflops": flops / (med * 1e-3) / 1e12 if finite else 0.0}
    return out


def ratios(result: dict[str, dict[str, float]]) -> dict[str, float]:
    """fp8 kernel-only and with-quantization against our bf16 and cuDNN (0 when missing)."""
    def best(prefix: str) -> float:
        return max((v["tflops"] for k, v in result.items() if k.startswith(prefix)), default=0.0)

    bf16, cudnn = best("bf16"), best("sdpa_cudnn")
    fp8, fp8q = best("fp8_kernel"), best("fp8_with_quant")

    def div(a: float, b: float) -> float:
        return a / b if a and b else 0.0

    return {"fp8_kernel/bf16": div(fp8, bf16), "fp8_kernel/cudnn": div(fp8, cudnn),
            "fp8_with_quant/bf16": div(fp8q, bf16), "bf16/cudnn": div(bf16, cudnn)}


def run_case(workload: Workload, table: str, *, rounds: int, top_fp8: int, also: Sequence[Config] = (),
             forms: Sequence[str] = ()) -> dict:
    """Time one case on the GPU; every variant that fails is reported, the rest still run."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from triton.testing import do_bench


    q, k, v = make_inputs(workload, seed=99, dev=torch.device("cuda"))
    scale = 1.0 / math.sqrt(workload.head_dim)
    # V^T in each key order a kernel reads (the Gluon kernel's permuted P form: FA3's).
    qz = {order: quantize_fp8(q, k, v, v_order=order) for order in ("keys", "fa3")}
    bf16, fp8 = case_configs(table, top_fp8=top_fp8, also=also)
    fp8_names: dict[str, dict] = {}  # fp8_kernel name -> its config and P form
    outs = {}

    def ours(name, fn, config):
        outs[name] = torch.empty_like(q)
        return lambda: fn(config, outs[name])

    fns = {}
    for i, c in enumerate(bf16):
        fns[f"bf16#{i}"] = ours(f"bf16#{i}", lambda c, o: launch(q, k, v, o, causal=False, scale=scale, config=c), c)
    def quantized(c, o, form):
        order = fp8_v_order(c) if form is None else fp8_p_v_order(form)
        return launch_quantized(*qz[order], o, causal=False, scale=scale, config=c, fp8_p=form)

    for i, c in enumerate(fp8):
        for form in gluon_forms(c, forms):
            name = f"fp8_kernel#{i}" + (f"/{form}" if form else "")
            fp8_names[name] = {"config": c.to_dict(), "fp8_p": form}
            fns[name] = ours(name, lambda c, o, form=form: quantized(c, o, form), c)
    if fp8:
        fns["fp8_with_quant#0"] = ours("fp8_with_quant#0", lambda c, o: launch(q, k, v, o, causal=False, scale=scale, config=c), fp8[0])
    fns["quantize_only"] = lambda: quantize_fp8(q, k, v, v_order=fp8_v_order(fp8[0]) if fp8 else "keys")

    def cudnn():
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return F.scaled_dot_product_attention(q, k, v)

    fns["sdpa_cudnn"] = cudnn
    errors: dict[str, str] = {}
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            if name in errors:
                continue
            try:
                samples[name].append(float(do_bench(fn, warmup=10, rep=60, return_mode="median")))
            except Exception as exc:  # a config that does not compile here: say so, keep going
                errors[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
                samples[name].append(math.inf)
    result = summarize(samples, workload.flops)
    result["quantize_only"]["tflops"] = 0.0  # not attention: its ms is the figure
    # The float32 reference on the first REFERENCE_HEADS heads of batch 0 (the heads are
    # independent; the whole of it would take most of a minute at true fp32).
    h = REFERENCE_HEADS
    ref = reference_attention(q[:1, :h], k[:1, :h], v[:1, :h], causal=False)
    rel = {name: relative_error(o[:1, :h].float(), ref) for name, o in outs.items() if name not in errors}
    gated, gated_tflops = best_within_gate(result, rel, FP8_TOLERANCE)
    return {
        "workload": workload.name, "config_table": table,
        "configs": {"bf16": [c.to_dict() for c in bf16], "fp8": [c.to_dict() for c in fp8]}, "fp8_names": fp8_names,
        "timings": result, "ratios": ratios(result), "rel_error_vs_fp32_reference": rel, "errors": errors,
        "fp8_best_within_gate": {"variant": gated, "tflops": gated_tflops, "tolerance": FP8_TOLERANCE,
                                 "meets_target": gated_tflops >= TARGET_TFLOPS},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--top-fp8", type=int, default=3, help="fp8 configs per case (by the recorded ranking)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--also", type=json.loads, action="append", default=[], metavar="CONFIG_JSON",
                        help="a config (JSON) to time in fp8 beside the recorded ones; repeatable")
    parser.add_argument("--gluon-fp8-forms", type=parse_forms, default=[], metavar="FORM,FORM",
                        help=f"time each fp8 Gluon config in each of these P forms ({', '.join(FP8_P_FORMS)})")
    args = parser.parse_args(argv)
    also = fp8_forms(args.also)
    import torch

    precompile(CASES, top_fp8=args.top_fp8, also=also, forms=args.gluon_fp8_forms)
    results = []
    for workload, table in CASES:
        results.append(run_case(workload, table, rounds=args.rounds, top_fp8=args.top_fp8, also=also,
                                forms=args.gluon_fp8_forms))
        if args.json:  # after each case: a killed run keeps what it measured
            args.json.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                                             "cases": results}, indent=2) + "\n")
    print(f"\n{torch.cuda.get_device_name()}: fp8 kernel-only (pre-quantized) vs bf16 and cuDNN, TFLOP/s")
    print("| workload | bf16 | fp8 kernel | fp8 + quant | cuDNN | fp8k/bf16 | fp8k/cuDNN | quantize ms "
          f"| fp8 within gate (< {FP8_TOLERANCE}) | >= {TARGET_TFLOPS:.0f} |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        t, x = r["timings"], r["ratios"]

        def best(p):
            return max((v["tflops"] for k, v in t.items() if k.startswith(p)), default=0.0)

        print(f"| {r['workload']} | {best('bf16'):.0f} | {best('fp8_kernel'):.0f} | {best('fp8_with_quant'):.0f} | "
              f"{best('sdpa_cudnn'):.0f} | {x['fp8_kernel/bf16']:.2f}x | {x['fp8_kernel/cudnn']:.2f}x | "
              f"{t['quantize_only']['ms']:.3f} | {r['fp8_best_within_gate']['tflops']:.0f} "
              f"({r['fp8_best_within_gate']['variant']}) | {'yes' if r['fp8_best_within_gate']['meets_target'] else 'no'} |")
        for name, entry in r["fp8_names"].items():
            print(f"|   {name}: {t.get(name, {}).get('tflops', 0):.0f} TFLOP/s, error "
                  f"{r['rel_error_vs_fp32_reference'].get(name, math.nan):.4f}, {entry['config']} |")
        if r["errors"]:
            print(f"|   errors: {r['errors']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
