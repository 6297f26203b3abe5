"""Dynamo's symbolic example inputs: which dimensions vary, and sizes passed as arguments.

Once Dynamo sees a dimension change between calls it compiles the frame again with
that dimension a symbol: the tensor's fake has a ``SymInt`` there, and the graph
takes the symbol itself as an extra argument (``s0``), passed the size at run time.
aotfx honours both: the dimension is traced symbolic (``meta.symbolic``), and a size
argument that some tensor argument's dimension equals is read from that tensor
inside the graph instead (``sym_size``), so that it is no constant of the input
signature, which would compile once per value. A size argument no tensor has
(a symbolic Python int) stays an argument, specialized on its value.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import torch
import torch.fx as fx

__all__ = ["dynamic_dims_of", "sizes_read_from_tensors", "symbolic_examples"]


def _is_symbol(size: Any) -> bool:
    return isinstance(size, torch.SymInt) and bool(size.node.expr.free_symbols)


def symbolic_examples(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> list[Any]:
    """The example of each input as Dynamo traced it: its placeholder's fake (``example_value``)
    where it has one (Dynamo may hand the backend the real tensors), else the example input."""
    placeholders = [node for node in gm.graph.nodes if node.op == "placeholder"]
    if len(placeholders) != len(example_inputs):
        return list(example_inputs)
    return [node.meta.get("example_value", value) for node, value in zip(placeholders, example_inputs, strict=True)]


def dynamic_dims_of(example_inputs: Sequence[Any]) -> dict[int, tuple[int, ...]]:
    """Input position -> the dimensions Dynamo made symbolic in its example (fake) tensor."""
    dims = {}
    for position, value in enumerate(example_inputs):
        if isinstance(value, torch.Tensor):
            symbolic = tuple(d for d, size in enumerate(value.shape) if _is_symbol(size))
            if symbolic:
                dims[position] = symbolic
    return dims


def sizes_read_from_tensors(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> tuple[fx.GraphModule, list[int]]:
    """``gm`` with each size argument equal to a tensor argument's dimension read from that tensor.

    Returns the new graph module, which no longer takes those arguments, and their
    positions in the old calling convention (for the caller to drop at run time).
    """
    found: dict[Any, tuple[int, int]] = {}  # symbolic expression -> (tensor position, dimension)
    for position, value in enumerate(example_inputs):
        if isinstance(value, torch.Tensor):
            for dim, size in enumerate(value.shape):
                if _is_symbol(size):
                    found.setdefault(cast(torch.SymInt, size).node.expr, (position, dim))
    placeholders = [node for node in gm.graph.nodes if node.op == "placeholder"]
    dropped = [
        position
        for position, value in enumerate(example_inputs)
        if _is_symbol(value) and value.node.expr in found and position < len(placeholders)
    ]
    if not dropped:
        return gm, []
    graph = fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    copied = [node for node in graph.nodes if node.op == "placeholder"]
    last = copied[-1]
    for position in dropped:
        tensor_position, dim = found[example_inputs[position].node.expr]
        with graph.inserting_after(last):
            read = graph.call_function(torch.ops.aten.sym_size.int, (copied[tensor_position], dim))
        last = read
        read.meta["example_value"] = example_inputs[position]
        copied[position].replace_all_uses_with(read)
        graph.erase_node(copied[position])
    return fx.GraphModule(gm, graph), dropped
