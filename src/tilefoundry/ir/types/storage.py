"""Storage kinds: where a value resides (abstract result residency, spec-facts types §2)."""

from __future__ import annotations

from enum import IntEnum

from tilefoundry.errors import VerifyError


class StorageKind(IntEnum):
    """spec-facts types §2: HOST=1 GMEM=2 SMEM=3 RMEM=4 TMEM=5 UMAT=6; `str()` is lowercase.

    UMAT means the residency is not decided yet (literals, shape elements); it must be resolved
    before codegen.
    """

    HOST = 1
    GMEM = 2
    SMEM = 3
    RMEM = 4
    TMEM = 5
    UMAT = 6

    def __str__(self) -> str:
        return self.name.lower()

    @classmethod
    def resolve(cls, value: object) -> StorageKind | None:
        """None and StorageKind pass through; exactly the lowercase names are accepted.

        Case-sensitive on purpose (spec-facts types §2 `resolve_storage`): one spelling per kind.
        """
        if value is None or isinstance(value, StorageKind):
            return value
        if isinstance(value, str) and value in _BY_LOWER_NAME:
            return _BY_LOWER_NAME[value]
        valid = ", ".join(_BY_LOWER_NAME)
        raise VerifyError(f"StorageKind: unknown storage {value!r}; valid storages are: {valid}")


_BY_LOWER_NAME = {str(kind): kind for kind in StorageKind}

# Addressability order used by Reshard: a value in a lower level is visible to fewer units.
_LEVELS = {StorageKind.RMEM: 0, StorageKind.SMEM: 1, StorageKind.GMEM: 2}


def storage_level(kind: StorageKind | str) -> int:
    """Rank of `kind` in the addressability order rmem < smem < gmem.

    The other kinds (host, tmem, umat) have no place in that order; asking for one is refused so
    that a Reshard between them fails closed instead of comparing meaningless numbers.
    """
    resolved = StorageKind.resolve(kind)
    if resolved not in _LEVELS:
        raise VerifyError(
            f"StorageKind: {resolved} has no addressability level; "
            "only rmem < smem < gmem are ordered"
        )
    return _LEVELS[resolved]
