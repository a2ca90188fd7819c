"""Output-storage anchoring for symmetric multi-input ops (semantic-analysis §3.3).

The output lives where its concrete operands live. An unmaterialised operand (umat, e.g. a literal
or host shape metadata) has no residency yet and abstains. There is deliberately no memory-level
lattice and no operand-order tie-break: `a + b` and `b + a` must type the same, so a disagreement
is an error unless the op itself defines how mixed storages resolve.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from tilefoundry.errors import VerifyError
from tilefoundry.ir.types.storage import StorageKind

__all__ = ["anchor_storage"]

MixedStorageResolution = Callable[[frozenset[StorageKind]], StorageKind]


def anchor_storage(
    op_name: str,
    storages: Iterable[StorageKind | str],
    *,
    resolve_mixed: MixedStorageResolution | None = None,
) -> StorageKind:
    """The output storage anchored on the concrete operand storages (order-independent).

    `resolve_mixed`, when an op defines its own destination/mixed-storage rule, receives the *set*
    of disagreeing concrete storages (never their order) and returns the output storage.
    """
    kinds = []
    for storage in storages:
        kind = StorageKind.resolve(storage)
        if kind is None:
            raise VerifyError(f"{op_name}: an operand has no storage; every operand needs one")
        kinds.append(kind)
    concrete = frozenset(k for k in kinds if k != StorageKind.UMAT)
    if not concrete:
        return StorageKind.UMAT
    if len(concrete) == 1:
        return next(iter(concrete))
    if resolve_mixed is not None:
        return resolve_mixed(concrete)
    found = ", ".join(sorted(str(k) for k in concrete))
    raise VerifyError(
        f"{op_name}: operands live in different storages ({found}) and the op defines no mixed-"
        "storage resolution (semantic-analysis §3.3: no operand-order tie-break); insert "
        "reshard(x, layout=..., storage=...) so the operands agree"
    )
