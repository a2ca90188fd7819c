"""Lower each (op, operand types, result type) once per process and replay its text.

A decoder repeats one op on one shape in every layer, and an op's StableHLO rule is a pure
function of the op's attributes, its operand and result types, the emission's bindings and the
body's indent: only the SSA names differ from one call to the next. So the first call runs the
rule on a recording body whose names are placeholders (operand `i`, and the `n`-th fresh name),
keeps its lines and result as format templates, and every call with the same key — the first
included — renders them with its own names. The text is byte-identical to running the rule.

What is not replayed (detected, not guessed): a rule that reads `lw.call` (a Constant operand's
value, say) — its lines are used for that call only; a key with something unhashable in it; a
rule that raises while recording (it is rerun on the real body, so its error names real values).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tilefoundry.caches import Memo
from tilefoundry.ir.core.nested import flatten
from tilefoundry.ir.lowering.builder import Lowered, Lowering

_FRESH, _OPERAND, _END = "\x01", "\x03", "\x02"
_TEMPLATES = Memo("replay: op lowering templates", 1 << 14)
"""key -> (fresh names the rule takes, its line templates, its result template)."""


class _Recording(Lowering):
    """A body whose fresh names are placeholders `\\x01n\\x02` (n counted from 0)."""

    def fresh(self) -> str:
        return f"{_FRESH}{self.take_names(1)}{_END}"


def _placeholders(value: Lowered, names: list[str], slot: dict[str, int]) -> Lowered:
    """`value` with each name replaced by its operand placeholder (one per distinct name)."""
    if isinstance(value, tuple):
        return tuple(_placeholders(part, names, slot) for part in value)
    return f"{_OPERAND}{slot[value]}{_END}"


def _template(text: str, fresh: int) -> str:
    """`text` as a `str.format` template: fresh name n is field n, operand i field fresh+i."""
    out = text.replace("{", "{{").replace("}", "}}")
    for n in range(fresh):
        out = out.replace(f"{_FRESH}{n}{_END}", f"{{{n}}}")
    if _OPERAND in out:
        parts = out.split(_OPERAND)
        rebuilt = [parts[0]]
        for part in parts[1:]:
            index, rest = part.split(_END, 1)
            rebuilt.append(f"{{{fresh + int(index)}}}{rest}")
        out = "".join(rebuilt)
    return out


def _result_template(value: Lowered, fresh: int) -> Any:
    if isinstance(value, tuple):
        return tuple(_result_template(part, fresh) for part in value)
    return _template(value, fresh)


def _render_result(template: Any, names: list[str]) -> Lowered:
    if isinstance(template, tuple):
        return tuple(_render_result(part, names) for part in template)
    return template.format(*names)


def _attribute_key(op: Any) -> tuple:
    """The op's attribute classes and float spellings: `1 == 1.0 == True` and `0.0 == -0.0`
    hash alike but may print differently."""
    values = getattr(op, "_values", {})
    return tuple((type(v), repr(v) if isinstance(v, float) else None) for v in values.values())


def lower_cached(
    rule: Callable[..., Lowered],
    op: Any,
    operands: tuple[Lowered, ...],
    arg_types: tuple,
    out_type: Any,
    lw: Lowering,
    call: Any = None,
) -> Lowered:
    """`rule(op, operands, arg_types, out_type, lw)`, replayed from the first lowering with the
    same key (see the module docstring); `call` is what the rule sees as `lw.call`."""
    if type(lw) is not Lowering:  # a body with other behaviour: no claim its text replays
        lw.set_call(call)
        return rule(op, operands, arg_types, out_type, lw)
    flat = flatten(operands)
    slot: dict[str, int] = {}
    for name in flat:
        slot.setdefault(name, len(slot))
    aliasing = None if len(slot) == len(flat) else tuple(slot[n] for n in flat)
    key = (
        type(op),
        op,
        _attribute_key(op),
        arg_types,
        out_type,
        aliasing,
        lw.indent,
        lw.bindings_key(),
    )
    try:
        entry = _TEMPLATES.get(key)
    except TypeError:  # something unhashable: run the rule as it is
        lw.set_call(call)
        return rule(op, operands, arg_types, out_type, lw)
    if entry is None:
        recorder = _Recording(lw.bindings, [0], lw.indent)
        recorder.set_call(call)
        try:
            result = rule(op, _placeholders(operands, flat, slot), arg_types, out_type, recorder)
        except Exception:  # rerun on the real body: the error then names the real values
            lw.set_call(call)
            return rule(op, operands, arg_types, out_type, lw)
        fresh = recorder.names_taken
        entry = (
            fresh,
            [_template(line, fresh) for line in recorder.lines],
            _result_template(result, fresh),
        )
        if not recorder.call_was_read:
            _TEMPLATES.put(key, entry)
    fresh, lines, result_template = entry
    base = lw.take_names(fresh)
    names = [f"%{base + n}" for n in range(fresh)]
    names.extend(slot)  # dicts keep insertion order: operand placeholder i is the i-th name
    lw.lines.extend([line.format(*names) for line in lines])
    return _render_result(result_template, names)
