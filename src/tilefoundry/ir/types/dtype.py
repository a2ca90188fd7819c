"""Element types: immutable, process-wide singleton descriptors.

DESIGN §4.9 / spec-facts types §3: a DType is a descriptor (not an Enum): no registration, no
iteration, no `.value`. Each descriptor is a singleton whose `name` is its attribute name (except
`bool_`, spelled `"bool"`), so identity comparison is enough everywhere, and copy/pickle hand back
the same object. `DType.from_name` is the one string entry point, so a typo can never silently
become a new dtype.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from tilefoundry.errors import VerifyError

FLOAT = "float"
INT = "int"
UINT = "uint"
BOOL = "bool"

_BY_NAME: dict[str, DType] = {}


class DType:
    """One element type. Build none yourself: use the module singletons or `DType.from_name`.

    `exponent_bits`/`mantissa_bits` are set for floats only (None otherwise) because the
    low-precision formats differ exactly there (bf16 vs f16, e8m0 has no mantissa).
    """

    __slots__ = ("bits", "exponent_bits", "family", "mantissa_bits", "name")

    name: str
    bits: int
    family: str
    exponent_bits: int | None
    mantissa_bits: int | None

    def __init__(self, *args: Any, **kwargs: Any):
        raise VerifyError(
            "DType: descriptors are singletons and cannot be constructed; "
            "use e.g. tilefoundry.ir.types.f32 or DType.from_name('f32')"
        )

    @classmethod
    def _define(
        cls,
        name: str,
        bits: int,
        family: str,
        exponent_bits: int | None = None,
        mantissa_bits: int | None = None,
    ) -> DType:
        self = object.__new__(cls)
        for field, value in (
            ("name", name),
            ("bits", bits),
            ("family", family),
            ("exponent_bits", exponent_bits),
            ("mantissa_bits", mantissa_bits),
        ):
            object.__setattr__(self, field, value)
        _BY_NAME[name] = self
        return self

    def __setattr__(self, key: str, value: object) -> None:
        raise AttributeError(f"DType {self.name} is immutable")

    # Singletons: identity is equality, and copies/pickles must return the same object.
    def __copy__(self) -> DType:
        return self

    def __deepcopy__(self, memo: dict) -> DType:
        return self

    def __reduce__(self) -> tuple:
        return (DType.from_name, (self.name,))

    def __repr__(self) -> str:
        return self.name

    __str__ = __repr__

    @property
    def is_float(self) -> bool:
        return self.family == FLOAT

    @property
    def is_int(self) -> bool:
        """Signed or unsigned integer (bool is not an integer here)."""
        return self.family in (INT, UINT)

    @property
    def is_signed(self) -> bool:
        """Signed integer or float: the types whose values can be negative."""
        return self.family in (INT, FLOAT)

    @property
    def is_unsigned(self) -> bool:
        return self.family == UINT

    @property
    def is_bool(self) -> bool:
        return self.family == BOOL

    @property
    def itemsize_bits(self) -> int:
        """Storage bits of one element (bool is stored as one byte, as numpy does)."""
        return 8 if self.is_bool else self.bits

    @staticmethod
    def from_name(name: str) -> DType:
        """The descriptor called `name`; the only place a string becomes a DType."""
        if isinstance(name, str) and name in _BY_NAME:
            return _BY_NAME[name]
        valid = ", ".join(_BY_NAME)
        raise VerifyError(f"DType: unknown dtype name {name!r}; valid names are: {valid}")

    def to_numpy(self) -> np.dtype:
        """The numpy dtype that carries values of this type (ml_dtypes for the narrow floats)."""
        return _TO_NUMPY[self.name]

    @staticmethod
    def from_numpy(np_dtype: Any) -> DType:
        """The DType of a numpy dtype (or anything `np.dtype()` accepts, e.g. `np.float32`)."""
        try:
            key = np.dtype(np_dtype)
        except TypeError as err:
            raise VerifyError(f"DType: {np_dtype!r} is not a numpy dtype") from err
        for name, candidate in _TO_NUMPY.items():
            if candidate == key:
                return _BY_NAME[name]
        raise VerifyError(f"DType: numpy dtype {key} has no tilefoundry DType")


bool_ = DType._define("bool", 1, BOOL)
i8 = DType._define("i8", 8, INT)
i16 = DType._define("i16", 16, INT)
i32 = DType._define("i32", 32, INT)
i64 = DType._define("i64", 64, INT)
u8 = DType._define("u8", 8, UINT)
u16 = DType._define("u16", 16, UINT)
u32 = DType._define("u32", 32, UINT)
u64 = DType._define("u64", 64, UINT)
f16 = DType._define("f16", 16, FLOAT, 5, 10)
bf16 = DType._define("bf16", 16, FLOAT, 8, 7)
f32 = DType._define("f32", 32, FLOAT, 8, 23)
f64 = DType._define("f64", 64, FLOAT, 11, 52)
fp8e4m3 = DType._define("fp8e4m3", 8, FLOAT, 4, 3)
f8e8m0 = DType._define("f8e8m0", 8, FLOAT, 8, 0)
f4e2m1 = DType._define("f4e2m1", 4, FLOAT, 2, 1)

_TO_NUMPY: dict[str, np.dtype] = {
    "bool": np.dtype(np.bool_),
    "i8": np.dtype(np.int8),
    "i16": np.dtype(np.int16),
    "i32": np.dtype(np.int32),
    "i64": np.dtype(np.int64),
    "u8": np.dtype(np.uint8),
    "u16": np.dtype(np.uint16),
    "u32": np.dtype(np.uint32),
    "u64": np.dtype(np.uint64),
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
    "fp8e4m3": np.dtype(ml_dtypes.float8_e4m3fn),
    "f8e8m0": np.dtype(ml_dtypes.float8_e8m0fnu),
    "f4e2m1": np.dtype(ml_dtypes.float4_e2m1fn),
}
