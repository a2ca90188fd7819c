"""HIR sharding ops (hir §1.3 ir/hir/sharding)."""
