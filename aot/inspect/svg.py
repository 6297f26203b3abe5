"""Pictures of graphs: graphviz's layout with ``pydot`` and ``dot``, else a built-in SVG renderer."""

from __future__ import annotations

import importlib
import importlib.util
import shutil
from collections import defaultdict
from typing import TYPE_CHECKING, Any
from xml.sax.saxutils import escape, quoteattr

import torch.fx as fx

from aot.compile.descriptors import DESC, Primal, Saved, Tangent

if TYPE_CHECKING:
    pass

from aot.inspect.report import _op_name, _value_text, graphs

__all__ = ["graph_dot", "graph_svg", "svgs"]


_FILL = {"input": "#d9ead3", "tangent": "#e1d5e7", "saved": "#fce5cd", "op": "#dae8fc", "output": "#eeeeee"}


def _kind(node: fx.Node) -> str:
    if node.op == "placeholder":
        desc = node.meta.get(DESC)
        return "saved" if isinstance(desc, Saved) else "tangent" if isinstance(desc, Tangent) else "input"
    return "output" if node.op == "output" else "op"


def _label(node: fx.Node) -> list[str]:
    desc = node.meta.get(DESC)
    if node.op == "placeholder":
        what = f"input {desc.name}" if isinstance(desc, Primal) else _kind(node)
    elif node.op == "output":
        returned = node.args[0]
        what = f"returns {len(returned)}" if isinstance(returned, list | tuple) else "returns 1"
    else:
        what = _op_name(node.target)
    value = "" if node.op == "output" else _value_text(node.meta.get("val"))
    return [node.name, f"{what} {value}".strip()]


def _edges(gm: fx.GraphModule) -> list[tuple[fx.Node, fx.Node]]:
    return [(source, node) for node in gm.graph.nodes for source in dict.fromkeys(node.all_input_nodes)]


def graph_dot(gm: fx.GraphModule, name: str = "graph") -> str:
    """The graph in graphviz's DOT language: one box per node (name, op, dtype and shape), one edge per use."""

    def quoted(text: str) -> str:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'

    lines = [f"digraph {quoted(name)} {{", '  node [shape=box, style="rounded,filled", fontname="monospace"];']
    for node in gm.graph.nodes:
        label = "\\n".join(part.replace("\\", "\\\\").replace('"', '\\"') for part in _label(node))
        lines.append(f'  {quoted(node.name)} [label="{label}", fillcolor="{_FILL[_kind(node)]}"];')
    lines += [f"  {quoted(a.name)} -> {quoted(b.name)};" for a, b in _edges(gm)]
    return "\n".join([*lines, "}"])


def graph_svg(gm: fx.GraphModule, engine: str = "auto") -> str:
    """An SVG picture of the graph (show it with ``IPython.display.SVG``).

    Args:
        engine: ``"graphviz"``: pydot and graphviz's ``dot`` lay it out (``pip install aotfx[viz]``
            plus graphviz); ``"builtin"``: a dependency-free renderer, nodes in rows by depth;
            ``"auto"``: graphviz when both are installed, else builtin.

    Raises:
        ImportError: ``engine="graphviz"`` without pydot.
        RuntimeError: ``engine="graphviz"`` without the ``dot`` binary.
    """
    if engine == "auto":
        engine = "graphviz" if importlib.util.find_spec("pydot") and shutil.which("dot") else "builtin"
    if engine == "builtin":
        return _render_svg(gm)
    if engine != "graphviz":
        raise ValueError(f"engine must be 'auto', 'graphviz' or 'builtin', not {engine!r}")
    try:
        pydot = importlib.import_module("pydot")
    except ImportError as error:
        raise ImportError(
            "graph_svg(engine='graphviz') needs pydot: pip install aotfx[viz] (and graphviz for the `dot` "
            "binary); engine='builtin' draws without either"
        ) from error
    if shutil.which("dot") is None:
        raise RuntimeError(
            "graphviz's `dot` binary is not on PATH: install graphviz (apt-get install graphviz, "
            "brew install graphviz), or use graph_svg(gm, engine='builtin')"
        )
    (dot_graph,) = pydot.graph_from_dot_data(graph_dot(gm))
    svg: bytes = dot_graph.create_svg()
    return svg.decode()


def svgs(compiled: Any, engine: str = "auto") -> dict[str, str]:
    """An SVG of each graph of the entry, by kind."""
    return {kind: graph_svg(gm, engine) for kind, gm in graphs(compiled).items()}


_CHAR_W, _LINE_H, _PAD, _GAP_X, _GAP_Y, _MARGIN = 7, 14, 6, 16, 36, 10


def _render_svg(gm: fx.GraphModule) -> str:
    """Nodes in rows by longest path from the inputs; each row ordered and placed under its inputs."""
    nodes = list(gm.graph.nodes)
    depth: dict[fx.Node, int] = {}
    for node in nodes:
        depth[node] = 1 + max((depth[source] for source in node.all_input_nodes), default=-1)
    rows: dict[int, list[fx.Node]] = defaultdict(list)
    for node in nodes:
        rows[depth[node]].append(node)
    size = {n: (max(len(t) for t in _label(n)) * _CHAR_W + 2 * _PAD, 2 * _LINE_H + _PAD) for n in nodes}
    center: dict[fx.Node, float] = {}
    top: dict[fx.Node, float] = {}
    y = float(_MARGIN)
    for row_index in sorted(rows):
        row = rows[row_index]

        def wanted(node: fx.Node) -> float:
            sources = node.all_input_nodes
            return sum(center[s] for s in sources) / len(sources) if sources else 0.0

        if row_index:
            row.sort(key=wanted)
        right = float(_MARGIN - _GAP_X)
        for node in row:
            node_width = size[node][0]
            left = max(wanted(node) - node_width / 2 if row_index else 0.0, right + _GAP_X)
            center[node], top[node] = left + node_width / 2, y
            right = left + node_width
        y += max(size[n][1] for n in row) + _GAP_Y
    width = max(center[n] + size[n][0] / 2 for n in nodes) + _MARGIN
    height = y - _GAP_Y + _MARGIN
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="monospace" font-size="11">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" markerHeight="6" '
        'orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker></defs>',
    ]
    for source, target in _edges(gm):
        # Each input enters its node at its own point along the top edge, in argument order.
        inputs = list(dict.fromkeys(target.all_input_nodes))
        slot = (inputs.index(source) + 1) / (len(inputs) + 1)
        x1, y1 = center[source], top[source] + size[source][1]
        x2, y2 = center[target] + (slot - 0.5) * size[target][0], top[target]
        bend = (y2 - y1) / 2
        out.append(
            f'<g class="edge"><title>{escape(source.name)}-&gt;{escape(target.name)}</title>'
            f'<path d="M{x1:.1f},{y1:.1f} C{x1:.1f},{y1 + bend:.1f} {x2:.1f},{y2 - bend:.1f} {x2:.1f},{y2:.1f}" '
            'fill="none" stroke="#555" marker-end="url(#arrow)"/></g>'
        )
    for node in nodes:
        (w, h), x = size[node], center[node] - size[node][0] / 2
        first, second = _label(node)
        out.append(
            f'<g class="node" id={quoteattr("node-" + node.name)}><title>{escape(node.name)}</title>'
            f'<rect x="{x:.1f}" y="{top[node]:.1f}" width="{w}" height="{h}" rx="4" '
            f'fill="{_FILL[_kind(node)]}" stroke="#333"/>'
            f'<text x="{center[node]:.1f}" y="{top[node] + _LINE_H:.1f}" text-anchor="middle" '
            f'font-weight="bold">{escape(first)}</text>'
            f'<text x="{center[node]:.1f}" y="{top[node] + 2 * _LINE_H:.1f}" text-anchor="middle">'
            f"{escape(second)}</text></g>"
        )
    return "\n".join([*out, "</svg>"])
