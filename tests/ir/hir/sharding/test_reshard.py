"""Reshard (hir §1.3 Reshard, shard-layout §7): the (layout, storage) table, value states, the
cross-CTA fence predicate, and the identity kernel."""

from __future__ import annotations

import numpy as np
import pytest

from tilefoundry.analysis import typeinfer_call
from tilefoundry.errors import VerifyError
from tilefoundry.ir.hir.sharding.reshard import Reshard, needs_grid_fence
from tilefoundry.ir.types import (
    DimVar,
    StorageKind,
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
XY = make_mesh((2, 4), ("x", "y"))
Z = make_mesh((4,), ("z",))
CTA = make_mesh((4,), ("c",), topology="cta")
N = DimVar("N", 1, 64)


def t(shape, storage="gmem", layout=None):
    return make_tensor_type(shape, f32, storage, layout)


def sharded(shape, mesh, *attrs, storage="gmem"):
    """Split(i) names *logical* axis i here (make_shard_tensor_type)."""
    return make_shard_tensor_type(shape, f32, storage, mesh=mesh, attrs=attrs)


def sl(shape, stride, attrs, mesh):
    return ShardLayout(Layout(shape, stride), attrs, mesh)


def reshard(layout=None, storage=None):
    return Reshard(layout=layout, storage=storage)


# (2, 1536) over (x=2, y=4, t=32) written as (2 @ m.x, 12 @ m.y, 128 @ m.t): shard-layout §7.5
# (with DESIGN §4.4's three attrs for the three mesh axes). Its t split is an inner factor of
# axis 1 (4 y, 3, 32 t, 4): the seed's warps hold that; a device mesh refuses it (below).
M75 = make_mesh((2, 4, 32), ("x", "y", "t"), topology="warp")
SUGAR75 = sl((2, 4, 3, 32, 4), None, (S(0), S(1), S(3)), M75)
DEVICES75 = make_mesh((2, 4, 32), ("x", "y", "t"))

ACCEPT = [
    # hir Reshard table: layout=None, storage unchanged -> x.type (no-op).
    ("no-op", reshard(), t((4, 8)), t((4, 8))),
    ("no-op, same storage named", reshard(storage="rmem"), t((4, 8), "rmem"), t((4, 8), "rmem")),
    ("no-op keeps a Partial", reshard(), sharded((8,), X, P("sum")), sharded((8,), X, P("sum"))),
    # shard-layout §7.5: gmem -> rmem (high -> low) materialises the per-instance form.
    (
        "§7.5 high -> low",
        reshard(SUGAR75, "rmem"),
        t((2, 1536)),
        t((2, 1536), "rmem", sl((2, 4, 3, 32, 4), (0, 0, 4, 0, 1), SUGAR75.attrs, M75)),
    ),
    # shard-layout §7.5: rmem -> gmem (low -> high) materialises shared C-order.
    (
        "§7.5 low -> high",
        reshard(SUGAR75, "gmem"),
        t((2, 1536), "rmem"),
        t((2, 1536), "gmem", sl((2, 4, 3, 32, 4), (1536, 384, 128, 4, 1), SUGAR75.attrs, M75)),
    ),
    (
        "smem -> gmem is low -> high",
        reshard(sl((4, 2), None, (S(0),), X), "gmem"),
        t((8,), "smem"),
        t((8,), "gmem", sl((4, 2), (2, 1), (S(0),), X)),
    ),
    (
        "gmem -> smem is high -> low",
        reshard(sl((4, 2), None, (S(0),), X), "smem"),
        t((8,)),
        t((8,), "smem", sl((4, 2), (0, 1), (S(0),), X)),
    ),
    # hir Reshard table: sugar, storage unchanged, x.layout None -> shared C-order.
    (
        "sugar from a plain tensor",
        reshard(sl((4, 2, 8), None, (S(0),), X)),
        t((8, 8)),
        t((8, 8), layout=sl((4, 2, 8), (16, 8, 1), (S(0),), X)),
    ),
    # ... a Split-axes-zero source -> per-instance form.
    (
        "sugar from a per-instance source",
        reshard(sl((8, 4, 2), None, (S(1),), X), "rmem"),
        t((8, 8), "rmem", sl((4, 2, 8), (0, 8, 1), (S(0),), X)),
        t((8, 8), "rmem", sl((8, 4, 2), (2, 0, 1), (S(1),), X)),
    ),
    # ... otherwise (positive Split strides) -> shared C-order.
    (
        "sugar from a shared source",
        reshard(sl((8, 4, 2), None, (S(1),), X)),
        sharded((8, 8), X, S(0)),
        t((8, 8), layout=sl((8, 4, 2), (8, 2, 1), (S(1),), X)),
    ),
    (
        "sugar from a split-free shard is shared",
        reshard(sl((4, 2), None, (S(0),), X), "rmem"),
        t((8,), "rmem", sl((8,), (0,), (B,), X)),
        t((8,), "rmem", sl((4, 2), (2, 1), (S(0),), X)),
    ),
    # hir Reshard table: verbose strides are kept verbatim (e.g. an MMA fragment).
    (
        "verbose strides verbatim",
        reshard(sl((4, 2), (1, 4), (S(0),), X), "rmem"),
        t((8,)),
        t((8,), "rmem", sl((4, 2), (1, 4), (S(0),), X)),
    ),
    (
        "verbose strides with host storage",
        reshard(sl((4, 2), (2, 1), (S(0),), X), "host"),
        t((8,)),
        t((8,), "host", sl((4, 2), (2, 1), (S(0),), X)),
    ),
    (
        "composed layout kept",
        reshard(ShardLayout(ComposedLayout(Layout((4, 2), (2, 1)), 0, None), (B,), X)),
        t((8,)),
        t((8,), layout=ShardLayout(ComposedLayout(Layout((4, 2), (2, 1)), 0, None), (B,), X)),
    ),
    # hir Reshard: the output preserves the logical shape (a symbolic one too).
    (
        "symbolic extent",
        reshard(sl((N, 8), None, (B,), X)),
        t((N, 8)),
        t((N, 8), layout=sl((N, 8), (8, 1), (B,), X)),
    ),
    # Partial -> Broadcast is the completion; Partial -> Split scatters it; Partial(sum) ->
    # Partial(sum) on the same mesh axis is a layout-only change.
    (
        "Partial -> Broadcast",
        reshard(sl((8,), None, (B,), X)),
        sharded((8,), X, P("sum")),
        t((8,), layout=sl((8,), (1,), (B,), X)),
    ),
    (
        "Partial -> Split",
        reshard(sl((4, 2), None, (S(0),), X)),
        sharded((8,), X, P("max")),
        t((8,), layout=sl((4, 2), (2, 1), (S(0),), X)),
    ),
    (
        "Partial(sum) kept, the other axis re-split",
        reshard(sl((4, 2), None, (P("sum"), S(0)), XY)),
        sharded((8,), XY, P("sum"), B),
        t((8,), layout=sl((4, 2), (2, 1), (P("sum"), S(0)), XY)),
    ),
    # Reshard is the explicit op that changes a value's mesh (semantic-analysis §3.3).
    (
        "change of mesh",
        reshard(sl((4, 2), None, (S(0),), Z)),
        sharded((8,), X, S(0)),
        t((8,), layout=sl((4, 2), (2, 1), (S(0),), Z)),
    ),
    ("storage as a string", Reshard(layout=None, storage="gmem"), t((4,)), t((4,))),
    # hir Reshard stride resolution, "layout=Layout(strides=None) (sugar)", also for a plain
    # value (DESIGN §4.15): storage unchanged and x.layout None -> shared-engine C-order ...
    # (C-order strides are a plain value's own, so the result is the plain type: DESIGN §4.2)
    (
        "Layout sugar, plain value, storage unchanged",
        reshard(Layout((4, 8))),
        t((4, 8)),
        t((4, 8)),
    ),
    # ... low -> high -> C-order over layout.shape ...
    (
        "Layout sugar, plain value, rmem -> gmem",
        reshard(Layout((4, 8)), "gmem"),
        t((4, 8), "rmem"),
        t((4, 8)),
    ),
    # ... high -> low -> C-order over the local shape (no Split: the shape) with size-1 -> 0.
    (
        "Layout sugar, plain value, gmem -> rmem",
        reshard(Layout((1, 8)), "rmem"),
        t((1, 8)),
        t((1, 8), "rmem", Layout((1, 8), (0, 1))),
    ),
    (
        "Layout sugar, plain value, gmem -> smem",
        reshard(Layout((4, 8)), "smem"),
        t((4, 8)),
        t((4, 8), "smem"),
    ),
    # A plain source layout has no Split axes, so it is not per-instance: shared C-order.
    (
        "Layout sugar over a column-major source",
        reshard(Layout((4, 8))),
        t((4, 8), layout=Layout((4, 8), (1, 4))),
        t((4, 8)),
    ),
    (
        "Layout sugar factoring the axis in one mode",
        reshard(Layout(((2, 4),)), "rmem"),
        t((8,)),
        t((8,), "rmem"),
    ),
    # "layout=Layout(strides=tuple) (verbose) -> dest strides are taken verbatim".
    (
        "plain verbose strides verbatim",
        reshard(Layout((4, 8), (1, 4)), "rmem"),
        t((4, 8)),
        t((4, 8), "rmem", Layout((4, 8), (1, 4))),
    ),
    # shard §7.4: a target that factors each logical axis into consecutive positions
    (
        "factors each logical axis",
        reshard(sl((1, 4, 2, 192), None, (B, S(1)), XY)),
        t((1, 1536)),
        t((1, 1536), layout=sl((1, 4, 2, 192), (1536, 384, 192, 1), (B, S(1)), XY)),
    ),
]


@pytest.mark.parametrize(("case", "op", "x", "expected"), ACCEPT, ids=[c[0] for c in ACCEPT])
def test_accepts(case, op, x, expected):
    assert typeinfer_call(op, x) == expected


def test_result_strides_are_always_materialised():
    # hir §1.3: after typeinfer every reachable ShardLayout has concrete strides.
    for case, op, x, _ in ACCEPT:
        layout = typeinfer_call(op, x).layout
        if isinstance(layout, ShardLayout) and isinstance(layout.layout, Layout):
            assert layout.layout.stride is not None, case


REJECT = [
    # hir Reshard stride resolution: "layout=None, storage changed -> error; a storage change
    # MUST carry an explicit layout=" -- for a plain value too (DESIGN §4.15), naming the sugar.
    (
        "storage change of a sharded value without layout",
        reshard(storage="rmem"),
        sharded((8,), X, S(0)),
        r"must carry an explicit layout=.*layout=ShardLayout\(Layout\(\(4, 2\)\), \(S\(0\),\)",
    ),
    (
        "storage change of a plain value without layout",
        reshard(storage="rmem"),
        t((4, 8)),
        r"gmem -> rmem\) must carry an explicit layout=.*reshard\(x, layout=Layout\(\(4, 8\)\), "
        r'storage="rmem"\)',
    ),
    (
        "Layout sugar to host",
        reshard(Layout((4,)), "host"),
        t((4,)),
        r"Reshard: cannot choose strides for gmem -> host",
    ),
    (
        "plain Layout target of a sharded value",
        reshard(Layout((8,)), "rmem"),
        sharded((8,), X, S(0)),
        r"x is sharded over .* names no mesh; give a ShardLayout target",
    ),
    # shard §7.4 (DESIGN §4.17): the same size grouped another way is another logical shape.
    (
        "ShardLayout of another shape, same size",
        reshard(sl((2, 2, 16), None, (S(0), B), XY)),
        t((8, 8)),
        r"the target layout's shape \(2, 2, 16\) does not factor x's logical shape \(8, 8\)",
    ),
    (
        "ShardLayout merging two axes",
        reshard(sl((4, 8), None, (S(0),), X)),
        t((8, 4)),
        r"shape \(4, 8\) does not factor x's logical shape \(8, 4\)",
    ),
    # types §2: a plain layout matches the shape mode by mode.
    (
        "plain Layout of another rank",
        reshard(Layout((2, 4))),
        t((8,)),
        r"Reshard: TensorType: layout \(2,4\):\(4,1\) has rank 2 but shape \[8\] has rank 1",
    ),
    (
        "plain Layout of another shape, same size",
        reshard(Layout((4, 16))),
        t((8, 8)),
        r"shape \(4, 16\) does not factor x's logical shape \(8, 8\)",
    ),
    # hir Reshard: destination storage is concrete, not unmaterialized.
    ("umat destination", reshard(storage="umat"), t((4,)), r"Reshard: the destination storage"),
    (
        "umat destination with a layout",
        reshard(sl((4,), None, (B,), X), "umat"),
        t((4,)),
        r"must be concrete",
    ),
    # rmem < smem < gmem orders only those three; a sugar target elsewhere has no direction.
    (
        "sugar to host",
        reshard(sl((4,), None, (B,), X), "host"),
        t((4,)),
        r"Reshard: cannot choose strides for gmem -> host.*explicit strides",
    ),
    # shard-layout §7.4: the output preserves the logical shape.
    ("size parity", reshard(sl((4, 4), None, (S(0),), X)), t((8,)), r"has size 16 but x \[8\]"),
    # On a device mesh an inner-factor split is refused when checked: a strided share per device
    # has no SPMD layout (DESIGN §1, issue 28).
    (
        "§7.5 target on a device mesh",
        reshard(sl((2, 4, 3, 32, 4), None, (S(0), S(1), S(3)), DEVICES75), "rmem"),
        t((2, 1536)),
        r"splits logical axis 1 of x \[2, 1536\] by mesh axis 1 \('y'\), mesh axis 2 \('t'\) on "
        r"an inner factor \(factors \(4, 3, 32, 4\)\).*split the outermost factors",
    ),
    # A Reshard cannot create a pending reduction.
    (
        "Broadcast -> Partial",
        reshard(sl((8,), None, (P("sum"),), X)),
        sharded((8,), X, B),
        r"Reshard: the target layout is Partial\(sum\) on mesh axis 0 \('x'\) but x is B there",
    ),
    (
        "plain -> Partial",
        reshard(sl((8,), None, (P("sum"),), X)),
        t((8,)),
        r"x is not sharded on that mesh there",
    ),
    (
        "Split -> Partial",
        reshard(sl((8,), None, (P("max"),), X)),
        sharded((8,), X, S(0)),
        r"Partial\(max\) on mesh axis 0 \('x'\) but x is S\(0\)",
    ),
    (
        "Partial(sum) -> Partial(max)",
        reshard(sl((8,), None, (P("max"),), X)),
        sharded((8,), X, P("sum")),
        r"never create or change one",
    ),
    (
        "Partial moved to another mesh axis",
        reshard(sl((8,), None, (B, P("sum")), XY)),
        sharded((8,), XY, P("sum"), B),
        r"Partial\(sum\) on mesh axis 1 \('y'\) but x is B",
    ),
    (
        "Partial carried onto another mesh",
        reshard(sl((4, 2), None, (S(0),), Z)),
        sharded((8,), X, P("sum")),
        r"x carries Partial\(sum\) on mesh axis 0 \('x'\) and the target is on another mesh",
    ),
    (
        "Dynamic target",
        reshard(sl((8,), None, (Dynamic(),), X)),
        t((8,)),
        r"target layout is Dynamic on mesh axis 0",
    ),
    # issue 28: "a reshard onto another mesh passes check and both backends then refuse it";
    # values move only between views of one device set (meshes whose axes nest), at check time
    (
        "onto a mesh of other devices",
        reshard(sharded((8,), make_mesh((8,), ("w",)), S(0)).layout),
        sharded((8,), X, S(0)),
        r"Reshard: the meshes .* have no common refinement: they are not views of one device",
    ),
    (
        "onto a cta mesh",
        reshard(sharded((8,), CTA, S(0)).layout),
        sharded((8,), X, S(0)),
        r"Reshard: the meshes Mesh\(device\[4\]: x=4\) and Mesh\(cta\[4\]: c=4\) have no",
    ),
    (
        "onto axes that do not nest",
        reshard(sharded((6,), make_mesh((3, 2), ("p", "q")), S(0), B).layout),
        sharded((6,), make_mesh((2, 3), ("a", "b")), S(0), B),
        r"their axes do not nest",
    ),
]


@pytest.mark.parametrize(("case", "op", "x", "match"), REJECT, ids=[c[0] for c in REJECT])
def test_rejects(case, op, x, match):
    with pytest.raises(VerifyError, match=match):
        typeinfer_call(op, x)


def test_layout_attribute_is_a_shard_layout_or_the_plain_sugar():
    # hir Reshard: the supplied layout is a ShardLayout; `Layout(shape)` is the sugar for a
    # value on no mesh (DESIGN §4.15); nothing else is a target.
    assert Reshard(layout=Layout((4,))).layout == Layout((4,))
    for wrong in (ComposedLayout(Layout((4,), (1,)), 0, None), (4,), 4):
        with pytest.raises(VerifyError, match="Reshard: attribute 'layout': must be a ShardLayout"):
            Reshard(layout=wrong)


def test_unknown_storage_name_is_refused():
    with pytest.raises(VerifyError, match="unknown StorageKind 'vram'"):
        Reshard(storage="vram")
    assert Reshard(storage="smem").storage is StorageKind.SMEM


FENCE = [
    # hir Reshard, cross-CTA fence: a gmem shard read under a different CTA ownership.
    ("cta ownership moves", sharded((8, 8), CTA, S(0)), sharded((8, 8), CTA, S(1)), True),
    ("cta split -> replicated", sharded((8, 8), CTA, S(0)), sharded((8, 8), CTA, B), True),
    ("cta replicated -> split", sharded((8, 8), CTA, B), sharded((8, 8), CTA, S(0)), True),
    (
        "cta onto a device mesh",
        sharded((8, 8), CTA, S(0)),
        sharded((8, 8), make_mesh((4,), ("d",)), S(0)),
        True,
    ),
    (
        "cta same ownership",
        sharded((8, 8), CTA, S(0)),
        sharded((8, 8), CTA, S(0), storage="rmem"),
        False,
    ),
    (
        "cta shard held in smem",
        sharded((8, 8), CTA, S(0), storage="smem"),
        sharded((8, 8), CTA, S(1)),
        False,
    ),
    ("device mesh", sharded((8, 8), X, S(0)), sharded((8, 8), X, S(1)), False),
    ("plain source", t((8, 8)), sharded((8, 8), CTA, S(0)), False),
]


@pytest.mark.parametrize(("case", "x", "out", "expected"), FENCE, ids=[c[0] for c in FENCE])
def test_needs_grid_fence(case, x, out, expected):
    assert needs_grid_fence(x, out) is expected


def test_fence_for_a_typed_reshard():
    x = sharded((8, 8), CTA, S(0))
    out = typeinfer_call(reshard(sl((8, 4, 2), None, (S(1),), CTA)), x)
    assert needs_grid_fence(x, out)


def test_relation_is_the_identity_and_surface():
    relations = ACCESS_RELATION.lookup(Reshard)(reshard(), (t((4, 8)),))
    assert relations.inputs == relations.outputs and relations.domain_rank == 2
    assert surface_entry("reshard").op_class is Reshard


def test_kernel_is_the_identity_on_global_values():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = EVAL.lookup(Reshard)(reshard(sl((2, 3), None, (B,), X)), (x,), t((2, 3)))
    np.testing.assert_array_equal(out, x)
    assert out is not x
