"""The hardware feature library: baseline configs per architecture, from public knowledge.

Used in two places: as priors for a study that has no data for a GPU yet, and
as the runtime's last fallback when the store has nothing for the GPU it runs on
. Every row says where it comes from; none was measured by flashtune except
the sm90 rows marked "measured here", which come from the H200 sweep in docs/reference.md
and the recorded tables in experiments/data (the Gluon kernel's rows: h200_gluon).

Sources, as read from public code:

- Triton's fused-attention tutorial (``06-fused-attention.py``, 2.x/3.0 launchers):
  ``BLOCK_M=128``, ``BLOCK_N = 64 if D <= 64 else 32``, ``num_stages = 4 if D <= 64 else
  3``, ``num_warps = 4`` (8 for D > 64 in later versions); on compute capability 9:
  ``num_warps=8``, ``num_stages = 7 if D >= 64 else 3`` (our space stops at 5 stages).
- FlashAttention-2's forward launch template (``flash_fwd_launch_template.h``): hd32/64
  128x128 with 4 warps; hd128 128x64 on A100/H100, and on sm86/sm89 128x32 non-causal,
  64x64 causal ("square" tiles win causal there); hd256 128x64 with 8 warps on A100,
  64x64 with 4 warps on H100 and sm8x.

FlashAttention-2 is a CUDA kernel without Triton's ``num_stages``; its tiles are mapped
to our kernel with the number of stages the shared memory allows (labelled "derived").
Shared memory per block (opt-in) per architecture is the CUDA C++ Programming Guide's.

Pure Python: the search and the store read baselines without torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from flashtune.kernels.config import Config
from flashtune.kernels.space import KERNEL_TUNABLES, SAFE_DEFAULT, kernel_of, uses_decode_kernel, validate_config
from flashtune.objectives.feasibility import check
from flashtune.objectives.hardware import HardwareSpec, known_specs
from flashtune.objectives.types import Measurement, Status, Workload

#: Maximum shared memory per block (opt-in), bytes, by architecture: CUDA C++
#: Programming Guide, "Technical Specifications per Compute Capability".
ARCH_SHARED_MEMORY_BYTES: dict[str, int] = {
    "sm75": 65536,  # Turing (T4, RTX 20xx): 64 KB
    "sm80": 166912,  # A100: 163 KB
    "sm86": 101376,  # Ampere consumer / A10 / A40: 99 KB
    "sm89": 101376,  # Ada (L4, L40S, RTX 40xx): 99 KB
    "sm90": 232448,  # Hopper (H100, H200): 227 KB
    "sm100": 232448,  # Blackwell datacenter (B200): 227 KB
}

#: Architectures the library covers, oldest first.
ARCHES: tuple[str, ...] = tuple(ARCH_SHARED_MEMORY_BYTES)

_TUTORIAL = "Triton fused-attention tutorial defaults"
_TUTORIAL_HOPPER = "Triton fused-attention tutorial, Hopper branch (8 warps; 7 stages clipped to our 5)"
_FA2 = "FlashAttention-2 forward tile"
_MEASURED = "measured here: H200 sweep winner (docs/reference.md)"


#: The varlen kernel's tile per architecture when the store has none for a varlen bucket (other
#: architectures: the safe ``VARLEN_DEFAULT``). Hopper's, 64x64 with 4 warps and 3 stages, was chosen
#: on the H100's packed prefill (8 tiles on 3 equal-length packs and one of mixed lengths, D128:
#: the best or within 7 % of it on each, 0.94-1.21x the safe tile's speed;
#: docs/results/cb-2026-12-06/cb_kernels.json) and checked held out on the H200's dense prefill
#: tables, whose loop the varlen kernel shares (the same 8 tiles on the 7 suite workloads, head
#: dims 64, 128 and 256: within 10.5 % of their best on each, 1.10-1.33x the safe tile's speed;
#: experiments/data/h200_grown; docs/lab/2026-12-06.md, "A Hopper default for packed prefill").
VARLEN_ARCH_TILES: dict[str, Config] = {"sm90": Config(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=3)}
#: Up to this head dim only: at 256 the varlen kernel compiled for sm90 at that tile holds 255
#: registers and spills 14 words (26-28 before it re-read its output rows after the key loops,
#: 2026-12-07) with 229,376 B of shared memory (the safe tile: 244, none), and its speed there was
#: never timed (the H100's packed timings are D128's).
VARLEN_ARCH_TILE_MAX_HEAD_DIM = 128


@dataclass(frozen=True)
class Baseline:
    """One baseline config and where it comes from.

    Attributes:
        arch: ``sm75`` style architecture tag.
        head_dim: the head dim it is meant for.
        causal: the mask it is meant for; None for both.
        config: the tunables.
        label: its public source, or how it was derived from one.
    """

    arch: str
    head_dim: int
    causal: bool | None
    config: Config
    label: str


def _c(block_m: int, block_n: int, warps: int, stages: int) -> Config:
    # Complete with the kernel's implied knobs (pointer loads): the rows predate them.
    return validate_config(Config(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps, num_stages=stages))


def _rows(arch: str, head_dim: int, causal: bool | None, *entries: tuple[Config, str]) -> list[Baseline]:
    return [Baseline(arch, head_dim, causal, config, label) for config, label in entries]


def _gluon(block_m: int, block_n: int, stages: int, grid: str = "tiles", order: str = "longest_first") -> Config:
    return validate_config(Config(loads="gluon_pingpong", BLOCK_M=block_m, BLOCK_N=block_n, num_warps=4,
                                  num_stages=stages, grid=grid, tile_order=order))


def _sm90_gluon_rows() -> list[Baseline]:
    # The Gluon kernel (FA3's ping-pong: Hopper's wgmma, so sm90 only, not sm100) where the
    # H200 ranks it first by a margin: at head_dim 128, 128x128 3 stages makes 591-601
    # TFLOP/s causal and 598 full against the pointer rows' 426-474 (experiments/data/h200_gluon
    # and h200_grown, 2026-12-02); at 256, 128x64 2 stages 682 against 514. At head_dim 64 the
    # tiles grid is not ahead (371/327 against 374/342), the persistent grid in zigzag order is:
    # 412 full and 378 causal against the pointer rows' 378/342 (H200, 2026-12-03, bench_peers,
    # docs/results/main-2026-12-03b; the persistent grid's D64 full 414-421 in three runs). The
    # rows below stay as the next choices (a dtype or head_dim the Gluon kernel does not take).
    # (The tables were re-swept on every grid on 2026-12-04 (c6f1e9a); the 2026-12-02 ones, tiles
    # grid only, are in git history. On the new ones these tiles read 0.89 of D128 full's
    # and 0.98 of D256's best single readings, which the power cap moves by up to 7 %: BENCHMARKS.md.)
    note = "measured here: H200 Gluon table's best or within 2 % of it (experiments/data/h200_gluon, 2026-12-02)"
    return [
        *_rows("sm90", 64, None, (_gluon(128, 128, 2, "persistent_zigzag", "head_major"),
                                  "measured here: H200 bench_peers 2026-12-03 (docs/results/main-2026-12-03b)")),
        *_rows("sm90", 128, None, (_gluon(128, 128, 3), note)),
        *_rows("sm90", 256, None, (_gluon(128, 64, 2), note)),
    ]


def _hopper_rows(arch: str, note: str) -> list[Baseline]:
    return [
        *_rows(arch, 32, None, (_c(128, 64, 8, 3), _TUTORIAL_HOPPER + note), (_c(128, 128, 4, 2), _FA2 + " hd32 (128x128, 4 warps), 2 stages" + note)),
        *_rows(arch, 64, None, (_c(64, 64, 4, 3), _MEASURED + note), (_c(128, 64, 8, 5), _TUTORIAL_HOPPER + note)),
        *_rows(arch, 128, False, (_c(256, 64, 8, 3), _MEASURED + note), (_c(128, 32, 8, 5), _TUTORIAL_HOPPER + note), (_c(128, 64, 4, 2), _FA2 + " hd128 H100 (128x64, 4 warps), 2 stages" + note)),
        *_rows(arch, 128, True, (_c(128, 64, 8, 3), _MEASURED + note), (_c(128, 32, 8, 5), _TUTORIAL_HOPPER + note)),
        *_rows(arch, 256, None, (_c(64, 64, 4, 2), _FA2 + " hd256 H100 (64x64, 4 warps), 2 stages" + note), (_c(128, 64, 8, 2), "derived: FlashAttention-2's A100 hd256 tile (128x64, 8 warps), 2 stages fit 227 KB" + note)),
    ]


def _sm8x_rows(arch: str) -> list[Baseline]:
    # sm86 and sm89 share FlashAttention-2's sm8x branch and the 99 KB limit.
    return [
        *_rows(arch, 32, None, (_c(128, 64, 4, 4), _TUTORIAL), (_c(128, 128, 4, 2), _FA2 + " hd32 (128x128, 4 warps), 2 stages")),
        *_rows(arch, 64, None, (_c(128, 64, 4, 4), _TUTORIAL), (_c(128, 128, 4, 2), _FA2 + " hd64 (128x128, 4 warps), 2 stages")),
        *_rows(arch, 128, False, (_c(128, 32, 4, 2), _FA2 + " hd128 sm8x non-causal (128x32, 4 warps), 2 stages"), (_c(128, 32, 8, 3), _TUTORIAL + " (8 warps for D > 64)")),
        *_rows(arch, 128, True, (_c(64, 64, 4, 2), _FA2 + " hd128 sm8x causal (64x64, 4 warps), 2 stages"), (_c(128, 32, 4, 2), _FA2 + " hd128 sm8x non-causal tile")),
        *_rows(arch, 256, None, (_c(64, 32, 4, 2), "derived: FlashAttention-2's sm8x hd256 tile (64x64, 4 warps) with BLOCK_N halved to double-buffer in 99 KB"), (_c(64, 64, 4, 1), _FA2 + " hd256 sm8x (64x64, 4 warps), one stage fits 99 KB")),
    ]


#: Every baseline, primary first within each (arch, head_dim, causal).
BASELINES: tuple[Baseline, ...] = (
    # Turing: FlashAttention-2 does not support it and the tutorial targets sm80+; no
    # cp.async either, so deep pipelines buy nothing. Shrunk to fit 64 KB.
    *_rows("sm75", 32, None, (_c(64, 64, 4, 2), "derived for Turing: 64-row tiles, 2 stages, within 64 KB")),
    *_rows("sm75", 64, None, (_c(64, 64, 4, 2), "derived for Turing: 64-row tiles, 2 stages, within 64 KB")),
    *_rows("sm75", 128, None, (_c(64, 32, 4, 2), "derived for Turing: the tutorial's BLOCK_N=32 for D > 64, 64-row tiles, within 64 KB")),
    *_rows("sm75", 256, None, (_c(32, 32, 4, 1), "derived for Turing: smallest tiles, one stage, within 64 KB")),
    *_rows("sm80", 32, None, (_c(128, 64, 4, 4), _TUTORIAL), (_c(128, 128, 4, 2), _FA2 + " hd32 (128x128, 4 warps), 2 stages")),
    *_rows("sm80", 64, None, (_c(128, 64, 4, 4), _TUTORIAL), (_c(128, 128, 4, 2), _FA2 + " hd64 (128x128, 4 warps), 2 stages")),
    *_rows("sm80", 128, None, (_c(128, 64, 4, 3), _FA2 + " hd128 A100 (128x64, 4 warps) with the tutorial's 3 stages"), (_c(128, 32, 8, 3), _TUTORIAL + " (8 warps for D > 64)")),
    *_rows("sm80", 256, None, (_c(128, 64, 8, 1), _FA2 + " hd256 A100 (128x64, 8 warps), one stage fits 163 KB"), (_c(64, 64, 4, 2), _FA2 + " hd256 sm8x/H100 tile (64x64, 4 warps), 2 stages")),
    *_sm8x_rows("sm86"),
    *_sm8x_rows("sm89"),
    *_sm90_gluon_rows(),
    *_hopper_rows("sm90", ""),
    # No public tuning data for this kernel on Blackwell: Hopper's rows, same 227 KB.
    *_hopper_rows("sm100", "; assumed for sm100 from sm90 (same 227 KB per block), not measured"),
)


def arch_of(hardware: HardwareSpec) -> str:
    """The covered architecture whose baselines serve ``hardware``.

    An architecture the library does not cover borrows the newest covered one at or below
    its compute capability (sm87 -> sm86, sm120 -> sm100); one older than all borrows the
    oldest. Feasibility is re-checked against the real spec anyway.
    """
    tag = hardware.arch
    if tag in ARCH_SHARED_MEMORY_BYTES:
        return tag
    major, minor = hardware.compute_capability
    older = [a for a in ARCHES if _cc(a) <= (major, minor)]
    return older[-1] if older else ARCHES[0]


def _cc(arch: str) -> tuple[int, int]:
    digits = arch[2:]
    return int(digits[:-1]), int(digits[-1])


def arch_specs(arch: str) -> list[HardwareSpec]:
    """The shipped specs of an architecture, or one synthetic spec when none is shipped.

    The synthetic spec carries only the public shared-memory limit (what feasibility
    reads) and says so in ``source``.

    Raises:
        ValueError: ``arch`` is not one of :data:`ARCHES`.
    """
    if arch not in ARCH_SHARED_MEMORY_BYTES:
        raise ValueError(f"arch must be one of {list(ARCHES)}, got {arch!r}")
    shipped = [spec for _, spec in sorted(known_specs().items()) if spec.arch == arch]
    if shipped:
        return shipped
    return [
        HardwareSpec(
            name=f"generic {arch}",
            compute_capability=_cc(arch),
            sm_count=1,
            shared_memory_per_block_bytes=ARCH_SHARED_MEMORY_BYTES[arch],
            source="synthetic: shared memory per block from the CUDA C++ Programming Guide; no other figure is real",
        )
    ]


def baselines_for(arch: str, head_dim: int, causal: bool) -> list[Baseline]:
    """The baselines of one architecture for a head dim and mask, primary first.

    Rows for the other mask follow as weaker hints; an uncovered head dim gets the rows of
    the nearest covered one (the caller re-checks feasibility).
    """
    rows = [b for b in BASELINES if b.arch == arch]
    dims = sorted({b.head_dim for b in rows})
    if not dims:
        return []
    dim = min(dims, key=lambda d: (abs(math.log2(d) - math.log2(max(head_dim, 1))), -d))
    rows = [b for b in rows if b.head_dim == dim]
    same = [b for b in rows if b.causal in (None, causal)]
    other = [b for b in rows if b.causal not in (None, causal)]
    return same + other


def fit(config: Config, workload: Workload, hardware: HardwareSpec) -> Config | None:
    """``config`` if it fits ``hardware``, else the nearest smaller config that does.

    Shrinks in the order that costs least speed: pipeline stages first, then BLOCK_N,
    then BLOCK_M. None when even the smallest tiles do not fit.
    """
    current = config
    tunables = KERNEL_TUNABLES[kernel_of(config)]
    for knob in ("num_stages", "BLOCK_N", "BLOCK_M"):
        if knob not in tunables:
            continue  # the decode kernel has no BLOCK_M
        allowed = sorted(tunables[knob])
        while not check(current, workload, hardware).feasible:
            smaller = [v for v in allowed if v < current[knob]]
            if not smaller:
                break
            current = current.replace(**{knob: smaller[-1]})
        if check(current, workload, hardware).feasible:
            return current
    return None


def decode_default(hardware: HardwareSpec | None, workload: Workload) -> tuple[Config, str]:
    """The decode kernel's default for ``workload`` on ``hardware``, and why.

    The tile is the decode kernel's own default (``kernels.decode.decode_default_for``:
    BLOCK_N 64, 32 past head_dim 128; 4 warps, 2 stages; no public tuning exists for this
    kernel). What differs per GPU and per bucket is the split count, from the programs
    the bucket's batch x KV heads give, its kv_len and the GPU's SM count (a GPU with more
    SMs needs more splits to be filled by one sequence).
    """
    from flashtune.kernels.decode import INTERPRETER_SMS, decode_default_for  # torch: the runtime's side only

    sms = hardware.sm_count if hardware is not None else INTERPRETER_SMS
    config = validate_config(decode_default_for(batch=workload.batch, q_heads=workload.q_heads,
                                                kv_heads=workload.kv_heads, q_len=workload.q_len,
                                                kv_len=workload.kv_len, head_dim=workload.head_dim, sm_count=sms))
    why = (f"num_splits {config['num_splits']} for kv_len {workload.kv_len}, batch x KV heads "
           f"{workload.batch * workload.kv_heads}, {sms} SMs{'' if hardware is not None else ' (no GPU spec)'}")
    return config, why


def fallback_config(hardware: HardwareSpec | None, workload: Workload,
                    accept: Callable[[Config], bool] | None = None) -> Config:
    """The one config the runtime launches when it knows nothing better.

    Decode workloads (q_len <= ``DECODE_MAX_Q_LEN``) get :func:`decode_default`. Prefill:
    the architecture's first baseline that ``accept`` takes (None: any), shrunk to fit
    ``hardware``; the kernel's ``SAFE_DEFAULT`` without a spec (CPU, interpreter) or when
    nothing fits (the launcher then reports the shared-memory problem itself).
    """
    if uses_decode_kernel(workload.q_len):
        return decode_default(hardware, workload)[0]
    if hardware is None:
        return SAFE_DEFAULT
    for baseline in baselines_for(arch_of(hardware), workload.head_dim, workload.causal):
        if accept is not None and not accept(baseline.config):
            continue
        fitted = fit(baseline.config, workload, hardware)
        if fitted is not None:
            return fitted
    return SAFE_DEFAULT


#: Rank proxy of the primary baseline, and the step between ranks (see baseline_priors).
_RANK_MS, _RANK_STEP_MS = 1.0, 0.1


def baseline_priors(hardware: HardwareSpec, workload: Workload) -> list[Measurement]:
    """Baselines as priors for a study on ``hardware``: feasible, deduplicated, best first.

    Each is a :class:`Measurement` with ``source="prior"``, ``status`` ok, the target
    ``workload``, ``fingerprint="baseline-<arch>"`` (one prior source per architecture,
    apart from measured GPUs) and ``hardware="baseline <arch>"``. Nothing was timed:
    ``median_ms`` is a rank proxy (1.0 for the primary baseline, +0.1 per rank) so that
    rankers such as ``search.priors.PriorBook`` order them; ``tflops`` is 0 and
    ``versions["median_ms"]`` says so. ``versions`` also names the baseline's source and
    whether it had to be shrunk to fit. Never export these to a store (``export_best``
    skips priors). A decode workload gets one prior, :func:`decode_default` (the rows
    above are prefill tiles).
    """
    arch = arch_of(hardware)
    priors: list[Measurement] = []
    seen: set[Config] = set()
    if uses_decode_kernel(workload.q_len):
        config, why = decode_default(hardware, workload)
        rows = [Baseline(arch, workload.head_dim, None, config, "decode default: " + why)]
    else:
        rows = baselines_for(arch, workload.head_dim, workload.causal)
    for baseline in rows:
        fitted = fit(baseline.config, workload, hardware)
        if fitted is None or fitted in seen:
            continue
        seen.add(fitted)
        priors.append(
            Measurement(
                config=fitted,
                workload=workload,
                status=Status.OK,
                fingerprint=f"baseline-{arch}",
                hardware=f"baseline {arch}",
                median_ms=_RANK_MS + _RANK_STEP_MS * len(priors),
                source="prior",
                versions={
                    "prior": "baseline",
                    "arch": arch,
                    "label": baseline.label,
                    "median_ms": "rank proxy, not a measurement",
                    "shrunk_from": "" if fitted == baseline.config else baseline.config.key(),
                },
            )
        )
    return priors
