"""The Python DSL: `@func`, `@module`, `Tensor[...]`, `ConstTensor[...]`, `tile` (DESIGN §3).

Layout sugar in annotations is `N @ m.a`, `N @ (m.a * m.b)` and a trailing `{m.a @ P("sum")}`;
see `tilefoundry.ir.types.shard.sugar` for why the multi-axis annotation spelling is `*` rather
than DESIGN §3's tuple (the tuple form is accepted inside function bodies).
"""

from tilefoundry.frontend.annotations import ConstTensor, Tensor, TensorSpec
from tilefoundry.frontend.decorators import func, module
from tilefoundry.frontend.parse import ConstParam
from tilefoundry.frontend.scopes import MeshScope
from tilefoundry.frontend.source import parse_source
from tilefoundry.frontend.tile_window import tile

__all__ = [
    "ConstParam",
    "ConstTensor",
    "MeshScope",
    "Tensor",
    "TensorSpec",
    "func",
    "module",
    "parse_source",
    "tile",
]
