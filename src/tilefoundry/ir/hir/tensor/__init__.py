"""HIR tensor ops (hir §1.3 ir/hir/tensor)."""
