"""An attention function for transformers' ``AttentionInterface`` registry.

transformers calls ``fn(module, query, key, value, attention_mask, scaling=..., dropout=...,
**kwargs)`` with (batch, heads, seq, head_dim) tensors, key/value with the model's KV
heads (grouped-query is native to the kernel), and expects ``(output as (batch, seq,
heads, head_dim), attention weights or None)``.

The kernel does causal attention aligned bottom-right over a per-sequence key range
[first, end): ``end`` is the query block's last position + 1 (a static cache holds empty
slots after it), ``first`` the first real key (left padding). :func:`register` installs
:func:`key_range_mask` as the name's mask builder (transformers 5's
``ALL_MASK_ATTENTION_FUNCTIONS``), which turns the 2-D padding mask and the cache's query
offset into those ranges: a (2, batch, 1, 1) int32 tensor, computed on the device without
a host read, so it traces under ``torch.compile``. Four dimensions because transformers
takes a 4-D mask as already built (generate builds the mask once and the model's forward
would otherwise read a 2-D one as a padding mask); int32 because real masks are bool or float. The padded keys before ``first`` and the empty
slots at or after ``end`` are never attended; a real query row (its own token not padding)
then gets exactly SDPA's result, for left and right padding alike (a right-padded row's
causal range ends before its pads). Padding rows themselves are nobody's output: a left pad's
row gets zeros (as SDPA's); a right pad's row sees the pads before it, where SDPA's sees only
the real keys (transformers' FlashAttention path writes zeros there). Only ``generate`` after
right padding reads such a row, the prompt's last, for its first token, which transformers
warns is wrong for a decoder; the decode steps after it have holes and get SDPA.

Whatever the kernel cannot express goes to PyTorch's SDPA, which is correct if slower: a
mask with holes (padding inside the sequence, such as generating after right padding),
sliding windows, chunked or custom mask functions (the builder returns sdpa's dense mask),
dropout, logit soft-capping, attention sinks, returned weights. Every such decision
depends only on shapes, kwargs and the mask builder's eager check, so it is made before
compiled code runs; each reason is one log line (``logging``, never ``warnings``: a
warning inside a compiled region breaks the graph) at its first eager call.

transformers is imported only inside :func:`register` and the mask builder.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import torch
import torch.nn.functional as F

import flashtune.runtime.integrations.torch_op  # noqa: F401 - registers torch.ops.flashtune.flash_attention
from flashtune.kernels.attention import SUPPORTED_DTYPES, SUPPORTED_HEAD_DIMS
from flashtune.kernels.dtypes import interpreting
from flashtune.runtime.dispatching.dispatch import flash_attention as _tuned

#: Not "flashtune": transformers (5.x) treats every implementation name containing
#: "flash" as a FlashAttention build and tries to load it (from the hub for unknown names),
#: so ``set_attn_implementation("flashtune")`` raised before our function was ever called.
NAME = "tuned_attention"

#: Substrings transformers routes to its own loaders or checks instead of the registry.
_RESERVED = ("flash", "flex_attention", "sdpa", "eager", "/")

# kwargs whose presence changes the attention's result in ways the kernel cannot do.
_UNSUPPORTED_KWARGS = ("softcap", "s_aux", "sinks")
#: Every kwarg that can change the result (the above, and returned weights).
_RESULT_KWARGS = frozenset((*_UNSUPPORTED_KWARGS, "output_attentions"))
_LOGGED: set[str] = set()
_LOG = logging.getLogger("flashtune.attention")


class FallbackLog(logging.Handler):
    """Collects the fallback lines (``with FallbackLog() as log: ...; log.lines``), for
    benchmarks that report whether the kernel ran."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def __enter__(self) -> FallbackLog:
        _LOGGED.clear()  # a reason logged before the block is logged again inside it
        _LOG.addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _LOG.removeHandler(self)


def is_key_ranges(mask: Any) -> bool:
    """Whether ``mask`` is :func:`key_range_mask`'s (2, batch, 1, 1) int32 ranges (first, end)."""
    return (isinstance(mask, torch.Tensor) and mask.dtype == torch.int32 and mask.dim() == 4 and mask.shape[0] == 2
            and mask.shape[2] == 1 and mask.shape[3] == 1)


def key_ranges(attention_mask: torch.Tensor | None, *, batch_size: int, q_length: int, kv_length: int,
               q_offset: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ranges, holes, full, to_end) from a 2-D padding mask: ``ranges`` (2, batch, 1, 1)
    int32, [0] each sequence's first real key, [1] the end ``q_offset + q_length`` (the same
    for every sequence); ``holes`` a 0-dim bool tensor, True when some sequence's real keys
    before the end are not one run (the ranges would then be wrong); ``full`` True when
    every key before the end is real (no padding); ``to_end`` True when every sequence's run
    of real keys reaches the end (no right padding). No host read.

    Args:
        attention_mask: (batch, >= kv_length) bool, True for real tokens; None: no padding.
        batch_size: sequences.
        q_length: queries of this forward pass.
        kv_length: keys the attention sees (a static cache's capacity).
        q_offset: the position of the first query (an int, or a 0-dim tensor for a static cache).
    """
    device = attention_mask.device if attention_mask is not None else (
        q_offset.device if isinstance(q_offset, torch.Tensor) else "cpu")
    end = torch.as_tensor(q_offset, device=device).to(torch.int32).reshape(()) + q_length
    ends = end.expand(batch_size)
    if attention_mask is None:
        no = torch.zeros((), dtype=torch.bool, device=device)
        return torch.stack([torch.zeros_like(ends), ends])[:, :, None, None], no, ~no, ~no
    mask = attention_mask[:, :kv_length].to(torch.bool)
    if mask.shape[1] < kv_length:  # a static cache's mask may stop at the filled part
        mask = F.pad(mask, (0, kv_length - mask.shape[1]))
    cols = torch.arange(kv_length, device=device, dtype=torch.int32)
    real = mask & (cols < end)
    first = real.to(torch.int8).argmax(dim=1).to(torch.int32)  # the first real key (0 for none)
    count = real.sum(dim=1, dtype=torch.int32)
    run = (cols >= first[:, None]) & (cols < (first + count)[:, None])
    holes = (real != run).any()
    return torch.stack([first, ends])[:, :, None, None], holes, (count == end).all(), (first + count == end).all()


def key_range_mask(batch_size: int, q_length: int | None = None, kv_length: int | None = None, q_offset: Any = 0,
                   kv_offset: int = 0, mask_function: Any = None, attention_mask: torch.Tensor | None = None,
                   **kwargs: Any) -> Any:
    """transformers 5's mask-builder interface, for the kernel: None (plain causal, every
    key real), :func:`key_ranges`' ranges, or sdpa's dense mask for what ranges cannot say.

    Eager, an unpadded forward pass (not a layer) reads one value on the host, as
    transformers' own sdpa builder reads ``padding_mask.sum()`` (``fast_all``). A dynamic
    cache (an int ``q_offset``): no 2-D mask, no read and None; with one, its sum, then None
    if every key is real, else the ranges and a second read (their holes check, which no
    sum can replace); a padded batch's later decode steps continue that check with one read
    (:func:`_continued_ranges`). A static cache (a tensor offset) always gets the ranges (or the dense
    mask for holes), also on the step that fills it, so that every compiled decode step
    takes one form. Under ``torch.compile`` nothing is read and the ranges are returned, so
    a mask with holes is only caught eagerly.
    """
    from transformers.masking_utils import causal_mask_function, sdpa_mask

    cache_position = kwargs.get("cache_position")
    if q_length is None and cache_position is not None:  # transformers before 5.5
        q_length, q_offset = cache_position.shape[0], cache_position[0]
    if (mask_function is not None and mask_function is not causal_mask_function) or kv_offset:
        # A sliding window, a chunked or custom mask: the dense mask, and SDPA.
        return sdpa_mask(batch_size=batch_size, q_length=q_length, kv_length=kv_length, q_offset=q_offset,
                         kv_offset=kv_offset, mask_function=mask_function, attention_mask=attention_mask, **kwargs)
    if attention_mask is not None and attention_mask.dim() != 2:
        return attention_mask  # already 4-D: someone else's mask, SDPA takes it
    if torch.compiler.is_compiling():
        return key_ranges(attention_mask, batch_size=batch_size, q_length=q_length, kv_length=kv_length,
                          q_offset=q_offset)[0]
    known_end = end = host_end(q_offset, q_length)
    if attention_mask is not None:
        continued = _continued_ranges(attention_mask, batch_size, q_length, kv_length, q_offset)
        if continued is not None:
            return continued
    _forget_chain()  # a chain starts only at a mask checked below and found without holes
    if end == kv_length and (attention_mask is None or _all_real(attention_mask, kv_length)):
        return None  # every key real, no empty slot: the plain causal kernel
    ranges, holes, full, to_end = key_ranges(attention_mask, batch_size=batch_size, q_length=q_length,
                                             kv_length=kv_length, q_offset=q_offset)
    if attention_mask is None:
        return ranges  # no padding: the ranges only say where the filled part ends (no read)
    has_holes, no_padding, end, runs_to_end = torch.stack(
        [holes.int(), full.int(), ranges[1, 0, 0, 0], to_end.int()]).tolist()
    if has_holes:
        return sdpa_mask(batch_size=batch_size, q_length=q_length, kv_length=kv_length, q_offset=q_offset,
                         kv_offset=kv_offset, mask_function=causal_mask_function, attention_mask=attention_mask,
                         **kwargs)
    if no_padding and end == kv_length and known_end is not None:
        return None
    if runs_to_end:
        # A static cache's prefill (an int offset) or decode step: its decode steps may
        # continue it. Not after right padding: the next real key would open a hole.
        _start_chain(attention_mask, ranges, batch_size, kv_length)
    # A static cache (a tensor offset) keeps the ranges even on the step that fills it: generate hands this mask to the compiled step, and a None on the last step alone
    # compiled and CUDA-graphed a second step (H200, 2026-12-02: two recordings a generate).
    return ranges


#: Per thread, the static-cache mask last checked eagerly, without holes and with every
#: sequence's real keys running up to its end: (the mask, its first real keys, batch,
#: kv_length). Per thread: two generate loops in two threads never continue each other's chain.
_CHAIN = threading.local()


def _forget_chain() -> None:
    """Forget the last checked mask: the next static step is built and checked in full."""
    _CHAIN.state = None


def _start_chain(attention_mask: torch.Tensor, ranges: torch.Tensor, batch_size: int, kv_length: int) -> None:
    """Remember a static-cache mask that was read, has no holes and whose real keys reach its
    end (see :func:`_continued_ranges`)."""
    # A copy: a mask that is a view of a buffer the caller writes into would otherwise
    # change with it, and the next step's comparison would see no change.
    _CHAIN.state = (attention_mask.clone(), ranges[0, :, 0, 0], batch_size, kv_length)


def _continued_ranges(attention_mask: torch.Tensor, batch_size: int, q_length: int, kv_length: int,
                      q_offset: Any) -> torch.Tensor | None:
    """The ranges of a decode step that continues the last checked mask, or None.

    ``generate`` builds every decode step's mask eagerly (with a static cache, outside its
    compiled step) from the 2-D mask grown by one real token a step. The full build (about
    30 small ops and a host read for the holes check; a dynamic cache's first reads the
    mask's sum) cost the op's compiled static generate about 1 ms a step on the H200,
    2026-12-02 (0.55x SDPA's tokens/s at batch 1, the GPU's time equal). A step whose mask
    is the last checked one (no holes, every run reaching its end) with one real key
    appended, and whose query comes right after it, has no holes either, and the same first
    real keys: that is checked with a few ops and one host read (generate has already
    waited for the GPU at the end of the last step, for its stopping check, so the read
    waits only for these ops). A static cache keeps its capacity (``kv_length``) and its
    offset on the device; a dynamic cache (an int offset) grows by the new key. Any other
    mask (a prefill, a new batch, a changed or padded column, a jump in the offset) is
    built and checked in full and starts a new chain, or none.
    """
    chain = getattr(_CHAIN, "state", None)
    if chain is None or q_length != 1 or attention_mask.dim() != 2:
        return None
    last, first, batch, kv = chain
    length = last.shape[1]
    dynamic = isinstance(q_offset, int)
    # A dynamic cache's keys are the mask's (one more than the checked ones); a static one's
    # stay its capacity.
    if (batch_size, kv_length, attention_mask.shape[1], attention_mask.dtype, attention_mask.device) != (
            batch, length + 1 if dynamic else kv, length + 1, last.dtype, last.device):
        return None
    if dynamic and q_offset != length:  # the query right after the checked keys: known on the host
        return None
    same = (attention_mask[:, :length] == last).all() & attention_mask[:, length].bool().all()
    if dynamic:
        end = torch.full((), length + 1, dtype=torch.int32, device=last.device)
    else:
        end = torch.as_tensor(q_offset, device=last.device).to(torch.int32).reshape(()) + 1
        same &= end == length + 1
    if not same.item():
        return None
    _CHAIN.state = (attention_mask.clone(), first, batch, kv_length)
    return torch.stack([first, end.expand(batch_size)])[:, :, None, None]


def host_end(q_offset: Any, q_length: int) -> int | None:
    """The end of the query block (``q_offset + q_length``) when the offset is a host int (a
    dynamic cache); None for a tensor offset: a static cache's, which transformers keeps a
    tensor (on the GPU: no host read) so that the compiled step sees one form every step."""
    if isinstance(q_offset, int):
        return q_offset + q_length
    return None


def _all_real(attention_mask: torch.Tensor, kv_length: int) -> bool:
    """Whether the first ``kv_length`` entries of every row of a 2-D padding mask are real
    tokens: one reduction and one host read (the check transformers' sdpa builder makes)."""
    mask = attention_mask[:, :kv_length]
    if mask.dtype is not torch.bool:  # transformers hands a bool mask; a 0/1 integer one is cast once
        mask = mask.bool()
    return mask.shape[1] == kv_length and int(mask.sum()) == mask.numel()


def ranges_to_dense(ranges: torch.Tensor, q_len: int, kv_len: int, causal: bool, dtype: torch.dtype) -> torch.Tensor:
    """The additive (batch, 1, q_len, kv_len) mask of the ranges (for the SDPA fallback):
    0 where a query sees a key, the dtype's minimum elsewhere (finite: a row that sees no
    key gets some output rather than NaN, which would reach the next layer's values)."""
    first, end = ranges[0, :, 0, 0].long(), ranges[1, :, 0, 0].long()
    cols = torch.arange(kv_len, device=ranges.device)
    rows = torch.arange(q_len, device=ranges.device)
    keep = (cols[None, None, :] >= first[:, None, None]) & (cols[None, None, :] < end[:, None, None])
    if causal:
        keep = keep & (cols[None, None, :] <= rows[None, :, None] + (end - q_len)[:, None, None])
    zero = torch.zeros((), dtype=dtype, device=ranges.device)
    return torch.where(keep[:, None], zero, torch.finfo(dtype).min)


def _fallback_reason(query: torch.Tensor, key: torch.Tensor, attention_mask: Any, dropout: float, kwargs: dict[str, Any],
                     ranges: Any = None) -> str | None:
    """Why SDPA must run this call (None: the kernel takes it). ``ranges`` is the mask's
    key ranges when the caller already knows them (then the mask is not re-inspected)."""
    if attention_mask is not None and ranges is None and not is_key_ranges(attention_mask):
        return "a dense attention mask (holes in the padding, a sliding window or a custom mask)"
    if dropout:
        return "dropout"
    if not _RESULT_KWARGS.isdisjoint(kwargs):  # one set operation for the usual kwargs (position ids, caches)
        if kwargs.get("output_attentions"):
            return "output_attentions"
        for name in _UNSUPPORTED_KWARGS:
            if kwargs.get(name) is not None:
                return name
    # Each shape read once: a decoding step runs this for every layer (host time).
    shape_q, shape_k = query.shape, key.shape
    if shape_q[-1] not in SUPPORTED_HEAD_DIMS or query.dtype not in SUPPORTED_DTYPES:
        return f"head_dim {shape_q[-1]} / dtype {query.dtype}"
    if shape_q[-1] != shape_k[-1] or shape_q[1] % shape_k[1]:
        return "head shapes the kernel does not take"
    if not query.is_cuda and query.device.type == "cpu" and not interpreting():
        return "CPU tensors without the Triton interpreter"
    return None


#: The last key-range mask seen eagerly and its (first, end) views. Every layer of a forward
#: pass gets the same mask object, and taking the views costs more host time than the
#: kernel's launch; one tuple, replaced whole, so concurrent threads read a consistent pair.
#: Only :func:`key_range_mask`'s tiny (2, batch, 1, 1) tensors are kept alive by it.
_LAST_RANGES: tuple[Any, Any] = (None, None)


def _ranges_views(mask: Any) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(first, end) of a key-range mask as (batch,) views, None for any other mask
    (memoized on the last key-range mask object: shape and dtype of a tensor object are
    fixed, and views share its storage, so in-place updates of its values still show)."""
    global _LAST_RANGES
    last, views = _LAST_RANGES
    if mask is last:
        return views
    if not is_key_ranges(mask):
        return None
    views = (mask[0, :, 0, 0], mask[1, :, 0, 0])
    _LAST_RANGES = (mask, views)
    return views


def _sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: Any, scaling: float | None, dropout: float, is_causal: bool) -> torch.Tensor:
    groups = query.shape[1] // key.shape[1]
    if groups > 1:
        key = key.repeat_interleave(groups, dim=1)
        value = value.repeat_interleave(groups, dim=1)
    # Same rule as transformers' own sdpa path: the causal flag only without a mask and
    # with more than one query (SDPA aligns its causal mask top-left).
    causal = bool(is_causal) and attention_mask is None and query.shape[2] > 1
    return F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, is_causal=causal)


def attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers-compatible attention through ``torch.ops.flashtune.flash_attention``.

    Args:
        module: the attention layer (read for ``is_causal``).
        query: (batch, heads, q_len, head_dim).
        key: (batch, kv_heads, kv_len, head_dim).
        value: like ``key``.
        attention_mask: None for "no mask beyond the causal flag", :func:`key_range_mask`'s
            ranges (the kernel takes them); anything else goes to SDPA.
        scaling: softmax scale (None: 1/sqrt(head_dim)).
        dropout: attention dropout probability (non-zero goes to SDPA).
        **kwargs: ``is_causal`` overrides ``module.is_causal``; others are ignored unless
            they change the result (see the module docstring).

    Returns:
        (output of shape (batch, q_len, heads, head_dim), None).
    """
    is_causal = kwargs.pop("is_causal", None)
    is_causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
    compiling = torch.compiler.is_compiling()
    if compiling:  # no module state inside a traced region
        views = None
        ranges = attention_mask if is_key_ranges(attention_mask) else None
    else:
        views = _ranges_views(attention_mask) if attention_mask is not None else None
        ranges = attention_mask if views is not None else None
    reason = _fallback_reason(query, key, attention_mask, dropout, kwargs, ranges)
    if reason is not None:
        if reason not in _LOGGED and not compiling:
            _LOGGED.add(reason)
            _LOG.warning("flashtune attention: %s is not supported by the kernel; using SDPA", reason)
        if ranges is not None:
            attention_mask = ranges_to_dense(ranges, query.shape[2], key.shape[2], bool(is_causal), query.dtype)
        out = _sdpa(query, key, value, attention_mask, scaling, dropout, is_causal)
    else:
        scale = None if scaling is None else float(scaling)
        if compiling:
            first = end = None
            if ranges is not None:
                first, end = ranges[0, :, 0, 0], ranges[1, :, 0, 0]
            # One opaque node for torch.compile (its fake implementation gives the shapes).
            out = torch.ops.flashtune.flash_attention(query, key, value, bool(is_causal), scale, end, first)
        else:
            # Eager: the runtime op directly. The torch.library dispatcher would add its own
            # per-call host time, which a decoding step (one query a layer) pays in full.
            first, end = views if views is not None else (None, None)
            out = _tuned(query, key, value, causal=bool(is_causal), scale=scale, cache_seqlens=end, kv_start=first)
            if query.shape[2] == 1:
                # A decode step: the op's contiguous (batch, heads, 1, head_dim) output is,
                # transposed, already contiguous; .contiguous() would only cost host time.
                return out.transpose(1, 2), None
    return out.transpose(1, 2).contiguous(), None


def set_attention(model: torch.nn.Module, name: str) -> None:
    """Switch a transformers model's attention implementation (``sdpa``, ``eager``, ``name``)."""
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(name)
    else:  # transformers before set_attn_implementation read the config at forward time
        model.config._attn_implementation = name


def register(name: str = NAME) -> str:
    """Register :func:`attention_forward` with transformers as ``attn_implementation=name``.

    Also maps ``name`` to :func:`key_range_mask`, which gives the kernel per-sequence key
    ranges (static caches, padded batches) and sdpa's dense mask only for what they
    cannot express (SDPA runs those).

    Returns:
        ``name``, for ``model.set_attn_implementation(name)`` or ``from_pretrained(..., attn_implementation=name)``.
    """
    reserved = [r for r in _RESERVED if r in name]
    if reserved:
        raise ValueError(f"attention name {name!r} contains {reserved[0]!r}: transformers would not route it "
                         f"to the registered function; pick another (default {NAME!r})")
    try:
        from transformers import AttentionInterface
    except ImportError as exc:  # an optional extra: say which, not only "No module named"
        raise ImportError(f"flashtune.runtime.hf_attention.register needs transformers >= 5.0, an extra: "
                          f"pip install 'flashtune[hf]' (or transformers itself) ({exc})") from exc

    AttentionInterface.register(name, attention_forward)
    try:
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
    except ImportError:  # transformers before the mask registry: masks come as before
        return name
    ALL_MASK_ATTENTION_FUNCTIONS.register(name, key_range_mask)
    return name
