"""The text half of :mod:`aot.inspect`: entries, graphs as code, saved values, op counts, the report."""

from __future__ import annotations

import operator
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.fx as fx

from aot.compile.descriptors import DESC, Primal, Saved, Tangent

if TYPE_CHECKING:
    from aot.compile.core import CompiledEntry

from aot.compile.source_lines import source_line

__all__ = [
    "NOT_RECORDED",
    "RecomputedOp",
    "SavedValue",
    "entries",
    "graph_code",
    "graphs",
    "op_count_table",
    "op_counts",
    "recomputed_ops",
    "report",
    "saved_bytes",
    "saved_for_backward",
    "saved_report",
    "saved_values",
]

NOT_RECORDED = "(source line not recorded)"


# --------------------------------------------------------------------------------------------
# Entries and graphs


def entries(compiled: Any) -> list[CompiledEntry]:
    """Every compiled entry of ``compiled`` (an entry, an ``AOTFunction``, an ``AOTModule``), oldest first."""
    from aot.compile.core import CompiledEntry

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
    """The entry's graphs by kind (``joint``, ``forward``, ``backward``, ``inference``), those that exist.

    Once a backward ran with grad mode on, the higher-order backward's graphs follow, prefixed by
    their order: ``order2_joint``, ``order2_forward`` (the saved values recomputed, then the first
    backward), ``order2_backward`` (the second derivative), then ``order3_...``.
    """
    entry = _entry(compiled)
    found: dict[str, fx.GraphModule] = {}
    order = 1
    while True:
        kinds = {"joint": entry.joint, "forward": entry.forward, "backward": entry.backward}
        kinds["inference"] = entry.inference
        prefix = f"order{order}_" if order > 1 else ""
        found |= {prefix + kind: gm for kind, gm in kinds.items() if gm is not None}
        if entry.higher_order is None or not entry.higher_order.entries:
            return found
        entry, order = entry.higher_order.entries[-1], order + 1


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
    # Why it is saved rather than recomputed in the backward: "input" (the caller holds it), "random"
    # (a second draw would differ), "needed" (not cheap or safe to run again: a matmul, a convolution,
    # an op with an effect) or "cheaper to save" (recomputable, and the partitioner chose to save it).
    why: str = "needed"


@dataclass(frozen=True)
class RecomputedOp:
    """A forward op the backward runs again (a rematerializing partitioner's choice)."""

    name: str
    producer: str
    flops: int  # estimated, as the memory-budget planner counts them
    source: str | None


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
        if made_by is not None and _is_draw_state(made_by):
            producer = f"generator state for {_op_name(made_by.args[0].args[0])}"
        elif made_by is not None and not is_input:
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
                why=_why_saved(made_by, is_input),
            )
        )
    return rows


def _is_draw_state(node: fx.Node) -> bool:
    from torch._prims.rng_prims import run_and_save_rng_state

    source = node.args[0] if node.target is operator.getitem and node.args else None
    state_of_draw = isinstance(source, fx.Node) and source.target is run_and_save_rng_state
    index = node.args[1] if len(node.args) > 1 else None
    return state_of_draw and isinstance(index, int) and index == 0


def _why_saved(node: fx.Node | None, is_input: bool) -> str:
    from aot.compile.min_cut import is_recomputable
    from aot.compile.partition import is_random

    if is_input or node is None:
        return "input"
    if _is_draw_state(node):
        return "replays a draw"
    if is_random(node):
        return "random"
    return "cheaper to save" if is_recomputable(node) else "needed"


def recomputed_ops(compiled: Any) -> list[RecomputedOp]:
    """Forward ops the backward runs again, in the backward's order, with their estimated FLOPs."""
    from aot.compile.memory_budget import node_flops

    entry = _entry(compiled)
    if entry.backward is None or entry.forward is None:
        return []
    from torch._prims.rng_prims import run_with_rng_state

    forward = {node.name for node in entry.forward.graph.nodes if node.op == "call_function"}
    ops = []
    for node in entry.backward.graph.nodes:
        if node.op == "call_function" and node.target is run_with_rng_state:  # a random op, replayed
            op = f"{_op_name(node.args[1])} (replayed)"
            numel = node.meta["val"].numel() if isinstance(node.meta.get("val"), torch.Tensor) else 0
            ops.append(RecomputedOp(node.name, op, numel, source_line(node)))
        elif node.op == "call_function" and node.name in forward:
            ops.append(RecomputedOp(node.name, _op_name(node.target), node_flops(node), source_line(node)))
    return ops


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
    """The saved-for-backward values as a table (name, dtype[shape], bytes, producing op, why it is saved,
    user source line), then the forward ops the backward runs again with their estimated FLOPs."""
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
                row.why,
                row.source or ("" if row.is_input else NOT_RECORDED),
            ]
            for row in rows
        ]
        header = ["name", "value", "bytes", "op", "why", "source"]
        lines += ["  " + line for line in _table(header, cells, right={2})]
    recomputed = recomputed_ops(compiled)
    if recomputed:
        flops = sum(op.flops for op in recomputed)
        lines.append(f"recomputed in the backward: {len(recomputed)} ops, {flops} FLOPs")
        cells = [[op.name, op.producer, str(op.flops), op.source or NOT_RECORDED] for op in recomputed]
        lines += ["  " + line for line in _table(["name", "op", "flops", "source"], cells, right={2})]
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
# The report


def report(compiled: Any) -> str:
    """Meta in words, each graph with shapes, op counts, and the saved activations with their sources."""
    entry = _entry(compiled)
    parts = [f"compiled in {entry.compile_seconds * 1e3:.1f} ms", "meta:", entry.meta.describe()]
    for kind, gm in graphs(entry).items():
        if not kind.endswith("joint"):
            parts += [f"{kind} graph ({sum(op_counts(gm).values())} ops):", graph_code(gm)]
    parts += ["op counts:", op_count_table(entry)]
    if entry.backward is not None:
        parts.append(saved_report(entry))
    if entry.runtime_source:
        parts += ["runtime (generated):", entry.runtime_source]
    return "\n".join(parts)
