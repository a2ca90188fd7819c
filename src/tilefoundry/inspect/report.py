"""A self-contained HTML report of one function: the program drawn as a graph.

Ops are nodes, fusion regions are boxes around their members, each edge carries the value's
shape/dtype and shard layout, and a Reshard is highlighted with the collective it becomes. Below
the drawing, a table gives every sharded value's per-device shape. Everything is inline SVG and
CSS: the page opens offline, in CI artifacts and in mail, with no scripts and no network.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html import escape
from typing import Any

from tilefoundry.inspect.report_layout import STEM, Box, enclosing, layered_layout, node_width
from tilefoundry.inspect.shard_view import (
    Emitted,
    axis_states,
    call_collectives,
    emitted_collectives,
    is_reshard,
    operation_name,
    shape_text,
    short_type,
    value_rows,
)
from tilefoundry.ir.core import Call, Constant, Expr, Var, binding_name, source_span
from tilefoundry.ir.core.graph import BLOCK_OPERANDS, post_order
from tilefoundry.ir.hir import Function, FusionRegion

STATE_ABBREVIATIONS = {"replicated": "B", "partial": "P", "split": "S", "dynamic": "D"}


@dataclass
class GraphNode:
    kind: str  # param | op | reshard | loop | output
    title: str
    subtitle: str
    region: int | None = None
    collectives: tuple[str, ...] = ()


@dataclass
class GraphEdge:
    src: int
    dst: int
    type_text: str
    layout_text: str


@dataclass
class Graph:
    nodes: list[GraphNode] = field(default_factory=list)
    edges: list[GraphEdge] = field(default_factory=list)
    regions: list[str] = field(default_factory=list)  # kind per region, index = region id


def compact_layout(type_: Any) -> str:
    """`x:S0 y:P(sum)`: the per-mesh-axis state, short enough for an edge label."""
    parts = []
    for axis, state in axis_states(type_):
        word, _, rest = state.partition(" ")
        if word == "split":
            parts.append(f"{axis}:S{rest.split()[-1]}")
        elif word == "partial":
            parts.append(f"{axis}:P({rest})")
        else:
            parts.append(f"{axis}:{STATE_ABBREVIATIONS[word]}")
    return " ".join(parts)


class _GraphBuilder:
    def __init__(self, emitted: Emitted | None = None) -> None:
        self.graph = Graph()
        self.ids: dict[int, int] = {}
        self.emitted = emitted or {}

    def add(self, expr: Expr, node: GraphNode) -> int:
        self.graph.nodes.append(node)
        self.ids[id(expr)] = len(self.graph.nodes) - 1
        return self.ids[id(expr)]

    def connect(self, producer: Expr, consumer: int, alias: dict[int, Expr]) -> None:
        source = alias.get(id(producer), producer)
        if id(source) not in self.ids:
            return  # constants are folded into the op that reads them
        type_ = source.type
        self.graph.edges.append(
            GraphEdge(self.ids[id(source)], consumer, short_type(type_), compact_layout(type_))
        )

    def op(self, call: Expr, region: int | None, alias: dict[int, Expr]) -> None:
        name = operation_name(call)
        binding = binding_name(call)
        span = source_span(call)
        collectives: tuple[str, ...] = ()
        kind = "loop" if name == "loop" else "op"
        if isinstance(call, Call) and is_reshard(call.target):
            kind = "reshard"
        collectives = call_collectives(call, self.emitted)
        title = binding or name
        subtitle = name if binding else (f"line {span.line}" if span is not None else "")
        index = self.add(call, GraphNode(kind, title, subtitle, region, collectives))
        for operand in call.block_operands():
            self.connect(operand, index, alias)

    def function(self, fn: Function) -> Graph:
        for param in fn.params:
            self.add(param, GraphNode("param", param.name, short_type(param.type)))
        if fn.body is None:
            return self.graph
        for node in post_order((fn.body,), BLOCK_OPERANDS):
            if isinstance(node, Var | Constant):
                continue
            if isinstance(node, Call) and isinstance(node.target, FusionRegion):
                self.region(node)
            else:
                self.op(node, None, {})
        output = self.add(Var("return", fn.body.type), GraphNode("output", "return", ""))
        self.connect(fn.body, output, {})
        return self.graph

    def region(self, call: Call) -> None:
        region = call.target
        self.graph.regions.append(region.kind)
        rid = len(self.graph.regions) - 1
        alias: dict[int, Expr] = {
            id(var): arg for var, arg in zip(region.inputs, call.args, strict=True)
        }
        for member in region.body:
            if not isinstance(member, Constant):
                self.op(member, rid, alias)
        self.ids[id(call)] = self.ids[id(region.outputs[0])]


def build_graph(fn: Function, spmd: Any) -> Graph:
    """`spmd`: the SPMD exit's module for `fn`, or None (`shard_view.emitted_collectives`)."""
    return _GraphBuilder(emitted_collectives(fn, spmd)).function(fn)


CSS = """
body { font: 14px/1.45 system-ui, -apple-system, 'Segoe UI', sans-serif; margin: 24px;
       color: #1f2933; background: #fbfbfd; }
h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 16px; margin: 22px 0 8px; }
.meta { color: #52606d; margin-bottom: 10px; }
code, .mono, svg text { font-family: ui-monospace, 'DejaVu Sans Mono', Menlo, monospace; }
.legend span { display: inline-block; margin-right: 16px; }
.swatch { display: inline-block; width: 14px; height: 14px; border-radius: 3px;
          vertical-align: -2px; margin-right: 5px; border: 1px solid #7b8794; }
svg { background: white; border: 1px solid #d9e2ec; border-radius: 6px; }
.node rect { stroke: #52606d; stroke-width: 1.2; fill: #e6f0ff; }
.node.param rect { fill: #e3f9e5; }
.node.output rect { fill: #f0f4f8; }
.node.loop rect { fill: #f3e8ff; }
.node.reshard rect { fill: #ffe8cc; stroke: #d9480f; stroke-width: 2.2; }
.node text.title { font-size: 12.5px; font-weight: 600; fill: #102a43; }
.node text.subtitle { font-size: 11px; fill: #486581; }
.node.reshard text.subtitle { fill: #b3400b; font-weight: 600; }
.region rect { fill: #fff8db; stroke: #c9a227; stroke-dasharray: 6 4; stroke-width: 1.5; }
.region text { font-size: 11px; fill: #8d6e00; font-weight: 600; }
.edge path { fill: none; stroke: #829ab1; stroke-width: 1.3; }
.edge-label rect { fill: white; fill-opacity: 0.9; }
.edge-label text { font-size: 10.5px; fill: #334e68; }
.edge-label text.layout { fill: #9c4221; }
table { border-collapse: collapse; margin-top: 6px; }
th, td { border: 1px solid #d9e2ec; padding: 4px 10px; text-align: left; }
th { background: #f0f4f8; } td.collective { color: #b3400b; font-weight: 600; }
"""


def _node_lines(node: GraphNode) -> list[str]:
    lines = [node.title]
    if node.collectives:
        lines.append("; ".join(node.collectives))
    elif node.subtitle:
        lines.append(node.subtitle)
    return lines


def _svg_node(index: int, node: GraphNode, box: Box) -> str:
    lines = _node_lines(node)
    texts = [
        f'<text class="title" x="{box.cx:.1f}" y="{box.y + 19:.1f}" text-anchor="middle">'
        f"{escape(lines[0])}</text>"
    ]
    if len(lines) > 1:
        texts.append(
            f'<text class="subtitle" x="{box.cx:.1f}" y="{box.y + 36:.1f}" '
            f'text-anchor="middle">{escape(lines[1])}</text>'
        )
    return (
        f'<g class="node {node.kind}" id="n{index}" data-title="{escape(node.title)}">'
        f'<rect x="{box.x:.1f}" y="{box.y:.1f}" width="{box.width:.1f}" '
        f'height="{box.height:.1f}" rx="7"/>{"".join(texts)}</g>'
    )


def _svg_edge(edge: GraphEdge, boxes: list[Box]) -> str:
    a, b = boxes[edge.src], boxes[edge.dst]
    x1, y1, x2, y2 = a.cx, a.bottom + STEM, b.cx, b.y
    bend = max(24.0, (y2 - y1) / 2)
    path = (
        f"M{x1:.1f},{a.bottom:.1f} L{x1:.1f},{y1:.1f} "
        f"C{x1:.1f},{y1 + bend:.1f} {x2:.1f},{y2 - bend:.1f} {x2:.1f},{y2:.1f}"
    )
    return (
        f'<g class="edge" data-src="n{edge.src}" data-dst="n{edge.dst}"><path d="{path}" '
        'marker-end="url(#arrow)"/></g>'
    )


def _svg_edge_label(edge: GraphEdge, box: Box) -> str:
    """The value's shape/dtype and layout, once per producer, on the stem under it: every edge
    leaving a node carries the same value, so one label serves them all without overlapping."""
    lines = [(edge.type_text, "type")] + (
        [(edge.layout_text, "layout")] if edge.layout_text else []
    )
    width = max(len(text) for text, _ in lines) * 6.4 + 8
    top = box.bottom + (STEM - 14 * len(lines)) / 2
    texts = "".join(
        f'<text class="{cls}" x="{box.cx:.1f}" y="{top + 11 + 14 * i:.1f}" text-anchor="middle">'
        f"{escape(text)}</text>"
        for i, (text, cls) in enumerate(lines)
    )
    return (
        f'<g class="edge-label" data-src="n{edge.src}"><rect x="{box.cx - width / 2:.1f}" '
        f'y="{top:.1f}" width="{width:.1f}" height="{14 * len(lines) + 2:.1f}" rx="3"/>{texts}</g>'
    )


def render_svg(graph: Graph) -> str:
    widths = [node_width(_node_lines(n)) for n in graph.nodes]
    edges = [(e.src, e.dst) for e in graph.edges]
    boxes, width, height = layered_layout(widths, edges, [n.region for n in graph.nodes])
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" role="img" aria-label="program graph">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#829ab1"/>'
        "</marker></defs>",
    ]
    for rid, kind in enumerate(graph.regions):
        members = [boxes[i] for i, n in enumerate(graph.nodes) if n.region == rid]
        caption = f"fusion #{rid} · {kind}"
        frame = enclosing(members, len(caption) * 6.8 + 16)
        parts.append(
            f'<g class="region" id="r{rid}" data-kind="{escape(kind)}">'
            f'<rect x="{frame.x:.1f}" y="{frame.y:.1f}" width="{frame.width:.1f}" '
            f'height="{frame.height:.1f}" rx="10"/>'
            f'<text x="{frame.x + 8:.1f}" y="{frame.y + 13:.1f}">{escape(caption)}</text></g>'
        )
    parts.extend(_svg_edge(edge, boxes) for edge in graph.edges)
    labelled: dict[int, GraphEdge] = {}
    for edge in graph.edges:
        labelled.setdefault(edge.src, edge)
    parts.extend(_svg_edge_label(edge, boxes[src]) for src, edge in labelled.items())
    parts.extend(_svg_node(i, node, boxes[i]) for i, node in enumerate(graph.nodes))
    parts.append("</svg>")
    return "\n".join(parts)


def _shape_table(fn: Function, spmd: Any) -> str:
    rows = [r for r in value_rows(fn, spmd) if r.states]
    if not rows:
        return '<p id="local-shapes">No sharded values: every value is whole on one device.</p>'
    body = "".join(
        "<tr>"
        f"<td class=mono>{escape(r.name)}</td><td class=mono>{escape(r.op)}</td>"
        f"<td class=mono>{escape(short_type(r.type_))}</td><td>{escape(r.states)}</td>"
        f"<td class=mono>{escape(shape_text(r.local))} × {r.devices}</td>"
        f'<td class="collective">{escape("; ".join(r.collectives))}</td>'
        "</tr>"
        for r in rows
    )
    return (
        '<table id="local-shapes"><thead><tr><th>value</th><th>op</th><th>global</th>'
        "<th>mesh axes</th><th>per-device shape × devices</th><th>reshard collective</th>"
        f"</tr></thead><tbody>{body}</tbody></table>"
    )


def _fusion_list(fusion: Any) -> str:
    if fusion is None:
        return ""
    items = "".join(
        f"<li>fusion #{i} <b>{escape(r.kind)}</b>: {escape(', '.join(r.ops))} "
        f"({r.saved_bytes} bytes not materialised)</li>"
        for i, r in enumerate(fusion.regions)
    )
    headline = escape(str(fusion).splitlines()[0])
    return f'<h2>Fusion</h2><p id="fusion-summary">{headline}</p><ul>{items}</ul>'


def render_report(
    fn: Function, fusion: Any = None, *, spmd: Any, source: str = "", note: str = ""
) -> str:
    """The page for `fn` (normally the output of `passes.compile`, with its FusionReport);
    `spmd`: the SPMD exit's module for `fn`, or None (`shard_view.emitted_collectives`)."""
    graph = build_graph(fn, spmd)
    legend = (
        '<div class="legend">'
        '<span><i class="swatch" style="background:#e3f9e5"></i>parameter</span>'
        '<span><i class="swatch" style="background:#e6f0ff"></i>op</span>'
        '<span><i class="swatch" style="background:#ffe8cc;border-color:#d9480f"></i>'
        "reshard (its collective)</span>"
        '<span><i class="swatch" style="background:#fff8db;border:1px dashed #c9a227"></i>'
        "fusion region</span>"
        "<span>edge: <code>dtype[shape]</code> / <code>axis:S&lt;dim&gt;</code> split, "
        "<code>P(sum)</code> pending partial, <code>B</code> replicated</span></div>"
    )
    meta = (
        f"{len(graph.nodes)} nodes, {len(graph.edges)} edges, {len(graph.regions)} fusion regions"
    )
    if source:
        meta = f"from <code>{escape(source)}</code> · {meta}"
    if note:
        meta += f" · {escape(note)}"
    return (
        "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
        f"<title>tilefoundry report: {escape(fn.name)}</title><style>{CSS}</style></head><body>"
        f"<h1>@{escape(fn.name)}</h1><div class=meta>{meta}</div>{legend}"
        f'<h2>Graph</h2><div id="graph">{render_svg(graph)}</div>'
        f"{_fusion_list(fusion)}"
        f"<h2>Per-device shapes</h2>{_shape_table(fn, spmd)}"
        "</body></html>\n"
    )
