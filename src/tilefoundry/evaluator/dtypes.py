"""The reference evaluator's dtype support table (DESIGN §4.9: one table per exit).

numpy carries every integer width, bool, f16/f32/f64, and ml_dtypes carries bf16 and the fp8
formats; the kernels compute narrow floats in f32 and round once. f4e2m1 has an ml_dtypes carrier
but no arithmetic the kernels can round to consistently, so the evaluator refuses it (the seed's
Cast entry names it as the example of an unsupported evaluation dtype) rather than produce values
no other exit would reproduce.
"""

from __future__ import annotations

import numpy as np

from tilefoundry.errors import UnsupportedError
from tilefoundry.ir.types import (
    DType,
    TensorType,
    TupleType,
    Type,
    bf16,
    bool_,
    f8e8m0,
    f16,
    f32,
    f64,
    fp8e4m3,
    i8,
    i16,
    i32,
    i64,
    u8,
    u16,
    u32,
    u64,
)

SUPPORTED_DTYPES: frozenset[DType] = frozenset(
    {bool_, i8, i16, i32, i64, u8, u16, u32, u64, f16, bf16, f32, f64, fp8e4m3, f8e8m0}
)


def numpy_dtype(dtype: DType) -> np.dtype:
    return np.dtype(dtype.to_numpy())


def check_dtype(dtype: DType, where: str) -> np.dtype:
    """The numpy carrier of `dtype`; UnsupportedError naming `where` when the evaluator has none."""
    if dtype not in SUPPORTED_DTYPES:
        names = ", ".join(sorted(d.name for d in SUPPORTED_DTYPES))
        raise UnsupportedError(
            f"{where}: dtype {dtype.name} is not supported by the reference evaluator "
            f"(supported: {names}); cast to a supported dtype before evaluating"
        )
    return numpy_dtype(dtype)


def check_type_dtypes(type_: Type, where: str) -> None:
    """Every tensor leaf of `type_` has a supported dtype."""
    if isinstance(type_, TensorType):
        check_dtype(type_.dtype, where)
    elif isinstance(type_, TupleType):
        for field in type_.fields:
            check_type_dtypes(field, where)
