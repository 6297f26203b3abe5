"""aotfx as a ``torch.compile`` backend: ``torch.compile(model, backend="aotfx")``.

``aotfx`` and ``aotfx_inductor`` are registered under those names through the
``torch_dynamo_backends`` entry point (``pyproject.toml``); :func:`make_backend`
builds one around any compilers. Dynamo hands each captured graph to
``aot_module_simplified``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch.fx as fx

from aot.api import aot_module_simplified
from aot.backends import inductor, inductor_decompositions, nop
from aot.compile.min_cut import min_cut_rematerialization_partition
from aot.compile.policy import ActivationPolicy

__all__ = ["aotfx", "aotfx_inductor", "make_backend"]


def make_backend(
    fw_compiler: Callable[..., Any] = nop,
    bw_compiler: Callable[..., Any] | None = None,
    partition_fn: Callable[..., Any] | None = None,
    decompositions: Any = None,
    inference_compiler: Callable[..., Any] | None = None,
    keep_inference_input_mutations: bool = True,
    activation_memory_budget: float | int | None = None,
    activation_policy: ActivationPolicy | None = None,
) -> Callable[[fx.GraphModule, list[Any]], Callable[..., Any]]:
    """A ``torch.compile`` backend that runs aotfx around the given compilers.

    ``decompositions`` is a table, or a function returning one (called per graph, so an
    expensive table is only built when a graph is compiled).

    ``torch.compile(model, backend=make_backend(my_compiler))``: Dynamo hands each
    captured graph to ``aot_module_simplified``, which traces, functionalizes and
    partitions it and gives the forward and backward graphs to the compilers. As torch's
    backends do, inference graphs write mutated inputs themselves (``keep_inference_input_mutations``).
    ``activation_memory_budget`` and ``activation_policy`` as in :func:`aot.aot_function`.
    """

    def backend(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        table = decompositions() if callable(decompositions) else decompositions
        return aot_module_simplified(
            gm,
            example_inputs,
            fw_compiler,
            bw_compiler,
            partition_fn,
            table,
            keep_inference_input_mutations,
            inference_compiler=inference_compiler,
            activation_memory_budget=activation_memory_budget,
            activation_policy=activation_policy,
        )

    return backend


# ``torch.compile(model, backend="aotfx")``, registered through the ``torch_dynamo_backends`` entry point.
aotfx = make_backend(nop)
# With a fusing compiler, recomputing cheap ops in the backward costs little time and saves memory.
aotfx_inductor = make_backend(
    inductor, decompositions=inductor_decompositions, partition_fn=min_cut_rematerialization_partition
)
