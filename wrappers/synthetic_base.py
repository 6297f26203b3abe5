"""The synthetic-base layer: inputs that overlap in memory, one of them written, become one base.

Below this layer no two inputs alias where a write could tell. Each cluster of
overlapping inputs with a data mutation among them is replaced by one *base*
input: the stretch of storage their elements span, as a 1-D view. Inside, the
function gets each member as a strided view of a copy of the base, so a write
through one member is read through the others; the graph never writes the base.
After the call, each mutated member's new value is written back into that
member alone (region-only write-back: a 4-element view of a huge storage writes
4 elements, where torch's AOTAutograd copies the whole base). Outputs that are
members, or views of them, are rebuilt here from the caller's tensors.

Inputs sharing storage without overlapping, or overlapping with no write among
them, stay separate: reads cannot tell. Metadata mutations never reach this
layer: the metadata-mutation layer above removes them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch

from meta.collect import overlaps, storage_extent
from meta.indices import BaseArg, IndexMap, UserArg, UserOut
from meta.view_and_mutation import (
    InputAliasInfo,
    OutputAliasInfo,
    OutputType,
    TensorSpec,
    ViewAndMutationMeta,
    replay_views,
)
from wrappers.base import Runtime, Stage
from wrappers.output_split import OutputSplit
from wrappers.write_back import set_versions, version, write_back

__all__ = ["SyntheticBase", "clusters_to_merge", "span_base"]


def clusters_to_merge(args: Sequence[torch.Tensor], meta: ViewAndMutationMeta) -> list[tuple[UserArg, ...]]:
    """Groups of inputs connected by memory overlap, with a data mutation among them, in input order."""
    parent = list(range(len(args)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in range(len(args)):
        for j in range(i):
            if overlaps(args[i], args[j]):
                parent[root(i)] = root(j)
    clusters: dict[int, list[UserArg]] = {}
    for i in range(len(args)):
        clusters.setdefault(root(i), []).append(UserArg(i))
    return [
        tuple(members)
        for members in clusters.values()
        if len(members) > 1 and any(meta.input_info[m].mutates_data for m in members)
    ]


def span_base(members: Sequence[torch.Tensor]) -> torch.Tensor:
    """The storage stretch the members' elements lie in, as a 1-D view of their common base.

    Taken from the base the members are views of (or the member that is that
    base), so gradients reach every element; from the first member only when
    they have no common base.
    """
    if len({m.dtype for m in members}) > 1:
        raise NotImplementedError("inputs that share memory with different dtypes, one of them mutated")
    start = min(storage_extent(m)[0] for m in members)
    end = max(storage_extent(m)[1] for m in members)
    roots = {id(root): root for root in (m._base if m._base is not None else m for m in members)}
    source = next(iter(roots.values())) if len(roots) == 1 else members[0]
    return source.as_strided((end - start,), (1,), start)


def _written(cluster: tuple[UserArg, ...], meta: ViewAndMutationMeta) -> tuple[UserArg, ...]:
    """The members to write back: those written through, whose regions hold every write.

    A member that only overlaps a written one sees the write through shared
    memory; writing it back too would copy more than changed.
    """
    through = tuple(m for m in cluster if meta.input_info[m].written_through)
    return through or tuple(m for m in cluster if meta.input_info[m].mutates_data)


class SyntheticBase:
    """Inner arguments: the inputs outside any cluster, then one base per cluster."""

    def __init__(self) -> None:
        self._meta: ViewAndMutationMeta | None = None
        self._clusters: list[tuple[UserArg, ...]] = []
        self._plain: tuple[UserArg, ...] = ()
        self._mutated: tuple[UserArg, ...] = ()
        self._split: OutputSplit | None = None
        # inner index -> the outer inputs it stands for
        self.to_outer: IndexMap[BaseArg, tuple[UserArg, ...]] = IndexMap()

    def pre_compile(self, outer: Stage) -> Stage:
        meta, args = outer.meta, outer.args
        self._meta = meta
        clusters = clusters_to_merge(args, meta)
        self._clusters = clusters
        if not clusters:
            return outer
        members = {m for cluster in clusters for m in cluster}
        plain = tuple(UserArg(i) for i in range(len(args)) if UserArg(i) not in members)
        mutated = tuple(m for cluster in clusters for m in _written(cluster, meta))
        self._plain, self._mutated = plain, mutated
        self.to_outer = IndexMap(
            [(BaseArg(i), (arg,)) for i, arg in enumerate(plain)]
            + [(BaseArg(len(plain) + k), cluster) for k, cluster in enumerate(clusters)]
        )
        split = OutputSplit.of(meta, lambda info: info.base_input in members)
        self._split = split
        bases = [span_base([args[m] for m in cluster]) for cluster in clusters]
        # Each member as (size, stride, offset from its base's start): fixed by the input signature.
        geometry = {
            m: (args[m].shape, args[m].stride(), args[m].storage_offset() - base.storage_offset())
            for cluster, base in zip(clusters, bases, strict=True)
            for m in cluster
        }
        flat_fn, num_args = outer.fn, len(args)

        def inner_fn(*inner_args: torch.Tensor) -> list[torch.Tensor]:
            working: list[Any] = [None] * num_args
            for position, arg in enumerate(plain):
                working[arg] = inner_args[position]
            for k, cluster in enumerate(clusters):
                # The base is read, never written: the members are views of a copy of it.
                copy = inner_args[len(plain) + k].clone()
                for m in cluster:
                    size, stride, offset = geometry[m]
                    working[m] = copy.as_strided(size, stride, copy.storage_offset() + offset)
            outs = list(flat_fn(*working))
            return [*(outs[out] for out in split.kept), *(working[m] for m in mutated)]

        def base_info(cluster: tuple[UserArg, ...], base: torch.Tensor) -> InputAliasInfo:
            name = "base_of_" + "_".join(meta.input_info[m].name for m in cluster)
            return InputAliasInfo(name=name, requires_grad=base.requires_grad, is_leaf=base.is_leaf)

        new_values = tuple(
            OutputAliasInfo(
                OutputType.NON_ALIAS, requires_grad=meta.input_info[m].requires_grad_after, spec=TensorSpec.of(args[m])
            )
            for m in mutated
        )
        inner_meta = dataclasses.replace(
            meta,
            input_info=tuple(meta.input_info[arg] for arg in plain)
            + tuple(base_info(cluster, base) for cluster, base in zip(clusters, bases, strict=True)),
            output_info=split.inner_output_info(meta) + new_values,
            intermediate_bases=meta.intermediate_bases,
        )
        return Stage(inner_fn, [args[arg] for arg in plain] + bases, inner_meta)

    def post_compile(self, inner: Runtime) -> Runtime:
        meta, clusters, plain, mutated, split = self._meta, self._clusters, self._plain, self._mutated, self._split
        assert meta is not None, "post_compile before pre_compile"
        if not clusters:
            return inner
        assert split is not None
        num_kept = len(split.kept)
        mutated_infos = [meta.input_info[m] for m in mutated]
        members = [m for cluster in clusters for m in cluster]

        def run(args: list[torch.Tensor]) -> list[Any]:
            bases = [span_base([args[m] for m in cluster]) for cluster in clusters]
            before = {m: version(args[m]) for m in members}
            final = [before[m] + meta.input_info[m].version_bumps for m in members]
            set_versions([args[m] for m in members], final)  # as the epilogue does, for what the forward saves
            try:
                inner_outs = inner([*(args[arg] for arg in plain), *bases])
            except BaseException:
                set_versions([args[m] for m in members], [before[m] for m in members])  # nothing half-done
                raise
            made: dict[int, torch.Tensor] = {}

            def rebuild(out: UserOut, info: OutputAliasInfo) -> torch.Tensor:
                base = info.base_input
                assert base is not None
                if info.output_type == OutputType.IS_INPUT:
                    return args[base]
                return replay_views(args[base], info.view_chain, made, before[base])

            early = {
                UserOut(i): rebuild(UserOut(i), info)
                for i, info in enumerate(meta.output_info)
                if UserOut(i) in split.rebuilt and info.replay_before_write_back
            }
            write_back([args[m] for m in mutated], inner_outs[num_kept:], mutated_infos, [before[m] for m in mutated])
            outs = split.assemble(
                meta, inner_outs[:num_kept], lambda out, info: early[out] if out in early else rebuild(out, info)
            )
            set_versions([args[m] for m in members], final)
            return outs

        return run
