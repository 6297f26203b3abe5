"""Reference backend compilers: a baseline for users and tests.

A compiler takes ``(GraphModule, example_inputs)`` and returns a callable.
A *plain* callable takes the graph inputs positionally; a *boxed* one (marked
``_boxed_call = True``) takes one list, which it may clear to free inputs early.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch.fx as fx

__all__ = [
    "boxed_nop",
    "eager",
    "inductor",
    "inductor_decompositions",
    "make_boxed_func",
    "nop",
    "to_boxed",
]


def make_boxed_func(fn: Callable[..., Any]) -> Callable[[list[Any]], Any]:
    """Wrap a plain callable into the boxed convention."""

    def boxed(args: list[Any]) -> Any:
        values = list(args)
        args.clear()
        return fn(*values)

    boxed._boxed_call = True  # type: ignore[attr-defined]
    return boxed


def to_boxed(compiled: Callable[..., Any]) -> Callable[[list[Any]], Any]:
    """Whatever a compiler returned, as a boxed callable."""
    if getattr(compiled, "_boxed_call", False):
        return compiled

    def boxed(args: list[Any]) -> Any:
        return compiled(*args)

    return boxed


def nop(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """Runs the GraphModule's generated Python as it is."""
    return gm


def boxed_nop(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[[list[Any]], Any]:
    """``nop`` in the boxed convention."""
    return make_boxed_func(gm.forward)


def eager(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """Interprets the graph node by node with ``torch.fx.Interpreter``: slow, obviously faithful."""

    def run(*args: Any) -> Any:
        return fx.Interpreter(gm).run(*args)

    return run


def inductor_decompositions() -> dict[Any, Callable[..., Any]]:
    """The decompositions Inductor expects its graphs traced with: pass them as ``decompositions``."""
    from torch._inductor.decomposition import select_decomp_table

    return dict(select_decomp_table())


def inductor(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[[list[Any]], Any]:
    """Inductor's per-graph compiler behind our frontend: generated C++ (CPU) or Triton (GPU) kernels.

    Our graphs are already functional and partitioned; Inductor compiles each one
    as it would a graph from its own AOTAutograd. Trace them with
    ``decompositions=inductor_decompositions()``.
    """
    from torch._inductor.compile_fx import compile_fx_inner

    with _fake_mode_of(example_inputs):
        # Parameters and buffers (``num_params_buffers``): inductor skips their per-call checks.
        compiled = compile_fx_inner(gm, example_inputs, static_input_idxs=gm.meta.get("static_input_indices", ()))

    def run(args: list[Any]) -> Any:
        return compiled(args)

    run._boxed_call = True  # type: ignore[attr-defined]
    return run


def _fake_mode_of(example_inputs: list[Any]) -> Any:
    """The fake mode the example inputs belong to, active while a backend inspects them."""
    import contextlib

    from torch._subclasses.fake_tensor import FakeTensor

    for value in example_inputs:
        if isinstance(value, FakeTensor):
            return value.fake_mode
    return contextlib.nullcontext()
