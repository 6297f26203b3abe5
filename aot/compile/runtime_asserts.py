"""What a trace assumed of sizes that depend on tensor data, checked by the graph on every call.

A size that depends on tensor data (``nonzero``'s, a boolean mask's) is an unbacked
symbol: the trace cannot read it, so where an op needs to know something of it
(two masks' counts equal, for ``x[m1] + y[m2]`` to add elementwise rather than
broadcast a count of 1) torch assumes it and records the assumption on the shape
environment. Such a call's graphs were traced for that case only: each graph that
computes such sizes checks each assumption once the sizes it names are computed, and
raises (a ``RuntimeError`` naming the assumption) where eager's data breaks it, rather
than compute something else. (A backward taking the forward's sizes as inputs computes
none: autograd checks each gradient's shape against its output.)
"""

from __future__ import annotations

import torch
import torch.fx as fx
from torch.fx.passes.runtime_assert import insert_deferred_runtime_asserts

from meta import symbolic

__all__ = ["insert_runtime_asserts"]

_WHY = (
    " (aotfx's trace assumed this of sizes that depend on tensor data, as torch's does, and this call's data "
    "breaks it; eager computes that case otherwise, e.g. broadcasting a count of 1: keep the data-dependent "
    "part outside the compiled function)"
)


def insert_runtime_asserts(gm: fx.GraphModule, kind: str) -> None:
    """Add to ``gm`` the checks of what its trace assumed of data-dependent sizes (nothing without them)."""
    inputs = symbolic.current()
    if inputs is None or not any("unbacked_bindings" in node.meta for node in gm.graph.nodes):
        return
    insert_deferred_runtime_asserts(gm, inputs.shape_env, kind)
    for node in gm.graph.find_nodes(op="call_function", target=torch.ops.aten._assert_scalar.default):
        condition, message = node.args
        node.args = (condition, f"{message}{_WHY}")
    gm.recompile()
