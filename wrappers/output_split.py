"""Outputs a layer rebuilds itself, apart from those its inner function computes.

The metadata-mutation and synthetic-base layers each take over the outputs tied
to the inputs they rewrite (the input object returned, a view of it) and pass
the rest down, renumbered. This is that split, and its reassembly at runtime.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from meta.indices import IndexMap
from meta.view_and_mutation import OutputAliasInfo, OutputType, ViewAndMutationMeta

__all__ = ["OutputSplit"]


In = TypeVar("In", bound=int)
In2 = TypeVar("In2", bound=int)
Out = TypeVar("Out", bound=int)  # the outer outputs
Out2 = TypeVar("Out2", bound=int)  # the inner ones


@dataclass(frozen=True)
class OutputSplit(Generic[Out, Out2]):
    """``kept`` maps each outer output the inner function computes to its inner position."""

    kept: IndexMap[Out, Out2]
    rebuilt: frozenset[Out]

    @staticmethod
    def of(
        meta: ViewAndMutationMeta[In, Out],
        rebuild: Callable[[OutputAliasInfo[In, Out]], bool],
        inner: Callable[[int], Out2],
    ) -> OutputSplit[Out, Out2]:
        """Rebuild the outputs ``rebuild`` accepts, and every repeat of one of them; ``inner`` numbers the others."""
        rebuilt: set[Out] = set()
        for out, info in _numbered(meta):
            repeat_of_rebuilt = info.output_type == OutputType.IS_OUTPUT and info.base_output in rebuilt
            if rebuild(info) or repeat_of_rebuilt:
                rebuilt.add(out)
        kept = [out for out, _ in _numbered(meta) if out not in rebuilt]
        return OutputSplit({out: inner(position) for position, out in enumerate(kept)}, frozenset(rebuilt))

    def inner_output_info(
        self, infos: Sequence[OutputAliasInfo[In, Out]], arg: Callable[[In], In2 | None]
    ) -> tuple[OutputAliasInfo[In2, Out2], ...]:
        """The kept outputs' info in the inner index spaces (input indices through ``arg``)."""
        return tuple(infos[out].renumbered(arg, self.kept.__getitem__) for out in self.kept)

    def assemble(
        self,
        meta: ViewAndMutationMeta[Any, Out],
        inner_outs: list[Any],
        rebuild: Callable[[Out, OutputAliasInfo[Any, Out]], Any],
    ) -> list[Any]:
        """The outer outputs: kept ones from ``inner_outs``, the others from ``rebuild`` (repeats reused)."""
        outs: list[Any] = [None] * len(meta.output_info)
        for out, info in _numbered(meta):
            if out in self.kept:
                outs[out] = inner_outs[self.kept[out]]
            elif info.output_type == OutputType.IS_OUTPUT and info.base_output in self.rebuilt:
                outs[out] = outs[info.base_output]
            else:
                outs[out] = rebuild(out, info)
        return outs


def _numbered(meta: ViewAndMutationMeta[In, Out]) -> list[tuple[Out, OutputAliasInfo[In, Out]]]:
    """Each output with its index, in the meta's output space."""
    return [(cast(Out, i), info) for i, info in enumerate(meta.output_info)]
