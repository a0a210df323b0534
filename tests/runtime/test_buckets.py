"""Workload buckets: powers of two, exact keys, a distance that refuses to mix head dims."""

from __future__ import annotations

import pytest

from flashtune.objectives.types import Workload
from flashtune.runtime.buckets import Bucket, distance, pow2_bucket


def test_pow2_bucket_rounds_up():
    assert [pow2_bucket(n) for n in (1, 2, 3, 1000, 1024, 1025)] == [1, 2, 4, 1024, 1024, 2048]


def test_bucket_of_workload_keeps_exact_fields_and_rounds_lengths():
    b = Bucket.of(Workload(3, 32, 8, 1000, 3000, 128, "float16", True))
    assert b == Bucket("float16", True, 128, 4, 1024, 4096)
    assert b.name == "float16_causal_d128_g4_q1024_k4096"
    assert Bucket.from_dict(b.to_dict()) == b
    assert Bucket.of(b.representative()) == b


@pytest.mark.parametrize(
    "field, value",
    [("dtype", "int8"), ("causal", 1), ("head_dim", 0), ("gqa", True), ("q_len", 1000), ("kv_len", -4)],
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
