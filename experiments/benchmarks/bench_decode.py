"""Decode on the GPU: sweep the decode kernel's space per shape, then the best against SDPA.

For each row of the decode table (bf16, q_len 1, K/V un-expanded) and two extra rows
(per-sequence cache lengths; q_len 4 causal, as speculative decoding asks):

1. sweep a compact part of the decode space (loads x BLOCK_N x num_warps x num_stages,
   every split count of the space: ``num_splits`` is a runtime argument, so trying it costs no
   compile), each config checked once against the float32 reference, then timed with
   ``triton.testing.do_bench`` (L2 flushed before every run, as every timing in the tables is);
   every config is one JSON line in ``Measurement.to_dict()`` form under
   ``$OUT/decode_sweep/`` (a replay table of the decode space);
2. re-time the best config, the default config (``flash_attention``'s pick without a
   config) and torch SDPA's cuDNN, flash and efficient backends (``enable_gqa=True`` on
   the same un-expanded K/V), interleaved, medians of ``--rounds`` rounds;
3. print the table last: op us (``launch_decode``, best config), default us (the config
   ``flash_attention`` picks without one), api us (``flash_attention`` with the best
   config: its checks included), SDPA us, op GB/s of K+V read, op / best SDPA.

    OUT=out flashtune bench decode

``--smoke`` runs tiny shapes (CPU interpreter too) to check the script itself. GPU
scripts must not import optuna, mlflow, deap, skopt or jsonschema: this one imports
kernels and objectives only.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import statistics
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from flashtune.kernels.attention import flash_attention
from flashtune.kernels.config import Config
from flashtune.kernels.decode import DecodeWorkspace, default_decode_config, launch_decode
from flashtune.kernels.reference import reference_attention, relative_error
from flashtune.kernels.space import DECODE_TUNABLES, validate_config
from flashtune.objectives.bench import TOLERANCE, classify_error, gpu_state, kernel_resources, make_inputs
from flashtune.objectives.feasibility import check
from flashtune.objectives.hardware import HardwareSpec
from flashtune.objectives.types import Measurement, Status, Workload

#: The decode table: (batch, q_heads, kv_heads, kv_len, head_dim), bf16, q_len 1.
DECODE_ROWS: tuple[tuple[int, int, int, int, int], ...] = (
    (1, 32, 8, 4096, 128),
    (1, 32, 8, 32768, 128),
    (1, 32, 8, 131072, 128),
    (1, 32, 32, 32768, 128),
    (8, 32, 8, 8192, 128),
    (32, 32, 8, 4096, 128),
    (64, 32, 8, 2048, 128),
    (1, 16, 16, 65536, 64),
)
#: The compiled part of the sweep, as parts whose knobs' products are swept; every split
#: count is tried for each compiled variant. TMA: the tile sizes and depths that keep
#: enough bytes in flight (its loads need no registers, so fewer warps do).
SWEEP = (
    {"loads": ("pointer",), "BLOCK_N": (32, 64, 128), "num_warps": (2, 4, 8), "num_stages": (2, 3, 4)},
    {"loads": ("tma",), "BLOCK_N": (64, 128), "num_warps": (4, 8), "num_stages": (2, 3, 4)},
)
#: The knobs of a compiled variant (all but num_splits), in the order variants are written.
VARIANT_KNOBS = ("loads", "BLOCK_N", "num_warps", "num_stages")
#: The extra rows (per-sequence lengths, q_len 4) are this row's shape; they sweep its
#: three best compiled variants (their own compiles: HAS_SEQLENS, IS_CAUSAL) x every split.
EXTRA_BASE = (8, 32, 8, 8192, 128)
#: Cached tokens per sequence of the per-sequence-lengths row (capacity 8192): full,
#: empty, one token, and lengths that end inside a tile.
SEQLENS = (8192, 0, 1, 4097, 7000, 2048, 8191, 5000)
#: H200 HBM3e peak (NVIDIA's datasheet), for the GB/s column's context.
H200_PEAK_GBPS = 4800.0


@dataclass
class Row:
    """One benchmarked shape: the workload, and per-sequence lengths when it has them."""

    label: str
    workload: Workload
    seqlens: tuple[int, ...] | None = None
    sweep: tuple[dict[str, tuple], ...] = SWEEP

    def keys_read(self) -> int:
        """Keys read per KV head over the batch."""
        if self.seqlens is not None:
            return sum(self.seqlens)
        return self.workload.batch * self.workload.kv_len


def kv_bytes(row: Row, dtype_bytes: int = 2) -> float:
    """Bytes of K and V the attention must read (each once)."""
    w = row.workload
    return 2.0 * row.keys_read() * w.kv_heads * w.head_dim * dtype_bytes


def variants(sweep: Iterable[dict[str, tuple]]) -> list[tuple]:
    """The compiled variants (VARIANT_KNOBS values) of a sweep's parts."""
    return [tuple(values) for part in sweep for values in itertools.product(*(part[n] for n in VARIANT_KNOBS))]


def sweep_configs(row: Row, feasible: Callable[[Config], bool] = lambda c: True) -> list[Config]:
    """The sweep's configs: compiled variants x every split count up to the cache's tiles
    (more splits than tiles only adds empty programs), those ``feasible`` accepts."""
    configs = []
    for values in variants(row.sweep):
        variant = dict(zip(VARIANT_KNOBS, values))
        tiles = math.ceil(row.workload.kv_len / variant["BLOCK_N"])
        for splits in DECODE_TUNABLES["num_splits"]:
            if splits > 1 and splits > tiles:
                break
            config = validate_config({"kernel": "decode", **variant, "num_splits": splits})
            if feasible(config):
                configs.append(config)
    return configs


def best_variants(measurements: Iterable[Measurement], top: int) -> tuple[dict[str, tuple], ...]:
    """The ``top`` fastest distinct compiled variants, as sweep parts of one variant each."""
    seen: list[tuple] = []
    for m in sorted((m for m in measurements if m.ok), key=lambda m: m.median_ms):
        variant = tuple(m.config[k] for k in VARIANT_KNOBS)
        if variant not in seen:
            seen.append(variant)
        if len(seen) == top:
            break
    return tuple({k: (v,) for k, v in zip(VARIANT_KNOBS, variant)} for variant in seen)


def format_table(results: list[dict]) -> str:
    """The last thing printed: one Markdown line per row."""
    head = ("| shape | best config | op us | fused us | default us | api us | cuDNN us | flash us | effic. us | "
            "op GB/s K+V | op/best SDPA |")
    lines = [head, "|" + "---|" * 11]
    for r in results:
        def us(name: str) -> str:
            v = r["us"].get(name, math.inf)
            return f"{v:.1f}" if math.isfinite(v) else "n/a"

        best_sdpa = min((r["us"].get(n, math.inf) for n in ("sdpa_cudnn", "sdpa_flash", "sdpa_efficient")),
                        default=math.inf)
        op = r["us"].get("op_best", math.inf)
        ratio = best_sdpa / op if math.isfinite(op) and math.isfinite(best_sdpa) else math.nan
        cfg = r.get("best_config") or {}
        cfg_text = "/".join(str(cfg.get(k, "?")) for k in (*VARIANT_KNOBS, "num_splits"))
        gbps = r["kv_bytes"] / (op * 1e-6) / 1e9 if math.isfinite(op) else 0.0
        lines.append(f"| {r['label']} | {cfg_text} | {us('op_best')} | {us('op_best_fused')} | {us('op_default')} | "
                     f"{us('op_api')} | {us('sdpa_cudnn')} | "
                     f"{us('sdpa_flash')} | {us('sdpa_efficient')} | {gbps:.0f} | {ratio:.2f} |")
    lines.append("best config = loads/BLOCK_N/num_warps/num_stages/num_splits; op = launch_decode with the best "
                 "config, fused = the same with the combine fused into the split kernel (one launch; n/a: one split, "
                 "or its output differed), default = the config flash_attention picks, api = "
                 "flash_attention(config=best) with its checks; op/best SDPA > 1 means the op is faster; "
                 f"H200 HBM peak ~{H200_PEAK_GBPS:.0f} GB/s")
    return "\n".join(lines)


def _finite(data: object) -> object:
    """``data`` with inf/nan floats as None (JSON has neither)."""
    if isinstance(data, dict):
        return {k: _finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_finite(v) for v in data]
    if isinstance(data, float) and not math.isfinite(data):
        return None
    return data


def decode_rows(smoke: bool) -> list[Row]:
    if smoke:
        rows = [Row("smoke 2,8/2,1/300,64", Workload(2, 8, 2, 1, 300, 64, "float16", False),
                    sweep=({"loads": ("pointer", "tma"), "BLOCK_N": (32,), "num_warps": (4,), "num_stages": (2,)},)),
                Row("smoke seqlens", Workload(3, 4, 1, 1, 100, 32, "float16", False), seqlens=(100, 0, 37),
                    sweep=({"loads": ("tma",), "BLOCK_N": (32,), "num_warps": (4,), "num_stages": (2,)},)),
                Row("smoke q4 causal", Workload(1, 4, 2, 4, 90, 32, "float16", True),
                    sweep=({"loads": ("pointer",), "BLOCK_N": (16,), "num_warps": (2,), "num_stages": (1,)},))]
        return rows
    rows = [Row(f"{b},{hq}/{hkv},1/{n},{d}", Workload(b, hq, hkv, 1, n, d, "bfloat16", False))
            for b, hq, hkv, n, d in DECODE_ROWS]
    b, hq, hkv, n, d = EXTRA_BASE
    rows.append(Row(f"{b},{hq}/{hkv},1/{n},{d} seqlens", Workload(b, hq, hkv, 1, n, d, "bfloat16", False),
                    seqlens=SEQLENS))
    rows.append(Row(f"{b},{hq}/{hkv},4/{n},{d} causal", Workload(b, hq, hkv, 4, n, d, "bfloat16", True)))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "out")))
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the final timing")
    parser.add_argument("--rep-ms", type=int, default=20, help="do_bench rep of each sweep config")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes (CPU interpreter too): checks the script")
    parser.add_argument("--rows", default="", help="comma-separated row indices to run (default: all)")
    args = parser.parse_args(argv)
    bench = _Bench(args.out, smoke=args.smoke, rep_ms=args.rep_ms, rounds=args.rounds)
    results, base_variants = [], None
    rows = decode_rows(args.smoke)
    if args.rows:
        rows = [rows[int(i)] for i in args.rows.split(",")]
    for row in rows:
        started = time.perf_counter()
        w = row.workload
        extra = row.seqlens is not None or w.q_len > 1
        if extra and base_variants:
            row.sweep = base_variants  # the base row's best compiled variants
        try:
            result = bench.run_row(row)
            results.append(result)
            if not extra and (w.batch, w.q_heads, w.kv_heads, w.kv_len, w.head_dim) == EXTRA_BASE:
                base_variants = best_variants(result["measurements"], top=3)
        except Exception:  # one row's failure must not lose the others
            print(f"{row.label}: FAILED\n{traceback.format_exc()}", flush=True)
            results.append({"label": row.label + " FAILED", "us": {}, "kv_bytes": kv_bytes(row)})
        print(f"{row.label}: {time.perf_counter() - started:.0f} s", flush=True)
        # After every row: a run cut short keeps what it measured.
        summary = [_finite({k: v for k, v in r.items() if k != "measurements"}) for r in results]
        (args.out / "bench_decode.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
        print(format_table(results[-1:]).splitlines()[-2], flush=True)
    print(format_table(results))
    return 0


class _Bench:
    """The GPU side: inputs, reference, sweep, final interleaved timing."""

    def __init__(self, out: Path, *, smoke: bool, rep_ms: int, rounds: int) -> None:
        import torch


        self.torch = torch
        self.dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.smoke, self.rep_ms, self.rounds = smoke, rep_ms, rounds
        self.out = out
        (out / "decode_sweep").mkdir(parents=True, exist_ok=True)
        self.hardware = HardwareSpec.from_device() if self.dev.type == "cuda" else None
        hw = self.hardware
        self.stamp = {} if hw is None else {
            "fingerprint": hw.fingerprint, "hardware": hw.name,
            "versions": {"torch": hw.torch, "triton": hw.triton, "cuda": hw.cuda, "driver": hw.driver}}

    # -- timing ---------------------------------------------------------------------
    def time_ms(self, fn: Callable[[], object], rep_ms: int) -> tuple[float, float, float]:
        if self.dev.type == "cuda":
            from triton.testing import do_bench

            median, p20, p80 = do_bench(fn, warmup=5, rep=rep_ms, quantiles=[0.5, 0.2, 0.8])
            return float(median), float(p20), float(p80)
        t0 = time.perf_counter()
        fn()
        ms = (time.perf_counter() - t0) * 1e3
        return ms, ms, ms

    # -- one row --------------------------------------------------------------------
    def run_row(self, row: Row) -> dict:

        torch, w = self.torch, row.workload
        q, k, v = make_inputs(w, seed=1234, dev=self.dev)
        seqlens = None
        if row.seqlens is not None:
            seqlens = torch.tensor(row.seqlens, dtype=torch.int32, device=self.dev)
        ref = self.reference(reference_attention, q, k, v, w.causal, row.seqlens)
        workspace = DecodeWorkspace.for_query(q)
        feasible = (lambda c: check(c, w, self.hardware).feasible) if self.hardware else (lambda c: True)
        configs = sweep_configs(row, feasible)
        tol = TOLERANCE[w.dtype]
        measurements = []
        path = self.out / "decode_sweep" / (w.name + ("_seqlens" if seqlens is not None else "") + ".jsonl")
        with path.open("w") as fh:
            for config in configs:
                m = self.measure(config, w, q, k, v, ref, tol, seqlens, workspace)
                measurements.append(m)
                fh.write(json.dumps(m.to_dict()) + "\n")
        ok = sorted((m for m in measurements if m.ok), key=lambda m: m.median_ms)
        statuses = {s.value: sum(m.status is s for m in measurements) for s in Status}
        top = [(*(m.config[k] for k in (*VARIANT_KNOBS, "num_splits")), round(m.median_ms * 1e3, 1)) for m in ok[:5]]
        print(f"{row.label}: {len(measurements)} configs {({k: n for k, n in statuses.items() if n})}; top: {top}",
              flush=True)
        result = {"label": row.label, "workload": w.to_dict(), "seqlens": row.seqlens, "kv_bytes": kv_bytes(row),
                  "measurements": measurements, "us": {}}
        if not ok:
            return result
        best = ok[0].config
        default = default_decode_config(q, k)
        result["best_config"], result["default_config"] = best.to_dict(), default.to_dict()
        default_m = next((m for m in measurements if m.config == default), None)
        result["default_in_sweep_us"] = default_m.median_ms * 1e3 if default_m and default_m.ok else None
        result["us"] = self.final_timing(row, q, k, v, seqlens, best, default, workspace)
        return result

    def reference(self, reference_attention, q, k, v, causal, seqlens):
        if seqlens is None:
            return reference_attention(q, k, v, causal=causal)
        ref = self.torch.zeros(q.shape, dtype=self.torch.float32, device=q.device)
        for b, length in enumerate(seqlens):
            if length:
                ref[b:b + 1] = reference_attention(q[b:b + 1], k[b:b + 1, :, :length], v[b:b + 1, :, :length],
                                                   causal=causal)
        return ref

    def measure(self, config, w, q, k, v, ref, tol, seqlens, workspace) -> Measurement:

        torch = self.torch
        scale = 1.0 / math.sqrt(w.head_dim)
        out = torch.full_like(q, float("nan"))  # poisoned: every element must be written

        def run():
            return launch_decode(q, k, v, out, causal=w.causal, scale=scale, config=config,
                                 cache_seqlens=seqlens, workspace=workspace)

        started = time.perf_counter()
        try:
            handle = run()
            if self.dev.type == "cuda":
                torch.cuda.synchronize()
        except Exception as exc:  # every failure becomes a status
            return Measurement.failure(config, w, classify_error(exc), f"{type(exc).__name__}: {exc}", **self.stamp)
        compile_s = time.perf_counter() - started
        err = relative_error(out, ref)
        if not err <= tol:
            return Measurement.failure(config, w, Status.WRONG_RESULT, f"relative error {err:.3g} over {tol:.3g}",
                                       rel_error=err, compile_s=compile_s, **kernel_resources(handle), **self.stamp)
        median, p20, p80 = self.time_ms(run, self.rep_ms)
        clock, temp = gpu_state()
        return Measurement(config=config, workload=w, status=Status.OK, median_ms=median, p20_ms=p20, p80_ms=p80,
                           tflops=w.flops / (median * 1e-3) / 1e12, compile_s=compile_s, rel_error=err,
                           sm_clock_mhz=clock, temperature_c=temp, **kernel_resources(handle), **self.stamp)

    # -- final, interleaved ------------------------------------------------------------
    def final_timing(self, row, q, k, v, seqlens, best, default, workspace) -> dict[str, float]:
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel


        torch, w = self.torch, row.workload
        scale = 1.0 / math.sqrt(w.head_dim)
        out = torch.empty_like(q)
        note = ""
        if seqlens is not None:
            # SDPA has no per-sequence lengths, and a padding mask shuts out its flash and
            # cuDNN paths: the peers attend to the whole cache (what padding costs them).
            note += " peers read the whole cache (no per-sequence lengths in SDPA);"
        if w.causal:
            # SDPA's is_causal is aligned top-left; bottom-right masks only the last q_len - 1
            # keys, which changes no cost: the peers run unmasked on the same K/V.
            note += " peers unmasked (bottom-right causal masks q_len - 1 keys; SDPA's is_causal is top-left);"
        fns: dict[str, Callable[[], object]] = {
            "op_best": lambda: launch_decode(q, k, v, out, causal=w.causal, scale=scale, config=best,
                                             cache_seqlens=seqlens, workspace=workspace),
            "op_default": lambda: launch_decode(q, k, v, out, causal=w.causal, scale=scale, config=default,
                                                cache_seqlens=seqlens, workspace=workspace),
            # The checked op: validation, the lengths' host check, allocation.
            "op_api": lambda: flash_attention(q, k, v, causal=w.causal, config=best, cache_seqlens=seqlens),
        }
        if int(best["num_splits"]) > 1:
            fused_out = torch.full_like(q, float("nan"))

            def fused() -> object:
                return launch_decode(q, k, v, fused_out, causal=w.causal, scale=scale, config=best,
                                     cache_seqlens=seqlens, workspace=workspace, combine="fused")

            # Timed only if it agrees with the launched combine (checked against the reference
            # in the sweep), call after call: a missing fence would show as a differing row.
            fns["op_best"]()
            agree = True
            for _ in range(10):
                fused_out.fill_(float("nan"))
                fused()
                agree = agree and bool(torch.allclose(fused_out.float(), out.float(), rtol=2e-2, atol=2e-3))
            if agree:
                fns["op_best_fused"] = fused
            else:
                note += " fused combine differs from the launched one: not timed;"
        backends = {"sdpa_cudnn": SDPBackend.CUDNN_ATTENTION, "sdpa_flash": SDPBackend.FLASH_ATTENTION,
                    "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION}
        for name, backend in backends.items():
            def peer(backend=backend):
                return F.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=True)

            fns[name] = (backend, peer)
        samples: dict[str, list[float]] = {name: [] for name in fns}
        for _ in range(self.rounds):
            for name, fn in fns.items():
                try:
                    if isinstance(fn, tuple):
                        with sdpa_kernel([fn[0]]):
                            samples[name].append(self.time_ms(fn[1], 100)[0])
                    else:
                        samples[name].append(self.time_ms(fn, 100)[0])
                except RuntimeError as exc:  # a backend that does not take this shape or mask
                    if not samples[name]:
                        note += f" {name} unavailable ({str(exc).splitlines()[0][:120]});"
                    samples[name].append(math.inf)
        if note:
            print(f"{row.label}:{note}", flush=True)
        return {name: statistics.median(ms) * 1e3 for name, ms in samples.items()}


if __name__ == "__main__":
    raise SystemExit(main())
