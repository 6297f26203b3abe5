"""Outputs a layer rebuilds itself, apart from those its inner function computes.

The metadata-mutation and synthetic-base layers each take over the outputs tied
to the inputs they rewrite (the input object returned, a view of it) and pass
the rest down, renumbered. This is that split, and its reassembly at runtime.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from meta.indices import IndexMap, UserOut
from meta.view_and_mutation import OutputAliasInfo, OutputType, ViewAndMutationMeta

__all__ = ["OutputSplit"]


@dataclass(frozen=True)
class OutputSplit:
    """``kept`` maps each outer output the inner function computes to its inner position."""

    kept: IndexMap[UserOut, UserOut]
    rebuilt: frozenset[UserOut]

    @staticmethod
    def of(meta: ViewAndMutationMeta, rebuild: Callable[[OutputAliasInfo], bool]) -> OutputSplit:
        """Rebuild the outputs ``rebuild`` accepts, and every repeat of one of them."""
        rebuilt: set[UserOut] = set()
        for out_idx, info in enumerate(meta.output_info):
            repeat_of_rebuilt = info.output_type == OutputType.IS_OUTPUT and info.base_output in rebuilt
            if rebuild(info) or repeat_of_rebuilt:
                rebuilt.add(UserOut(out_idx))
        kept = [UserOut(i) for i in range(len(meta.output_info)) if UserOut(i) not in rebuilt]
        return OutputSplit(IndexMap((out, UserOut(inner)) for inner, out in enumerate(kept)), frozenset(rebuilt))

    def inner_output_info(self, meta: ViewAndMutationMeta) -> tuple[OutputAliasInfo, ...]:
        """The kept outputs' info, with ``base_output`` renumbered into the inner output space."""
        infos = []
        for out in self.kept:
            info = meta.output_info[out]
            if info.base_output is not None:
                info = dataclasses.replace(info, base_output=self.kept[info.base_output])
            infos.append(info)
        return tuple(infos)

    def assemble(
        self,
        meta: ViewAndMutationMeta,
        inner_outs: list[Any],
        rebuild: Callable[[UserOut, OutputAliasInfo], Any],
    ) -> list[Any]:
        """The outer outputs: kept ones from ``inner_outs``, the others from ``rebuild`` (repeats reused)."""
        outs: list[Any] = [None] * len(meta.output_info)
        for out_idx, info in enumerate(meta.output_info):
            out = UserOut(out_idx)
            if out in self.kept:
                outs[out_idx] = inner_outs[self.kept[out]]
            elif info.output_type == OutputType.IS_OUTPUT and info.base_output in self.rebuilt:
                outs[out_idx] = outs[info.base_output]
            else:
                outs[out_idx] = rebuild(out, info)
        return outs
