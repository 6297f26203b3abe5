"""Text reports of what was compiled: graphs with shapes, the meta, saved activations."""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx

from aot.core import CompiledEntry
from aot.descriptors import DESC, Saved

__all__ = ["graph_code", "report", "saved_bytes", "saved_for_backward"]


def graph_code(gm: fx.GraphModule) -> str:
    """The graph as Python, each value annotated with dtype, shape and strides."""
    text: str = gm.print_readable(print_output=False, include_stride=True, include_device=False)
    return text


def _tensor_bytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    return 0


def saved_for_backward(entry: CompiledEntry) -> list[tuple[str, tuple[int, ...], torch.dtype | None, int]]:
    """(name, shape, dtype, bytes) of every value the forward saves for the backward."""
    if entry.backward is None:
        return []
    rows = []
    for node in entry.backward.graph.nodes:
        if node.op == "placeholder" and isinstance(node.meta.get(DESC), Saved):
            value = node.meta.get("val")
            shape = tuple(value.shape) if isinstance(value, torch.Tensor) else ()
            dtype = value.dtype if isinstance(value, torch.Tensor) else None
            rows.append((node.name, shape, dtype, _tensor_bytes(value)))
    return rows


def saved_bytes(entry: CompiledEntry) -> int:
    return sum(row[3] for row in saved_for_backward(entry))


def _op_count(gm: fx.GraphModule | None) -> int:
    return 0 if gm is None else sum(1 for node in gm.graph.nodes if node.op == "call_function")


def report(entry: CompiledEntry) -> str:
    """Meta in words, each graph with shapes, and the saved activations with their sizes."""
    parts = [f"compiled in {entry.compile_seconds * 1e3:.1f} ms", "meta:", entry.meta.describe()]
    for label, gm in (("inference", entry.inference), ("forward", entry.forward), ("backward", entry.backward)):
        if gm is not None:
            parts.append(f"{label} graph ({_op_count(gm)} ops):")
            parts.append(graph_code(gm))
    rows = saved_for_backward(entry)
    if rows:
        parts.append(f"saved for backward ({len(rows)} values, {sum(r[3] for r in rows)} bytes):")
        parts += [f"  {name}: {dtype} {list(shape)} = {size} bytes" for name, shape, dtype, size in rows]
    return "\n".join(parts)
