"""HIR tensor ops (hir §1.3 ir/hir/tensor)."""

from tilefoundry.ir.hir.tensor.blocked_window import BlockedDynamicSlice, BlockedDynamicUpdateSlice
from tilefoundry.ir.hir.tensor.broadcast_to import BroadcastTo
from tilefoundry.ir.hir.tensor.cache_update import CacheUpdate
from tilefoundry.ir.hir.tensor.cast import Cast
from tilefoundry.ir.hir.tensor.concat import Concat, Stack
from tilefoundry.ir.hir.tensor.cumulative import Cumulative, CumulativeKind
from tilefoundry.ir.hir.tensor.dynamic_slice import DynamicSlice
from tilefoundry.ir.hir.tensor.dynamic_update_slice import DynamicUpdateSlice
from tilefoundry.ir.hir.tensor.gather import Gather
from tilefoundry.ir.hir.tensor.insert_slice import InsertSlice
from tilefoundry.ir.hir.tensor.iota import Iota
from tilefoundry.ir.hir.tensor.optimization_barrier import OptimizationBarrier
from tilefoundry.ir.hir.tensor.pad import Pad
from tilefoundry.ir.hir.tensor.reduce import Reduce, ReduceKind
from tilefoundry.ir.hir.tensor.reshape import Reshape
from tilefoundry.ir.hir.tensor.reverse import Reverse
from tilefoundry.ir.hir.tensor.scatter_add import ScatterAdd
from tilefoundry.ir.hir.tensor.shape_of import Rank, ShapeOf
from tilefoundry.ir.hir.tensor.slice import Slice
from tilefoundry.ir.hir.tensor.topk import TopK
from tilefoundry.ir.hir.tensor.transpose import Transpose
from tilefoundry.ir.hir.tensor.tuple_get_item import TupleGetItem
from tilefoundry.ir.hir.tensor.where import Where
from tilefoundry.ir.hir.tensor.zeros import Zeros

__all__ = [
    "BlockedDynamicSlice",
    "BlockedDynamicUpdateSlice",
    "BroadcastTo",
    "CacheUpdate",
    "Cast",
    "Concat",
    "Cumulative",
    "CumulativeKind",
    "DynamicSlice",
    "DynamicUpdateSlice",
    "Gather",
    "InsertSlice",
    "Iota",
    "OptimizationBarrier",
    "Pad",
    "Rank",
    "Reduce",
    "ReduceKind",
    "Reshape",
    "Reverse",
    "ScatterAdd",
    "ShapeOf",
    "Slice",
    "Stack",
    "TopK",
    "Transpose",
    "TupleGetItem",
    "Where",
    "Zeros",
]
