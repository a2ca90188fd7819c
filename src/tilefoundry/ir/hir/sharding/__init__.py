"""HIR sharding ops (hir §1.3 ir/hir/sharding)."""

from tilefoundry.ir.hir.sharding.local import Local
from tilefoundry.ir.hir.sharding.reshard import Reshard

__all__ = [
    "Local",
    "Reshard",
]
