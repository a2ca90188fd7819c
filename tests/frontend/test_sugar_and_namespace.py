"""Layout sugar objects (parser §1.5, shard §7.1) and the `tf` namespace (DESIGN §3)."""

import pytest

from tilefoundry.dsl import UnknownOpError, tf
from tilefoundry.errors import VerifyError
from tilefoundry.frontend import Tensor
from tilefoundry.ir.core import Var
from tilefoundry.ir.types import f32, make_tensor_type
from tilefoundry.ir.types.shard import B, Layout, P, S, ShardLayout, make_mesh
from tilefoundry.ir.types.shard.sugar import AxisGroup, SplitSugar, layout_from_sugar

M = make_mesh((2, 4), ("x", "y"))


def test_sugar_objects_are_hashable_records():
    assert 16 @ M.x == SplitSugar(16, (M.x,))
    assert M.x * M.y == AxisGroup((M.x, M.y))
    assert hash(16 @ (M.x * M.y)) == hash(SplitSugar(16, (M.x, M.y)))
    assert hash(Tensor[(8, {M.y @ P("max")}), "f32"]) is not None


def test_multi_axis_split_factors_in_the_written_order():
    shape, layout = layout_from_sugar((16 @ (M.y * M.x), 3))
    assert shape == (16, 3)
    assert layout == ShardLayout(Layout((4, 2, 2, 3)), (S(1), S(0)), M)


def test_verbose_strides_expand_within_a_factored_axis():
    _, layout = layout_from_sugar(((12 @ M.y, 4), (4, 1)))
    assert layout == ShardLayout(Layout((4, 3, 4), (12, 4, 1)), (B, S(0)), M)


def test_signature_strides_are_materialised_to_c_order():
    type_ = Tensor[(16 @ M.x, 8, {M.y @ P("sum")}), "f32"].to_type()
    assert type_.layout == ShardLayout(Layout((2, 8, 8), (64, 8, 1)), (S(0), P("sum")), M)


def test_tf_namespace_lists_registry_names_and_types_calls_directly():
    assert {"add", "matmul", "reduce", "reshard", "logical_not"} <= set(dir(tf))
    x = Var("x", make_tensor_type((4, 8), f32))
    call = tf.reduce(x, axes=(1,), kind="sum")
    assert call.type == make_tensor_type((4, 1), f32)
    assert tf.add(x, 1.0).args[1].type.dtype == f32


def test_unknown_op_is_a_verify_and_attribute_error():
    with pytest.raises(UnknownOpError):
        tf.no_such_op  # noqa: B018
    assert not hasattr(tf, "no_such_op")
    with pytest.raises(VerifyError, match="missing input 'rhs'"):
        tf.add(Var("x", make_tensor_type((4,), f32)))
