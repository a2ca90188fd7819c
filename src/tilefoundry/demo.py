"""The main job: a short, computed tour of what the compiler knows.

Every figure printed here is computed by the library at run time; nothing is pasted in. The tour
grows as the compiler does: today it covers the CuTe layout algebra, meshes, the seed's sharded
layout example (shard-layout §7.5) and a refused sharding.
"""

from __future__ import annotations

from typing import TextIO

from tilefoundry.errors import VerifyError
from tilefoundry.inspect import format_type
from tilefoundry.ir.types import f32, make_shard_tensor_type
from tilefoundry.ir.types.shard import (
    Layout,
    Partial,
    ShardLayout,
    Split,
    factor_sugar,
    make_mesh,
    per_instance_strides,
    shard_layout_local_shape,
    shared_strides,
)
from tilefoundry.ir.types.shard.layout import complement, composition, logical_divide


def _section(out: TextIO, title: str) -> None:
    out.write(f"\n== {title}\n")


def _layout_algebra(out: TextIO) -> None:
    _section(out, "CuTe layout algebra")
    a, b = Layout((6, 2), (8, 2)), Layout((4, 3), (3, 1))
    out.write(f"composition({a}, {b}) = {composition(a, b)}\n")
    out.write(f"complement({Layout(4, 2)}, 24) = {complement(Layout(4, 2), 24)}\n")
    tile = Layout(4, 2)
    out.write(f"logical_divide({Layout(24, 1)}, {tile}) = {logical_divide(Layout(24, 1), tile)}\n")


def _seed_example(out: TextIO) -> None:
    _section(out, "shard-layout §7.5: a (2, 1536) tensor as (2 @ x, 12 @ y, 128 @ t)")
    mesh = make_mesh((2, 4, 32), ("x", "y", "t"))
    positions = [
        *factor_sugar(2, mesh.x),
        *factor_sugar(12, mesh.y),
        *factor_sugar(128, mesh.t),
    ]
    shape = tuple(extent for extent, _ in positions)
    split_at = {axis.index: k for k, (_, axis) in enumerate(positions) if axis is not None}
    attrs = tuple(Split(split_at[a]) for a in range(mesh.rank))
    layout = ShardLayout(Layout(shape), attrs, mesh)
    out.write(f"mesh                 {mesh!r}\n")
    out.write(f"canonical layout     {Layout(shape)}  attrs {attrs}\n")
    out.write(f"local shape          {shard_layout_local_shape(layout)}\n")
    out.write(f"per-instance strides {per_instance_strides(layout)}  (gmem -> rmem)\n")
    out.write(f"shared strides       {shared_strides(layout)}  (rmem -> gmem)\n")


def _typed_values(out: TextIO) -> None:
    _section(out, "sharded tensor types")
    mesh = make_mesh((2, 4), ("x", "y"))
    rows = make_shard_tensor_type((8, 16), f32, mesh=mesh, attrs=(Split(0), Partial("sum")))
    out.write(f"rows split on x, pending sum on y: {format_type(rows)}\n")
    try:
        ShardLayout(Layout((2, 4, 16)), (Split(0), Split(0)), mesh)
    except VerifyError as err:
        out.write(f"refused (two mesh axes on one layout position): {err}\n")


def run_demo(out: TextIO) -> None:
    out.write("tilefoundry demo (embedded default: reference machinery, no server, no GPU)\n")
    _layout_algebra(out)
    _seed_example(out)
    _typed_values(out)
