"""HIR shape ops (hir §1.3 ir/hir/shape)."""

from tilefoundry.ir.hir.shape.shape_ops import ShapeCompose, ShapeExtract

__all__ = [
    "ShapeCompose",
    "ShapeExtract",
]
