"""Every HIR op has every rule (DESIGN §2: "A coverage test asserts that every registered op has
every rule"): a typeinfer rule, an access relation (or the explicit NO_AFFINE_RELATION marker), a
reference kernel, a fusion kind, at least one DSL surface name, and validator samples (or the reason
it has none, via `register_not_sampled`). Test-only ops (under `tests/`) are excluded.
"""

from __future__ import annotations

import pytest

import tilefoundry.ir.hir  # noqa: F401  (importing HIR registers every op module)
from tilefoundry.ir.core import Op
from tilefoundry.rules import (
    ACCESS_RELATION,
    EVAL,
    FUSION,
    TYPEINFER,
    VALIDATION_SAMPLES,
    surface_entry,
    surface_names,
)

HIR_OPS = sorted(
    (
        cls
        for cls in TYPEINFER.registered()
        if isinstance(cls, type)
        and issubclass(cls, Op)
        and cls.__module__.startswith("tilefoundry.ir.hir.")
    ),
    key=lambda cls: cls.__name__,
)

SEED_OPS = {
    # hir §1.3: every op of the seed catalog (math / tensor / nn / shape / sharding) plus the
    # consensus ops DESIGN §3 names
    "Binary", "Unary", "Reshape", "Cast", "Gather", "Zeros", "Reduce", "InsertSlice",
    "CacheUpdate", "TopK", "Transpose", "Slice", "Concat", "Stack", "ShapeOf", "Rank", "Where",
    "BroadcastTo", "TupleGetItem", "MatMul", "Conv2D", "ReLU", "Sigmoid", "Tanh", "SoftMax",
    "LayerNorm", "Gelu", "Silu", "RMSNorm", "RoPE", "ShapeExtract", "ShapeCompose", "Reshard",
    "Local",
}  # fmt: skip


def test_every_seed_op_is_registered():
    missing = SEED_OPS - {cls.__name__ for cls in HIR_OPS}
    assert not missing, f"ops without a typeinfer rule: {sorted(missing)}"


@pytest.mark.parametrize("op_class", HIR_OPS, ids=lambda cls: cls.__name__)
def test_op_has_every_rule(op_class):
    assert ACCESS_RELATION.has(op_class), f"{op_class.__name__}: no access relation (or marker)"
    assert EVAL.has(op_class), f"{op_class.__name__}: no reference kernel"
    assert FUSION.has(op_class), f"{op_class.__name__}: no fusion kind"
    spelled = [n for n in surface_names() if surface_entry(n).op_class is op_class]
    assert spelled, f"{op_class.__name__}: no tf.<name> surface spelling"
    assert VALIDATION_SAMPLES.has(op_class), (
        f"{op_class.__name__}: no validation samples (or register_not_sampled reason)"
    )
