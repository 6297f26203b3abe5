"""What was compiled, for people: graphs with shapes, saved activations with source lines, op counts, pictures.

Every function here takes a *compiled thing*: a ``CompiledEntry`` (one input
signature), or an ``AOTFunction`` / ``AOTModule`` / the callable
``aot_module_simplified`` returns, meaning its most recently compiled entry
(pick another from ``.entries``).

- :func:`graphs` / :func:`graph_code`: the joint, forward, backward and inference
  graphs, as Python with dtype, shape and strides on every value;
- :func:`saved_values` / :func:`saved_report`: what the forward saves for the
  backward, with shape, dtype, bytes, the op and the user source line that made
  it (like JAX's ``print_saved_residuals``);
- :func:`op_count_table`: ops per overload, forward next to backward;
- :func:`graph_svg` / :func:`svgs`: a picture of each graph. With ``pydot`` (``pip install
  aotfx[viz]``) and graphviz's ``dot`` binary it is graphviz's layout; without them a
  built-in renderer draws the same nodes and edges, so notebooks work anywhere;
- :func:`report`: all of the above in text, with the meta in words.

Source lines come from ``node.meta["stack_trace"]``, which the tracer records
while :func:`recording_source_lines` is active.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import re
import shutil
import sys
import sysconfig
import threading
import traceback
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any
from xml.sax.saxutils import escape, quoteattr

import torch
import torch.fx as fx
import torch.fx.traceback as fx_traceback
from torch.overrides import TorchFunctionMode

from aot.descriptors import DESC, Primal, Saved, Tangent

if TYPE_CHECKING:
    from aot.core import CompiledEntry

__all__ = [
    "SavedValue",
    "entries",
    "graph_code",
    "graph_dot",
    "graph_svg",
    "graphs",
    "op_count_table",
    "op_counts",
    "recording_source_lines",
    "report",
    "saved_bytes",
    "saved_for_backward",
    "saved_report",
    "saved_values",
    "source_line",
    "svgs",
]

NOT_RECORDED = "(source line not recorded)"


# --------------------------------------------------------------------------------------------
# Entries and graphs


def entries(compiled: Any) -> list[CompiledEntry]:
    """Every compiled entry of ``compiled`` (an entry, an ``AOTFunction``, an ``AOTModule``), oldest first."""
    from aot.core import CompiledEntry

    if isinstance(compiled, CompiledEntry):
        return [compiled]
    holder = getattr(compiled, "compiled", compiled)  # AOTModule and aot_module_simplified's forward
    found = getattr(holder, "entries", None)
    if found is None:
        raise TypeError(f"expected a CompiledEntry, AOTFunction or AOTModule, got {type(compiled).__name__}")
    return list(found)


def _entry(compiled: Any) -> CompiledEntry:
    found = entries(compiled)
    if not found:
        raise ValueError("nothing compiled yet: call the compiled function once first")
    return found[-1]


def graphs(compiled: Any) -> dict[str, fx.GraphModule]:
    """The entry's graphs by kind (``joint``, ``forward``, ``backward``, ``inference``), those that exist."""
    entry = _entry(compiled)
    kinds = {"joint": entry.joint, "forward": entry.forward, "backward": entry.backward, "inference": entry.inference}
    return {kind: gm for kind, gm in kinds.items() if gm is not None}


def graph_code(gm: fx.GraphModule) -> str:
    """The graph as Python, each value annotated with dtype, shape and strides."""
    text: str = gm.print_readable(print_output=False, include_stride=True, include_device=False)
    return text


def _spec_text(dtype: torch.dtype, shape: tuple[int, ...]) -> str:
    return f"{_DTYPE_ABBRS.get(dtype, str(dtype).removeprefix('torch.'))}{list(shape)}"


def _value_text(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return _spec_text(value.dtype, tuple(value.shape))
    if isinstance(value, list | tuple):
        return "(" + ", ".join(_value_text(item) for item in value) + ")"
    return ""


_DTYPE_ABBRS = {torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16"}
_DTYPE_ABBRS |= {torch.int64: "i64", torch.int32: "i32", torch.int8: "i8", torch.uint8: "u8", torch.bool: "b8"}


def _op_name(target: Any) -> str:
    if isinstance(target, torch._ops.OpOverload):
        return str(target)  # aten.add.Tensor: the overload, as the op counts are keyed
    return getattr(target, "__name__", str(target))


# --------------------------------------------------------------------------------------------
# Source lines


_PROJECT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Frames in these directories are never "the user's line": torch, the standard library, aotfx itself.
_LIBRARY_DIRS = tuple(
    os.path.join(directory, "")
    for directory in (
        os.path.dirname(torch.__file__),
        sysconfig.get_paths()["stdlib"],
        *(os.path.join(_PROJECT, package) for package in ("aot", "meta", "wrappers")),
    )
)
_recording = threading.local()


_USER_FILES = (os.path.join(_PROJECT, "aot", "demo.py"),)  # the demo model is user code


def _is_user(frame: FrameType) -> bool:
    filename = frame.f_code.co_filename
    if filename.startswith("<"):
        # Code without a file: the user's (``python -c``, exec, IPython) runs in a module namespace;
        # make_fx's generated wrappers run with bare globals; frozen modules are the import system.
        module = frame.f_globals.get("__name__")
        return isinstance(module, str) and not module.startswith("torch") and not filename.startswith("<frozen")
    return not filename.startswith(_LIBRARY_DIRS) or filename in _USER_FILES


class _SourceLines(TorchFunctionMode):
    """Sets the fx stack trace to the user frames of each torch call while it is traced."""

    def __init__(self, outer: set[FrameType]) -> None:
        super().__init__()
        self.outer = outer

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        user: list[tuple[FrameType, int]] = []
        frame = sys._getframe(1)
        while frame is not None and frame not in self.outer:
            if _is_user(frame):
                user.append((frame, frame.f_lineno))
            frame = frame.f_back  # type: ignore[assignment]
        previous = fx_traceback.get_current_meta().get("stack_trace")
        fx_traceback.set_stack_trace(traceback.StackSummary.extract(reversed(user)).format())
        try:
            return func(*args, **(kwargs or {}))
        finally:
            fx_traceback.set_stack_trace([previous] if previous else [])


@contextlib.contextmanager
def recording_source_lines() -> Iterator[None]:
    """While active, ``make_fx`` records on each node the user code lines that produced it.

    Wrap a ``make_fx`` call in it: every node gets ``node.meta["stack_trace"]`` listing the
    frames of the traced function (not torch's, not aotfx's, not the caller's) that issued
    the torch call it came from. Nodes the autograd engine makes (the backward) get none.
    Re-entering it is a no-op.
    """
    if getattr(_recording, "active", False):
        yield
        return
    outer: set[FrameType] = set()
    frame: FrameType | None = sys._getframe(0)
    while frame is not None:
        outer.add(frame)
        frame = frame.f_back
    _recording.active = True
    try:
        with fx_traceback.preserve_node_meta(), _SourceLines(outer):
            yield
    finally:
        _recording.active = False


_FRAME = re.compile(
    r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>[^\n]+)\n(?:(?!\s*File ")(?P<code>[^\n]*))?'
)


def source_line(node: fx.Node | None) -> str | None:
    """``file:line in function: code`` of the innermost user frame in the node's stack trace, if recorded."""
    trace = None if node is None else node.meta.get("stack_trace")
    if not trace:
        return None
    frames = list(_FRAME.finditer(trace))
    if not frames:
        return None
    last = frames[-1]
    code = (last["code"] or "").strip()
    file = "cell" if "ipykernel_" in last["file"] else os.path.basename(last["file"])  # a notebook cell
    where = f"{file}:{last['line']} in {last['fn'].strip()}"
    return f"{where}: {code}" if code else where


# --------------------------------------------------------------------------------------------
# Saved for backward


@dataclass(frozen=True)
class SavedValue:
    """One value the forward saves for the backward."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype | None
    nbytes: int
    producer: str  # the op that computed it (``aten.relu.default``), or ``input <name>``
    source: str | None  # ``file:line in function: code``, None if not recorded
    is_input: bool = False  # a graph input saved as it is (no source line: the caller made it)


def _saved_placeholders(backward: fx.GraphModule) -> list[fx.Node]:
    placeholders = [node for node in backward.graph.nodes if node.op == "placeholder"]
    marked = [node for node in placeholders if isinstance(node.meta.get(DESC), Saved)]
    if marked:
        return marked
    # A partitioner of torch's convention that sets no descriptors: saved values come before the tangents.
    return [node for node in placeholders if not isinstance(node.meta.get(DESC), Tangent)]


def saved_values(compiled: Any) -> list[SavedValue]:
    """What the forward of the entry saves for the backward, in the backward's input order."""
    entry = _entry(compiled)
    if entry.backward is None:
        return []
    known = {
        node.name: node for gm in (entry.joint, entry.forward) if gm is not None for node in gm.graph.nodes
    }  # the forward's node wins: it is the one that runs
    rows = []
    for node in _saved_placeholders(entry.backward):
        value = node.meta.get("val")
        made_by = known.get(node.name)
        is_input = made_by is None or made_by.op == "placeholder"
        if made_by is not None and not is_input:
            producer = _op_name(made_by.target)
        else:
            desc = made_by.meta.get(DESC) if made_by is not None else None
            producer = f"input {desc.name}" if isinstance(desc, Primal) else "input"
        tensor = value if isinstance(value, torch.Tensor) else None
        rows.append(
            SavedValue(
                name=node.name,
                shape=() if tensor is None else tuple(tensor.shape),
                dtype=None if tensor is None else tensor.dtype,
                nbytes=0 if tensor is None else tensor.numel() * tensor.element_size(),
                producer=producer,
                source=source_line(made_by) or source_line(node),
                is_input=is_input,
            )
        )
    return rows


def saved_for_backward(compiled: Any) -> list[tuple[str, tuple[int, ...], torch.dtype | None, int]]:
    """``(name, shape, dtype, bytes)`` of every value the forward saves for the backward."""
    return [(row.name, row.shape, row.dtype, row.nbytes) for row in saved_values(compiled)]


def saved_bytes(compiled: Any) -> int:
    """Bytes of the values saved for the backward (each counted once, views too)."""
    return sum(row.nbytes for row in saved_values(compiled))


def _table(header: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    return [
        "  ".join(
            cell.rjust(w) if i in right else cell.ljust(w) for i, (cell, w) in enumerate(zip(r, widths, strict=True))
        ).rstrip()
        for r in (header, *rows)
    ]


def saved_report(compiled: Any) -> str:
    """The saved-for-backward values as a table: name, dtype[shape], bytes, producing op, user source line."""
    rows = saved_values(compiled)
    total = sum(row.nbytes for row in rows)
    lines = [f"saved for backward: {len(rows)} values, {total} bytes ({total / 1024:.1f} KiB)"]
    if rows:
        cells = [
            [
                row.name,
                "-" if row.dtype is None else _spec_text(row.dtype, row.shape),
                str(row.nbytes),
                row.producer,
                row.source or ("" if row.is_input else NOT_RECORDED),
            ]
            for row in rows
        ]
        lines += ["  " + line for line in _table(["name", "value", "bytes", "op", "source"], cells, right={2})]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Op counts


def op_counts(gm: fx.GraphModule) -> Counter[str]:
    """How often each op overload (``aten.mm.default``) is called in ``gm``."""
    return Counter(_op_name(node.target) for node in gm.graph.nodes if node.op == "call_function")


def op_count_table(compiled: Any) -> str:
    """Op overload -> count in the forward and in the backward (the inference graph if that is all there is)."""
    found = graphs(compiled)
    kinds: list[str] = [kind for kind in ("forward", "backward") if kind in found]
    kinds = kinds or [kind for kind in ("inference",) if kind in found]
    counts = {kind: op_counts(found[kind]) for kind in kinds}
    ops = sorted({op for c in counts.values() for op in c}, key=lambda op: (-sum(c[op] for c in counts.values()), op))
    rows = [[op, *(str(counts[kind][op]) for kind in kinds)] for op in ops]
    rows.append(["total", *(str(sum(counts[kind].values())) for kind in kinds)])
    return "\n".join(_table(["op", *kinds], rows, right=set(range(1, len(kinds) + 1))))


# --------------------------------------------------------------------------------------------
# Pictures


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


# --------------------------------------------------------------------------------------------
# The report


def report(compiled: Any) -> str:
    """Meta in words, each graph with shapes, op counts, and the saved activations with their sources."""
    entry = _entry(compiled)
    parts = [f"compiled in {entry.compile_seconds * 1e3:.1f} ms", "meta:", entry.meta.describe()]
    for kind, gm in graphs(entry).items():
        if kind != "joint":
            parts += [f"{kind} graph ({sum(op_counts(gm).values())} ops):", graph_code(gm)]
    parts += ["op counts:", op_count_table(entry)]
    if entry.backward is not None:
        parts.append(saved_report(entry))
    return "\n".join(parts)
