"""The strict verifier's case table (SFEP-0053 §3.4, DESIGN §6): one program per rejection class,
each refused with its own message; and the valid edge cases, accepted at both tiers."""

from __future__ import annotations

import importlib

import pytest

from passes.builders import T8, binary, function, region_call, typed, unary
from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import Call, Constant, SourceSpan, Var
from tilefoundry.ir.hir import Function, make_grid_region
from tilefoundry.ir.hir.math import Binary, BinaryKind
from tilefoundry.ir.hir.tensor import Reduce, ReduceKind, Reshape, ShapeOf, Transpose
from tilefoundry.ir.types import DimVar, TensorType, TupleType, UnitType, bf16, f32, f64, i64
from tilefoundry.ir.types.shard import Layout
from tilefoundry.passes import compile, verify

ROW = TensorType((4, 8), f32, layout=Layout((4, 8), (8, 1)))
COL = TensorType((4, 8), f32, layout=Layout((4, 8), (1, 4)))


def use_before_definition():
    x = Var("x", TensorType((), i64))

    def step(i, phis):
        total = binary("add", phis[0], i)
        return total, [total]

    loop = make_grid_region([x], 4, step)
    body = binary("add", loop, loop.induction_var)
    return function("f", (x,), body)


def foreign_var():
    x = Var("x", T8)
    return function("f", (x,), binary("add", x, Var("z", T8)))


def arity_mismatch():
    x = Var("x", T8)
    call = binary("add", x, x)
    object.__setattr__(call, "args", (x,))  # what a pass that drops an operand leaves behind
    return function("f", (x,), call)


def result_arity_mismatch():
    x = Var("x", T8)
    call = Call(Binary(kind=BinaryKind.ADD), (x, x))
    call.stamp_type(TupleType((T8, T8)))
    return function("f", (x,), call)


def declared_type_breaks_rule():
    x = Var("x", T8)
    call = Call(Binary(kind=BinaryKind.ADD), (x, x))
    call.stamp_type(TensorType((8,), f64))
    return function("f", (x,), call)


def dimension_overflow():
    x = Var("x", TensorType((2**31, 2**31, 4), f32))
    return function("f", (x,), x)


def malformed_layout():
    bad = TensorType((4, 8), f32)
    object.__setattr__(bad, "layout", Layout((4, 8), (1, 1)))  # non-injective: never constructible
    x = Var("x", bad)
    return function("f", (x,), x)


def call_signature_mismatch():
    y = Var("y", T8)
    callee = function("g", (y,), unary("neg", y))
    x = Var("x", TensorType((4,), f32))
    call = Call(callee, (x,))
    call.stamp_type(T8)
    return function("f", (x,), call)


def non_fusible_op_in_region():
    x = Var("x", T8)

    def build(v):
        shape = typed(Call(ShapeOf(), (v,)))
        return [shape], [shape]

    call, _ = region_call(build, (x,))
    return function("f", (x,), call)


def value_leaks_from_region():
    x = Var("x", T8)
    inner = {}

    def build(v):
        inner["exp"] = unary("exp", v)
        neg = unary("neg", inner["exp"])
        return [inner["exp"], neg], [neg]

    call, _ = region_call(build, (x,))
    return function("f", (x,), binary("add", call, inner["exp"]))


def root_consumed_in_region():
    x = Var("x", TensorType((4, 8), f32))

    def build(v):
        first = typed(Call(Reduce(axes=(1,), kind=ReduceKind.SUM), (v,)))
        second = typed(Call(Reduce(axes=(0,), kind=ReduceKind.SUM), (first,)))
        return [first, second], [second]

    call, _ = region_call(build, (x,), kind="reduction")
    return function("f", (x,), call)


def transpose_not_view_like_in_region():
    """A transpose feeding a reduction changes the order the reduction walks (fusion_rules)."""
    x = Var("x", TensorType((8, 4), f32))

    def build(a):
        t = typed(Call(Transpose(perm=(1, 0)), (a,)))
        total = typed(Call(Reduce(axes=(1,), kind=ReduceKind.SUM), (t,)))
        return [t, total], [total]

    call, _ = region_call(build, (x,), kind="reduction")
    return function("f", (x,), call)


def transpose_through_reshape_into_reduction():
    """fusion_rules: a view chain is judged by the op at its end; transpose -> reshape -> reduce
    is a transpose feeding a reduction."""
    x = Var("x", TensorType((8, 4), f32))

    def build(a):
        t = typed(Call(Transpose(perm=(1, 0)), (a,)))
        flat = typed(Call(Reshape(new_shape=(32,)), (t,)))
        total = typed(Call(Reduce(axes=(0,), kind=ReduceKind.SUM), (flat,)))
        return [t, flat, total], [total]

    call, _ = region_call(build, (x,), kind="reduction")
    return function("f", (x,), call)


def effect_form_call():
    x = Var("x", T8)
    call = Call(Binary(kind=BinaryKind.ADD), (x, x))
    call.stamp_type(UnitType())
    return function("f", (x,), call, return_type=T8)


def implicit_broadcast():
    x, b = Var("x", TensorType((4, 8), f32)), Var("b", T8)
    return function("f", (x, b), binary("add", x, b))


def implicit_same_rank_broadcast():
    """Issue 20: the verifier must see a same-rank broadcast by itself, not through legalize's
    reading of access relations (a shared blind spot would let a buggy legalize through)."""
    b, x = Var("b", TensorType((1, 8), f32)), Var("x", TensorType((4, 8), f32))
    return function("f", (b, x), binary("add", b, x))


def implicit_promotion():
    x = Var("x", TensorType((), bf16))
    return function("f", (x,), binary("mul", x, Constant(2.0)))


def implicit_layout_change():
    a, b = Var("a", ROW), Var("b", COL)
    return function("f", (a, b), binary("add", a, b))


def dynamic_dimension():
    x = Var("x", TensorType((DimVar("S", 1, 65),), f32))
    return function("f", (x,), unary("neg", x))


def non_dense_layout():
    x = Var("x", TensorType((4, 8), f32, layout=Layout((4, 8), (16, 1))))
    return function("f", (x,), x)


REJECTED = [
    (use_before_definition, "hir", "outside the loop that defines it"),
    (foreign_var, "hir", "foreign Var 'z'"),
    (arity_mismatch, "hir", "arity mismatch: 1 argument"),
    (result_arity_mismatch, "hir", "result arity mismatch"),
    (declared_type_breaks_rule, "hir", "does not follow its rule"),
    (dimension_overflow, "hir", "dimension-product overflow"),
    (malformed_layout, "hir", "malformed layout"),
    (call_signature_mismatch, "hir", "call signature mismatch at parameter 'y'"),
    (non_fusible_op_in_region, "hir", "non-fusible ShapeOf"),
    (value_leaks_from_region, "hir", "without being declared as a region output"),
    (root_consumed_in_region, "hir", "root Reduce is consumed inside its region"),
    (transpose_not_view_like_in_region, "hir", "Transpose, which is not view-like"),
    (effect_form_call, "hir", "effect-form call"),
    (implicit_broadcast, "tensor", "implicit broadcast of operand 1"),
    (implicit_same_rank_broadcast, "tensor", "implicit broadcast of operand 0"),
    (implicit_promotion, "tensor", "implicit dtype promotion"),
    (implicit_layout_change, "tensor", "implicit layout change"),
    (dynamic_dimension, "tensor", "dynamic dimension"),
    (non_dense_layout, "tensor", "dense permutation"),
]


@pytest.mark.parametrize(
    ("build", "tier", "message"), REJECTED, ids=lambda c: getattr(c, "__name__", None)
)
def test_rejected_with_its_own_message(build, tier, message):
    with pytest.raises(VerifyError, match=message.replace("(", r"\(")):
        verify(build(), tier=tier)


def test_a_transpose_read_through_a_reshape_by_a_reduction_is_not_view_like():
    with pytest.raises(VerifyError, match="Transpose, which is not view-like"):
        verify(transpose_through_reshape_into_reduction(), tier="hir")


def test_messages_are_distinct():
    assert len({message for _, _, message in REJECTED}) == len(REJECTED)


@pytest.mark.parametrize(
    "build",
    [
        implicit_broadcast,
        implicit_same_rank_broadcast,
        implicit_promotion,
        implicit_layout_change,
        dynamic_dimension,
    ],
)
def test_tensor_tier_rules_do_not_apply_to_hir(build):
    assert verify(build(), tier="hir") is not None


def test_diagnostics_keep_source_spans():
    x = Var("x", T8)
    call = Call(
        Binary(kind=BinaryKind.ADD), (x, Var("z", T8)), metadata=(SourceSpan("m.py", 7, 3),)
    )
    typed(call)
    with pytest.raises(VerifyError, match=r"at m\.py:7:3"):
        verify(function("f", (x,), call))


def rank0():
    x = Var("x", TensorType((), f32))
    return function("f", (x,), binary("mul", x, x))


def reduce_all_axes():
    x = Var("x", TensorType((4, 8), f32))
    return function(
        "f", (x,), typed(Call(Reduce(axes=(0, 1), keepdim=False, kind=ReduceKind.MAX), (x,)))
    )


def column_major():
    a, b = Var("a", COL), Var("b", COL)
    return function("f", (a, b), unary("exp", binary("add", a, b)))


def returns_parameter():
    x = Var("x", T8)
    return function("f", (x,), x)


@pytest.mark.parametrize("build", [rank0, reduce_all_axes, column_major, returns_parameter])
def test_valid_edge_cases_pass(build):
    fn = build()
    assert isinstance(fn, Function)
    verify(fn, tier="hir")
    verify(fn, tier="tensor")
    compiled, _ = compile(fn)
    verify(compiled, tier="tensor")


def test_compile_refuses_a_dynamic_signature_as_the_users_choice():
    """SFEP-0053 §3.2: the tensor tier is static. A DimVar signature is refused up front as a
    VerifyError naming the dimension, not reported as a pass that broke the IR."""
    from tilefoundry.analysis import TypeInferContext
    from tilefoundry.ir.core import Call, Var
    from tilefoundry.ir.hir import Function
    from tilefoundry.ir.hir.nn import ReLU
    from tilefoundry.ir.types import DimVar, f32, make_tensor_type
    from tilefoundry.passes import compile

    dynamic = make_tensor_type((DimVar("S", 1, 9), 4), f32)
    x = Var("x", dynamic)
    fn = Function("dyn", (x,), Call(ReLU(), (x,)), dynamic)
    TypeInferContext().infer(fn)
    with pytest.raises(VerifyError, match=r"parameter 'x' has the dynamic dimension S"):
        compile(fn)


def test_trusted_nodes_do_not_hide_a_broken_new_node():
    """SFEP-0053 §3.4 (verify after every pass), incremental form: a node already verified at a
    tier is not re-checked, but a node the pass created is checked in full, even when it reads
    only trusted nodes."""
    x = Var("x", T8)
    kept = binary("add", x, x)
    trusted: set = set()
    verify(function("f", (x,), kept), tier="tensor", trusted=trusted)
    assert kept in trusted
    broken = Call(Binary(kind=BinaryKind.MUL), (kept, x))
    broken.stamp_type(TensorType((8,), f64))  # a pass that stamped the wrong dtype
    with pytest.raises(VerifyError, match="does not follow its rule"):
        verify(function("f", (x,), broken, T8), tier="tensor", trusted=trusted)


def test_debug_passes_rechecks_every_node(monkeypatch):
    """TILEFOUNDRY_DEBUG_PASSES=1 keeps full per-pass checking: the manager hands verify no
    trusted set, so every node is checked after every pass."""
    from tilefoundry.passes import manager

    seen = []
    monkeypatch.setattr(manager, "verify", lambda ir, *, tier, trusted: seen.append(trusted))
    monkeypatch.setenv(manager.DEBUG_ENV, "1")
    x = Var("x", T8)
    compile(function("f", (x,), binary("add", x, x)))
    assert seen == [None, None, None]
    seen.clear()
    monkeypatch.setenv(manager.DEBUG_ENV, "0")
    compile(function("f", (x,), binary("add", x, x)))
    assert len(seen) == 3 and all(isinstance(s, set) for s in seen)


def _count_checked_calls(monkeypatch) -> list:
    verify_module = importlib.import_module("tilefoundry.passes.verify")

    checked: list = []
    real = verify_module._Verifier.node

    def counting(self, node):
        if isinstance(node, Call):
            checked.append(node)
        return real(self, node)

    monkeypatch.setattr(verify_module._Verifier, "node", counting)
    return checked


def test_a_repeated_signature_is_checked_once_per_run(monkeypatch):
    """SFEP-0053 §3.4 incremental form: with a trusted set, a node whose signature (op, operand
    types and literals, stamped type) already passed at the tier is not re-checked; a plain
    verify (or TILEFOUNDRY_DEBUG_PASSES) still checks every node."""
    checked = _count_checked_calls(monkeypatch)
    x, y = Var("x", T8), Var("y", T8)
    first, second = binary("add", x, y), binary("add", y, x)
    fn = function("f", (x, y), binary("mul", first, second))
    verify(fn, tier="tensor", trusted=set())
    assert checked.count(first) + checked.count(second) == 1
    checked.clear()
    verify(fn, tier="tensor")
    assert first in checked and second in checked


def test_a_remembered_signature_does_not_hide_a_wrong_stamp():
    """A node with the same op and operand types as a verified one, but a stamp its rule does not
    give, has another signature and is checked in full."""
    x = Var("x", T8)
    trusted: set = set()
    verify(function("f", (x,), binary("add", x, x)), tier="tensor", trusted=trusted)
    broken = Call(Binary(kind=BinaryKind.ADD), (x, x))
    broken.stamp_type(TensorType((8,), f64))
    with pytest.raises(VerifyError, match="does not follow its rule"):
        verify(function("f", (x,), broken, T8), tier="tensor", trusted=trusted)
