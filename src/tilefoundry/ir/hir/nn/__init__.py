"""HIR nn ops (hir §1.3 ir/hir/nn)."""
