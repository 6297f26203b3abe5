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
    if isinstance(compiled, fx.GraphModule) and _plain_graph_module(compiled):
        # Its generated forward, called straight: a GraphModule's own call (fx's error-printing wrapper, then
        # nn.Module's hook dispatch, for a module with no hooks and no __call__ of its own) costs more than a
        # small graph's code, at every call. Nothing else differs: the same code runs (looked up at each call: a
        # recompile() replaces it), the same errors rise.
        module = compiled

        def boxed_forward(args: list[Any]) -> Any:
            return module.forward(*args)

        return boxed_forward

    def boxed(args: list[Any]) -> Any:
        return compiled(*args)

    return boxed


def _plain_graph_module(compiled: fx.GraphModule) -> bool:
    """A GraphModule whose call is its ``forward``: no hooks, no ``__call__`` of its own."""
    wrapped = getattr(compiled, "_wrapped_call", None)
    hooks = (
        compiled._forward_hooks,
        compiled._forward_pre_hooks,
        compiled._backward_hooks,
        compiled._backward_pre_hooks,
    )
    return wrapped is not None and getattr(wrapped, "cls_call", True) is None and not any(hooks)


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
