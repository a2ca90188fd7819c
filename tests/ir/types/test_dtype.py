"""DType descriptors: DESIGN §4.9 and spec-facts types §3."""

from __future__ import annotations

import copy
import pickle

import ml_dtypes
import numpy as np
import pytest

from tilefoundry.errors import VerifyError
from tilefoundry.ir import types as T
from tilefoundry.ir.types import DType

# spec-facts types §3 table, extended with DESIGN §4.9's union of both seeds.
# (attribute, name, bits, family, exponent bits, mantissa bits, numpy dtype)
DTYPES = [
    ("bool_", "bool", 1, "bool", None, None, np.bool_),
    ("i8", "i8", 8, "int", None, None, np.int8),
    ("i16", "i16", 16, "int", None, None, np.int16),
    ("i32", "i32", 32, "int", None, None, np.int32),
    ("i64", "i64", 64, "int", None, None, np.int64),
    ("u8", "u8", 8, "uint", None, None, np.uint8),
    ("u16", "u16", 16, "uint", None, None, np.uint16),
    ("u32", "u32", 32, "uint", None, None, np.uint32),
    ("u64", "u64", 64, "uint", None, None, np.uint64),
    ("f16", "f16", 16, "float", 5, 10, np.float16),
    ("bf16", "bf16", 16, "float", 8, 7, ml_dtypes.bfloat16),
    ("f32", "f32", 32, "float", 8, 23, np.float32),
    ("f64", "f64", 64, "float", 11, 52, np.float64),
    ("fp8e4m3", "fp8e4m3", 8, "float", 4, 3, ml_dtypes.float8_e4m3fn),
    ("f8e8m0", "f8e8m0", 8, "float", 8, 0, ml_dtypes.float8_e8m0fnu),
    ("f4e2m1", "f4e2m1", 4, "float", 2, 1, ml_dtypes.float4_e2m1fn),
]


@pytest.mark.parametrize(("attr", "name", "bits", "family", "e", "m", "np_dtype"), DTYPES)
def test_descriptor_fields(attr, name, bits, family, e, m, np_dtype):
    dt = getattr(T, attr)
    assert (dt.name, dt.bits, dt.family, dt.exponent_bits, dt.mantissa_bits) == (
        name,
        bits,
        family,
        e,
        m,
    )
    assert str(dt) == name
    assert (dt.is_float, dt.is_int, dt.is_bool) == (
        family == "float",
        family in ("int", "uint"),
        family == "bool",
    )
    assert dt.is_unsigned == (family == "uint")


@pytest.mark.parametrize(("attr", "name"), [(row[0], row[1]) for row in DTYPES])
def test_from_name_is_the_singleton(attr, name):
    # spec-facts types §3: from_name is the only string entry point; singletons per name.
    assert DType.from_name(name) is getattr(T, attr)


@pytest.mark.parametrize(("attr", "np_dtype"), [(row[0], row[6]) for row in DTYPES])
def test_numpy_round_trip(attr, np_dtype):
    dt = getattr(T, attr)
    assert dt.to_numpy() == np.dtype(np_dtype)
    assert DType.from_numpy(np_dtype) is dt
    assert DType.from_numpy(dt.to_numpy()) is dt


@pytest.mark.parametrize("attr", [row[0] for row in DTYPES])
def test_identity_survives_copy_and_pickle(attr):
    dt = getattr(T, attr)
    assert copy.copy(dt) is dt
    assert copy.deepcopy({"d": dt})["d"] is dt
    assert pickle.loads(pickle.dumps(dt)) is dt


@pytest.mark.parametrize("bad", ["float32", "F32", "fp8e5m2", "bool_", "", 3, None])
def test_unknown_name_lists_valid_names(bad):
    with pytest.raises(VerifyError, match="valid names are: bool, i8") as info:
        DType.from_name(bad)
    assert "f4e2m1" in str(info.value)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (np.complex64, "DType: numpy dtype complex64 has no tilefoundry DType"),
        ("not-a-dtype-xyz", "DType: 'not-a-dtype-xyz' is not a numpy dtype"),
        (object(), "DType: <object object at .*> is not a numpy dtype"),
    ],
)
def test_from_numpy_refuses_unmapped(bad, message):
    with pytest.raises(VerifyError, match=message):
        DType.from_numpy(bad)


def test_descriptors_cannot_be_built_or_mutated():
    with pytest.raises(VerifyError, match="singletons"):
        DType("f32", 32, "float")
    with pytest.raises(AttributeError, match="immutable"):
        T.f32.bits = 16


def test_no_enum_surface():
    # spec-facts types §3: no registration, iteration, `.value` or `__members__`.
    assert not hasattr(DType, "__members__")
    assert not hasattr(T.f32, "value")
    with pytest.raises(TypeError):
        iter(DType)
