"""Workload buckets: powers of two, exact keys, a distance that refuses to mix head dims."""

from __future__ import annotations

import pytest

from flashtune.objectives.types import Workload
from flashtune.runtime.storage.buckets import DECODE_MAX_Q_LEN, Bucket, distance, pow2_bucket


def test_pow2_bucket_rounds_up():
    assert [pow2_bucket(n) for n in (1, 2, 3, 1000, 1024, 1025)] == [1, 2, 4, 1024, 1024, 2048]


def test_bucket_of_workload_keeps_exact_fields_and_rounds_lengths():
    b = Bucket.of(Workload(3, 32, 8, 1000, 3000, 128, "float16", True))
    assert b == Bucket("float16", True, 128, 4, 1024, 4096, "prefill", 32)  # batch x KV heads 24 -> 32
    assert b.name == "float16_causal_d128_g4_q1024_k4096_bh32"
    assert Bucket.from_dict(b.to_dict()) == b
    assert Bucket.of(b.representative()) == b


@pytest.mark.parametrize(
    "field, value",
    [("dtype", "int8"), ("causal", 1), ("head_dim", 0), ("gqa", True), ("q_len", 1000), ("kv_len", -4),
     ("kind", "verify"), ("batch_kv_heads", 3), ("batch_kv_heads", -2)],
)
def test_bad_bucket_fields_raise_naming_the_field(field, value):
    good = Bucket("float16", False, 64, 1, 128, 128).to_dict()
    with pytest.raises(ValueError, match=f"Bucket.{field}"):
        Bucket.from_dict({**good, field: value})


def test_distance_orders_by_length_and_refuses_other_head_dims_and_dtype_sizes():
    a = Bucket("bfloat16", False, 128, 1, 4096, 4096)
    near = Bucket("bfloat16", False, 128, 1, 8192, 8192)
    far = Bucket("bfloat16", False, 128, 1, 1024, 1024)
    masked = Bucket("bfloat16", True, 128, 1, 4096, 4096)
    fp16 = Bucket("float16", False, 128, 1, 4096, 4096)
    assert distance(a, a) == 0
    assert distance(a, near) < distance(a, far)
    assert 0 < distance(a, fp16) < distance(a, masked)
    assert distance(a, Bucket("bfloat16", False, 64, 1, 4096, 4096)) is None
    assert distance(a, Bucket("float32", False, 128, 1, 4096, 4096)) is None


def test_decode_class_up_to_the_kernels_limit_and_batch_heads_bucket():
    decode = Bucket.of(Workload(2, 32, 8, 1, 5000, 128, "bfloat16", True))
    assert decode == Bucket("bfloat16", True, 128, 4, 1, 8192, "decode", 16)
    assert decode.name == "bfloat16_causal_d128_g4_q1_k8192_bh16_decode"
    assert Bucket.of(Workload(1, 8, 8, DECODE_MAX_Q_LEN, 64, 64)).kind == "decode"
    assert Bucket.of(Workload(1, 8, 8, DECODE_MAX_Q_LEN + 1, 64, 64)).kind == "prefill"
    # A prefill config measured at q_len 1 is recorded as prefill; the class says which kernel.
    assert Bucket.of(Workload(1, 8, 8, 1, 64, 64), kind="prefill").kind == "prefill"
    assert Bucket.from_dict(decode.to_dict()) == decode and Bucket.of(decode.representative()) == decode
    with pytest.raises(ValueError, match="Bucket.kind 'decode' needs q_len"):
        Bucket("float16", False, 64, 1, 1024, 1024, "decode")


def test_decode_and_prefill_never_share_and_batch_heads_weighs_in():
    decode = Bucket("bfloat16", True, 128, 4, 1, 8192, "decode", 16)
    assert distance(decode, Bucket("bfloat16", True, 128, 4, 1, 8192, "prefill", 16)) is None
    assert distance(decode, Bucket("bfloat16", True, 128, 4, 1, 8192, "prefill")) is None
    near = Bucket("bfloat16", True, 128, 4, 1, 8192, "decode", 32)
    far = Bucket("bfloat16", True, 128, 4, 1, 8192, "decode", 256)
    assert 0 < distance(decode, near) < distance(decode, far)
    # Format-1 buckets (any batch x heads) are at no batch x heads distance.
    assert distance(Bucket("bfloat16", True, 128, 4, 64, 64, "prefill", 16), Bucket("bfloat16", True, 128, 4, 64, 64)) == 0


def test_format_1_bucket_reads_as_prefill_of_any_batch_heads():
    old = {"dtype": "float16", "causal": False, "head_dim": 64, "gqa": 1, "q_len": 1, "kv_len": 128}
    bucket = Bucket.from_dict(old)
    assert bucket.kind == "prefill" and bucket.batch_kv_heads == 0
    assert "batch_kv_heads" not in bucket.to_dict() and bucket.name == "float16_full_d64_g1_q1_k128"
