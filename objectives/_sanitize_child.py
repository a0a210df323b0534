"""The process compute-sanitizer watches: one config's kernel (or a batch of configs') on
its edge cases, then exit.

``python -m flashtune.objectives._sanitize_child REQUEST`` with REQUEST the JSON of
``objectives.sanitize.request`` (config, head_dim, dtype, cases, seed): every case is
launched through ``flashtune.kernels.flash_attention`` (a packed kernel's cases through
``flash_attention_varlen`` or ``flash_attention_with_kvcache``, by the case's ``layout``) and
synchronized; exit 0 when all ran. Inputs are drawn on the host and copied over, so the only kernels the sanitizer sees
are the config's own (and the few torch ops its launcher runs: fp8 scales, a workspace's
zeroing), with descriptor scratch zeroed (``zero_descriptor_scratch``). A failure is a traceback on stderr and exit code 3: the parent reads it as a crash.

A batch, ``{"batch": [REQUEST, ...]}`` (``objectives.sanitize.batch_request``), runs each
request's cases in turn in this one process, each request with its own seed as it would
alone: Python, torch and the CUDA context under the tool start once for all of them. A
failure ends the batch at once (exit code 3), its last line naming the request's index and
the case: ``config I case N ...``.

``--probe`` prints the GPU's ``HardwareSpec`` as JSON (``null`` without one) and exits.

Without a GPU the cases run on the CPU, in float32, under Triton's interpreter when
``TRITON_INTERPRET=1`` is set (the CPU tests check the cases are valid calls that way).
"""

from __future__ import annotations

import itertools
import json
import sys
import traceback
from typing import Any

import torch

from flashtune.kernels import flash_attention, flash_attention_varlen, flash_attention_with_kvcache
from flashtune.kernels.launch_support import zero_descriptor_scratch
from flashtune.kernels.space import PAGE_SIZE_KEY
from flashtune.objectives.hardware import HardwareSpec

_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def run_case(case: dict[str, Any], *, config: dict[str, Any], head_dim: int, dtype: torch.dtype,
             device: torch.device, generator: torch.Generator) -> None:
    """Launch one case and wait for it."""
    layout = case.get("layout", "dense")
    launch = {"dense": dense_case, "varlen": varlen_case, "paged": paged_case}[layout]
    launch(case, config=config, head_dim=head_dim, dtype=dtype, device=device, generator=generator)
    if device.type == "cuda":
        torch.cuda.synchronize()


def dense_case(case: dict[str, Any], *, config: dict[str, Any], head_dim: int, dtype: torch.dtype,
               device: torch.device, generator: torch.Generator) -> None:
    """(batch, heads, length, head_dim) inputs through ``flash_attention``."""
    b, hq, hkv, nq, nk = (int(case[k]) for k in ("batch", "q_heads", "kv_heads", "q_len", "kv_len"))

    def draw(heads: int, length: int) -> torch.Tensor:
        return torch.randn(b, heads, length, head_dim, generator=generator).to(device=device, dtype=dtype)

    q, k, v = draw(hq, nq), draw(hkv, nk), draw(hkv, nk)
    ranges = {name: torch.tensor(case[name], dtype=torch.int32).to(device)
              for name in ("cache_seqlens", "kv_start") if case.get(name) is not None}
    flash_attention(q, k, v, causal=bool(case["causal"]), config=config, **ranges)


def cumulative(lengths: list[int], device: torch.device) -> torch.Tensor:
    return torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32).to(device)


def varlen_case(case: dict[str, Any], *, config: dict[str, Any], head_dim: int, dtype: torch.dtype,
                device: torch.device, generator: torch.Generator) -> None:
    """Packed sequences through ``flash_attention_varlen``, with ``pad_rows`` rows past the
    last sequence's queries (left unwritten by the kernel), a K/V group's query heads in one
    tile where ``pack_gqa``, tiles by packed rows where ``grid_by="tokens"`` (whatever the op
    launches now: a case names what it runs)."""
    q_lens, k_lens = list(case["q_lens"]), list(case["k_lens"])

    def draw(rows: int, heads: int) -> torch.Tensor:
        return torch.randn(rows, heads, head_dim, generator=generator).to(device=device, dtype=dtype)

    q = draw(sum(q_lens) + int(case["pad_rows"]), int(case["q_heads"]))
    k, v = (draw(sum(k_lens), int(case["kv_heads"])) for _ in "kv")
    flash_attention_varlen(q, k, v, cumulative(q_lens, device), cumulative(k_lens, device), max(q_lens), max(k_lens),
                           causal=bool(case["causal"]), config=config, pack_gqa=bool(case.get("pack_gqa", False)),
                           grid_by=str(case.get("grid_by", "longest")))


def paged_case(case: dict[str, Any], *, config: dict[str, Any], head_dim: int, dtype: torch.dtype,
               device: torch.device, generator: torch.Generator) -> None:
    """Queries against a page pool through ``flash_attention_with_kvcache``, ``new_keys`` keys
    a sequence appended first: each sequence's pages (its cached and new keys') taken in a
    shuffled order, its table's unused entries -1."""
    page, lengths = int(case["page_size"]), [int(n) for n in case["cache_seqlens"]]
    batch, q_len, hq, hkv = len(lengths), int(case["q_len"]), int(case["q_heads"]), int(case["kv_heads"])
    new = int(case.get("new_keys", 0))
    needs = [-(-(n + new) // page) for n in lengths]
    order = torch.randperm(max(sum(needs), 1), generator=generator).tolist()
    table = torch.full((batch, max(max(needs), 1)), -1, dtype=torch.int32)
    taken = 0
    for b, need in enumerate(needs):
        table[b, :need] = torch.tensor(order[taken:taken + need], dtype=torch.int32)
        taken += need
    pool = [torch.randn(max(sum(needs), 1), page, hkv, head_dim, generator=generator).to(device=device, dtype=dtype)
            for _ in "kv"]
    q = torch.randn(batch, q_len, hq, head_dim, generator=generator).to(device=device, dtype=dtype)
    appended = [torch.randn(batch, new, hkv, head_dim, generator=generator).to(device=device, dtype=dtype)
                for _ in "kv"] if new else [None, None]
    flash_attention_with_kvcache(q, pool[0], pool[1], *appended,
                                 cache_seqlens=torch.tensor(lengths, dtype=torch.int32).to(device),
                                 block_table=table.to(device), causal=bool(case["causal"]),
                                 config={k: v for k, v in config.items() if k != PAGE_SIZE_KEY})  # the cache's, not a knob


def run_request(request: dict[str, Any], *, device: torch.device, label: str = "") -> bool:
    """Every case of one request, in turn; False (its traceback and a line naming ``label``
    and the case printed on stderr) at the first that fails."""
    # The interpreter computes in float32.
    dtype = _DTYPES[request["dtype"]] if device.type == "cuda" else torch.float32
    generator = torch.Generator().manual_seed(int(request.get("seed", 0)))
    for number, case in enumerate(request["cases"]):
        try:
            run_case(case, config=request["config"], head_dim=int(request["head_dim"]), dtype=dtype, device=device,
                     generator=generator)
        except Exception as exc:
            traceback.print_exc()
            print(f"{label}case {number} {case}: {type(exc).__name__}: {str(exc).strip()[:300]}", file=sys.stderr)
            return False
    return True


def run_batch(requests: list[dict[str, Any]], *, device: torch.device) -> int:
    """Each request in turn (``config I`` in a failure's line); exit code 3 at the first failure."""
    for index, request in enumerate(requests):
        if not run_request(request, device=device, label=f"config {index} "):
            return 3
    cases = sum(len(r["cases"]) for r in requests)
    print(f"sanitize child: {len(requests)} config(s), {cases} case(s) ran on {device}", file=sys.stderr)
    return 0


def main(argv: list[str]) -> int:
    if argv == ["--probe"]:
        spec = HardwareSpec.from_device().to_dict() if torch.cuda.is_available() else None
        print(json.dumps(spec))
        return 0
    if len(argv) != 1:
        print("usage: python -m flashtune.objectives._sanitize_child REQUEST_JSON | --probe", file=sys.stderr)
        return 2
    request = json.loads(argv[0])
    zero_descriptor_scratch()  # what initcheck cannot see Triton write (launch_support)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if "batch" in request:
        return run_batch(request["batch"], device=device)
    if not run_request(request, device=device):
        return 3
    print(f"sanitize child: {len(request['cases'])} case(s) ran on {device}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
