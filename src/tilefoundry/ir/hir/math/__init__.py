"""HIR math ops (hir §1.3 ir/hir/math)."""
