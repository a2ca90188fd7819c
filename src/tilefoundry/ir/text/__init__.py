"""The IR's canonical text: the printer (golden-tested; one spelling per construct) and the
spellings of types, layouts and meshes it is built from.

It sits beside the IR rather than in `inspect` so that every stage (a pass's error dump, the
fusion report, the CLI) can print IR without depending on the inspector's HTML report.
"""

from tilefoundry.ir.text.printer import format_ir, op_mnemonic
from tilefoundry.ir.text.type_text import MeshNames, format_mesh, format_type

__all__ = ["MeshNames", "format_ir", "format_mesh", "format_type", "op_mnemonic"]
