"""The process-wide op typeinfer memo (analysis/typeinfer.py): results of a pure op rule
are reused per (op, operand types); errors are not, so each is located at its own call site."""

from __future__ import annotations

import pytest

from tilefoundry.analysis import TypeInferContext
from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import Call, SourceSpan, Var
from tilefoundry.ir.hir.nn import MatMul
from tilefoundry.ir.types import TensorType, f32


def test_same_error_is_located_at_each_call_site():
    """Common rules: a refusal carries the source location of the call; a memo must not hand
    the first site's location to the second."""
    a, b = Var("a", TensorType((2, 3), f32)), Var("b", TensorType((4, 5), f32))
    for line in (11, 29):
        call = Call(MatMul(), (a, b), metadata=(SourceSpan("m.py", line, 1),))
        with pytest.raises(VerifyError) as err:
            TypeInferContext().infer(call)
        assert f"m.py:{line}:1" in str(err.value)


def test_memoised_result_matches_the_shapes():
    """Two call sites with equal operand types get the type the rule gives (4x5 = (2x4)@(4x5)),
    whichever of them is typed first."""
    a, b = Var("a", TensorType((2, 4), f32)), Var("b", TensorType((4, 5), f32))
    first = TypeInferContext().infer(Call(MatMul(), (a, b)))
    second = TypeInferContext().infer(Call(MatMul(), (Var("c", a.type), Var("d", b.type))))
    assert first == second == TensorType((2, 5), f32)
