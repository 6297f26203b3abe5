"""``keep_inference_input_mutations``: the inference graph writes the mutated inputs itself.

Below the runtime epilogue, an input's final value is a graph output that the epilogue
copies into the caller's tensor. A backend that would rather see the write (inductor
fuses it into the kernel computing the value) asks for it in the graph, as with torch's
AOTAutograd: each such output becomes a ``copy_`` into the input's placeholder at the
end of the graph, and the graph returns ``None`` in its place, which tells the epilogue
the write is done (it still sets the version counter to eager's). Only writes a plain
``copy_`` under ``no_grad`` reproduces: nothing for autograd to record, no expanded
target (several indices per element), no inference tensor (writable only through a
``detach()`` alias outside inference mode).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.fx as fx

from aot.compile.partition import output_values
from meta.alias import AliasAnalysis
from meta.indices import GraphArg, GraphOut
from meta.storage import expanded_dims
from meta.view_and_mutation import ViewAndMutationMeta

__all__ = ["keep_input_writes"]


def keep_input_writes(
    gm: fx.GraphModule, meta: ViewAndMutationMeta[GraphArg, GraphOut], args: Sequence[torch.Tensor]
) -> None:
    """Make ``gm`` (an inference graph of ``meta``) write the mutated inputs a plain ``copy_`` can."""
    graph = gm.graph
    placeholders = [node for node in graph.nodes if node.op == "placeholder"]
    output = graph.output_node()
    values = output_values(gm)
    analysis = AliasAnalysis(graph)
    kept = False
    for position, info in enumerate(meta.output_info):
        arg = info.new_value_of
        if arg is None:
            continue
        target, value, tensor = placeholders[arg], values[position], args[arg]
        plain = not (info.requires_grad or meta.input_info[arg].requires_grad or tensor.is_inference())
        if not plain or expanded_dims(tensor.shape, tensor.stride()) or not isinstance(value, fx.Node):
            continue
        if analysis.may_alias(value, target):
            continue  # the write would read what it writes
        with graph.inserting_before(output):
            copy = graph.call_function(torch.ops.aten.copy_.default, (target, value))
        copy.meta["val"] = target.meta.get("val")
        values[position] = None
        kept = True
    if kept:
        output.args = (values,)
        graph.lint()
        gm.recompile()
