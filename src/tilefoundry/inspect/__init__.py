"""Reading IR: the canonical text printer (golden-tested; one spelling per construct)."""

from tilefoundry.inspect.printer import format_ir, op_mnemonic
from tilefoundry.inspect.type_text import MeshNames, format_mesh, format_type

__all__ = ["MeshNames", "format_ir", "format_mesh", "format_type", "op_mnemonic"]
