"""Exits: where HIR leaves the compiler (StableHLO text, XLA execution, IREE)."""
