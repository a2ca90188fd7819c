"""`Tensor[shape, "dtype"(, layout)(, storage)]` and `ConstTensor[...]` (parser §1.4).

Subscripting only records the (normalised, hashable) items: the TensorType is built by the
frontend, which knows the annotation's source line and can report a bad dtype or an indivisible
`12 @ m.y` there. `TensorSpec.to_type()` is the same construction without a location, for code
that wants the type of an annotation directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tilefoundry.caches import Memo
from tilefoundry.errors import VerifyError
from tilefoundry.ir.types import DType, StorageKind, TensorType, is_shape_dim, normalize_dim
from tilefoundry.ir.types.shard import LayoutBase
from tilefoundry.ir.types.shard.int_tuple import product
from tilefoundry.ir.types.shard.sugar import (
    AbstractSet,
    SplitSugar,
    layout_from_sugar,
    materialize_strides,
)
from tilefoundry.sharding.shard_regroup import logical_groups


def _freeze(value: Any) -> Any:
    """Sets and lists in an annotation become frozensets and tuples, so the spec is hashable."""
    if isinstance(value, AbstractSet):
        return frozenset(_freeze(v) for v in value)
    if isinstance(value, tuple | list):
        return tuple(_freeze(v) for v in value)
    return value


@dataclass(frozen=True)
class TensorSpec:
    """What `Tensor[...]` wrote: the raw slots, and whether the parameter is a constant."""

    items: tuple[Any, ...]
    const: bool = False

    def to_type(self) -> TensorType:
        """The signature type: sugar strides are materialised to C-order (hir §1.1)."""
        kind = "ConstTensor" if self.const else "Tensor"
        try:
            return _build(self.items)
        except VerifyError as err:
            raise VerifyError(f"{kind}[...]: {err.message}") from None


class _TensorFactory:
    """`Tensor` / `ConstTensor`: subscripting yields a TensorSpec."""

    def __init__(self, const: bool):
        self._const = const

    def __getitem__(self, items: Any) -> TensorSpec:
        items = items if isinstance(items, tuple) else (items,)
        return TensorSpec(_freeze(items), self._const)

    def __repr__(self) -> str:
        return "ConstTensor" if self._const else "Tensor"


Tensor = _TensorFactory(const=False)
ConstTensor = _TensorFactory(const=True)


def _dtype(value: Any) -> DType:
    if isinstance(value, DType):
        return value
    if isinstance(value, str):
        return DType.from_name(value)
    raise VerifyError(f'the dtype slot must be a dtype name such as "f32", got {value!r}')


def _storage(value: Any) -> StorageKind:
    storage = StorageKind.resolve(value)
    if storage is None:
        raise VerifyError(f'the storage slot must be a storage name such as "rmem", got {value!r}')
    return storage


def _is_storage(value: Any) -> bool:
    return isinstance(value, str | StorageKind)


def _shape_slot(value: Any) -> tuple:
    if isinstance(value, tuple):
        return value
    if is_shape_dim(value) or isinstance(value, SplitSugar):
        return (value,)
    if isinstance(value, str):
        raise VerifyError(
            f"the first slot is the shape, got {value!r}; a rank-0 tensor is written "
            f"Tensor[(), {value!r}]"
        )
    raise VerifyError(f"the shape slot must be a tuple of extents, got {value!r}")


_PLAIN = Memo("annotations: plain Tensor[...] types", 4096)
"""`Tensor[(ints...), "dtype"]` -> its type: the common annotation, built once per spelling."""


def _build(items: tuple) -> TensorType:
    plain = (
        len(items) == 2
        and type(items[0]) is tuple
        and type(items[1]) is str
        and all(type(d) is int for d in items[0])
    )
    if not plain:
        return _build_type(items)
    built = _PLAIN.get(items)
    if built is None:
        built = _PLAIN.put(items, _build_type(items))
    return built


def _build_type(items: tuple) -> TensorType:
    if len(items) < 2 or len(items) > 4:
        raise VerifyError(
            f'expected Tensor[shape, "dtype"(, layout)(, storage)], got {len(items)} slot(s)'
        )
    shape, layout = layout_from_sugar(_shape_slot(items[0]))
    dtype = _dtype(items[1])
    rest = list(items[2:])
    storage = StorageKind.GMEM
    if rest and not _is_storage(rest[0]):
        if layout is not None:
            raise VerifyError(
                "the shape slot already carries layout sugar, so the third slot is the storage; "
                f"got {rest[0]!r}"
            )
        layout = _layout_slot(rest.pop(0), shape)
    if rest:
        storage = _storage(rest.pop(0))
    if rest:
        raise VerifyError(f"unexpected slot {rest[0]!r} after the storage")
    return TensorType(shape, dtype, materialize_strides(layout), storage)


def _layout_slot(value: Any, shape: tuple) -> LayoutBase:
    if isinstance(value, LayoutBase):
        return value
    if isinstance(value, tuple):
        # shard §7.1.1: rank(G) MAY differ from rank(T.shape); only size(G) == size(T.shape)
        # must hold (the §7.5 example spells (2, 12, 128) for a (2, 1536) tensor).
        written, layout = layout_from_sugar(value)
        if normalize_dim(product(written)) != normalize_dim(product(shape)):
            raise VerifyError(
                f"the layout slot spells logical shape {written} of size {product(written)}, "
                f"but the shape slot {shape} has size {product(shape)}; a layout covers the "
                "tensor's elements exactly (shard §7.1.1: size(G) == size(T.shape))"
            )
        if None in logical_groups(tuple(shape), tuple(written)):
            raise VerifyError(
                f"the layout slot spells logical shape {written}, which does not factor the "
                f"shape slot {shape} axis by axis, so no op could read its splits (canonical "
                "regroup, semantic-analysis §3.1); write each axis of the shape as consecutive "
                "extents whose product is that axis"
            )
        return layout
    raise VerifyError(f"the layout slot must be a Layout, ShardLayout or sugar, got {value!r}")
