"""The knobs of one ``aot_function`` call, gathered in one frozen record."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["AOTConfig", "Compiler", "PartitionFn"]

# A backend compiler: (graph, example inputs) -> callable running the graph.
Compiler = Callable[[torch.fx.GraphModule, list[Any]], Callable[..., Any]]
# A partitioner: (joint graph, joint inputs, *, num_fwd_outputs) -> (forward graph, backward graph).
PartitionFn = Callable[..., tuple[torch.fx.GraphModule, torch.fx.GraphModule]]


@dataclass(frozen=True)
class AOTConfig:
    fw_compiler: Compiler
    bw_compiler: Compiler
    inference_compiler: Compiler
    partition_fn: PartitionFn
    decompositions: Mapping[Any, Callable[..., Any]] = field(default_factory=dict)
    num_params_buffers: int = 0
    keep_inference_input_mutations: bool = False
    # False: this function's compiles log nothing on the ``aot.*`` channels (``aot.logs``).
    enable_log: bool = True
    # Persistent compile cache directory; None: AOTFX_CACHE_DIR, else in-process only.
    cache_dir: str | None = None
    # Dynamic shapes (``meta.symbolic``): every dimension of every input but parameters and buffers ...
    dynamic: bool = False
    # ... or these: (input name or flat tensor position, its dimensions).
    dynamic_dims: tuple[tuple[str | int, tuple[int, ...]], ...] = ()
