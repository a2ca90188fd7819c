"""GridRegionExpr (hir §1.2): carry-chain checks, value types, and elaboration through a loop."""

import pytest

from support.toy_ops import Ident, Pick
from tilefoundry.analysis import TypeInferContext
from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import Call, Constant, SourceSpan, Var
from tilefoundry.ir.hir import Function, GridRegionExpr, elaborate, make_grid_region
from tilefoundry.ir.hir.grid_region import INDUCTION_TYPE
from tilefoundry.ir.types import (
    DimVar,
    TensorType,
    TupleType,
    f32,
    i32,
    make_shard_tensor_type,
    make_tensor_type,
)
from tilefoundry.ir.types.shard import Partial, Split, make_mesh

ACC = make_tensor_type((4,), f32)
IDX = make_tensor_type((4,), i32)
SPAN = SourceSpan("loop.py", 8, 5)


def loop(phis, inits, yields, body=None, **dims):
    iv = Var("i", INDUCTION_TYPE)
    body = body if body is not None else (yields[0] if yields else iv)
    dims = {"extent": 8, "step": 1} | dims
    return GridRegionExpr(iv, tuple(phis), tuple(inits), body, tuple(yields), **dims)


def test_single_carry_value_is_the_carry_tensor_type():
    init = Var("x", ACC)
    region = make_grid_region(
        [init], 16, lambda i, phis: (Call(Ident(), phis), [Call(Ident(), phis)]), step=4
    )
    assert region.type == ACC
    assert region.carried_args[0].type == ACC  # hir §1.2: the phi takes its init's type
    assert region.init_args == (init,)


def test_multi_carry_is_a_tuple_projected_per_field():
    a, b = Var("a", ACC), Var("b", IDX)

    def build(i, phis):
        stepped = tuple(Call(Ident(), (p,)) for p in phis)
        return stepped[0], stepped

    region = make_grid_region([a, b], 8, build, carry_names=["acc", "idx"])
    assert region.type == TupleType((ACC, IDX))
    assert [p.name for p in region.carried_args] == ["acc", "idx"]
    ctx = TypeInferContext()
    assert ctx.infer(Call(Pick(index=1), (region,))) == IDX
    assert ctx.infer(Call(Pick(index=0), (region,))) == ACC


def test_no_carry_loop_is_the_empty_tuple():
    region = make_grid_region([], 8, lambda i, phis: (i, []))
    assert region.type == TupleType(())


@pytest.mark.parametrize(
    ("make", "match"),
    [
        # hir §1.2: phi types equal their init types
        (
            lambda: loop([Var("acc", ACC)], [Var("x", IDX)], [Var("y", ACC)]),
            r"carry 0 \('acc'\): phi type f32\[4\] gmem differs from its init type i32\[4\]",
        ),
        # hir §1.2: yield types equal phi types
        (
            lambda: loop([Var("acc", ACC)], [Var("x", ACC)], [Var("y", IDX)]),
            r"carry 0 \('acc'\): yield type i32\[4\] gmem differs from the phi type f32\[4\]",
        ),
    ],
)
def test_type_unstable_carries_are_refused_and_located(make, match):
    region = make()
    located = GridRegionExpr(
        region.induction_var,
        region.carried_args,
        region.init_args,
        region.body,
        region.yield_values,
        region.extent,
        region.step,
        metadata=(SPAN,),
    )
    with pytest.raises(VerifyError, match=f"^GridRegionExpr: {match}") as info:
        TypeInferContext().infer(located)
    assert str(info.value).endswith("at loop.py:8:5")


@pytest.mark.parametrize(
    ("args", "match"),
    [
        # hir §1.2: len(init_args) == len(carried_args) == len(yield_values)
        (
            ([Var("acc", ACC)], [Var("x", ACC)], []),
            "equal lengths, got 1 carried_args, 1 init_args and 0 yield_values",
        ),
        # hir §1.2: resolved start/extent non-negative, step positive
        (([], [], [], None, {"step": 0}), "static step must be positive, got 0"),
        (([], [], [], None, {"extent": -1}), "static extent must be non-negative, got -1"),
        (([], [], [], None, {"start": -2}), "static start must be non-negative, got -2"),
        # hir §1.2: start / extent / step are ShapeDims
        (([], [], [], None, {"extent": 2.5}), "expected an int, DimVar or dim expression"),
        # hir §1.2: carried_args are Vars
        (([Constant(1.0)], [Var("x", ACC)], [Var("y", ACC)]), r"carried_args\[0\] must be a Var"),
    ],
)
def test_malformed_regions_are_refused_at_construction(args, match):
    phis, inits, yields, *rest = args
    body, dims = rest if rest else (None, {})
    with pytest.raises(VerifyError, match=match):
        loop(phis, inits, yields, body, **dims)


def test_dim_var_bounds_must_be_bound_by_the_function_parameters():
    n = DimVar("N", 1, 64)
    k = DimVar("K", 1, 64)
    x = Var("x", make_tensor_type((n,), f32))
    bound_loop = make_grid_region([x], n, lambda i, phis: (phis[0], phis))
    assert TypeInferContext().infer(Function("f", (x,), bound_loop, x.type)) is not None
    stray = GridRegionExpr(Var("i", INDUCTION_TYPE), (), (), x, (), k, 1, metadata=(SPAN,))
    fn = Function("g", (x,), stray, TupleType(()))
    with pytest.raises(VerifyError, match=r"extent uses DimVar K, which no parameter") as info:
        TypeInferContext().infer(fn)
    assert str(info.value).endswith("at loop.py:8:5")


def test_elaboration_carries_a_sharded_partial_init_through_the_loop():
    mesh = make_mesh((2, 4), names=("x", "y"))
    sharded = make_shard_tensor_type((8, 16), f32, mesh=mesh, attrs=(Split(0), Partial("max")))
    plain = make_tensor_type((8, 16), f32)
    x = Var("x", plain)
    region = make_grid_region([x], 4, lambda i, phis: (Call(Ident(), phis), [Call(Ident(), phis)]))
    fn = Function("f", (x,), region, plain)
    concrete = elaborate(fn, [sharded])
    assert concrete.return_type == sharded
    assert isinstance(concrete.body, GridRegionExpr)
    assert concrete.body.carried_args[0].type == sharded
    assert concrete.body.carried_args[0] is not region.carried_args[0]
    assert concrete.body.yield_values[0].args[0] is concrete.body.carried_args[0]
    assert isinstance(concrete.body.induction_var.type, TensorType)
