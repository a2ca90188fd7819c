"""HIR shape ops (hir §1.3 ir/hir/shape)."""
