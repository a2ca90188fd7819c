"""Typeinfer throughput: 10,000 identical elementwise ops on the same shapes (issue "Semantic
analysis": must stay under a second; relations are cached per (op, shapes)).

Peer: JAX tracing the same chain of 10,000 adds into a jaxpr (its abstract evaluation), in the
same run. Run: `python benchmarks/typeinfer_elementwise.py [--ops N] [--sharded]`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _timing import best_of, report

import tilefoundry.ir.hir  # noqa: F401
from tilefoundry.analysis import TypeInferContext
from tilefoundry.ir.core import Call, Var
from tilefoundry.ir.hir.math.binary import Binary, BinaryKind
from tilefoundry.ir.types import f32, make_shard_tensor_type, make_tensor_type
from tilefoundry.ir.types.shard import Split, make_mesh


def chain(n: int, type_) -> Call:
    x, y = Var("x", type_), Var("y", type_)
    add = Binary(kind=BinaryKind.ADD)
    value = x
    for _ in range(n):
        value = Call(add, (value, y))
    return value


def ours(n: int, sharded: bool) -> float:
    if sharded:
        mesh = make_mesh((2, 4), ("x", "y"))
        type_ = make_shard_tensor_type((64, 128), f32, mesh=mesh, attrs=(Split(0), Split(1)))
    else:
        type_ = make_tensor_type((64, 128), f32)
    return best_of(lambda: TypeInferContext().infer(chain(n, type_)), repeats=3)


def peer(n: int) -> float:
    import jax
    import jax.numpy as jnp

    def trace() -> None:
        def f(x, y):  # a fresh function each time: JAX caches traces per function object
            for _ in range(n):
                x = jnp.add(x, y)
            return x

        jax.make_jaxpr(f)(spec, spec)

    spec = jax.ShapeDtypeStruct((64, 128), jnp.float32)
    return best_of(trace, repeats=3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=10_000)
    parser.add_argument("--sharded", action="store_true", help="also time a 2-D-mesh sharded chain")
    args = parser.parse_args()
    plain = ours(args.ops, sharded=False)
    jax_time = peer(args.ops)
    print(
        report(f"typeinfer {args.ops} elementwise ops (plain)", plain, jax_time, "jax make_jaxpr")
    )
    if args.sharded:
        sharded = ours(args.ops, sharded=True)
        print(
            report(
                f"typeinfer {args.ops} elementwise ops (2x4 mesh)",
                sharded,
                jax_time,
                "jax make_jaxpr",
            )
        )
    print(f"budget: under 1 s -> {'met' if plain < 1.0 else 'MISSED'}")


if __name__ == "__main__":
    main()
