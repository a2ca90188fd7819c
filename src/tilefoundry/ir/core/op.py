"""Op: a value class described by a declarative ParamDef schema.

An op class is a few lines: its class body lists `ParamDef`s, inputs (which become Call
arguments) and attributes (compile-time values stored on the op). Everything else — construction
checks, defaults, `inputs()`/`attributes()`, equality — is derived here once, so the hundred op
classes never repeat that plumbing. Ops compare and hash by value (class + attribute values):
`Binary(kind=ADD) == Binary(kind=ADD)`, because a rule table or memo keyed on an op must not care
which Python object spelled it.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import Any, ClassVar

from tilefoundry.errors import VerifyError


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()

_KINDS = ("input", "attribute")


class ParamDef:
    """One parameter of an Op: an `input` (a Call argument) or an `attribute` (stored on the op).

    `validate(value) -> value` may normalise an attribute (e.g. a shape list to a tuple) and
    raises on a bad value; `optional=True` admits None (and defaults to it).
    """

    def __init__(
        self,
        kind: str,
        annotation: Any = object,
        default: Any = MISSING,
        validate: Callable[[Any], Any] | None = None,
        optional: bool = False,
    ):
        if kind not in _KINDS:
            raise TypeError(f"ParamDef kind must be one of {_KINDS}, got {kind!r}")
        if kind == "input" and (default is not MISSING or optional or validate is not None):
            raise TypeError("an input ParamDef has no default/optional/validate; it is an argument")
        self.kind = kind
        self.annotation = annotation
        self.default = None if optional and default is MISSING else default
        self.validate = validate
        self.optional = optional
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Op | None, owner: type | None = None) -> Any:
        if obj is None:
            return self
        if self.kind == "input":
            raise AttributeError(
                f"{type(obj).__name__}.{self.name} is an input; its value is a Call argument"
            )
        return obj._values[self.name]

    def __repr__(self) -> str:
        return f"ParamDef({self.kind!r}, name={self.name!r})"

    def coerce(self, op_name: str, value: Any) -> Any:
        """The checked, normalised attribute value; a VerifyError names the op and attribute."""
        if value is None and self.optional:
            return None
        where = f"{op_name}: attribute '{self.name}'"
        annotation = self.annotation
        if isinstance(annotation, type) and issubclass(annotation, Enum) and isinstance(value, str):
            try:
                value = annotation[value.upper()]
            except KeyError:
                names = ", ".join(m.name.lower() for m in annotation)
                raise VerifyError(
                    f"{where}: unknown {annotation.__name__} {value!r}; valid: {names}"
                ) from None
        if annotation is tuple and isinstance(value, list):
            value = tuple(value)
        if self.validate is not None:
            try:
                value = self.validate(value)
            except VerifyError as err:
                raise VerifyError(f"{where}: {err.message}") from None
            except (TypeError, ValueError) as err:
                raise VerifyError(f"{where}: {err}") from None
        if isinstance(annotation, type) and annotation is not object:
            wrong_bool = annotation is int and isinstance(value, bool)
            if wrong_bool or not isinstance(value, annotation):
                raise VerifyError(
                    f"{where} must be {annotation.__name__}, got {type(value).__name__} {value!r}"
                )
        try:
            hash(value)
        except TypeError:
            raise VerifyError(f"{where}: value {value!r} is not hashable") from None
        return value


class Op:
    """Base of every operator. Construct with attribute keywords only: `Reduce(axes=(0,))`."""

    _params: ClassVar[tuple[ParamDef, ...]] = ()
    _inputs: ClassVar[tuple[str, ...]] = ()
    mnemonic: ClassVar[str | None] = None
    """The op's name in printed IR, for an op the DSL does not spell; None: its DSL surface name
    (`register_surface`), so the printed form and the DSL spell an op alike."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        by_name: dict[str, ParamDef] = {}
        for klass in reversed(cls.__mro__):
            for name, value in vars(klass).items():
                if isinstance(value, ParamDef):
                    by_name[name] = value
        cls._params = tuple(by_name.values())
        cls._inputs = tuple(p.name for p in cls._params if p.kind == "input")

    def __init__(self, **attrs: Any):
        name = type(self).__name__
        values: dict[str, Any] = {}
        for param in type(self)._params:
            if param.kind == "input":
                if param.name in attrs:
                    raise VerifyError(
                        f"{name}: '{param.name}' is an input; pass it as a Call argument"
                    )
                continue
            if param.name in attrs:
                values[param.name] = param.coerce(name, attrs.pop(param.name))
            elif param.default is not MISSING:
                values[param.name] = param.coerce(name, param.default)
            else:
                raise VerifyError(f"{name}: missing required attribute '{param.name}'")
        if attrs:
            unknown = ", ".join(sorted(attrs))
            known = ", ".join(p.name for p in type(self)._params if p.kind == "attribute")
            known = known or "none"
            raise VerifyError(f"{name}: unknown attribute(s) {unknown}; attributes: {known}")
        object.__setattr__(self, "_values", values)

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    @classmethod
    def param_defs(cls) -> tuple[ParamDef, ...]:
        """Every ParamDef, inputs and attributes, in MRO-then-definition order."""
        return cls._params

    @classmethod
    def inputs(cls) -> tuple[str, ...]:
        """The names of the input parameters, in Call-argument order (computed once per class)."""
        return cls._inputs

    def attributes(self) -> dict[str, Any]:
        """The attribute values by name, in schema order."""
        return dict(self._values)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._values == self._values

    def __hash__(self) -> int:
        return hash((type(self), tuple(self._values.items())))

    def __repr__(self) -> str:
        attrs = ", ".join(f"{k}={_show(v)}" for k, v in self._values.items())
        return f"{type(self).__name__}({attrs})"


def _show(value: Any) -> str:
    return value.name if isinstance(value, Enum) else repr(value)
