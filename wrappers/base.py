"""The layer protocol and the runner that stacks layers around the core.

A layer rewrites the calling convention of the flat function in one direction
before compiling (``pre_compile``: outer function, args and meta to inner ones)
and undoes it after (``post_compile``: compiled inner runtime to compiled outer
runtime). A layer never asks about another layer: each can be tested alone by
wrapping a hand-written inner runtime.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import torch

from meta.indices import GraphArg, GraphOut
from meta.view_and_mutation import ViewAndMutationMeta
from wrappers.codegen import Emitter, Generated, emitter_of, generate, opaque

__all__ = ["CoreCompiler", "CoreStage", "FlatFn", "Layer", "Runtime", "Stage", "compile_generated", "compile_through"]

# The function being compiled: takes tensors positionally, returns a sequence of tensors.
FlatFn = Callable[..., Sequence[torch.Tensor]]
# A compiled flat function: takes a list of tensors (which it leaves untouched), returns a list.
Runtime = Callable[[list[torch.Tensor]], list[Any]]


In = TypeVar("In", bound=int, covariant=True)
Out = TypeVar("Out", bound=int, covariant=True)


@dataclass(frozen=True)
class Stage(Generic[In, Out]):
    """The flat function, example arguments and meta at one depth of the stack, in its index spaces."""

    fn: FlatFn
    args: list[torch.Tensor]
    meta: ViewAndMutationMeta[In, Out]
    # Inputs ``fn`` copies to write the copy only: where the graph returns and saves no alias of the copy, the
    # core may have it read the input itself (the last layer passes on the ones of the stage it got).
    copied: frozenset[In] = frozenset()


class Layer(Protocol):
    """One rewrite of the calling convention. An instance serves one compile.

    ``pre_compile`` turns the outer stage into the inner one the next layer (or the
    core) compiles; ``post_compile`` wraps the compiled inner runtime into one with the
    outer convention. A layer works around any inner runtime, here a hand-written one:

    >>> import torch
    >>> from meta.collect import collect_meta
    >>> from wrappers.dedupe import Dedupe
    >>> def f(a, b):
    ...     return (a * b,)
    >>> x = torch.full((2,), 3.0)
    >>> outer = Stage(f, [x, x], collect_meta(f, [x, x], ["a", "b"]))
    >>> layer = Dedupe()
    >>> inner = layer.pre_compile(outer)  # f(x, x) is compiled as g(x) = f(x, x)
    >>> len(inner.args)
    1
    >>> run = layer.post_compile(lambda args: list(inner.fn(*args)))  # the inner runtime, eager
    >>> run([x, x])
    [tensor([9., 9.])]
    """

    def pre_compile(self, outer: Stage[Any, Any]) -> Stage[Any, Any]: ...

    def post_compile(self, inner: Runtime) -> Runtime: ...


CoreStage = Stage[GraphArg, GraphOut]  # what the core compiles: the stage below every layer
CoreCompiler = Callable[[CoreStage], Runtime]

# The ``aot.layers`` channel (``AOTFX_LOGS=layers``); named here so this package does not import ``aot``.
_log = logging.getLogger("aot.layers")


def _mutated(meta: ViewAndMutationMeta[Any, Any]) -> list[str]:
    # (neither: the function only called ``requires_grad_()`` on it)
    kinds = {(True, False): "data", (False, True): "metadata", (True, True): "data+metadata", (False, False): "grad"}
    return [
        f"{info.name} ({kinds[info.mutates_data, info.mutates_metadata]})" for info in meta.input_info if info.mutates
    ]


def _log_rewrite(layer: Layer, outer: Stage[Any, Any], inner: Stage[Any, Any]) -> None:
    """One record per layer: how its ``pre_compile`` changed the calling convention."""
    fields: dict[str, Any] = {
        "layer": type(layer).__name__,
        "outer_args": [info.name for info in outer.meta.input_info],
        "inner_args": [info.name for info in inner.meta.input_info],
        "outer_outputs": len(outer.meta.output_info),
        "inner_outputs": len(inner.meta.output_info),
        "inner_intermediate_bases": len(inner.meta.intermediate_bases),
        "outer_mutated": _mutated(outer.meta),
        "inner_mutated": _mutated(inner.meta),
    }
    f, bases = fields, len(inner.meta.intermediate_bases)
    _log.debug(  # only built with the channel on (``_pre_compile_all``)
        f"{f['layer']}: args {len(f['outer_args'])} -> {len(f['inner_args'])} {f['outer_args']} -> {f['inner_args']}; "
        f"outputs {f['outer_outputs']} -> {f['inner_outputs']}{f' (+{bases} intermediate bases)' if bases else ''}; "
        f"mutated inputs {f['outer_mutated'] or 'none'} -> {f['inner_mutated'] or 'none'}",
        extra={"aot": fields},
    )


def _pre_compile_all(layers: Sequence[Layer], stage: Stage[Any, Any]) -> CoreStage:
    """Every layer's ``pre_compile``, outside-in: the stage the core compiles."""
    for layer in layers:
        inner = layer.pre_compile(stage)
        if _log.isEnabledFor(logging.DEBUG):
            _log_rewrite(layer, stage, inner)
        stage = inner
    return stage


def compile_through(layers: Sequence[Layer], stage: Stage[Any, Any], core: CoreCompiler) -> Runtime:
    """Run every layer's ``pre_compile`` outside-in, the core, then every ``post_compile`` inside-out."""
    runtime = core(_pre_compile_all(layers, stage))
    for layer in reversed(layers):
        runtime = layer.post_compile(runtime)
    return runtime


def compile_generated(layers: Sequence[Layer], stage: Stage[Any, Any], core: CoreCompiler) -> tuple[Runtime, Generated]:
    """``compile_through``'s runtime (the interpreted reference) and the same call as one generated function.

    A layer emits its part when it has ``emit_post_compile(inner_emitter)`` returning an emitter (after its
    ``post_compile``, whose plan it reads); a layer whose ``post_compile`` returned its inner runtime adds
    nothing; any other layer is called as its ``post_compile`` wraps the generated code of the layers below.
    """
    runtime = core(_pre_compile_all(layers, stage))
    emit: Emitter = emitter_of(runtime)
    parts: list[str] = []
    for layer in reversed(layers):
        outer = layer.post_compile(runtime)
        if outer is not runtime:
            own = getattr(layer, "emit_post_compile", None)
            emitted: Emitter | None = own(emit) if own is not None else None
            if emitted is None:
                below = generate(emit, f"aotfx_below_{type(layer).__name__}")
                parts.append(below.source)
                emitted = opaque(layer.post_compile(below.fn), type(layer).__name__)
            emit = emitted
        runtime = outer
    generated = generate(emit)
    generated.source = "\n".join([generated.source, *reversed(parts)])
    return runtime, generated
