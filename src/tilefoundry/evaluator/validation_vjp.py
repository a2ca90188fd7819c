"""The validator's VJP mode (issue 25 item 5): VJP rules are a second rule set, proven alike.

For one op sample on one mesh, each per-mesh-axis input state (Broadcast, each Split, Partial(sum))
the forward's typeinfer accepts gives a one-op program; its backward (`vjp` of that program: the
forward call, then the VJP rule's HIR ops, typed by the same typeinfer and shard propagation) runs
on the simulated devices with adversarially placed inputs and output cotangents
(`validation_inputs.place`), and each result is completed through the type the backward claims and
compared with the unsharded backward on the same global values. Outcomes:

- unsound: the backward types but computes a different global value (or divergent replicas);
- untyped: the forward types but its backward does not (JAX's users file these: a gather's vjp,
  conv's vjp); also a failure;
- no cotangent: the forward's output is pending Partial(max|min), which has no cotangent (the
  transform refuses it, DESIGN §4.18); Partial(max|min) inputs are not tried for the same reason.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from functools import partial

import numpy as np

from tilefoundry.analysis import TypeInferContext
from tilefoundry.autodiff import vjp
from tilefoundry.errors import EvalError, UnsupportedError, VerifyError
from tilefoundry.evaluator.interpreter import Interpreter, evaluate
from tilefoundry.evaluator.validation_checks import (
    SampleRun,
    _addend_rounding,
    _rng,
    judged,
    slot_options,
    type_state,
)
from tilefoundry.evaluator.validation_inputs import (
    REDRAWS,
    draw_truth,
    is_uninformative,
    place,
    sign_flipped,
)
from tilefoundry.evaluator.values import MeshValue, is_replicated_type
from tilefoundry.ir.core import Call, Tuple, Var
from tilefoundry.ir.hir import Function
from tilefoundry.ir.types import TensorType, TupleType, Type
from tilefoundry.ir.types import make_tensor_type as plain_type
from tilefoundry.passes import verify
from tilefoundry.sharding.shard_reading import pending_partials

_TRIED = 4096
"""Input-state combinations typed per sample and mesh at most (RoPE has 640000 on the 2x2 mesh)."""


def one_op_program(sample, op, types: Sequence[Type]) -> Function:
    """`op` applied to one parameter per operand slot (tuple operands rebuilt from their
    fields), typed by typeinfer; raises VerifyError when typeinfer rejects the types."""
    params = tuple(Var(f"a{i}", t) for i, t in enumerate(types))
    body = Call(op, sample.nest(params, lambda fields: Tuple(tuple(fields))))
    return Function("one_op", params, body, TypeInferContext().infer(body))


def _output_leaves(type_: Type) -> list[TensorType]:
    if isinstance(type_, TupleType):
        return [leaf for field in type_.fields for leaf in _output_leaves(field)]
    return [type_]


def _float_outputs(type_: Type) -> list[TensorType]:
    return [t for t in _output_leaves(type_) if t.dtype.is_float]


def differentiable_argnums(fn: Function) -> tuple[int, ...]:
    """The float parameters, when some output is float too (else nothing to differentiate)."""
    if not _float_outputs(fn.return_type):
        return ()
    return tuple(i for i, p in enumerate(fn.params) if p.type.dtype.is_float)


def _leaves(value) -> list[np.ndarray]:
    if isinstance(value, tuple):
        return [leaf for v in value for leaf in _leaves(v)]
    return [np.asarray(value)]


def _no_cotangent(type_: Type) -> bool:
    """A float output pending Partial(max|min): the transform gives it no cotangent."""
    return any(
        reduction != "sum"
        for leaf in _float_outputs(type_)
        for reduction in pending_partials(leaf).values()
    )


def _invoked(fn: Function, args: Sequence) -> object:
    """`fn` run by the interpreter on evaluator values (MeshValues placed by the validator)."""
    return Interpreter().invoke(fn, args)[1]


class VjpSampleRun(SampleRun):
    """One sample on one mesh in VJP mode: the unsharded backward, then every input state."""

    def truths(self):
        """Per variant (values, their sign flip): the inputs, the output cotangents and the
        unsharded backward's result; None (recorded) when the sample has nothing to
        differentiate or its unsharded backward fails."""
        op = self.sample.op_for(self.mesh)
        try:
            plain = one_op_program(
                self.sample, op, [plain_type(s.shape, s.dtype) for s in self.slots]
            )
            self.argnums = differentiable_argnums(plain)
            if not self.argnums:
                return None
            reference = vjp(plain, argnums=self.argnums)
            for attempt in range(REDRAWS):
                rng = _rng(self.settings.seed, self.name, self.label, "vjp", attempt)
                values = [
                    draw_truth(s.shape, s.dtype.to_numpy(), s.domain, rng) for s in self.slots
                ]
                outputs = _leaves(evaluate(plain, *values))
                if not any(is_uninformative(o) for o in outputs):
                    break
            else:
                raise EvalError(f"{REDRAWS} draws gave an all-zero unsharded result")
            cotangents = [
                rng.standard_normal(t.shape).astype(t.dtype.to_numpy())
                for t in _float_outputs(plain.return_type)
            ]
            flipped = [sign_flipped(v, s.domain) for v, s in zip(values, self.slots, strict=True)]
            return [
                (inputs, cotangents, evaluate(reference, *inputs, *cotangents))
                for inputs in (values, flipped)
            ]
        except Exception as err:
            self.report.broken_samples.append(self.finding((), "-", f"{type(err).__name__}: {err}"))
            return None

    def _arguments(self, backward: Function, inputs, cotangents, key) -> list:
        """The backward's arguments on the devices: each sharded one placed adversarially
        (uneven mixed-sign Partial addends), a replicated one as its global array."""
        rng = _rng(self.settings.seed, *key)
        result = []
        for index, (param, value) in enumerate(
            zip(backward.params, [*inputs, *cotangents], strict=True)
        ):
            if is_replicated_type(param.type):
                result.append(value)
                continue
            shards = place(value, param.type, index, rng)
            result.append(MeshValue(self.mesh, param.type, value.shape, shards))
        return result

    def check_backward(self, combo, backward: Function, variants, key) -> tuple[str, str | None]:
        for flip, (inputs, cotangents, truth) in enumerate(variants):
            args = self._arguments(backward, inputs, cotangents, (*key, flip))
            execute = partial(_invoked, backward, args)
            found = judged(execute, truth, flip, _addend_rounding(combo))
            if found:
                return found
        return "ok", None

    def accepted(self, rng) -> Iterator[tuple[int, tuple, Function]]:
        """Input-state combinations in a seeded order (all of them when few, else a seeded
        draw of `_TRIED`), each typed by the forward's typeinfer; the accepted ones until
        `settings.cap(mesh)` of them. Capping after typeinfer rather than before keeps ops with
        many operands and few accepted states (RoPE, Conv2D) from drawing none."""
        options = [slot_options(slot, self.mesh, self.settings.reductions) for slot in self.slots]
        extents = [len(o) for o in options]
        total = math.prod(extents)
        order = rng.permutation(total) if total <= _TRIED else rng.choice(total, _TRIED, False)
        op, found = self.sample.op_for(self.mesh), 0
        for index in order:
            picks = np.unravel_index(int(index), extents)
            combo = tuple(o[i] for o, i in zip(options, picks, strict=True))
            if all(attrs is None for attrs, _ in combo):
                continue  # the unsharded program itself: the reference
            self.tally.combinations += 1
            try:
                fn = one_op_program(self.sample, op, [t for _, t in combo])
            except VerifyError:
                self.tally.rejected += 1
                continue
            if _no_cotangent(fn.return_type):
                self.tally.no_cotangent += 1
                continue
            yield int(index), combo, fn
            found += 1
            if found == self.settings.cap(self.mesh):
                return

    def run(self) -> None:
        variants = self.truths()
        if variants is None:
            return
        rng = _rng(self.settings.seed, self.name, self.label, self.mesh_text, "vjp combos")
        for index, combo, fn in self.accepted(rng):
            self.tally.accepted += 1
            try:
                backward = vjp(fn, argnums=self.argnums)
                verify(backward)
            except (VerifyError, UnsupportedError) as err:
                self.tally.untyped += 1
                detail = f"the forward types, its backward does not: {err}"
                self.report.untyped.append(self.finding(combo, type_state(fn.return_type), detail))
                continue
            claimed = type_state(backward.return_type.fields[1])
            key = (self.name, self.label, self.mesh_text, index, "vjp")
            verdict, detail = self.check_backward(combo, backward, variants, key)
            if verdict == "refuted":
                self.tally.unsound += 1
                self.report.unsound.append(self.finding(combo, claimed, detail))
            elif verdict == "unexecutable":
                self.tally.not_executable += 1
                self.report.not_executable.append(self.finding(combo, claimed, detail))
