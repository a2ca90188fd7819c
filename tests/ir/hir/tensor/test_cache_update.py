"""CacheUpdate (hir §1.3 CacheUpdate): typeinfer case table, no relation, reference kernel."""

from __future__ import annotations

import numpy as np
import pytest

from tilefoundry.analysis import typeinfer_call
from tilefoundry.errors import EvalError, VerifyError
from tilefoundry.ir.hir.op_support import NO_AFFINE_RELATION
from tilefoundry.ir.hir.tensor.cache_update import CacheUpdate
from tilefoundry.ir.types import (
    DimVar,
    bf16,
    f32,
    i32,
    i64,
    make_shard_tensor_type,
    make_tensor_type,
)
from tilefoundry.ir.types.shard import B, P, S, make_mesh
from tilefoundry.rules import ACCESS_RELATION, EVAL, surface_entry

X = make_mesh((4,), ("x",))
XY = make_mesh((2, 4), ("x", "y"))
CTX = DimVar("CTX", 1, 4096)
OP = CacheUpdate()


t = make_tensor_type  # the shorthand the case tables use


def sharded(shape, mesh, *attrs, dtype=f32):
    """Split(i) names *logical* axis i here (make_shard_tensor_type)."""
    return make_shard_tensor_type(shape, dtype, mesh=mesh, attrs=attrs)


POS = t((), i32)
COUNT = t((1,), i32)
CACHE = t((2, 16, 4, 8))
NEW = t((2, 4, 4, 8))

ACCEPT = [
    # hir §1.3 CacheUpdate: the result has cache's same static shape (the interval is data).
    ("basic", (CACHE, POS, POS, NEW), CACHE),
    # hir §1.3 CacheUpdate: a scalar is rank-0 or has only literal size-1 dimensions.
    ("size-1 scalars", (CACHE, t((1, 1), i32), COUNT, NEW), CACHE),
    ("new as long as cache", (CACHE, POS, POS, t((2, 16, 4, 8))), CACHE),
    ("bf16", (t((1, 8, 2, 4), bf16), POS, POS, t((1, 8, 2, 4), bf16)), t((1, 8, 2, 4), bf16)),
    # hir §1.3 CacheUpdate: the length check applies only when both lengths are static.
    ("symbolic cache length", (t((2, CTX, 4, 8)), POS, POS, NEW), t((2, CTX, 4, 8))),
    ("symbolic new length", (CACHE, POS, POS, t((2, CTX, 4, 8))), CACHE),
    (
        "cache storage wins",
        (t((1, 4, 1, 2), storage="rmem"), POS, POS, t((1, 2, 1, 2))),
        t((1, 4, 1, 2), storage="rmem"),
    ),
    # hir §1.3 CacheUpdate: a Partial cache with new carrying the identical mesh and state.
    (
        "Partial(sum) cache and new",
        (sharded((2, 16, 4, 8), X, P("sum")), POS, POS, sharded((2, 4, 4, 8), X, P("sum"))),
        sharded((2, 16, 4, 8), X, P("sum")),
    ),
    # Module doc: the same Split on kv_heads (tensor parallel) is elementwise for the write.
    (
        "kv_heads split on both",
        (sharded((2, 16, 4, 8), XY, B, S(2)), POS, POS, sharded((2, 4, 4, 8), XY, B, S(2))),
        sharded((2, 16, 4, 8), XY, B, S(2)),
    ),
    (
        "Partial beside a heads split",
        (
            sharded((2, 16, 4, 8), XY, P("max"), S(2)),
            POS,
            POS,
            sharded((2, 4, 4, 8), XY, P("max"), S(2)),
        ),
        sharded((2, 16, 4, 8), XY, P("max"), S(2)),
    ),
]


@pytest.mark.parametrize(("case", "args", "expected"), ACCEPT, ids=[c[0] for c in ACCEPT])
def test_accepts(case, args, expected):
    assert typeinfer_call(OP, *args) == expected


REJECT = [
    # hir §1.3 CacheUpdate: cache and new MUST be rank-4 [B, len, kv_heads, head_dim].
    ("rank-3 cache", (t((2, 16, 4)), POS, POS, NEW), r"CacheUpdate: 'cache' must be rank 4"),
    ("rank-5 new", (CACHE, POS, POS, t((2, 4, 4, 8, 1))), r"'new' must be rank 4"),
    # ... with the same dtype and equal B, kv_heads and head_dim.
    ("dtype", (CACHE, POS, POS, t((2, 4, 4, 8), bf16)), r"operand 'new' is bf16 but 'cache'"),
    ("B", (CACHE, POS, POS, t((3, 4, 4, 8))), r"CacheUpdate: B differs: cache has 2 but new has 3"),
    ("kv_heads", (CACHE, POS, POS, t((2, 4, 2, 8))), r"kv_heads differs"),
    ("head_dim", (CACHE, POS, POS, t((2, 4, 4, 16))), r"head_dim differs"),
    ("symbolic B", (t((CTX, 16, 4, 8)), POS, POS, NEW), r"B differs: cache has CTX but new has 2"),
    # hir §1.3 CacheUpdate: when both lengths are static, new.len MUST NOT exceed cache.len.
    ("new too long", (CACHE, POS, POS, t((2, 17, 4, 8))), r"new.len 17 exceeds cache.len 16"),
    # hir §1.3 CacheUpdate: cur_pos and s MUST be i32 scalar tensors.
    ("i64 cur_pos", (CACHE, t((), i64), POS, NEW), r"'cur_pos' must be an i32 scalar"),
    ("vector s", (CACHE, POS, t((2,), i32), NEW), r"'s' must be an i32 scalar .* got i32\[2\]"),
    ("symbolic s", (CACHE, POS, t((CTX,), i32), NEW), r"'s' must be an i32 scalar"),
    # hir §1.3 CacheUpdate: a complete cache rejects a new carrying Partial.
    (
        "complete cache, Partial new",
        (CACHE, POS, POS, sharded((2, 4, 4, 8), X, P("sum"))),
        r"CacheUpdate: operand 'new' carries Partial\(sum\) on mesh axis 0 \('x'\) but 'cache' "
        r"is complete.*insert reshard\(new, \.\.\.\) to Broadcast",
    ),
    # hir §1.3 CacheUpdate: a Partial cache requires the identical mesh and per-axis state.
    (
        "Partial cache, plain new",
        (sharded((2, 16, 4, 8), X, P("sum")), POS, POS, NEW),
        r"'cache' carries a Partial, so 'new' must carry the identical mesh",
    ),
    (
        "Partial(sum) cache, Partial(max) new",
        (sharded((2, 16, 4, 8), XY, B, P("sum")), POS, POS, sharded((2, 4, 4, 8), XY, B, P("max"))),
        r"on mesh axis 1 \('y'\) 'cache' is P\(sum\) but 'new' is P\(max\)",
    ),
    # The write position and count are complete values.
    (
        "Partial cur_pos",
        (CACHE, make_shard_tensor_type((), i32, mesh=X, attrs=(P("max"),)), POS, NEW),
        r"operand 'cur_pos' carries Partial\(max\)",
    ),
    # Module doc: no Split on the written length axis; identical Splits elsewhere.
    (
        "split length axis",
        (sharded((2, 16, 4, 8), X, S(1)), POS, POS, NEW),
        r"operand 'cache' is Split on mesh axis 0 \('x'\) along axis 1, where the write window",
    ),
    (
        "heads split on cache only",
        (sharded((2, 16, 4, 8), X, S(2)), POS, POS, NEW),
        r"'cache' and 'new' must be split the same way",
    ),
]


@pytest.mark.parametrize(("case", "args", "match"), REJECT, ids=[c[0] for c in REJECT])
def test_rejects(case, args, match):
    with pytest.raises(VerifyError, match=match):
        typeinfer_call(OP, *args)


def test_no_affine_relation_is_registered():
    # hir §1.3 CacheUpdate: no affine access relation (the write boundaries are opaque).
    assert ACCESS_RELATION.lookup(CacheUpdate) is NO_AFFINE_RELATION
    assert ACCESS_RELATION.lookup(CacheUpdate)(OP, (CACHE, POS, POS, NEW)) is None


def test_surface():
    assert surface_entry("cache_update").op_class is CacheUpdate


# ---------------------------------------------------------------------------------------------
# Reference kernel

KERNEL = EVAL.lookup(CacheUpdate)


def run(cache, cur_pos, s, new):
    return KERNEL(OP, (cache, np.int32(cur_pos), np.array([s], np.int32), new), t(cache.shape))


def test_writes_the_first_s_positions_of_new():
    cache = np.zeros((1, 5, 1, 2), np.float32)
    new = np.arange(1, 7, dtype=np.float32).reshape(1, 3, 1, 2)
    out = run(cache, 2, 2, new)
    expected = np.zeros((1, 5, 1, 2), np.float32)
    expected[0, 2] = [1, 2]
    expected[0, 3] = [3, 4]
    np.testing.assert_array_equal(out, expected)
    assert not cache.any(), "the kernel must not write into its input"


@pytest.mark.parametrize(
    ("cur_pos", "s"),
    [
        (-1, 1),  # hir §1.3 CacheUpdate: cur_pos >= 0
        (0, 0),  # 1 <= s
        (0, 4),  # s <= new.len (3)
        (3, 3),  # cur_pos + s <= cache.len (5)
    ],
)
def test_runtime_interval_checks_are_eval_errors(cur_pos, s):
    with pytest.raises(EvalError, match=rf"CacheUpdate: writing {s} positions at {cur_pos} needs"):
        run(np.zeros((1, 5, 1, 2)), cur_pos, s, np.ones((1, 3, 1, 2)))


def test_non_integer_position_is_an_eval_error():
    with pytest.raises(EvalError, match="cur_pos must be one integer"):
        KERNEL(
            OP, (np.zeros((1, 5, 1, 2)), np.float32(1), np.int32(1), np.ones((1, 3, 1, 2))), None
        )
