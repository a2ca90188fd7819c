# ruff: noqa: B007, F821, F841
# Dtype names in Tensor[...] are strings that ruff reads as forward references, class-body
# siblings resolve through the frontend's frame capture, and loop variables may go unused.
"""Programs the frontend must refuse, each with a located VerifyError (not decorated here: the
test applies `func` so that the refusal is what is observed)."""

from tilefoundry.dsl import tf
from tilefoundry.frontend import Tensor, func, tile
from tilefoundry.ir.types import DimVar
from tilefoundry.ir.types.shard import B, Mesh, P, S, make_mesh

M = make_mesh((2, 4), ("x", "y"))
OTHER = make_mesh((2,), ("z",))
K = 4
V = Tensor[(8,), "f32"]


def helper(x):
    return x


@func
def double_it(x: V):
    return x + x


def while_loop(x: V):
    while True:
        x = x + 1.0
    return x


def if_on_tensor(x: V):
    if x > 0.0:
        return x
    return -x


def aug_assign_in_loop(x: V):
    acc = x
    for i in range(4):
        acc += x
    return acc


def return_in_loop(x: V):
    for i in range(4):
        return x
    return x


def try_block(x: V):
    try:
        y = x + x
    except ValueError:
        y = x
    return y


def del_statement(x: V):
    y = x + x
    del y
    return x


def global_statement(x: V):
    global K
    return x


def import_in_body(x: V):
    import math  # noqa: F401

    return x


def nested_def(x: V):
    def inner(y):
        return y

    return x


def unknown_name(x: V):
    return x + undefined_value


def unknown_callable(x: V):
    return helper(x)


def unknown_op(x: V):
    return tf.frobnicate(x)


def wrong_arity_op(x: V):
    return tf.exp(x, x)


def wrong_arity_function_call(x: V):
    return double_it(x, x)


def unknown_keyword(x: V):
    return tf.softmax(x, dim=0)


def bad_enum_name(x: Tensor[(8, 4), "f32"]):
    return tf.reduce(x, axes=(1,), kind="median")


def dtype_mismatch(x: V, y: Tensor[(8,), "f16"]):
    return x + y


def int_scalar_on_float(x: V):
    return x * 2


def shape_mismatch(x: V, y: Tensor[(4,), "f32"]):
    return x + y


def matmul_mismatch(x: Tensor[(4, 8), "f32"], w: Tensor[(4, 8), "f32"]):
    return x @ w


def indivisible_split(x: Tensor[(6 @ M.y, 4), "f32"]):
    return x


def axis_bound_twice(x: Tensor[(8 @ M.x, 8 @ M.x), "f32"]):
    return x


def value_set_not_last(x: Tensor[({M.y @ P("sum")}, 8), "f32"]):
    return x


def partial_without_reduction(x: Tensor[(8, {M.y @ P()}), "f32"]):
    return x


def broadcast_written(x: Tensor[(8, {M.y @ B}), "f32"]):
    return x


def split_in_value_set(x: Tensor[(8, {M.y @ S(0)}), "f32"]):
    return x


def two_meshes(x: Tensor[(8 @ M.x, 2 @ OTHER.z), "f32"]):
    return x


def bad_dtype_name(x: Tensor[(8,), "float33"]):
    return x


def rank0_without_shape(x: Tensor["bf16"]):
    return x


def missing_annotation(x):
    return x


def not_a_tensor_annotation(x: int):
    return x


def default_value(x: V = None):
    return x


def varargs(*xs: V):
    return xs[0]


def no_return(x: V):
    y = x + x


def return_number(x: V):
    return 3


def unreachable_after_return(x: V):
    return x
    y = x


def discarded_expression(x: V):
    tf.exp(x)
    return x


def loop_without_carry(x: V):
    for i in range(4):
        y = x + x
    return x


def loop_local_used_after(x: V):
    acc = x
    for i in range(4):
        step = acc * 0.5
        acc = acc + step
    return step


def loop_over_tensor(x: V):
    acc = x
    for row in x:
        acc = acc + row
    return acc


def tile_without_step(x: V):
    acc = x
    for i in tile(8):
        acc = acc + x
    return acc


def compile_time_reassigned_in_loop(x: V):
    k = 1
    acc = x
    for i in range(4):
        k = 2
        acc = acc + x
    return acc


def carry_changes_type(x: V):
    acc = x
    for i in range(4):
        acc = tf.cast(acc, "f16")
    return acc


def runtime_slice_bound(x: Tensor[(16, 4), "f32"]):
    return x[x[0, 0] : 4]


# DESIGN §4.14 loop windows: located refusals, each with its fix.
def window_wider_than_axis(x: Tensor[(8, 4), "f32"]):
    acc = tf.zeros((16, 4), "f32")
    for i in tile(16, 16):
        acc = acc + x[i]
    return acc


def window_size_not_constant(x: Tensor[(16, 4), "f32"]):
    acc = tf.zeros((4, 4), "f32")
    for i in range(4):
        acc = acc + x[i : 2 * i]
    return acc


def window_of_symbolic_tile_step(x: Tensor[(DimVar("T", 4, 65),), "f32"]):
    acc = tf.zeros((4,), "f32")
    for i in tile(x.shape[0], x.shape[0] // 4):
        acc = acc + x[i]
    return acc


def window_over_split_axis(x: Tensor[(16 @ M.x, 4), "f32"]):
    acc = tf.zeros((4, 4), "f32")
    for i in tile(16, 4):
        acc = acc + x[i]
    return acc


def window_past_the_end(x: Tensor[(10, 4), "f32"]):
    acc = tf.zeros((4, 4), "f32")
    for i in tile(10, 4):
        acc = acc + x[i]
    return acc


def window_moving_backwards(x: Tensor[(16, 4), "f32"]):
    acc = tf.zeros((4, 4), "f32")
    for i in range(4):
        acc = acc + x[12 - i : 16 - i]
    return acc


def window_write_of_two_axes(x: Tensor[(16, 16), "f32"]):
    acc = tf.zeros((16, 16), "f32")
    for i in tile(16, 4):
        acc[i, i] = x[i, i]
    return acc


def negative_index_symbolic(x: Tensor[(DimVar("N", 1, 9),), "f32"]):
    return x[-1]


def index_out_of_range(x: V):
    return x[8]


def subscript_assignment(x: V):
    x[0] = 1.0
    return x


def not_on_tensor(x: V):
    return not x


def and_on_tensors(x: V, y: V):
    return (x > y) and (y > x)


def invert_on_float(x: V):
    return ~x


def power_operator(x: V):
    return x**2


def chained_comparison(x: V, y: V):
    return x < y < x


def tensor_in_static_call(x: V):
    return max(x, x)


def lambda_in_body(x: V):
    f = lambda v: v  # noqa: E731
    return f(x)


def float_ambiguous(x: V, y: Tensor[(8,), "f16"]):
    return tf.where(1.0, x, y)


def partial_in_body(x: V):
    return tf.reshard(x, layout=(8, {M.y @ P()}))


def layout_without_mesh(x: V):
    return tf.reshard(x, layout=(8,), storage="gmem")


def partial_completion_missing(x: Tensor[(8, {M.y @ P("sum")}), "f32"]):
    return tf.exp(x)


def mesh_call_outside_with(x: V):
    m = Mesh(topology="cta", layout=(2,))
    return x


def range_outside_loop(x: V):
    r = range(4)
    return x


def with_in_loop(x: V):
    acc = x
    for i in range(2):
        with M:
            acc = acc + x
    return acc
