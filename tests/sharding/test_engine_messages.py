"""DESIGN §7: "Error messages name the op, the operand, the mesh axis and the fix." A refusal of
the shared shard propagation engine (semantic-analysis §3.2), met through an op, names each
operand by the op's ParamDef name and each domain dim by the operand axes that read it, not by
position ("input 1", "domain dim 0")."""

from __future__ import annotations

import re

import pytest

from tilefoundry.analysis import typeinfer_call
from tilefoundry.errors import VerifyError
from tilefoundry.ir.hir.math import Binary, BinaryKind
from tilefoundry.ir.hir.nn import MatMul
from tilefoundry.ir.types import f32, make_shard_tensor_type, make_tensor_type
from tilefoundry.ir.types.shard import Broadcast, Layout, ShardLayout, Split, make_mesh

X = make_mesh((4,), ("x",))
XY = make_mesh((2, 4), ("x", "y"))
ADD = Binary(kind=BinaryKind.ADD)


def sharded(shape, mesh, *attrs):
    return make_shard_tensor_type(shape, f32, mesh=mesh, attrs=attrs)


CASES = [
    (
        "rule 6: one mesh axis partitions two dims",
        ADD,
        (sharded((16, 8), X, Split(0)), sharded((16, 8), X, Split(1))),
        "Binary: shard propagation (semantic-analysis §3.2 rule 6): mesh axis 0 ('x') splits "
        "lhs axis 0 = rhs axis 0 on operand 'lhs' but lhs axis 1 = rhs axis 1 on operand 'rhs'; "
        "one mesh axis cannot partition two dims; insert reshard(rhs, Broadcast) to replicate "
        "operand 'rhs' along mesh axis 0 ('x') first",
    ),
    (
        "rule 6: a contraction dim and an output dim on one mesh axis",
        MatMul(),
        (sharded((16, 32), X, Split(1)), sharded((32, 8), X, Split(1))),
        "MatMul: shard propagation (semantic-analysis §3.2 rule 6): mesh axis 0 ('x') splits "
        "lhs axis 1 = rhs axis 0 on operand 'lhs' but rhs axis 1 on operand 'rhs'",
    ),
    (
        "rule 6: one dim split by different factors",
        ADD,
        (
            sharded((16, 8), X, Split(0)),
            make_tensor_type((16, 8), f32, layout=ShardLayout(Layout((4, 4, 8)), (Split(1),), X)),
        ),
        "Binary: shard propagation (semantic-analysis §3.2 rule 6): operands 'lhs' and 'rhs' "
        "shard lhs axis 0 = rhs axis 0 incompatibly (factor 0 of (4, 4) on mesh axis 0 ('x') vs "
        "factor 1 of (4, 4) on mesh axis 0 ('x')); insert reshard on operand 'rhs' so both "
        "split that dim the same way",
    ),
    (
        "mesh: real sharding on two meshes",
        MatMul(),
        (sharded((16, 32), X, Split(0)), sharded((32, 8), XY, Split(1), Broadcast())),
        "MatMul: shard propagation (semantic-analysis §3.2 mesh): operand 'rhs' is sharded on "
        "Mesh(device[8]: x=2, y=4) but operand 'lhs' on Mesh(device[4]: x=4); inputs with real "
        "sharding must share one mesh; insert reshard on operand 'rhs' onto the common mesh",
    ),
]


@pytest.mark.parametrize(("what", "op", "arg_types", "message"), CASES, ids=[c[0] for c in CASES])
def test_a_propagation_refusal_names_the_operands_and_their_axes(what, op, arg_types, message):
    with pytest.raises(VerifyError, match=f"^{re.escape(message)}"):
        typeinfer_call(op, *arg_types)
