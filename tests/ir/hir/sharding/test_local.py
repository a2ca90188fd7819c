"""Local (hir §1.3 Local): the local shape and layout of one device's block; no global kernel."""

from __future__ import annotations

import numpy as np
import pytest

from tilefoundry.analysis import typeinfer_call
from tilefoundry.errors import UnsupportedError, VerifyError
from tilefoundry.ir.hir.op_support import NO_AFFINE_RELATION
from tilefoundry.ir.hir.sharding.local import Local
from tilefoundry.ir.types import (
    DimVar,
    bf16,
    f32,
    make_shard_tensor_type,
    make_tensor_type,
)
from tilefoundry.ir.types.shard import (
    B,
    ComposedLayout,
    Dynamic,
    Layout,
    P,
    S,
    ShardLayout,
    make_mesh,
)
from tilefoundry.rules import ACCESS_RELATION, EVAL, surface_entry

X = make_mesh((4,), ("x",))
CTAS = make_mesh((4,), ("c",), topology="cta")
XY = make_mesh((2, 4), ("x", "y"))
N = DimVar("N", 1, 64)
OP = Local()


t = make_tensor_type  # the shorthand the case tables use


def sharded(shape, mesh, *attrs, dtype=f32, storage="gmem"):
    """Split(i) names *logical* axis i here (make_shard_tensor_type)."""
    return make_shard_tensor_type(shape, dtype, storage, mesh=mesh, attrs=attrs)


def sl(shape, stride, attrs, mesh):
    return ShardLayout(Layout(shape, stride), attrs, mesh)


ACCEPT = [
    # hir §1.3 Local: the result shape contracts each Split axis by that mesh axis's extent;
    # the shard wrapper is stripped, leaving the base Layout (kept strides of the non-split
    # positions: the local view inside a shared engine).
    ("split axis 1", sharded((8, 16), X, S(1)), t((8, 4), layout=Layout((8, 4), (16, 1)))),
    (
        "split on both axes",
        sharded((8, 16), XY, S(0), S(1)),
        t((4, 4), layout=Layout((4, 4), (16, 1))),
    ),
    (
        "two mesh axes on one axis",
        sharded((16, 4), XY, S(0), S(0)),
        t((2, 4), layout=Layout((2, 4), (4, 1))),
    ),
    (
        "axis split whole",
        sharded((4, 8), X, S(0)),
        t((1, 8), layout=Layout((1, 8), (0, 1))),
    ),
    # hir §1.3 Local: dtype and storage are preserved.
    (
        "bf16 in rmem",
        sharded((8,), X, S(0), dtype=bf16, storage="rmem"),
        t((2,), bf16, "rmem", Layout((2,), (1,))),
    ),
    # A per-instance source keeps its compact per-engine strides.
    (
        "per-instance strides",
        t((8, 8), layout=sl((4, 2, 8), (0, 8, 1), (S(0),), X)),
        t((2, 8), layout=Layout((2, 8), (8, 1))),
    ),
    # A replicated mesh axis contributes no contraction.
    (
        "Broadcast beside a split",
        sharded((8, 6), XY, B, S(0)),
        t((2, 6), layout=Layout((2, 6), (6, 1))),
    ),
    ("fully Broadcast", sharded((8, 6), X, B), t((8, 6), layout=Layout((8, 6), (6, 1)))),
    # A residual factor of an unsplit axis stays as a nested mode.
    (
        "unsplit factored axis",
        t((8, 6), layout=sl((8, 2, 3), (6, 3, 1), (B,), X)),
        t((8, 6), layout=Layout((8, (2, 3)), (6, (3, 1)))),
    ),
    # hir §1.3 Local: symbolic sizes pass through (kept symbolic, as the quotient); an
    # un-materialised layout becomes C-order over the local shape.
    ("symbolic multiple", sharded((4 * N, 8), X, S(0)), t((N, 8), layout=Layout((N, 8), (8, 1)))),
    (
        "symbolic extent",
        sharded((N, 8), X, S(0)),
        t((N // 4, 8), layout=Layout((N // 4, 8), (8, 1))),
    ),
    ("symbolic unsplit axis", sharded((8, N), X, S(0)), t((2, N), layout=Layout((2, N), (N, 1)))),
]


@pytest.mark.parametrize(("case", "x", "expected"), ACCEPT, ids=[c[0] for c in ACCEPT])
def test_accepts(case, x, expected):
    assert typeinfer_call(OP, x) == expected


REJECT = [
    # hir §1.3 Local: x.type.layout MUST be a ShardLayout.
    ("plain tensor", t((8,)), r"Local: x must carry a ShardLayout .* got no layout"),
    ("plain layout", t((8,), layout=Layout((8,), (1,))), r"x must carry a ShardLayout"),
    # Local exposes one device's addend: a Partial has no plain-type local view (fail closed).
    (
        "Partial",
        sharded((8,), XY, S(0), P("sum")),
        r"Local: operand 'x' carries Partial\(sum\) on mesh axis 1 \('y'\).*insert "
        r"reshard\(x, \.\.\.\) to Broadcast on mesh axis 1 \('y'\)",
    ),
    (
        "Dynamic",
        t((8,), layout=sl((8,), None, (Dynamic(),), X)),
        r"Local: x is Dynamic on mesh axis 0",
    ),
    (
        "composed base layout",
        t((8,), layout=ShardLayout(ComposedLayout(Layout((8,), (1,)), 0, None), (B,), X)),
        r"binds a ComposedLayout",
    ),
    (
        "layout not aligned with the logical axes",
        t((6, 4), layout=sl((4, 6), (6, 1), (B,), X)),
        r"does not factor the logical shape",
    ),
    (
        "split position straddling logical axes",
        t((2, 8), layout=sl((4, 4), (4, 1), (S(0),), X)),
        r"Local: mesh axis 0 \('x'\) splits layout position 0 .* factors no single axis",
    ),
    # A cta mesh is one kernel's grid: a CTA's block is already its value there, and a per-CTA
    # value has no way out of the kernel, so the simulator refuses it as the Pallas exit would.
    (
        "on a cta mesh",
        sharded((8, 16), CTAS, S(1)),
        r"Local: x lives on a cta mesh, where a CTA's block already is the value",
    ),
]


@pytest.mark.parametrize(("case", "x", "match"), REJECT, ids=[c[0] for c in REJECT])
def test_rejects(case, x, match):
    with pytest.raises(VerifyError, match=match):
        typeinfer_call(OP, x)


def test_no_affine_relation_and_surface():
    assert ACCESS_RELATION.lookup(Local) is NO_AFFINE_RELATION
    assert surface_entry("local").op_class is Local


def test_kernel_refuses_global_arrays():
    with pytest.raises(UnsupportedError, match="only under the evaluator's mesh simulation"):
        EVAL.lookup(Local)(OP, (np.zeros(8, np.float32),), t((2,)))
