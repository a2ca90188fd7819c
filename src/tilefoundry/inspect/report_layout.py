"""Geometry for the HTML report: a layered (Sugiyama-style, one sweep) drawing of a DAG.

Programs are small (tens of ops) and mostly chains, so a simple scheme reads well and stays
deterministic: a node's layer is its longest path from the inputs, nodes within a layer are
ordered by the mean position of their producers, and each layer is centred. No crossing
minimisation beyond that one sweep; determinism matters more than optimality for a report that
people diff.
"""

from __future__ import annotations

from dataclasses import dataclass

CHAR_WIDTH = 7.2
NODE_HEIGHT = 46
NODE_PADDING = 22
LAYER_GAP = 84
STEM = 34
"""The straight drop under a node that carries its value's label before edges fan out."""
NODE_GAP = 36
MARGIN = 40


@dataclass
class Box:
    x: float
    y: float
    width: float
    height: float

    @property
    def cx(self) -> float:
        return self.x + self.width / 2

    @property
    def bottom(self) -> float:
        return self.y + self.height


def node_width(lines: list[str]) -> float:
    return max(96.0, max(len(line) for line in lines) * CHAR_WIDTH + NODE_PADDING)


def _layers(
    producers: list[list[int]], consumers: list[list[int]], groups: list[int | None]
) -> list[int]:
    """Longest path from the inputs; then every source (a parameter, an op reading only
    constants) moves down to just above its first consumer, so inputs sit next to their use,
    but never into the rows a group (a fusion region's box) spans unless it belongs to it."""
    count = len(groups)
    layer = [0] * count
    for node in range(count):
        if producers[node]:
            layer[node] = 1 + max(layer[p] for p in producers[node])
    spans: dict[int, tuple[int, int]] = {}
    for node, group in enumerate(groups):
        if group is not None and producers[node]:
            low, high = spans.get(group, (layer[node], layer[node]))
            spans[group] = (min(low, layer[node]), max(high, layer[node]))
    for node in range(count):
        if producers[node] or not consumers[node]:
            continue
        layer[node] = min(layer[c] for c in consumers[node]) - 1
        for group, (top, bottom) in spans.items():
            if group != groups[node] and top <= layer[node] <= bottom:
                layer[node] = top - 1
    return layer


def _order(
    rows: list[list[int]],
    neighbours: list[list[int]],
    centre: dict[int, float],
    widths: list[float],
) -> None:
    """Sort each row by the mean centre of `neighbours` (a node without any keeps its place),
    then re-pack the row left to right."""
    for row in rows:

        def key(node: int) -> tuple[float, int]:
            placed = [centre[p] for p in neighbours[node] if p in centre]
            return (sum(placed) / len(placed) if placed else centre.get(node, -1.0), node)

        row.sort(key=key)
        x = 0.0
        for node in row:
            centre[node] = x + widths[node] / 2
            x += widths[node] + NODE_GAP


def layered_layout(
    widths: list[float], edges: list[tuple[int, int]], groups: list[int | None]
) -> tuple[list[Box], float, float]:
    """Boxes for nodes 0..n-1 (given in a topological order) and the drawing's width, height;
    `groups` names each node's fusion region (None outside any)."""
    count = len(widths)
    producers: list[list[int]] = [[] for _ in range(count)]
    consumers: list[list[int]] = [[] for _ in range(count)]
    for src, dst in edges:
        producers[dst].append(src)
        consumers[src].append(dst)
    layer = _layers(producers, consumers, groups)
    rows: list[list[int]] = [[] for _ in range(max(layer, default=0) + 1)]
    for node in range(count):
        rows[layer[node]].append(node)
    centre: dict[int, float] = {}
    _order(rows, producers, centre, widths)
    _order(rows[::-1], consumers, centre, widths)
    _order(rows, producers, centre, widths)

    row_widths = [sum(widths[n] for n in row) + NODE_GAP * (len(row) - 1) for row in rows]
    width = max(row_widths, default=0.0) + 2 * MARGIN
    boxes: list[Box | None] = [None] * count
    for index, row in enumerate(rows):
        x = (width - row_widths[index]) / 2
        y = MARGIN + index * (NODE_HEIGHT + LAYER_GAP)
        for node in row:
            boxes[node] = Box(x, y, widths[node], NODE_HEIGHT)
            x += widths[node] + NODE_GAP
    height = MARGIN * 2 + len(rows) * NODE_HEIGHT + (len(rows) - 1) * LAYER_GAP
    return [b for b in boxes if b is not None], width, height


def enclosing(boxes: list[Box], min_width: float, pad: float = 12.0) -> Box:
    """The rectangle around `boxes`, with room for a caption above and at least `min_width`."""
    left = min(b.x for b in boxes) - pad
    top = min(b.y for b in boxes) - pad - 14
    right = max(max(b.x + b.width for b in boxes) + pad, left + min_width)
    bottom = max(b.bottom for b in boxes) + pad
    return Box(left, top, right - left, bottom - top)
