"""StableHLO text building blocks that op modules use in their lowering rules.

They live below `ir` so that an op module (which owns its StableHLO and SPMD lowering rules,
DESIGN §2) never imports from `exits`: the exits depend on the IR, not the other way round.
`mlir_text` spells types and literals, `builder.Lowering` accumulates one function body, and
`values.Value` is the operand handle op rules compose.
"""
