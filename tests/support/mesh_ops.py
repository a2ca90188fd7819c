"""Test-only twins of the real ops whose mesh execution needs a SHARDED_EVAL rule.

Each twin subclasses the real op and re-registers the real typeinfer, access relation and kernel
(registries key on the exact class), then adds the SHARDED_EVAL rule its owner is asked to
register on the real class. The mesh tests therefore exercise the real sharding rules through
the evaluator's hook exactly as the real ops will, without registering into the real classes
(which would clash once the owners add theirs).
"""

from __future__ import annotations

from collections.abc import Callable

from tilefoundry.ir.hir.sharding.local import Local
from tilefoundry.ir.hir.sharding.reshard import Reshard
from tilefoundry.ir.hir.tensor.reduce import Reduce, ReduceKind
from tilefoundry.ir.hir.tensor.tuple_get_item import TupleGetItem
from tilefoundry.visitor_registry import (
    ACCESS_RELATION,
    EVAL,
    TYPEINFER,
    register_access_relation,
    register_eval,
    register_sharded_eval,
    register_typeinfer,
)


def _twin(real: type, name: str, sharded_rule: Callable) -> type:
    twin = type(name, (real,), {"__doc__": f"{real.__name__} with its SHARDED_EVAL rule."})
    register_typeinfer(twin)(TYPEINFER.lookup(real))
    if ACCESS_RELATION.has(real):
        register_access_relation(twin)(ACCESS_RELATION.lookup(real))
    register_eval(twin)(EVAL.lookup(real))
    register_sharded_eval(twin)(sharded_rule)
    return twin


REDUCE_COMBINER = {
    ReduceKind.SUM: "sum",
    ReduceKind.MEAN: "mean",
    ReduceKind.MAX: "max",
    ReduceKind.ABS_MAX: "max",
}

SimReshard = _twin(Reshard, "SimReshard", lambda op, args, call: call.redistribute(args[0]))
SimLocal = _twin(Local, "SimLocal", lambda op, args, call: call.local(args[0]))
SimReduce = _twin(
    Reduce,
    "SimReduce",
    lambda op, args, call: call.run_blocks(complete=REDUCE_COMBINER[op.kind]),
)
SimTupleGetItem = _twin(TupleGetItem, "SimTupleGetItem", lambda op, args, call: args[0][op.index])
