"""The programs the benchmarks run, each written once as DSL source and once as array code.

Every program is a `Program`: its parameters, the body of a DSL function (source text, so a decoder
of any depth can be generated and then go through the full frontend path: Python compile, parse,
typeinfer), and `array_fn(xp, *arrays)`, written against the array API that numpy and jax.numpy
share. Passing `numpy` gives the hand-written numpy peer of the reference evaluator; passing
`jax.numpy` gives the JAX peer. One array-code definition for both peers means the two peers run
the same arithmetic, and the DSL body mirrors it op for op (softmax as max-subtract/exp/sum,
RMSNorm as x / sqrt(mean(x^2) + eps) * w, SiLU as x * sigmoid(x)), so all three sides compute the
same function, which each script checks with `allclose` before it times anything.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

EPS = 1e-5


@dataclass(frozen=True)
class Program:
    name: str
    params: tuple[tuple[str, tuple[int, ...]], ...]
    body: tuple[str, ...]
    array_fn: Callable[..., Any]

    def source(self) -> str:
        """A DSL module defining `entry`: what `tilefoundry.frontend.parse_source` takes."""
        signature = ", ".join(f'{name}: Tensor[{shape!r}, "f32"]' for name, shape in self.params)
        return "\n".join(
            [
                "from tilefoundry.dsl import tf",
                "from tilefoundry.frontend import Tensor, func",
                "",
                "",
                "@func",
                f"def entry({signature}):",
                *(f"    {line}" for line in self.body),
                "",
            ]
        )

    def arguments(self, seed: int = 0) -> list[np.ndarray]:
        """Float32 inputs scaled so a deep decoder neither overflows nor vanishes: matrices
        named w* are N(0, 1/fan_in), vectors (norm weights) are near 1, activations N(0, 1)."""
        rng = np.random.default_rng(seed)
        arrays = []
        for name, shape in self.params:
            sample = rng.standard_normal(shape)
            if len(shape) == 1:
                sample = 1.0 + 0.1 * sample
            elif name.startswith("w"):
                sample = sample / np.sqrt(shape[0])
            arrays.append(sample.astype(np.float32))
        return arrays


def _softmax(xp: Any, x: Any) -> Any:
    e = xp.exp(x - xp.max(x, axis=-1, keepdims=True))
    return e / xp.sum(e, axis=-1, keepdims=True)


def _rms_norm(xp: Any, x: Any, w: Any) -> Any:
    return x / xp.sqrt(xp.mean(x * x, axis=-1, keepdims=True) + EPS) * w


def _silu(xp: Any, x: Any) -> Any:
    return x * (1.0 / (1.0 + xp.exp(-x)))


@dataclass(frozen=True)
class DecoderDims:
    seq: int
    model: int
    heads: int
    ffn: int

    @property
    def head_dim(self) -> int:
        return self.model // self.heads


SMALL = DecoderDims(seq=16, model=32, heads=2, ffn=64)
"""Compile-scaling dims: small, so the cost measured is the compiler's, not the constants'."""
MEDIUM = DecoderDims(seq=128, model=256, heads=4, ffn=512)
"""Execution dims: large enough that the arithmetic, not the call overhead, dominates."""

LAYER_PARAMS = ("n1", "wq", "wk", "wv", "wo", "n2", "wg", "wu", "wd")


def decoder(layers: int, dims: DecoderDims = SMALL) -> Program:
    """A pre-norm transformer decoder of `layers` layers: RMSNorm, multi-head softmax attention
    (no mask), residual, RMSNorm, SiLU-gated MLP, residual. Every layer has its own weights."""
    s, d, h, hd, f = dims.seq, dims.model, dims.heads, dims.head_dim, dims.ffn
    shapes = {
        "n1": (d,),
        "wq": (d, d),
        "wk": (d, d),
        "wv": (d, d),
        "wo": (d, d),
        "n2": (d,),
        "wg": (d, f),
        "wu": (d, f),
        "wd": (f, d),
    }
    params = [("x", (s, d))]
    body = ["h = x"]
    scale = float(1.0 / np.sqrt(hd))
    for i in range(layers):
        params += [(f"{p}{i}", shapes[p]) for p in LAYER_PARAMS]
        body += [
            f"a = tf.rms_norm(h, n1{i}, eps={EPS})",
            f"q = tf.transpose(tf.reshape(a @ wq{i}, ({s}, {h}, {hd})), (1, 0, 2))",
            f"k = tf.transpose(tf.reshape(a @ wk{i}, ({s}, {h}, {hd})), (1, 2, 0))",
            f"v = tf.transpose(tf.reshape(a @ wv{i}, ({s}, {h}, {hd})), (1, 0, 2))",
            f"p = tf.softmax(q @ k * {scale}, axis=-1)",
            f"o = tf.reshape(tf.transpose(p @ v, (1, 0, 2)), ({s}, {d}))",
            f"h = h + o @ wo{i}",
            f"m = tf.rms_norm(h, n2{i}, eps={EPS})",
            f"h = h + (tf.silu(m @ wg{i}) * (m @ wu{i})) @ wd{i}",
        ]
    body.append("return h")

    def array_fn(xp: Any, x: Any, *weights: Any) -> Any:
        h_ = x
        for i in range(layers):
            n1, wq, wk, wv, wo, n2, wg, wu, wd = weights[9 * i : 9 * i + 9]
            a = _rms_norm(xp, h_, n1)
            q = xp.transpose(xp.reshape(a @ wq, (s, h, hd)), (1, 0, 2))
            k = xp.transpose(xp.reshape(a @ wk, (s, h, hd)), (1, 2, 0))
            v = xp.transpose(xp.reshape(a @ wv, (s, h, hd)), (1, 0, 2))
            p = _softmax(xp, q @ k * np.float32(scale))
            o = xp.reshape(xp.transpose(p @ v, (1, 0, 2)), (s, d))
            h_ = h_ + o @ wo
            m = _rms_norm(xp, h_, n2)
            h_ = h_ + (_silu(xp, m @ wg) * (m @ wu)) @ wd
        return h_

    return Program(f"decoder_L{layers}_d{d}", tuple(params), tuple(body), array_fn)


def exp_chain(ops: int, n: int = 8) -> Program:
    """`h = exp(h) * y + x`, repeated to about `ops` HIR ops (three per line) in one elementwise
    fusion region: the compile-scaling case whose region grows with the program (issue 28), where
    the decoder's regions stay small however deep it is. Only compiled, never run: its values
    overflow long before 10,000 ops."""
    repeats = max(ops // 3, 1)

    def array_fn(xp: Any, x: Any, y: Any) -> Any:
        h_ = x
        for _ in range(repeats):
            h_ = xp.exp(h_) * y + x
        return h_

    return Program(
        f"exp_chain_{3 * repeats}",
        (("x", (n, n)), ("y", (n, n))),
        ("h = x", *("h = tf.exp(h) * y + x" for _ in range(repeats)), "return h"),
        array_fn,
    )


def four_arguments(n: int) -> Program:
    """A small program with four parameters: at 16x16 what a call costs is the call itself."""
    return Program(
        "four_arguments",
        (("a", (n, n)), ("b", (n, n)), ("c", (n, n)), ("d", (n, n))),
        ("return (a + b) * c - d",),
        lambda xp, a, b, c, d: (a + b) * c - d,
    )


def elementwise_chain(n: int) -> Program:
    return Program(
        "elementwise_chain",
        (("x", (n, n)), ("y", (n, n))),
        ("return tf.exp(x * y + y) - x",),
        lambda xp, x, y: xp.exp(x * y + y) - x,
    )


def softmax_rows(n: int) -> Program:
    return Program(
        "softmax",
        (("x", (n, n)),),
        ("return tf.softmax(x, axis=-1)",),
        _softmax,
    )


def rms_norm(rows: int, width: int) -> Program:
    return Program(
        "rms_norm",
        (("x", (rows, width)), ("g", (width,))),
        (f"return tf.rms_norm(x, g, eps={EPS})",),
        _rms_norm,
    )


def attention(heads: int, seq: int, head_dim: int) -> Program:
    scale = float(1.0 / np.sqrt(head_dim))
    shape = (heads, seq, head_dim)
    return Program(
        "attention",
        (("q", shape), ("k", shape), ("v", shape)),
        (f"return tf.softmax(q @ tf.transpose(k, (0, 2, 1)) * {scale}, axis=-1) @ v",),
        lambda xp, q, k, v: _softmax(xp, q @ xp.transpose(k, (0, 2, 1)) * np.float32(scale)) @ v,
    )


def swiglu_mlp(rows: int, width: int, hidden: int) -> Program:
    return Program(
        "swiglu_mlp",
        (("x", (rows, width)), ("wg", (width, hidden)), ("wu", (width, hidden))),
        ("return tf.silu(x @ wg) * (x @ wu)",),
        lambda xp, x, wg, wu: _silu(xp, x @ wg) * (x @ wu),
    )


def example_programs(quick: bool) -> list[Program]:
    """The components of the decoder on their own, then whole decoders."""
    if quick:
        return [elementwise_chain(16), attention(2, 8, 8), decoder(1)]
    return [
        elementwise_chain(512),
        softmax_rows(512),
        rms_norm(512, 512),
        attention(4, 128, 64),
        swiglu_mlp(128, 256, 512),
        decoder(1, MEDIUM),
        decoder(4, MEDIUM),
    ]


def parse_program(program: Program, filename: str | None = None) -> Any:
    """The typed hir Function of `program`, through the DSL's full source path."""
    from tilefoundry.frontend import parse_source

    return parse_source(program.source(), filename or f"<{program.name}>")["entry"]


def allclose(ours: Any, peer: Any, rtol: float = 2e-4) -> tuple[bool, float]:
    """Whether two float32 results agree, and the largest difference relative to the peer's
    magnitude (reassociation by XLA and libm differences make bit equality the wrong test)."""
    ours, peer = np.asarray(ours, np.float64), np.asarray(peer, np.float64)
    scale = max(float(np.max(np.abs(peer))), 1.0)
    error = float(np.max(np.abs(ours - peer))) / scale
    return ours.shape == peer.shape and error <= rtol, error
