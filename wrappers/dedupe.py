"""The dedupe layer: a tensor passed more than once becomes one inner argument.

``f(x, x)`` compiles as ``g(x)`` with ``g(a) = f(a, a)``: the graph sees one
primal, autograd accumulates every use into the one tensor's gradient as eager
does, and a mutation through either position is one mutation of that tensor.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from meta.indices import DedupedArg, IndexMap, UserArg, UserOut
from meta.view_and_mutation import InputAliasInfo
from wrappers.base import Runtime, Stage
from wrappers.codegen import Emitter, Source

__all__ = ["Dedupe"]


class Dedupe:
    """Outer argument positions map many-to-one onto the distinct tensor objects."""

    def __init__(self) -> None:
        self.to_inner: IndexMap[UserArg, DedupedArg] = {}
        self.kept: tuple[UserArg, ...] = ()  # the first position of each distinct tensor, in inner order

    def pre_compile(self, outer: Stage[UserArg, UserOut]) -> Stage[UserArg, UserOut] | Stage[DedupedArg, UserOut]:
        first: dict[int, UserArg] = {}  # each distinct tensor's first position, in inner order
        for position, arg in enumerate(outer.args):
            first.setdefault(id(arg), UserArg(position))
        distinct = {tensor: DedupedArg(k) for k, tensor in enumerate(first)}
        self.to_inner = {UserArg(i): distinct[id(arg)] for i, arg in enumerate(outer.args)}
        self.kept = kept = tuple(first.values())
        if len(kept) == len(outer.args):
            return outer
        to_inner, meta, flat_fn = self.to_inner, outer.meta, outer.fn
        positions = [to_inner[UserArg(i)] for i in range(len(outer.args))]

        def inner_fn(*args: torch.Tensor) -> Any:
            return flat_fn(*(args[inner] for inner in positions))

        def renumbered_input(info: InputAliasInfo) -> InputAliasInfo:
            if info.storage_set_to is None or info.storage_set_to[0] not in ("input", "moved_with"):
                return info
            kind, index = info.storage_set_to
            return dataclasses.replace(info, storage_set_to=(kind, to_inner[UserArg(index)]))

        # The meta of a stage indexes that stage's own arguments.
        inner_meta = meta.below(
            tuple(renumbered_input(meta.input_info[position]) for position in kept),
            tuple(info.renumbered(to_inner.__getitem__, UserOut) for info in meta.output_info),
        )
        return Stage(inner_fn, [outer.args[position] for position in kept], inner_meta)

    def post_compile(self, inner: Runtime) -> Runtime:
        kept = self.kept
        if len(kept) == len(self.to_inner):
            return inner

        def run(args: list[torch.Tensor]) -> list[Any]:
            return inner([args[position] for position in kept])

        return run

    def emit_post_compile(self, inner: Emitter) -> Emitter:
        """``post_compile``'s ``run``: the kept positions (its whole plan) baked in."""
        kept = self.kept

        def emit(source: Source, args: str) -> str:
            inner_args = source.fresh("deduped")
            source.line(f"# dedupe: {len(self.to_inner)} arguments, {len(kept)} distinct tensors")
            source.line(f"{inner_args} = [{', '.join(f'{args}[{position}]' for position in kept)}]")
            return inner(source, inner_args)

        return emit
