"""Core IR shared by every tier: expressions, the Op schema, patterns, Module and Target."""

from tilefoundry.ir.core.expr import Call, Constant, Expr, Tuple, Var
from tilefoundry.ir.core.metadata import (
    BindingName,
    Metadata,
    SourceSpan,
    binding_name,
    get_metadata,
    source_span,
    with_metadata,
)
from tilefoundry.ir.core.module import Module, Target
from tilefoundry.ir.core.op import MISSING, Op, ParamDef
from tilefoundry.ir.core.patterns import DimVarRangePat

__all__ = [
    "MISSING",
    "BindingName",
    "Call",
    "Constant",
    "DimVarRangePat",
    "Expr",
    "Metadata",
    "Module",
    "Op",
    "ParamDef",
    "SourceSpan",
    "Target",
    "Tuple",
    "Var",
    "binding_name",
    "get_metadata",
    "source_span",
    "with_metadata",
]
