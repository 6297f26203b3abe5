"""The layer protocol and the runner that stacks layers around the core.

A layer rewrites the calling convention of the flat function in one direction
before compiling (``pre_compile``: outer function, args and meta to inner ones)
and undoes it after (``post_compile``: compiled inner runtime to compiled outer
runtime). A layer never asks about another layer: each can be tested alone by
wrapping a hand-written inner runtime.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from meta.view_and_mutation import ViewAndMutationMeta

__all__ = ["CoreCompiler", "FlatFn", "Layer", "Runtime", "Stage", "compile_through"]

# The function being compiled: takes tensors positionally, returns a sequence of tensors.
FlatFn = Callable[..., Sequence[torch.Tensor]]
# A compiled flat function: takes a list of tensors (which it leaves untouched), returns a list.
Runtime = Callable[[list[torch.Tensor]], list[Any]]


@dataclass(frozen=True)
class Stage:
    """The flat function, example arguments and meta at one depth of the stack."""

    fn: FlatFn
    args: list[torch.Tensor]
    meta: ViewAndMutationMeta


class Layer(Protocol):
    """One rewrite of the calling convention. An instance serves one compile."""

    def pre_compile(self, outer: Stage) -> Stage: ...

    def post_compile(self, inner: Runtime) -> Runtime: ...


CoreCompiler = Callable[[Stage], Runtime]


def compile_through(layers: Sequence[Layer], stage: Stage, core: CoreCompiler) -> Runtime:
    """Run every layer's ``pre_compile`` outside-in, the core, then every ``post_compile`` inside-out."""
    for layer in layers:
        stage = layer.pre_compile(stage)
    runtime = core(stage)
    for layer in reversed(layers):
        runtime = layer.post_compile(runtime)
    return runtime
