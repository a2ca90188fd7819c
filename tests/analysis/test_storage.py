"""Output-storage anchoring (semantic-analysis §3.3)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tilefoundry.analysis.storage import anchor_storage
from tilefoundry.errors import VerifyError
from tilefoundry.ir.types.storage import StorageKind

U, G, S, R = StorageKind.UMAT, StorageKind.GMEM, StorageKind.SMEM, StorageKind.RMEM


@pytest.mark.parametrize(
    ("storages", "expected"),
    [
        pytest.param((U, G), G, id="umat abstains"),
        pytest.param((S,), S, id="one concrete operand anchors"),
        pytest.param((R, R, U), R, id="agreeing operands anchor"),
        pytest.param((U, U), U, id="all umat stays umat"),
        pytest.param(("umat", "smem"), S, id="names resolve"),
    ],
)
def test_anchor(storages, expected):
    assert anchor_storage("Binary", storages) is expected


def test_disagreeing_storages_fail_without_a_tie_break():
    with pytest.raises(VerifyError, match=r"^MatMul: .*\(gmem, smem\).*§3\.3.*reshard"):
        anchor_storage("MatMul", (S, U, G))


def test_op_resolution_sees_the_set_of_storages():
    seen = []

    def resolve(kinds):
        seen.append(kinds)
        return G

    assert anchor_storage("Concat", (S, G, S), resolve_mixed=resolve) is G
    assert seen == [frozenset({S, G})]


storage_lists = st.lists(st.sampled_from(list(StorageKind)), min_size=1, max_size=5)


@given(storage_lists, st.randoms(use_true_random=False))
def test_anchoring_is_independent_of_operand_order(storages, rng):
    shuffled = list(storages)
    rng.shuffle(shuffled)

    def outcome(order):
        try:
            return anchor_storage("Binary", order)
        except VerifyError as err:
            return str(err)

    assert outcome(storages) == outcome(shuffled)
