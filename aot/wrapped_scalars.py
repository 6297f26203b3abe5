"""Python scalars Dynamo passes as tensors: aotfx specializes the graph on their values.

When a Python float the compiled code reads changes between calls (a learning rate a
scheduler steps), Dynamo stops baking it in: it passes it as a 0-dim tensor input and
reads it back with ``.item()``, a symbolic float that aotfx's static-shape trace does not
have. aotfx compiles one graph per value instead, each ``.item()`` replaced by the value
itself: the graph computes with the same Python float eager does (``add_(alpha=-lr)``
rounds alike), and a new value compiles again, as Dynamo itself does for floats it
specializes.
"""

from __future__ import annotations

from typing import Any

import torch.fx as fx
from torch.utils._pytree import tree_map

__all__ = ["scalar_inputs", "specialized"]


def _is_item(node: fx.Node) -> bool:
    return node.op == "call_method" and node.target == "item"


def scalar_inputs(gm: fx.GraphModule) -> list[int]:
    """Positions of the placeholders that stand for Python scalars and are read with ``.item()``."""
    placeholders = [node for node in gm.graph.nodes if node.op == "placeholder"]
    return [
        position
        for position, node in enumerate(placeholders)
        if getattr(node.meta.get("grapharg"), "pass_arg_as_tensor", False) and any(map(_is_item, node.users))
    ]


def specialized(gm: fx.GraphModule, positions: list[int], values: tuple[Any, ...]) -> fx.GraphModule:
    """A copy of ``gm`` whose ``.item()`` reads of the placeholders at ``positions`` are ``values``.

    The placeholders stay (unused by those reads): the calling convention does not change.
    """
    graph = fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    placeholders = [node for node in graph.nodes if node.op == "placeholder"]
    for position, value in zip(positions, values, strict=True):
        for item in [user for user in placeholders[position].users if _is_item(user)]:
            for user in list(item.users):
                user.args = tree_map(lambda arg, item=item, value=value: value if arg is item else arg, user.args)
                user.kwargs = tree_map(lambda arg, item=item, value=value: value if arg is item else arg, user.kwargs)
            graph.erase_node(item)
    return fx.GraphModule(gm, graph)
