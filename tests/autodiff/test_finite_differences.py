"""Every differentiable op's VJP against central finite differences in float64 on the evaluator,
with random shapes and attributes (issue 25 item 5; the checks are `vjp_checks.py`'s).

- Every op with a VJP rule, drawn from its own validation samples (`VALIDATION_SAMPLES`, the
  attributes each op module states), float operands promoted to float64, values drawn per
  example: the list of ops follows the registry, so a new rule is checked as soon as it lands.
- Per-op strategies with random shapes and attributes (broadcasting, reduction axes, strides,
  negative pads, conv windows, k), each also against `jax.vjp` of the same math.

Values stay inside each op's smooth domain: real operands away from zero (relu's and abs's
kink), positive where a log or a divisor needs it, and continuous draws, so max/topk ties and
floor/round jumps have probability ~0 (ties are rule_cases.py's business, matched to JAX's
convention). CI draws a few examples per op; `-m slow` draws many.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tilefoundry.ir.hir  # noqa: F401  (registers every op)
from autodiff.rule_cases import AWAY_FROM_ZERO, POSITIVE, Case, Input, _conv2d, _lax, _topk
from autodiff.vjp_checks import assert_finite_differences, assert_matches_jax
from tilefoundry.dsl import tf
from tilefoundry.errors import VerifyError
from tilefoundry.evaluator.validation_inputs import draw_truth
from tilefoundry.evaluator.validation_vjp import differentiable_argnums, one_op_program
from tilefoundry.ir.core import Call, Tuple
from tilefoundry.ir.types import f64, make_tensor_type
from tilefoundry.ir.types.shard import make_mesh
from tilefoundry.rules import VALIDATION_SAMPLES, VJP

MESH = make_mesh((4,), ("x",))
"""The mesh a sample's op is built for (Reshard's target); the programs themselves are plain."""
CI = settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- every op, from its validation samples ------------------------------------------------------


def _promoted(sample):
    """The sample's slot types with every float operand in float64, or None when the op
    does not type so (then it keeps its own dtypes)."""
    types = [
        make_tensor_type(s.shape, f64 if s.dtype.is_float else s.dtype) for s in sample.slots()
    ]
    try:
        return one_op_program(sample, sample.op_for(MESH), types)
    except VerifyError:
        return None


def _checkable(sample) -> bool:
    """A float64 input and only float64 float outputs (a narrowing Cast rounds the derivative
    below its noise; the `cast` strategy below takes a coarser step through it)."""
    fn = _promoted(sample)
    if fn is None or not differentiable_argnums(fn):
        return False
    leaves = fn.return_type.fields if hasattr(fn.return_type, "fields") else (fn.return_type,)
    return all(t.dtype == f64 for t in leaves if t.dtype.is_float)


def _sampled_ops() -> dict[str, list]:
    result = {}
    for op_class in VJP.registered():
        if not op_class.__module__.startswith("tilefoundry."):
            continue  # an op a test module registers (tests/evaluator's deliberately bad rules)
        entry = VALIDATION_SAMPLES.lookup(op_class)() if VALIDATION_SAMPLES.has(op_class) else ()
        samples = [] if isinstance(entry, str) else [s for s in entry if _checkable(s)]
        result[op_class.__name__] = samples
    return result


SAMPLED = _sampled_ops()


def _sample_case(name, sample, seed) -> Case:
    """The sample as a rule case: float operands drawn by the case (away from zero, or
    positive), index and size operands fixed to a draw of their own domain."""
    rng = np.random.default_rng(seed)
    inputs = []
    for slot in sample.slots():
        if slot.dtype.is_float:
            domain = POSITIVE if slot.domain.kind == "positive" else AWAY_FROM_ZERO
            inputs.append(Input(slot.shape, "f64", domain))
        else:
            value = draw_truth(slot.shape, slot.dtype.to_numpy(), slot.domain, rng)
            inputs.append(Input(slot.shape, slot.dtype.name, value=value))
    op = sample.op_for(MESH)

    def build(*params):
        leaves = list(params)
        args = tuple(
            Tuple(tuple(leaves.pop(0) for _ in o.fields)) if hasattr(o, "fields") else leaves.pop(0)
            for o in sample.operands
        )
        return Call(op, args)

    return Case(f"{name} {sample.label}", tuple(inputs), build, None)


def test_every_op_with_a_rule_has_a_checkable_sample():
    assert sorted(name for name, samples in SAMPLED.items() if not samples) == []


def _sample_property(name, data):
    sample = data.draw(st.sampled_from(SAMPLED[name]), label="sample")
    seed = data.draw(st.integers(0, 2**31 - 1), label="seed")
    assert_finite_differences(_sample_case(name, sample, seed), seed)


@pytest.mark.parametrize("name", sorted(n for n, s in SAMPLED.items() if s))
@CI
@given(data=st.data())
def test_every_op_vjp_equals_finite_differences(name, data):
    _sample_property(name, data)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(n for n, s in SAMPLED.items() if s))
@SLOW
@given(data=st.data())
def test_every_op_vjp_equals_finite_differences_many(name, data):
    _sample_property(name, data)


# -- per-op strategies: random shapes and attributes, also against jax --------------------------

DIM = st.integers(1, 4)


def _f(*shape, domain=AWAY_FROM_ZERO):
    return Input(tuple(shape), "f64", domain)


def _shape(draw, min_rank=1, max_rank=3):
    return tuple(draw(st.lists(DIM, min_size=min_rank, max_size=max_rank)))


UNARY = {
    "neg": (tf.neg, lambda j, x: -x, AWAY_FROM_ZERO),
    "abs": (tf.abs, lambda j, x: j.abs(x), AWAY_FROM_ZERO),
    "square": (tf.square, lambda j, x: x * x, AWAY_FROM_ZERO),
    "exp": (tf.exp, lambda j, x: j.exp(x), AWAY_FROM_ZERO),
    "log": (tf.log, lambda j, x: j.log(x), POSITIVE),
    "sqrt": (tf.sqrt, lambda j, x: j.sqrt(x), POSITIVE),
    "rsqrt": (tf.rsqrt, lambda j, x: 1.0 / j.sqrt(x), POSITIVE),
    "tanh": (tf.tanh, lambda j, x: j.tanh(x), AWAY_FROM_ZERO),
    "relu": (tf.relu, lambda j, x: j.maximum(x, 0.0), AWAY_FROM_ZERO),
    "silu": (tf.silu, lambda j, x: x / (1.0 + j.exp(-x)), AWAY_FROM_ZERO),
}


@st.composite
def unary_cases(draw):
    kind = draw(st.sampled_from(sorted(UNARY)))
    build, jax_math, domain = UNARY[kind]
    return Case(kind, (_f(*_shape(draw, 0), domain=domain),), build, jax_math)


BINARY = {
    "add": (tf.add, lambda j, a, b: a + b),
    "sub": (tf.sub, lambda j, a, b: a - b),
    "mul": (tf.mul, lambda j, a, b: a * b),
    "div": (tf.div, lambda j, a, b: a / b),
    "maximum": (tf.maximum, lambda j, a, b: j.maximum(a, b)),
    "minimum": (tf.minimum, lambda j, a, b: j.minimum(a, b)),
}


@st.composite
def binary_cases(draw):
    """Torch broadcasting: the rhs a suffix of the lhs's shape, some extents 1 (or the swap)."""
    kind = draw(st.sampled_from(sorted(BINARY)))
    build, jax_math = BINARY[kind]
    full = _shape(draw)
    suffix = full[draw(st.integers(0, len(full))) :]
    rhs = tuple(1 if draw(st.booleans()) else d for d in suffix)
    shapes = (full, rhs) if draw(st.booleans()) else (rhs, full)
    divisor = POSITIVE if kind == "div" else AWAY_FROM_ZERO
    inputs = (_f(*shapes[0]), _f(*shapes[1], domain=divisor))
    return Case(f"{kind} {shapes}", inputs, build, jax_math)


REDUCTIONS = {
    "sum": lambda j: j.sum,
    "mean": lambda j: j.mean,
    "max": lambda j: j.max,
    "abs_max": lambda j: lambda v, **kw: j.max(j.abs(v), **kw),
}


@st.composite
def reduce_cases(draw):
    shape = _shape(draw)
    axes = tuple(sorted(draw(st.sets(st.integers(0, len(shape) - 1), min_size=1))))
    keep, kind = draw(st.booleans()), draw(st.sampled_from(sorted(REDUCTIONS)))
    return Case(
        f"reduce {kind} {shape} axes {axes} keepdim {keep}",
        (_f(*shape),),
        lambda x: tf.reduce(x, axes=axes, keepdim=keep, kind=kind),
        lambda j, x: REDUCTIONS[kind](j)(x, axis=axes, keepdims=keep),
    )


@st.composite
def matmul_cases(draw):
    """Torch matmul: 1-D promotion of either side, batch dims broadcast."""
    m, k, n = draw(DIM), draw(DIM), draw(DIM)
    batch = tuple(draw(st.lists(DIM, max_size=2)))
    lhs = (k,) if draw(st.booleans()) else (*batch, m, k)
    rhs = (k,) if draw(st.booleans()) else ((*batch, k, n) if draw(st.booleans()) else (k, n))
    return Case(f"matmul {lhs} @ {rhs}", (_f(*lhs), _f(*rhs)), tf.matmul, lambda j, a, b: a @ b)


@st.composite
def transpose_cases(draw):
    shape = _shape(draw)
    perm = tuple(draw(st.permutations(range(len(shape)))))
    return Case(
        f"transpose {shape} {perm}",
        (_f(*shape),),
        lambda x: tf.transpose(x, perm),
        lambda j, x: j.transpose(x, perm),
    )


@st.composite
def slice_cases(draw):
    shape = _shape(draw)
    starts, stops, strides = [], [], []
    for extent in shape:
        start = draw(st.integers(0, extent - 1))
        starts.append(start)
        stops.append(draw(st.integers(start + 1, extent)))
        strides.append(draw(st.integers(1, 3)))
    index = tuple(slice(a, b, s) for a, b, s in zip(starts, stops, strides, strict=True))
    return Case(
        f"slice {shape} {starts}:{stops}:{strides}",
        (_f(*shape),),
        lambda x: tf.slice(x, tuple(starts), tuple(stops), strides=tuple(strides)),
        lambda j, x: x[index],
    )


@st.composite
def pad_cases(draw):
    """lax.pad's edges, negative ones included, and interior padding; every extent >= 1."""
    shape = _shape(draw)
    low, high, interior = [], [], []
    for extent in shape:
        inner = draw(st.integers(0, 2))
        spread = extent + (extent - 1) * inner
        lo = draw(st.integers(-min(2, spread - 1), 2))
        hi = draw(st.integers(-min(2, spread + lo - 1), 2))
        low.append(lo), high.append(hi), interior.append(inner)
    value = draw(st.sampled_from([0.0, 1.5]))
    config = list(zip(low, high, interior, strict=True))
    return Case(
        f"pad {shape} {config} value {value}",
        (_f(*shape),),
        lambda x: tf.pad(
            x, low=tuple(low), high=tuple(high), interior=tuple(interior), value=value
        ),
        lambda j, x: _lax("pad")(x, value, config),
    )


CUMULATIVE = {"cumsum": tf.cumsum, "cumprod": tf.cumprod, "cummax": tf.cummax, "cummin": tf.cummin}


@st.composite
def cumulative_cases(draw):
    shape = _shape(draw)
    axis, reverse = draw(st.integers(0, len(shape) - 1)), draw(st.booleans())
    kind = draw(st.sampled_from(sorted(CUMULATIVE)))
    return Case(
        f"{kind} {shape} axis {axis} reverse {reverse}",
        (_f(*shape),),
        lambda x: CUMULATIVE[kind](x, axis=axis, reverse=reverse),
        lambda j, x: _lax(kind)(x, axis=axis, reverse=reverse),
    )


@st.composite
def softmax_cases(draw):
    shape = _shape(draw)
    axis = draw(st.integers(-len(shape), len(shape) - 1))

    def softmax(j, x):
        shifted = j.exp(x - j.max(x, axis=axis, keepdims=True))
        return shifted / j.sum(shifted, axis=axis, keepdims=True)

    return Case(
        f"softmax {shape} axis {axis}",
        (_f(*shape),),
        lambda x: tf.softmax(x, axis=axis),
        softmax,
    )


@st.composite
def concat_cases(draw):
    shape = _shape(draw)
    axis = draw(st.integers(0, len(shape) - 1))
    extents = draw(st.lists(DIM, min_size=1, max_size=3))
    inputs = tuple(_f(*shape[:axis], e, *shape[axis + 1 :]) for e in extents)
    return Case(
        f"concat {[i.shape for i in inputs]} axis {axis}",
        inputs,
        lambda *xs: tf.concat(xs, axis=axis),
        lambda j, *xs: j.concatenate(xs, axis=axis),
    )


@st.composite
def topk_cases(draw):
    shape = _shape(draw)
    axis = draw(st.integers(0, len(shape) - 1))
    k, largest = draw(st.integers(1, shape[axis])), draw(st.booleans())
    return Case(
        f"topk {shape} k {k} axis {axis} largest {largest}",
        (_f(*shape),),
        lambda x: tf.tuple_get_item(tf.topk(x, k, axis=axis, largest=largest), index=0),
        lambda j, x: _topk(j, x, k, axis, largest),
    )


@st.composite
def conv2d_cases(draw):
    """Random groups, strides, paddings and dilations whose output is at least 1 x 1
    (jax-ml/jax#31798: conv's VJP is checked against finite differences, not only jax)."""
    groups = draw(st.integers(1, 2))
    c_in, c_out = groups * draw(st.integers(1, 2)), groups * draw(st.integers(1, 2))
    kernel = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    stride = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    padding = (draw(st.integers(0, 1)), draw(st.integers(0, 1)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    spans = [d * (k - 1) + 1 for d, k in zip(dilation, kernel, strict=True)]
    size = [
        max(1, s - 2 * p) + draw(st.integers(0, 3)) for s, p in zip(spans, padding, strict=True)
    ]
    inputs = (
        _f(draw(st.integers(1, 2)), c_in, *size),
        _f(c_out, c_in // groups, *kernel),
        _f(c_out),
    )
    attrs = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
    return Case(
        f"conv2d {[i.shape for i in inputs]} {attrs}",
        inputs,
        lambda x, w, b: tf.conv2d(x, w, b, **attrs),
        lambda j, x, w, b: _conv2d(j, x, w, b, stride, padding, dilation, groups),
    )


@st.composite
def norm_cases(draw):
    shape = _shape(draw)
    hidden = shape[-1:]

    def rms(j, x, w):
        return x / j.sqrt(j.mean(x * x, -1, keepdims=True) + 1e-6) * w

    def layer(j, x, w, b):
        centred = x - j.mean(x, -1, keepdims=True)
        return centred / j.sqrt(j.mean(centred * centred, -1, keepdims=True) + 1e-5) * w + b

    if draw(st.booleans()):
        return Case(f"rms_norm {shape}", (_f(*shape), _f(*hidden)), tf.rms_norm, rms)
    inputs = (_f(*shape), _f(*hidden), _f(*hidden))
    return Case(f"layer_norm {shape}", inputs, tf.layer_norm, layer)


@st.composite
def gather_scatter_cases(draw):
    """Rows gathered (repeats accumulate in the cotangent) and scatter-added back."""
    rows, width, count = draw(DIM), draw(DIM), draw(st.integers(1, 5))
    seed = draw(st.integers(0, 2**16))
    index = np.random.default_rng(seed).integers(0, rows, size=count).astype(np.int32)
    position = Input((count,), "i32", value=index)
    if draw(st.booleans()):
        return Case(
            f"gather {rows}x{width} at {index.tolist()}",
            (_f(rows, width), position),
            lambda x, i: tf.gather(x, i, axis=0),
            lambda j, x, i: j.take(x, i, axis=0),
        )
    return Case(
        f"scatter_add {rows}x{width} at {index.tolist()}",
        (_f(rows, width), position, _f(count, width)),
        lambda x, i, u: tf.scatter_add(x, i, u, axis=0),
        lambda j, x, i, u: x.at[i].add(u),
    )


@st.composite
def clamp_cases(draw):
    shape = _shape(draw)
    bound = shape[draw(st.integers(0, len(shape))) :]
    inputs = (_f(*shape), _f(*bound), _f(*bound))
    return Case(
        f"clamp {shape} bounds {bound}", inputs, tf.clamp, lambda j, x, a, b: j.clip(x, a, b)
    )


@st.composite
def cast_cases(draw):
    """A round trip through f32 (or f64 itself): the identity, up to f32's rounding, which a
    1e-3 step keeps ~1e-4 of the derivative."""
    shape, through = _shape(draw, 0), draw(st.sampled_from(["f32", "f64"]))
    return Case(
        f"cast {shape} through {through}",
        (_f(*shape),),
        lambda x: tf.cast(tf.cast(x, through), "f64"),
        lambda j, x: x.astype(j.dtype(through.replace("f", "float"))).astype(j.float64),
        tolerance=1e-3,
        step=1e-3,
    )


@st.composite
def where_cases(draw):
    """A fixed random mask, broadcast against both branches (torch broadcasting, as Binary)."""
    full = _shape(draw)
    suffix = full[draw(st.integers(0, len(full))) :]
    mask_shape, x_shape, y_shape = (
        tuple(1 if draw(st.booleans()) else d for d in full[k:])
        for k in (draw(st.integers(0, len(full))), 0, len(full) - len(suffix))
    )
    mask = np.random.default_rng(draw(st.integers(0, 2**16))).random(mask_shape) < 0.5
    return Case(
        f"where {mask_shape} {x_shape} {y_shape}",
        (Input(mask_shape, "bool", value=mask), _f(*x_shape), _f(*y_shape)),
        tf.where,
        lambda j, c, x, y: j.where(c, x, y),
    )


@st.composite
def dynamic_slice_cases(draw):
    """A window at `scale * start + offset`, the start sometimes past the end (clamped into
    [0, extent - size], as StableHLO's dynamic_slice: the cotangent lands where it read)."""
    shape = _shape(draw)
    axis = draw(st.integers(0, len(shape) - 1))
    size = draw(st.integers(1, shape[axis]))
    scale, offset, start = draw(st.integers(1, 2)), draw(st.integers(0, 2)), draw(DIM)
    attrs = {"axis": axis, "size": size, "scale": scale, "offset": offset}
    at = min(max(scale * start + offset, 0), shape[axis] - size)
    return Case(
        f"dynamic_slice {shape} {attrs} start {start}",
        (_f(*shape), Input((), "i32", value=np.array(start, np.int32))),
        lambda x, i: tf.dynamic_slice(x, i, **attrs),
        lambda j, x, i: j.take(x, j.arange(at, at + size), axis=axis),
    )


@st.composite
def insert_slice_cases(draw):
    """An update written into a window of dst at runtime offsets (inside dst: the reference
    refuses others): dst's cotangent is zero in the window, update's is the window's."""
    shape = _shape(draw)
    window = tuple(draw(st.integers(1, d)) for d in shape)
    offsets = tuple(draw(st.integers(0, d - w)) for d, w in zip(shape, window, strict=True))
    index = tuple(slice(o, o + w) for o, w in zip(offsets, window, strict=True))
    scalars = tuple(Input((), "i32", value=np.array(o, np.int32)) for o in offsets)
    return Case(
        f"insert_slice {window} into {shape} at {offsets}",
        (_f(*shape), _f(*window), *scalars),
        lambda d, u, *at: tf.insert_slice(d, u, Tuple(at)),
        lambda j, d, u, *at: d.at[index].set(u),
    )


@st.composite
def cache_update_cases(draw):
    """`new[:, :s]` written into `cache[:, pos:pos + s]` (hir CacheUpdate), pos and s data."""
    batch, heads, dim = draw(DIM), draw(DIM), draw(DIM)
    length = draw(st.integers(2, 6))
    new_len = draw(st.integers(1, min(3, length)))  # typeinfer: new.len <= cache.len
    count = draw(st.integers(1, new_len))
    pos = draw(st.integers(0, length - count))
    scalars = tuple(Input((), "i32", value=np.array(v, np.int32)) for v in (pos, count))
    return Case(
        f"cache_update [{batch}, {length}, {heads}, {dim}] at {pos}, {count} of {new_len}",
        (_f(batch, length, heads, dim), scalars[0], scalars[1], _f(batch, new_len, heads, dim)),
        tf.cache_update,
        lambda j, c, p, n, new: c.at[:, pos : pos + count].set(new[:, :count]),
    )


@st.composite
def rope_cases(draw):
    """Rotate-half RoPE of q and k (different leading axes) at random cache rows."""
    seq, half, max_pos = draw(DIM), draw(st.integers(1, 3)), draw(st.integers(1, 6))
    q_lead, k_lead = _shape(draw, 0, 2), _shape(draw, 0, 2)
    positions = np.random.default_rng(draw(st.integers(0, 2**16))).integers(0, max_pos, seq)
    table = (max_pos, 2 * half)

    def rotated(j, x, cos, sin):
        turned = j.concatenate([-x[..., half:], x[..., :half]], axis=-1)
        return x * cos[positions] + turned * sin[positions]

    branches = (_f(*q_lead, seq, 2 * half), _f(*k_lead, seq, 2 * half))
    index = Input((seq,), "i32", value=positions.astype(np.int32))
    return Case(
        f"rope q {branches[0].shape} k {branches[1].shape} at {positions.tolist()}",
        (*branches, _f(*table), _f(*table), index),
        tf.rope,
        lambda j, q, k, cos, sin, p: (rotated(j, q, cos, sin), rotated(j, k, cos, sin)),
    )


STRATEGIES = {
    "cast": cast_cases(),
    "unary": unary_cases(),
    "binary": binary_cases(),
    "reduce": reduce_cases(),
    "matmul": matmul_cases(),
    "transpose": transpose_cases(),
    "slice": slice_cases(),
    "pad": pad_cases(),
    "cumulative": cumulative_cases(),
    "softmax": softmax_cases(),
    "concat": concat_cases(),
    "topk": topk_cases(),
    "conv2d": conv2d_cases(),
    "norms": norm_cases(),
    "gather and scatter_add": gather_scatter_cases(),
    "clamp": clamp_cases(),
    "where": where_cases(),
    "dynamic_slice": dynamic_slice_cases(),
    "insert_slice": insert_slice_cases(),
    "cache_update": cache_update_cases(),
    "rope": rope_cases(),
}


def _strategy_property(case, seed):
    assert_finite_differences(case, seed)
    assert_matches_jax(case, seed)


@pytest.mark.parametrize("family", sorted(STRATEGIES))
@CI
@given(data=st.data())
def test_random_shapes_and_attributes_match_finite_differences_and_jax(family, data):
    case = data.draw(STRATEGIES[family], label="case")
    _strategy_property(case, data.draw(st.integers(0, 2**16), label="seed"))


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(STRATEGIES))
@SLOW
@given(data=st.data())
def test_random_shapes_and_attributes_match_finite_differences_and_jax_many(family, data):
    case = data.draw(STRATEGIES[family], label="case")
    _strategy_property(case, data.draw(st.integers(0, 2**16), label="seed"))
