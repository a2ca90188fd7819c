"""The validator's VJP mode catches wrong backward programs (issue 25 item 5).

Mutation tests: each test-only twin below is an identity (its forward rule, carrying a pending
sum, is sound) whose VJP rule is wrong in a way only sharding exposes. The unsharded backward is
the reference, so a rule that is merely wrong math is the finite-difference tests' business
(tests/autodiff/test_finite_differences.py); here the backward's own typing is on trial.
"""

from __future__ import annotations

import numpy as np

from evaluator.test_validate import _elementwise_relation, _elementwise_typeinfer
from tilefoundry.evaluator.validate import main, validate, vjp_catalog_samples
from tilefoundry.evaluator.validation_checks import Settings
from tilefoundry.ir.core import Call, Op, ParamDef
from tilefoundry.rules import (
    register_access_relation,
    register_eval,
    register_typeinfer,
    register_vjp,
)
from tilefoundry.rules.validation_samples import Operand, Sample


class AbsKeepsSums(Op):
    """abs whose rule carries a pending sum (|a| + |b| != |a + b|): what the backward reads."""

    x = ParamDef("input")


class ScaledByAbsBackward(Op):
    """identity; its VJP rule reads the primal through AbsKeepsSums (dx = ct * |x|)."""

    x = ParamDef("input")


class AddsPrimalBackward(Op):
    """identity; its VJP rule adds the primal to the cotangent (dx = ct + x), which does not type
    when x is a pending sum and ct is complete."""

    x = ParamDef("input")


for _twin in (AbsKeepsSums, ScaledByAbsBackward, AddsPrimalBackward):
    register_typeinfer(_twin)(_elementwise_typeinfer)
    register_access_relation(_twin)(_elementwise_relation)
register_eval(AbsKeepsSums)(lambda op, args, out_type: np.abs(args[0]))
register_eval(ScaledByAbsBackward)(lambda op, args, out_type: np.array(args[0], copy=True))
register_eval(AddsPrimalBackward)(lambda op, args, out_type: np.array(args[0], copy=True))


@register_vjp(ScaledByAbsBackward)
def _scaled_by_abs(call, ct, ad):
    (x,) = call.args

    def dx():
        magnitude = Call(AbsKeepsSums(), (x,))
        ad.ctx.infer(magnitude)
        return ad.tf.mul(ct, magnitude)

    return (dx,)


@register_vjp(AddsPrimalBackward)
def _adds_primal(call, ct, ad):
    (x,) = call.args
    return (lambda: ad.tf.add(ct, x),)


def _vjp_report(twin):
    samples = {twin.__name__: [Sample(twin(), (Operand((4, 8)),))]}
    return validate(samples, Settings(seed=3, vjp=True))


def _inputs(findings, mesh="4"):
    return {f.inputs for f in findings if f.mesh == mesh}


def test_a_backward_reading_a_pending_sum_through_a_wrong_rule_is_unsound():
    report = _vjp_report(ScaledByAbsBackward)
    assert _inputs(report.unsound) == {"P(sum)"}
    assert all("P(sum)" in f.inputs for f in report.unsound)
    assert report.tallies["ScaledByAbsBackward"].unsound == len(report.unsound)
    assert report.tallies["ScaledByAbsBackward"].accepted > len(report.unsound)


def test_a_forward_that_types_with_a_backward_that_does_not_is_reported():
    report = _vjp_report(AddsPrimalBackward)
    assert _inputs(report.untyped) == {"P(sum)"}
    assert not report.unsound
    assert "its backward does not" in report.untyped[0].detail


def test_partial_max_and_min_inputs_are_not_tried():
    """The transform refuses to differentiate through them (DESIGN §4.18)."""
    report = _vjp_report(ScaledByAbsBackward)
    findings = report.unsound + report.untyped + report.not_executable
    assert not any("max" in f.inputs or "min" in f.inputs for f in findings)
    # 1-axis mesh: (B, S0, S1, P(sum)), less nothing; 2x2: 4 states per mesh axis, 16 pairs
    assert report.tallies["ScaledByAbsBackward"].combinations == 4 + 16


def test_the_cli_exits_1_on_an_unsound_or_untyped_backward(monkeypatch, capsys):
    twins = {
        t.__name__: [Sample(t(), (Operand((4, 8)),))]
        for t in (ScaledByAbsBackward, AddsPrimalBackward)
    }
    monkeypatch.setattr(
        "tilefoundry.evaluator.validate.vjp_catalog_samples", lambda op: (twins, {})
    )
    assert main(["--vjp", "--no-progress"]) == 1
    out = capsys.readouterr().out
    assert "UNSOUND acceptances" in out and "ScaledByAbsBackward" in out
    assert "UNTYPED backwards" in out and "AddsPrimalBackward" in out


def test_the_vjp_catalog_lists_every_op_without_a_rule_with_why():
    sampled, not_sampled = vjp_catalog_samples()
    assert not_sampled["Local"].startswith("no VJP rule: the transform refuses it")
    assert not_sampled["Rank"].startswith("no VJP rule: a zero cotangent")
    assert {"MatMul", "Conv2D", "TopK", "RoPE"} <= set(sampled)
