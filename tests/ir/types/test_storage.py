"""StorageKind: spec-facts types §2 (IntEnum values, lowercase str, resolve_storage)."""

from __future__ import annotations

import pytest

from tilefoundry.errors import VerifyError
from tilefoundry.ir.types import StorageKind, storage_level

KINDS = [
    (StorageKind.HOST, 1, "host"),
    (StorageKind.GMEM, 2, "gmem"),
    (StorageKind.SMEM, 3, "smem"),
    (StorageKind.RMEM, 4, "rmem"),
    (StorageKind.TMEM, 5, "tmem"),
    (StorageKind.UMAT, 6, "umat"),
]


@pytest.mark.parametrize(("kind", "value", "name"), KINDS)
def test_values_and_names(kind, value, name):
    assert int(kind) == value
    assert str(kind) == name
    assert StorageKind.resolve(name) is kind
    assert StorageKind.resolve(kind) is kind


def test_resolve_passes_none_through():
    assert StorageKind.resolve(None) is None


@pytest.mark.parametrize("bad", ["GMEM", "Gmem", "global", "", 2, 2.0, True, b"gmem"])
def test_resolve_refuses_other_spellings(bad):
    # spec-facts types §2: exactly host|gmem|smem|rmem|tmem|umat, case-sensitive.
    with pytest.raises(VerifyError, match="valid storages are: host, gmem, smem"):
        StorageKind.resolve(bad)


def test_addressability_order():
    assert storage_level("rmem") < storage_level("smem") < storage_level(StorageKind.GMEM)


@pytest.mark.parametrize("kind", ["host", "tmem", "umat"])
def test_unordered_kinds_refused(kind):
    with pytest.raises(VerifyError, match="no addressability level"):
        storage_level(kind)
