"""Every op either has its Pallas rules or is in one explicit, sorted refused set (DESIGN §2:
"a coverage test asserts that every registered op has every rule, or is listed in one explicit,
sorted 'fails closed at this exit' set"), and every PALLAS rule computes what the op's reference
kernel computes, on the op's own validator samples (jnp outside a kernel; the rules are the
same functions the kernel traces)."""

import numpy as np
import pytest

from tilefoundry.analysis import typeinfer_call
from tilefoundry.evaluator.validation_inputs import draw_truth
from tilefoundry.exits.pallas.namespace import KernelNamespace
from tilefoundry.ir.types import TensorType, TupleType
from tilefoundry.rules import (
    EVAL,
    PALLAS,
    PALLAS_SHARDED,
    SHARDED_EVAL,
    STABLEHLO,
    VALIDATION_SAMPLES,
)
from tilefoundry.rules.validation_samples import TupleOperand

NO_PALLAS_RULE = ("Local", "ScatterAdd")
"""Ops the Pallas exit refuses by name (fail closed): Local is refused at typeinfer on a cta mesh
(a CTA's block IS its value there), and a kernel grid is never another mesh, so it never reaches
a kernel; ScatterAdd (adding at runtime indices, duplicates accumulating) has no kernel rule."""

NO_PALLAS_SHARDED_RULE = (
    "BlockedDynamicSlice",
    "BlockedDynamicUpdateSlice",
    "Concat",
    "Local",
    "Reshape",
    "RoPE",
    "ScatterAdd",
    "Stack",
)
"""Ops with mesh semantics (SHARDED_EVAL) the Pallas exit refuses when they touch the cta mesh."""


def _names(classes) -> set[str]:
    """The package's own op classes: toy ops that other test modules register are not ours."""
    return {cls.__name__ for cls in classes if cls.__module__.startswith("tilefoundry.")}


def test_the_refused_sets_are_sorted_and_explicit():
    assert list(NO_PALLAS_RULE) == sorted(NO_PALLAS_RULE)
    assert list(NO_PALLAS_SHARDED_RULE) == sorted(NO_PALLAS_SHARDED_RULE)


def test_every_stablehlo_op_has_a_pallas_rule_or_is_refused_by_name():
    lowered, pallas = _names(STABLEHLO.registered()), _names(PALLAS.registered())
    assert lowered - pallas == set(NO_PALLAS_RULE)
    assert not pallas & set(NO_PALLAS_RULE)


def test_every_op_with_mesh_semantics_has_a_pallas_sharded_rule_or_is_refused():
    meshed, pallas = _names(SHARDED_EVAL.registered()), _names(PALLAS_SHARDED.registered())
    assert meshed - pallas == set(NO_PALLAS_SHARDED_RULE)
    assert pallas <= meshed  # a PALLAS_SHARDED rule stands in for a SHARDED_EVAL one


def _samples():
    for cls in PALLAS.registered():
        if not VALIDATION_SAMPLES.has(cls):
            continue
        samples = VALIDATION_SAMPLES.lookup(cls)()
        if isinstance(samples, str):
            continue
        for index, sample in enumerate(samples):
            if sample.ci and not callable(sample.op):  # a factory builds a mesh op (Reshard)
                yield pytest.param(cls, sample, id=f"{cls.__name__}-{index}-{sample.label}")


def _tensor(operand, rng):
    array = draw_truth(operand.shape, operand.dtype.to_numpy(), operand.domain, rng)
    return array, TensorType(operand.shape, operand.dtype)


def _operand(operand, rng):
    if isinstance(operand, TupleOperand):
        pairs = [_tensor(f, rng) for f in operand.fields]
        return tuple(a for a, _ in pairs), TupleType(tuple(t for _, t in pairs))
    return _tensor(operand, rng)


@pytest.mark.parametrize("cls, sample", list(_samples()))
def test_the_pallas_rule_computes_the_reference_kernel(cls, sample):
    import jax.numpy as jnp

    rng = np.random.default_rng(18)
    op = sample.op_for(None)
    pairs = [_operand(o, rng) for o in sample.operands]
    arrays, types = [a for a, _ in pairs], [t for _, t in pairs]
    out_type = typeinfer_call(op, *types)
    want = EVAL.lookup(cls)(op, tuple(arrays), out_type)
    as_jnp = [
        tuple(map(jnp.asarray, a)) if isinstance(a, tuple) else jnp.asarray(a) for a in arrays
    ]
    got = PALLAS.lookup(cls)(op, tuple(as_jnp), tuple(types), out_type, KernelNamespace())
    wants = want if isinstance(want, tuple) else (want,)
    gots = got if isinstance(got, tuple) else (got,)
    for g, w in zip(gots, wants, strict=True):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape
        if w.dtype.kind == "f":
            # atol scales with the values, as the oracle judge's does (`tilefoundry run --help`):
            # a contraction's f32 rounding depends on its summation order, which the reference
            # kernel and jnp choose differently, by about an ulp of its terms.
            scale = max(1.0, float(np.median(np.abs(w)))) if w.size else 1.0
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6 * scale)
        else:
            np.testing.assert_array_equal(g.astype(w.dtype), w)
