"""The runtimes: where emitted modules run. XLA on one device (`xla`, called through `jax.jit`:
`xla_jit`) and on N devices (`xla_spmd`), IREE (`iree`), and P processes or hosts
(`distributed`).

Each takes the text the emitters (`tilefoundry.exits.stablehlo`) write and never the reverse: an
emitter is pure text generation and imports no runtime.
"""
