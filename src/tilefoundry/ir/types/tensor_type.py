"""The IR's value types: `Type = TensorType | TupleType | UnitType | CallableType` (types §1).

All four are frozen and compare by value, so typeinfer results can be compared with `==` and used as
dict keys. Construction validates and normalises (shape dims go through the one dim normal form),
so an invalid type object never exists; every refusal is a VerifyError naming the type and rule.
The layout classes live in `shard/`, which imports dims from here; they are imported lazily inside
the validating functions to keep the import graph acyclic.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tilefoundry.errors import VerifyError
from tilefoundry.ir.types.dims import ShapeDim, format_dim, normalize_dim
from tilefoundry.ir.types.dtype import DType, f32
from tilefoundry.ir.types.storage import StorageKind

MAX_RANK = 64
"""numpy's NPY_MAXDIMS: the reference evaluator (and every exit's host arrays) hold a value as
a numpy array, so a rank beyond it could be typed but never run."""


def _check_shape(shape: Any) -> tuple[ShapeDim, ...]:
    if not isinstance(shape, tuple | list):
        raise VerifyError(
            f"TensorType: shape must be a tuple of dims, got {shape!r} (a scalar is shape ())"
        )
    if len(shape) > MAX_RANK:
        raise VerifyError(
            f"TensorType: rank {len(shape)} exceeds {MAX_RANK}, the most numpy (and so the "
            "evaluator and the exits) can hold; merge axes with a reshape"
        )
    dims = tuple(normalize_dim(d, what="TensorType: shape entry") for d in shape)
    for axis, d in enumerate(dims):
        if isinstance(d, int) and d < 0:
            raise VerifyError(
                f"TensorType: shape {_shape_text(dims)} has negative extent at {axis}"
            )
    return dims


def _shape_text(shape: Sequence[ShapeDim]) -> str:
    return "[" + ", ".join(format_dim(d) for d in shape) + "]"


def _check_layout(layout: Any, shape: tuple[ShapeDim, ...]) -> None:
    """types §2: a plain layout matches the shape mode by mode; a ShardLayout matches in size."""
    from tilefoundry.ir.types.shard.int_tuple import is_int, product
    from tilefoundry.ir.types.shard.layout import (
        INJECTIVITY_ENUMERATION_LIMIT,
        ComposedLayout,
        Layout,
        check_injective,
    )

    shape_text = _shape_text(shape)
    if not isinstance(layout, Layout | ComposedLayout):
        from tilefoundry.ir.types.shard.shard_layout import ShardLayout

        if not isinstance(layout, ShardLayout):
            raise VerifyError(
                "TensorType: layout must be a Layout, ComposedLayout or ShardLayout, "
                f"got {layout!r}"
            )
        # DESIGN §4.3: size(G) == size(T.shape) is checked when the layout enters a TensorType;
        # the domain shape itself may be a factoring of the logical shape.
        layout_size, tensor_size = product(layout.layout.shape), product(shape)
        if is_int(layout_size) and is_int(tensor_size) and layout_size != tensor_size:
            raise VerifyError(
                f"TensorType: ShardLayout size {layout_size} (shape {layout.layout.shape}) "
                f"differs from the tensor size {tensor_size} of shape {shape_text}"
            )
        return
    modes = layout.shape if isinstance(layout.shape, tuple) else (layout.shape,)
    if len(modes) != len(shape):
        raise VerifyError(
            f"TensorType: layout {layout} has rank {len(modes)} but shape {shape_text} "
            f"has rank {len(shape)}; a plain layout must match the shape's rank"
        )
    for axis, (mode, extent) in enumerate(zip(modes, shape, strict=True)):
        mode_size = product(mode)
        if mode_size is None or normalize_dim(mode_size) != extent:
            raise VerifyError(
                f"TensorType: layout {layout} has extent {mode_size} on axis {axis} but shape "
                f"{shape_text} has {format_dim(extent)}; a plain layout must match the extents"
            )
    # types §2: layouts must be injective. Only a domain small enough to enumerate is decided here;
    # larger ones are built by our own compact-stride constructors.
    size = layout.size()
    if is_int(size) and size <= INJECTIVITY_ENUMERATION_LIMIT:
        check_injective(layout, "TensorType")


@dataclass(frozen=True)
class TensorType:
    """types §2: logical `shape` (unchanged by sharding, storage, layout), dtype, layout, storage.

    A scalar is rank 0 (`shape=()`); there is no separate scalar type. `storage` also accepts the
    lowercase storage names.
    """

    shape: tuple[ShapeDim, ...]
    dtype: DType
    layout: Any = None
    storage: StorageKind = StorageKind.GMEM

    def __post_init__(self) -> None:
        shape = _check_shape(self.shape)
        if not isinstance(self.dtype, DType):
            raise VerifyError(
                f"TensorType: dtype must be a DType, got {self.dtype!r} "
                "(use DType.from_name for a string)"
            )
        try:
            storage = StorageKind.resolve(self.storage)
        except VerifyError as err:
            raise VerifyError(f"TensorType: {err.message}") from None
        if storage is None:
            raise VerifyError("TensorType: storage must be a StorageKind, got None")
        if self.layout is not None:
            _check_layout(self.layout, shape)
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "storage", storage)

    @property
    def rank(self) -> int:
        return len(self.shape)

    def __str__(self) -> str:
        text = f"{self.dtype}{_shape_text(self.shape)} {self.storage}"
        return text if self.layout is None else f"{text} layout={self.layout}"


@dataclass(frozen=True)
class TupleType:
    """types §5: the result of a multi-output op; consumed only through tuple_get_item."""

    fields: tuple[TensorType | TupleType, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.fields, tuple | list):
            raise VerifyError(f"TupleType: fields must be a tuple of types, got {self.fields!r}")
        fields = tuple(self.fields)
        for index, field in enumerate(fields):
            if not isinstance(field, TensorType | TupleType):
                raise VerifyError(
                    f"TupleType: field {index} must be a TensorType or TupleType, got {field!r}"
                )
        object.__setattr__(self, "fields", fields)

    def __str__(self) -> str:
        return "(" + ", ".join(str(f) for f in self.fields) + ")"


@dataclass(frozen=True)
class UnitType:
    """types §6: the result of an effect-form op (it carries no value)."""

    def __str__(self) -> str:
        return "unit"


@dataclass(frozen=True)
class CallableType:
    """types §7: the type of a `hir.Function`; positional parameter types only (no names)."""

    params: tuple[Type, ...]
    return_type: Type

    def __post_init__(self) -> None:
        if not isinstance(self.params, tuple | list):
            raise VerifyError(f"CallableType: params must be a tuple of types, got {self.params!r}")
        params = tuple(self.params)
        for index, param in enumerate(params):
            if not is_type(param):
                raise VerifyError(f"CallableType: parameter {index} is not a Type: {param!r}")
        if not is_type(self.return_type):
            raise VerifyError(f"CallableType: return_type is not a Type: {self.return_type!r}")
        object.__setattr__(self, "params", params)

    def __str__(self) -> str:
        return "(" + ", ".join(str(p) for p in self.params) + f") -> {self.return_type}"


Type = TensorType | TupleType | UnitType | CallableType
_TYPE_CLASSES = (TensorType, TupleType, UnitType, CallableType)


def is_type(x: object) -> bool:
    return isinstance(x, _TYPE_CLASSES)


def is_tensor_type(x: object) -> bool:
    return isinstance(x, TensorType)


def tensor_fields(type_: Type) -> tuple[TensorType, ...]:
    """The TensorType leaves of a (possibly nested) tuple, in order; a unit has none."""
    if isinstance(type_, TensorType):
        return (type_,)
    if isinstance(type_, TupleType):
        return tuple(leaf for field in type_.fields for leaf in tensor_fields(field))
    if isinstance(type_, UnitType):
        return ()
    raise VerifyError(f"tensor_fields: {type_!r} is not a tensor, tuple or unit type")


def _require_tensor(type_: Any, fn: str) -> TensorType:
    if not isinstance(type_, TensorType):
        raise VerifyError(f"{fn}: expected a TensorType, got {type_!r}")
    return type_


def with_layout(type_: TensorType, layout: Any) -> TensorType:
    return dataclasses.replace(_require_tensor(type_, "with_layout"), layout=layout)


def with_storage(type_: TensorType, storage: StorageKind | str) -> TensorType:
    return dataclasses.replace(_require_tensor(type_, "with_storage"), storage=storage)


def with_dtype(type_: TensorType, dtype: DType) -> TensorType:
    return dataclasses.replace(_require_tensor(type_, "with_dtype"), dtype=dtype)


def numel(type_: Type) -> int:
    """types §2.2: element count, summed over tuple leaves; symbolic extents are refused."""
    total = 0
    for leaf in tensor_fields(type_):
        count = 1
        for d in leaf.shape:
            if not isinstance(d, int):
                raise VerifyError(f"numel: {leaf} has the symbolic extent {format_dim(d)}")
            count *= d
        total += count
    return total


def make_tensor_type(
    shape: Iterable[Any],
    dtype: DType = f32,
    storage: StorageKind | str = "gmem",
    layout: Any = None,
) -> TensorType:
    """types §8: the usual way to write a type; `storage` takes a StorageKind or its name."""
    return TensorType(_shape_tuple(shape), dtype, layout, storage)


def _shape_tuple(shape: Any) -> tuple:
    if not isinstance(shape, tuple | list):
        raise VerifyError(f"TensorType: shape must be a tuple of dims, got {shape!r}")
    return tuple(shape)


def make_shard_tensor_type(
    shape: Iterable[Any],
    dtype: DType = f32,
    storage: StorageKind | str = "gmem",
    *,
    mesh: Any = None,
    attrs: Sequence[Any] = (),
) -> TensorType:
    """types §8 / DESIGN §3: a tensor sharded over `mesh` by `attrs`, with the canonical layout.

    Here, and only here, `Split(i)` names logical tensor axis i; `canonical_shard_layout` turns
    that into the layout-position Splits of the ShardLayout. No mesh or no attrs gives a plain type.
    """
    logical_shape = _shape_tuple(shape)
    if mesh is None or not attrs:
        return make_tensor_type(logical_shape, dtype, storage)
    from tilefoundry.ir.types.shard.shard_layout import canonical_shard_layout

    layout = canonical_shard_layout(logical_shape, mesh, tuple(attrs))
    return make_tensor_type(logical_shape, dtype, storage, layout)
