"""hir §1.2 GridRegionExpr: the one structured-SSA node, a loop folded into a single value.

The node is self-contained: each loop-carried phi Var starts as its init value and is replaced by
its yield value every iteration, so the carry chain must be type-stable (init, phi and yield
types equal). The value is the final carry: its TensorType for one carry, a TupleType for several,
and — a choice the seed leaves open — the empty TupleType for a loop with no carries.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tilefoundry.analysis import TypeInferContext
from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import Expr, Metadata, Var
from tilefoundry.ir.core.metadata import normalize_metadata
from tilefoundry.ir.types import (
    ShapeDim,
    StorageKind,
    TensorType,
    TupleType,
    Type,
    i64,
    is_static,
    normalize_dim,
)
from tilefoundry.rules import register_typeinfer

INDUCTION_TYPE = TensorType((), i64, storage=StorageKind.UMAT)
"""A loop induction variable is an i64 scalar whose residency is not decided (umat)."""


@dataclass(frozen=True, eq=False)
class GridRegionExpr(Expr):
    """`for induction_var in range(start, extent, step)` carrying `carried_args` (hir §1.2)."""

    induction_var: Var
    carried_args: tuple[Var, ...]
    init_args: tuple[Expr, ...]
    body: Expr
    yield_values: tuple[Expr, ...]
    extent: ShapeDim
    step: ShapeDim
    start: ShapeDim = 0
    type: Any = None
    metadata: tuple[Metadata, ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        where = "GridRegionExpr"
        for name in ("carried_args", "init_args", "yield_values"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if not isinstance(self.induction_var, Var):
            raise VerifyError(f"{where}: induction_var must be a Var, got {self.induction_var!r}")
        for i, phi in enumerate(self.carried_args):
            if not isinstance(phi, Var):
                raise VerifyError(f"{where}: carried_args[{i}] must be a Var, got {phi!r}")
        for role in ("init_args", "yield_values"):
            for i, value in enumerate(getattr(self, role)):
                if not isinstance(value, Expr):
                    raise VerifyError(f"{where}: {role}[{i}] must be an Expr, got {value!r}")
        if not isinstance(self.body, Expr):
            raise VerifyError(f"{where}: body must be an Expr, got {self.body!r}")
        lengths = (len(self.carried_args), len(self.init_args), len(self.yield_values))
        if len(set(lengths)) != 1:
            raise VerifyError(
                f"{where}: the carry chain needs equal lengths, got {lengths[0]} carried_args, "
                f"{lengths[1]} init_args and {lengths[2]} yield_values"
            )
        for name in ("start", "extent", "step"):
            dim = normalize_dim(getattr(self, name), what=f"GridRegionExpr {name}")
            object.__setattr__(self, name, dim)
            if is_static(dim) and (dim <= 0 if name == "step" else dim < 0):
                need = "positive" if name == "step" else "non-negative"
                raise VerifyError(f"{where}: static {name} must be {need}, got {dim}")
        object.__setattr__(self, "metadata", normalize_metadata(self.metadata))

    def operands(self) -> tuple[Expr, ...]:
        """The init values, then the body and the yield values (the nested block's roots)."""
        return (*self.init_args, self.body, *self.yield_values)

    def block_operands(self) -> tuple[Expr, ...]:
        """Only the init values: the body is a block of its own, run once per iteration."""
        return self.init_args


def make_grid_region(
    init_args: Sequence[Expr],
    extent: ShapeDim,
    build: Callable[[Var, tuple[Var, ...]], tuple[Expr, Sequence[Expr]]],
    *,
    step: ShapeDim = 1,
    start: ShapeDim = 0,
    carry_names: Sequence[str] | None = None,
    induction_name: str = "i",
) -> GridRegionExpr:
    """Build a loop whose phi Vars take their types from the init values (what the frontend does
    for a carried name): `build(induction_var, phis)` returns `(body, yield_values)`."""
    ctx = TypeInferContext()
    names = carry_names or [f"carry{i}" for i in range(len(init_args))]
    phis = tuple(Var(n, ctx.infer(init)) for n, init in zip(names, init_args, strict=True))
    induction_var = Var(induction_name, INDUCTION_TYPE)
    body, yields = build(induction_var, phis)
    region = GridRegionExpr(
        induction_var, phis, tuple(init_args), body, tuple(yields), extent, step, start
    )
    ctx.infer(region)
    return region


def carry_type(phi_types: Sequence[Type]) -> Type:
    """The region's value type: the single carry's type, else the tuple of the carries."""
    if len(phi_types) == 1:
        return phi_types[0]
    return TupleType(tuple(phi_types))


@register_typeinfer(GridRegionExpr)
def _grid_region(node: GridRegionExpr, ctx: TypeInferContext) -> Type:
    for i, (phi, init) in enumerate(zip(node.carried_args, node.init_args, strict=True)):
        init_type = ctx.infer(init)
        if phi.type != init_type:
            ctx.error(
                node,
                f"carry {i} ('{phi.name}'): phi type {phi.type} differs from its init type "
                f"{init_type}; a loop carry keeps one type",
            )
    ctx.infer(node.body)
    for i, (phi, value) in enumerate(zip(node.carried_args, node.yield_values, strict=True)):
        yield_type = ctx.infer(value)
        if yield_type != phi.type:
            ctx.error(
                node,
                f"carry {i} ('{phi.name}'): yield type {yield_type} differs from the phi type "
                f"{phi.type}; a loop carry keeps one type",
            )
    return carry_type(tuple(phi.type for phi in node.carried_args))
