"""Reading IR: the HTML/SVG report and sharding in words, over the canonical text printer (which
lives beside the IR, `tilefoundry.ir.text`, and is re-exported here)."""

from tilefoundry.ir.text import MeshNames, format_ir, format_mesh, format_type, op_mnemonic

__all__ = ["MeshNames", "format_ir", "format_mesh", "format_type", "op_mnemonic"]
