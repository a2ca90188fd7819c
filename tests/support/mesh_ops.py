"""A test-only twin of Reduce with no SHARDED_EVAL rule: the evaluator must fail closed on a
complete-effect reduction whose op names no combiner (it may not guess one)."""

from __future__ import annotations

from tilefoundry.ir.hir.tensor.reduce import Reduce
from tilefoundry.rules import (
    ACCESS_RELATION,
    EVAL,
    TYPEINFER,
    register_access_relation,
    register_eval,
    register_typeinfer,
)


class ReduceWithoutCombiner(Reduce):
    """Reduce's typeinfer, relation and kernel, but no per-device completion rule."""


register_typeinfer(ReduceWithoutCombiner)(TYPEINFER.lookup(Reduce))
register_access_relation(ReduceWithoutCombiner)(ACCESS_RELATION.lookup(Reduce))
register_eval(ReduceWithoutCombiner)(EVAL.lookup(Reduce))
