"""Conv2D: torch `conv2d(x, weight, bias, stride, padding, dilation, groups)`, NCHW / OIHW.

The three inputs are fixed (hir §1.3 names "input, weight, and bias"): a convolution without a
bias passes an explicit zero bias. Channel and kernel extents must be static (grouping has to be
checked); batch and spatial extents may be symbolic. Operands share one float dtype; narrow
floats accumulate in f32 and round once.

Relation: domain `[n, o, ho, wo, c, kh, kw]` (c indexes the channels of one group);
`x[n, g(o)*Cg + c, ho*sh + kh*dh - ph, wo*sw + kw*dw - pw]`, `weight[o, c, kh, kw]`, `bias[o]`,
`out[n, o, ho, wo]`, where `g(o) = floor(o / (O / groups))` (just `c` when groups == 1).

Sharding, read off that relation and one soundness fact:
- a Split of the batch axis (x) or of the output channels (weight, with bias split alike or
  replicated) carries to the output; with groups > 1 an output-channel Split fails closed: a
  device's output channels read their group's input channels, `floor(o / (O/groups))`, which
  is no plain block of x, so no engine could run it per device;
- a spatial Split fails closed: the window reads a halo from the neighbouring shard, which no
  ShardLayout expresses;
- a Split of a summed axis (x's channels, weight's channels or kernel window) fails closed,
  although the convolution alone would leave Partial(sum): every device would also add the whole
  bias, so completing the sum would count the bias once per device. (DESIGN §4.6: unsound never.)

Pending reductions (hir §1.3: "the same per-axis multilinear constraint to input, weight, and
bias"): `conv(x, w) + b` is a sum of two terms, bilinear `conv(x, w)` and linear `b`, and it
commutes with a pending sum on a mesh axis exactly when *each* term carries one Partial(sum)
there: x or w (never both: cross terms), facing a replicated partner, *and* the bias. A Partial
on x or w with a replicated bias is rejected (the bias would be added once per device), as is a
Partial bias alone (the convolution would be). No other reduction commutes.
"""

from __future__ import annotations

import islpy as isl
import numpy as np

from tilefoundry.analysis.access_relation import AccessRelations, AffineAccess, BoundaryRelation
from tilefoundry.caches import memoize
from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import Op, ParamDef
from tilefoundry.ir.hir.op_support import (
    completion_remedy,
    compute_in_f32,
    mesh_axis_label,
    op_name,
    propagate,
    refuse_partials,
    result_storage,
    same_dtype,
    tensor_operands,
)
from tilefoundry.ir.hir.whole_axis import refuse_splits_on
from tilefoundry.ir.lowering.values import Value
from tilefoundry.ir.types import TensorType, is_static
from tilefoundry.ir.types.shard import ShardLayout, Split
from tilefoundry.rules import (
    FusionKind,
    register_access_relation,
    register_eval,
    register_fusion_kind,
    register_pallas,
    register_stablehlo,
    register_surface,
    register_typeinfer,
    register_validation_samples,
    register_vjp,
)
from tilefoundry.rules.validation_samples import Sample, operand
from tilefoundry.sharding.shard_reading import pending_partials


def _pair(minimum: int):
    def validate(value: object) -> tuple[int, int]:
        pair = (value, value) if isinstance(value, int) else value
        ok = isinstance(pair, tuple | list) and len(pair) == 2
        if not ok or any(isinstance(v, bool) or not isinstance(v, int) for v in pair):
            raise VerifyError(f"expected an int or a pair of ints, got {value!r}")
        if min(pair) < minimum:
            raise VerifyError(f"every entry must be >= {minimum}, got {value!r}")
        return tuple(pair)

    return validate


def _positive(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise VerifyError(f"must be a positive int, got {value!r}")
    return value


class Conv2D(Op):
    """2-D cross-correlation plus bias (torch conv2d)."""

    x = ParamDef("input")
    weight = ParamDef("input")
    bias = ParamDef("input")
    stride = ParamDef("attribute", tuple, default=(1, 1), validate=_pair(1))
    padding = ParamDef("attribute", tuple, default=(0, 0), validate=_pair(0))
    dilation = ParamDef("attribute", tuple, default=(1, 1), validate=_pair(1))
    groups = ParamDef("attribute", int, default=1, validate=_positive)


def _checked(op: Conv2D, arg_types) -> tuple[TensorType, TensorType, TensorType]:
    x, weight, bias = operands = tensor_operands(op, arg_types)
    names = type(op).inputs()
    for name, type_, rank, what in zip(
        names, operands, (4, 4, 1), ("[N, C, H, W]", "[O, C/groups, kH, kW]", "[O]"), strict=True
    ):
        if type_.rank != rank:
            raise VerifyError(
                f"{op_name(op)}: operand '{name}' must be {what}, got shape {list(type_.shape)}"
            )
    dtype = same_dtype(op, list(zip(names, operands, strict=True)))
    if not dtype.is_float:
        raise VerifyError(f"{op_name(op)}: operands must be float tensors, got {dtype}")
    channels, (out_channels, group_channels, *kernel) = x.shape[1], weight.shape
    if not all(is_static(e) for e in (channels, out_channels, group_channels, *kernel)):
        raise VerifyError(
            f"{op_name(op)}: channel and kernel extents must be static, got x {list(x.shape)} "
            f"and weight {list(weight.shape)}"
        )
    groups = op.groups
    if out_channels % groups or channels != group_channels * groups:
        raise VerifyError(
            f"{op_name(op)}: with groups={groups}, x's {channels} channels must equal weight's "
            f"{group_channels} x {groups} and weight's {out_channels} output channels must "
            "divide by groups"
        )
    if bias.shape[0] != out_channels:
        raise VerifyError(
            f"{op_name(op)}: operand 'bias' must be [{out_channels}] (weight's output "
            f"channels), got shape {list(bias.shape)}"
        )
    return x, weight, bias


def _out_shape(op: Conv2D, x: TensorType, weight: TensorType) -> tuple:
    spatial = []
    for axis in range(2):
        extent, kernel = x.shape[2 + axis], weight.shape[2 + axis]
        stride, pad, dilation = op.stride[axis], op.padding[axis], op.dilation[axis]
        window = dilation * (kernel - 1) + 1
        if is_static(extent) and extent + 2 * pad < window:
            raise VerifyError(
                f"{op_name(op)}: spatial axis {2 + axis} of x has extent {extent}, padded "
                f"{extent + 2 * pad}, smaller than the dilated kernel window {window}"
            )
        spatial.append((extent + (2 * pad - window)) // stride + 1)
    return (x.shape[0], weight.shape[0], *spatial)


@memoize("conv2d access relations", 256)
def _relations(stride, padding, dilation, groups, group_out, group_in) -> AccessRelations:
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    channel = "d4" if groups == 1 else f"floor(d1/{group_out})*{group_in} + d4"
    exprs = (
        ("d0", channel, f"{sh}*d2 + {dh}*d5 - {ph}", f"{sw}*d3 + {dw}*d6 - {pw}"),
        ("d1", "d4", "d5", "d6"),
        ("d1",),
    )

    def boundary(axes) -> BoundaryRelation:
        text = f"{{ [d0, d1, d2, d3, d4, d5, d6] -> [{', '.join(axes)}] }}"
        return BoundaryRelation(AffineAccess(isl.Map(text)))

    return AccessRelations(tuple(boundary(a) for a in exprs), (boundary(("d0", "d1", "d2", "d3")),))


@register_access_relation(Conv2D)
def _relation(op, arg_types):
    _, weight, _ = _checked(op, arg_types)
    out_channels, group_in = weight.shape[0], weight.shape[1]
    return _relations(
        op.stride, op.padding, op.dilation, op.groups, out_channels // op.groups, group_in
    )


def _split_on(type_: TensorType, mesh, axis: int) -> bool:
    layout = type_.layout
    return (
        isinstance(layout, ShardLayout)
        and layout.mesh == mesh
        and isinstance(layout.attrs[axis], Split)
    )


def _refuse_partials(op: Conv2D, x: TensorType, weight: TensorType, bias: TensorType) -> None:
    """Per mesh axis: none Partial, or (x xor weight) and bias Partial(sum) (module docstring)."""
    operands = (("x", x), ("weight", weight), ("bias", bias))
    refuse_partials(
        op, operands, allowed=("sum",), why="conv2d is multilinear (it commutes with a sum only)"
    )
    px, pw, pb = (set(pending_partials(t)) for _, t in operands)
    for axis in sorted(px | pw | pb):
        layout = next(t.layout for _, t in operands if axis in pending_partials(t))
        label = mesh_axis_label(layout.mesh, axis)
        if axis in px and axis in pw:
            why = "x and weight both carry it (a product of sums has cross terms)"
            culprit = "weight"
        elif axis not in pb:
            culprit = "x" if axis in px else "weight"
            why = f"'{culprit}' carries it but 'bias' is complete: every device would add the bias"
        elif not (axis in px or axis in pw):
            why = "only the bias carries it, so every device would add the whole convolution"
            culprit = "bias"
        else:
            name, other_name = ("x", "weight") if axis in px else ("weight", "x")
            if not _split_on(dict(operands)[other_name], layout.mesh, axis):
                continue
            why = f"'{name}' carries it while '{other_name}' is Split there, not replicated"
            culprit = name
        raise VerifyError(
            f"{op_name(op)}: Partial(sum) on {label} does not commute with conv2d: {why}; "
            f"{completion_remedy(culprit, layout, axis)}"
        )


@register_typeinfer(Conv2D)
def _typeinfer(op, arg_types, ctx):
    x, weight, bias = operands = _checked(op, arg_types)
    _refuse_partials(op, x, weight, bias)
    refuse_splits_on(
        op,
        [("x", x, {2, 3})],
        "the convolution window reads a halo across that spatial split, which no ShardLayout "
        "expresses",
    )
    refuse_splits_on(
        op,
        [("x", x, {1}), ("weight", weight, {1, 2, 3})],
        "conv2d sums over that axis: each device's partial sum would add the whole bias, "
        "counting it once per device",
    )
    if op.groups > 1:
        refuse_splits_on(
            op,
            [("weight", weight, {0}), ("bias", bias, {0})],
            f"with groups={op.groups} each device's output channels read the input channels "
            "of their group, which is no plain block of x (neither the mesh simulation nor the "
            "SPMD exit cuts one)",
        )
    out_shape = _out_shape(op, x, weight)
    layout = propagate(op, operands, out_shape)
    return TensorType(out_shape, x.dtype, layout, result_storage(op, operands))


def _convolve(op: Conv2D):
    """Sum over the kernel window of strided input slices, contracted per group with einsum."""
    (sh, sw), (ph, pw), (dh, dw), groups = op.stride, op.padding, op.dilation, op.groups

    def kernel(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
        n, _, height, width = x.shape
        out_channels, group_in, kh, kw = weight.shape
        ho = (height + 2 * ph - dh * (kh - 1) - 1) // sh + 1
        wo = (width + 2 * pw - dw * (kw - 1) - 1) // sw + 1
        padded = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
        grouped_w = weight.reshape(groups, out_channels // groups, group_in, kh, kw)
        out = np.zeros((n, groups, out_channels // groups, ho, wo), dtype=x.dtype)
        for i in range(kh):
            for j in range(kw):
                rows = slice(i * dh, i * dh + sh * (ho - 1) + 1, sh)
                cols = slice(j * dw, j * dw + sw * (wo - 1) + 1, sw)
                patch = padded[:, :, rows, cols].reshape(n, groups, group_in, ho, wo)
                out += np.einsum("ngchw,goc->ngohw", patch, grouped_w[..., i, j])
        return out.reshape(n, out_channels, ho, wo) + bias.reshape(1, -1, 1, 1)

    return kernel


@register_eval(Conv2D)
def _eval(op, args, out_type):
    return compute_in_f32(_convolve(op), out_type.dtype, *(np.asarray(a) for a in args))


register_surface("conv2d", Conv2D)
register_fusion_kind(Conv2D, FusionKind.CONTRACTION)


@register_vjp(Conv2D)
def _vjp(call, ct, ad):
    """Both cotangents are convolutions again, so they are typed by this module's own rules:

    - x: the transposed convolution, as a Conv2D: ct is dilated by the stride (interior zero
      padding) and padded (or cropped) so that a stride-1 correlation with the kernel flipped
      and its channel roles swapped per group lands on x's positions;
    - weight: the correlation of x with ct over the batch, as a Conv2D whose batch is x's
      channels and whose kernel is ct (the forward dilation becomes its stride, the forward
      stride its dilation), cut to the kernel extent (positions no window read get nothing);
    - bias: ct summed over batch and space.

    Checked against central finite differences, not only `jax.vjp` (jax-ml/jax#31798)."""
    x, weight, bias = call.args
    op = call.target
    return (
        lambda: _input_cotangent(ad, op, ct, x, weight),
        lambda: _weight_cotangent(ad, op, ct, x, weight),
        lambda: ad.sum_to(
            ad.tf.reduce(ct, axes=(2, 3), keepdim=False, kind="sum"), bias.type.shape
        ),
    )


def _regrouped(ad, value, groups: int, split: tuple, order: tuple, shape: tuple):
    """`value` reshaped to `split` (one channel axis factored by the groups), permuted by
    `order` and reshaped to `shape`: with one group, a transpose of the first two axes. With
    several, the permutation can bring a split axis (a batch split) inside an unsplit one, which
    a device mesh cannot hold (a strided share: the reshape refuses it); the value is then
    regrouped from its replicated form."""
    tf = ad.tf
    if groups == 1:
        return tf.transpose(value, (1, 0, 2, 3))
    return ad.accepted(
        lambda v: tf.reshape(tf.transpose(tf.reshape(v, split), order), shape), value
    )


def _convolved(ad, x, weight, **attributes):
    """A zero-bias Conv2D (a bias would add into the cotangent), from replicated operands
    where the rule refuses their own states (a contraction over a split channel axis)."""
    tf = ad.tf
    bias = tf.zeros((weight.type.shape[0],), weight.type.dtype)
    return ad.accepted(lambda a, w: tf.conv2d(a, w, bias, **attributes), x, weight)


def _input_cotangent(ad, op: Conv2D, ct, x, weight):
    """x[h] receives ct[ho] w[kh] wherever ho*s + kh*d - p = h: ct dilated by the stride and
    edge-padded by d(k-1) - p before and by H - ((Ho-1)s + 1) + p after (a negative edge
    crops), correlated at stride 1 and dilation d with the flipped kernel, whose output and
    input channels are swapped within each group."""
    tf = ad.tf
    groups = op.groups
    out_channels, group_in, *kernel = weight.type.shape
    group_out = out_channels // groups
    low, high = [0, 0], [0, 0]
    for axis in range(2):
        read = (ct.type.shape[2 + axis] - 1) * op.stride[axis] + 1
        low.append(op.dilation[axis] * (kernel[axis] - 1) - op.padding[axis])
        high.append(x.type.shape[2 + axis] - read + op.padding[axis])
    interior = (0, 0, op.stride[0] - 1, op.stride[1] - 1)
    spread = tf.pad(ct, low=tuple(low), high=tuple(high), interior=interior)
    swapped = _regrouped(
        ad,
        weight,
        groups,
        (groups, group_out, group_in, *kernel),
        (0, 2, 1, 3, 4),
        (groups * group_in, group_out, *kernel),
    )
    flipped = tf.reverse(swapped, axes=(2, 3))
    return _convolved(ad, spread, flipped, dilation=op.dilation, groups=groups)


def _weight_cotangent(ad, op: Conv2D, ct, x, weight):
    """w[o, c, kh, kw] receives sum over n, ho, wo of ct[n, o, ho, wo] x[n, c, ho*s + kh*d - p]:
    a Conv2D of x with the channels as its batch and the batch as its (per-group) channels,
    by the kernel ct, at stride d, dilation s and padding p; its output holds the kernel's
    positions first, and then positions that no forward window read (cut off)."""
    tf = ad.tf
    groups = op.groups
    batch, _, *space = x.type.shape
    out_channels, group_in, *kernel = weight.type.shape
    group_out = out_channels // groups
    images = _regrouped(
        ad,
        x,
        groups,
        (batch, groups, group_in, *space),
        (2, 1, 0, 3, 4),
        (group_in, groups * batch, *space),
    )
    produced = tuple(ct.type.shape[2:])
    kernels = _regrouped(
        ad,
        ct,
        groups,
        (batch, groups, group_out, *produced),
        (1, 2, 0, 3, 4),
        (out_channels, batch, *produced),
    )
    correlated = _convolved(
        ad,
        images,
        kernels,
        stride=op.dilation,
        padding=op.padding,
        dilation=op.stride,
        groups=groups,
    )
    cut = tf.slice(correlated, (None, None, 0, 0), (None, None, *kernel))
    return tf.transpose(cut, (1, 0, 2, 3))


@register_validation_samples(Conv2D)
def _validation_samples() -> list[Sample]:
    return [
        Sample(
            Conv2D(padding=(1, 1)),
            (operand(4, 4, 8, 8), operand(4, 4, 3, 3), operand(4)),
            "3x3 pad 1",
        ),
        Sample(Conv2D(), (operand(4, 4, 4, 4), operand(8, 4, 1, 1), operand(8)), "1x1", False),
        Sample(
            Conv2D(groups=2),
            (operand(4, 4, 4, 4), operand(8, 2, 1, 1), operand(8)),
            "groups 2 (an output-channel split is refused)",
        ),
    ]


@register_stablehlo(Conv2D)
def _stablehlo(op, operands, arg_types, out_type, lw):
    """One `stablehlo.convolution` in NCHW / OIHW with torch's symmetric padding, then the bias
    broadcast over the channel axis; narrow floats accumulate in f32 and round once."""
    x, weight, bias = (
        Value.of(lw, n, t).widened() for n, t in zip(operands, arg_types, strict=True)
    )
    (ph, pw), (sh, sw), (dh, dw) = op.padding, op.stride, op.dilation
    shape = lw.shape(out_type)
    out = TensorType(shape, x.dtype)
    name = lw.op(
        f'"stablehlo.convolution"({x.name}, {weight.name}) <{{batch_group_count = 1 : i64, '
        "dimension_numbers = #stablehlo.conv<[b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]>, "
        f"feature_group_count = {op.groups} : i64, lhs_dilation = array<i64: 1, 1>, "
        f"padding = dense<[[{ph}, {ph}], [{pw}, {pw}]]> : tensor<2x2xi64>, "
        f"rhs_dilation = array<i64: {dh}, {dw}>, window_strides = array<i64: {sh}, {sw}>}}> : "
        f"({lw.type(x.type)}, {lw.type(weight.type)}) -> {lw.type(out)}"
    )
    convolved = Value.of(lw, name, out)
    result = convolved + bias.broadcast_in_dim([1], shape)
    return result.convert(out_type.dtype).name


@register_pallas(Conv2D, reads_refs=True)
def _pallas(op, args, arg_types, out_type, kx):
    """One `lax.conv_general_dilated` in NCHW / OIHW at full f32 precision plus the bias, narrow
    floats accumulated in f32 like the reference kernel. No Pallas GPU lowering has a
    convolution, so on a GPU backend it is a sum over the kernel's taps (`_taps_on_gpu`), which
    reads x and the weights one tap at a time from their Refs: x's window of the tap in one
    gather-load, the weights' (O, C/groups) slice in one load, so a 3x3 (any odd) kernel holds
    only power-of-two arrays, as Triton's are, and no array larger than the output."""
    lax, jnp = kx.lax, kx.jnp
    (ph, pw) = op.padding
    x, weight, bias = args

    def convolve(x, weight, bias):
        out = lax.conv_general_dilated(
            x,
            weight,
            window_strides=op.stride,
            padding=((ph, ph), (pw, pw)),
            rhs_dilation=op.dilation,
            dimension_numbers=("NCHW", "OIHW", "NCHW"),
            feature_group_count=op.groups,
            precision=lax.Precision.HIGHEST,
            preferred_element_type=jnp.float32,
        )
        return out + bias.reshape((1, -1, 1, 1))

    def on_gpu(bias):
        taps = _taps_on_gpu(op, kx, x, weight, arg_types[1].shape, out_type.shape[2:], bias.dtype)
        return taps + bias.reshape((1, -1, 1, 1))

    if not kx.gpu:
        return kx.in_f32(convolve, out_type.dtype, *(kx.load(a) for a in args))
    return kx.in_f32(on_gpu, out_type.dtype, kx.load(bias))


def _taps_on_gpu(op: Conv2D, kx, x, weight, weight_shape, out_spatial, dtype):
    """The convolution as the reference kernel sums it, tap by tap: tap (i, j) reads x at
    `(ho*sh + i*dh - ph, wo*sw + j*dw - pw)`, zero in the padding (`kx.zero_filled_window`: of
    x's Ref one gather-load, of a value a selection from every input position), and contracts
    each group's channels of that window with the tap's weights (`weight[group's rows, :, i,
    j]`, a Ref's or a value's static window), both in `dtype` (x's widened); per group a 2-D
    `kx.matmul`, a dot where Triton takes it; the taps summed in f32."""
    groups, (sh, sw), (ph, pw), (dh, dw) = op.groups, op.stride, op.padding, op.dilation
    out_channels, group_in, kh, kw = weight_shape
    group_out = out_channels // groups
    ho, wo = out_spatial
    totals = [None] * groups
    for i in range(kh):
        for j in range(kw):
            window = kx.zero_filled_window(
                x,
                (None, None, (i * dh - ph, sh, ho), (j * dw - pw, sw, wo)),
                "a tap's input window",
                "convolve a smaller block per CTA (split the batch or output channels over the "
                "cta mesh), read x from its parameter (not computed in the kernel), or run it "
                "on XLA (run_xla)",
            ).astype(dtype)
            n = window.shape[0]
            for g in range(groups):
                channels = slice(g * group_in, (g + 1) * group_in)
                lhs = kx.static_window(window, (slice(None), channels)).transpose((0, 2, 3, 1))
                outs = slice(g * group_out, (g + 1) * group_out)
                at = (outs, slice(None), slice(i, i + 1), slice(j, j + 1))
                rhs = kx.static_window(weight, at).astype(dtype).reshape((group_out, group_in))
                product = kx.matmul(lhs.reshape((n * ho * wo, group_in)), rhs.T)
                totals[g] = product if totals[g] is None else totals[g] + product
    spread = kx.stack(totals, 0).reshape((groups, n, ho, wo, group_out))
    return spread.transpose((1, 0, 4, 2, 3)).reshape((n, out_channels, ho, wo))
