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
from torch._prims_common import is_non_overlapping_and_dense_or_false

from meta.errors import UnsupportedMutationError
from meta.indices import BaseArg, BaseOut, RestridedArg, RestridedOut
from meta.stand_ins import leaf_standing_for
from meta.storage import (
    clone_at_offset,
    has_gaps,
    leaf_of_ungraded_base,
    overlaps,
    storage_extent,
    storage_key,
    view_root,
)
from meta.versions import Counters, counter_groups
from meta.view_and_mutation import (
    ComputedAlias,
    InputAliasInfo,
    OutputAliasInfo,
    OutputType,
    TensorSpec,
    ViewAndMutationMeta,
    replay_views,
)
from wrappers.base import Runtime, Stage
from wrappers.codegen import Emitter, Source, counted_call
from wrappers.history import (
    GradientTo,
    ViewWithHistory,
    adopted,
    history_alias,
    made_a_leaf,
    with_history,
)
from wrappers.output_split import OutputSplit
from wrappers.write_back import write_back

__all__ = ["SyntheticBase", "clusters_to_merge", "span_base"]


def _needs_own_memory(arg: torch.Tensor, info: InputAliasInfo) -> bool:
    """A data-mutated input whose working copy must keep its storage layout, not be a compact clone.

    Gaps between its elements (``x[:, ::2]``) or elements shared by several
    indices (``expand``) are not reproduced by ``clone()``, nor is a storage
    offset other than 0, which ops like ``as_strided`` (and in-place view ops,
    traced as one) read, nor memory beyond its own elements that they reach.

    Unwritten, an input needs it where its version counter moves (an in-place view op through a
    ``detach()`` alias) and it reaches outside its elements, above or below them: eager then takes the
    histories of its views again by strides from the storage's base, so their gradients reach that memory too.
    """
    own_bytes = storage_extent(arg)[1] * arg.element_size()
    reaches_past = info.offset_sensitive and info.storage_reach > own_bytes
    if not info.mutates_data:
        # Below its elements too (``reaches_below``): an input restrided before the call (its geometry changed
        # under no_grad) sits at its final offset, while the function's uses before the change read the old
        # geometry, which may lie lower; the base spans from the storage's start then (offsets matter).
        # Between its elements too (seed 29 program 67: a view ``as_strided_((2,), (2,), 0)`` under no_grad after
        # a use of the elements it then skips): the gradient of an input covers its elements only.
        gaps = has_gaps(arg.shape, arg.stride())
        reaches_outside = reaches_past or (info.offset_sensitive and (info.reaches_below or gaps))
        return info.requires_grad and not info.is_leaf and info.version_bumps > 0 and reaches_outside
    dense = is_non_overlapping_and_dense_or_false(arg)
    return not dense or reaches_past or (info.offset_sensitive and arg.storage_offset() != 0)


def clusters_to_merge(
    args: Sequence[torch.Tensor], meta: ViewAndMutationMeta[RestridedArg, Any]
) -> list[tuple[RestridedArg, ...]]:
    """Groups of inputs connected by memory overlap, with a data mutation among them, in input order.

    Also single inputs needing their own memory (``_needs_own_memory``); and
    an input whose storage offset matters joins every input of its storage.
    """
    parent = list(range(len(args)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in range(len(args)):
        for j in range(i):
            same_storage = storage_key(args[i]) == storage_key(args[j])
            absolute = meta.input_info[i].offset_sensitive or meta.input_info[j].offset_sensitive
            if overlaps(args[i], args[j]) or (same_storage and absolute):
                parent[root(i)] = root(j)
    clusters: dict[int, list[RestridedArg]] = {}
    for i in range(len(args)):
        clusters.setdefault(root(i), []).append(RestridedArg(i))
    return [
        tuple(members)
        for members in clusters.values()
        if (len(members) > 1 and any(meta.input_info[m].mutates_data for m in members))
        or any(_needs_own_memory(args[m], meta.input_info[m]) for m in members)
    ]


def _span(members: Sequence[torch.Tensor], infos: Sequence[InputAliasInfo]) -> tuple[int, int]:
    """The storage interval the base covers: the members' elements, or from 0 if offsets matter."""
    extents = [storage_extent(m) for m in members]  # at every call: once each
    start = min(extent[0] for extent in extents)
    end = max(extent[1] for extent in extents)
    if any(info.offset_sensitive for info in infos):
        size = members[0].element_size()
        return 0, max(end, *(-(-info.storage_reach // size) for info in infos))
    return start, end


def span_base(members: Sequence[torch.Tensor], span: tuple[int, int]) -> torch.Tensor:
    """The storage stretch ``span`` of the members' storage, as a 1-D view of their common base.

    Taken from the base the members are views of (or the member that is that
    base), so gradients reach every element; from the first member only when
    they have no common base. A member that is a leaf of its own (a view of a
    base needing none, made to require grad) is rerouted (``_own_histories``):
    a view of it reaching past its elements would have its history taken again
    from that base once a write moves the shared counter, losing the gradient.
    """
    if len({m.dtype for m in members}) > 1:
        raise UnsupportedMutationError(
            "inputs that share memory with different dtypes (view(dtype), view_as_real ...), one of them "
            "written: not supported; pass them as separate tensors"
        )
    source = _source(members)
    start, end = span
    if end * source.element_size() > source.untyped_storage().nbytes():
        # A resize through a view of a smaller dtype (``out=`` into a detached ``.imag``) grew the storage by part
        # of one of the members' elements: eager keeps that odd size, which no view in the members' dtype spans.
        raise UnsupportedMutationError(
            f"an input's storage grown to {source.untyped_storage().nbytes()} bytes, not a whole number of its "
            f"{source.dtype} elements (resize_() or out= through a view of another dtype): not supported"
        )
    # Taken in grad mode whatever the caller's: a view made under no_grad whose memory the layers below write
    # would refuse the history an enable_grad region of the function reads.
    with torch.enable_grad():
        if source.requires_grad and source.grad_fn is None and source._base is not None:
            # A leaf view of a base needing none: autograd takes a view's history again from that base once the
            # counter moves (the layers below set it early), and the gradient would stop there. An alias of no
            # view, whose gradient goes to the leaf, is the root the base's history is taken again from.
            source = history_alias(source)
        return source.as_strided((end - start,), (1,), start)


def _source(members: Sequence[torch.Tensor]) -> torch.Tensor:
    """The tensor a cluster's base is taken from (see ``span_base``)."""
    roots = {id(root): root for root in (view_root(m) for m in members)}
    source = next(iter(roots.values())) if len(roots) == 1 else members[0]
    requiring_grad = [m for m in members if m.requires_grad]
    # Members needing grad decide: the others (``detach()`` aliases) are read detached inside.
    grad_roots = {id(root): root for root in (view_root(m) for m in requiring_grad) if root.requires_grad}
    if len(grad_roots) == 1:
        source = next(iter(grad_roots.values()))
    return source


def _grad_root(tensor: torch.Tensor) -> torch.Tensor | None:
    """What ``tensor``'s gradient reaches: itself if a leaf requiring grad, else the tensor it is a view of."""
    if not tensor.requires_grad:
        return None
    return tensor if tensor.grad_fn is None else view_root(tensor)


def _own_histories(members: Sequence[torch.Tensor]) -> list[int]:
    """Positions of the members requiring grad whose history is not the base's: a leaf of its own sharing the
    memory (``detach().requires_grad_()``), a view of another leaf. Eager differentiates each through its own.
    So is a leaf whose elements share memory (an expanded one): eager's gradient has one value per index, the
    base's one per element of memory."""
    source = _grad_root(_source(members))
    return [
        k
        for k, m in enumerate(members)
        if (root := _grad_root(m)) is not None and (root is not source or (root is m and _shares_elements(m)))
    ]


def _shares_elements(tensor: torch.Tensor) -> bool:
    """Whether elements of ``tensor`` may share memory (``expand``, overlapping ``as_strided``)."""
    return torch._debug_has_internal_overlap(tensor) != 0


def _write_target(written: Sequence[torch.Tensor], base: torch.Tensor) -> torch.Tensor:
    """The whole ``base``'s memory, to write back through: taken from what eager wrote through (a written
    member's root), not from a leaf requiring grad the base may come from, which eager never wrote in place."""
    root = view_root(written[0])
    if root is base._base or base._base is None:
        return base
    return root.as_strided(base.shape, base.stride(), base.storage_offset())


def _new_values(cluster: _Cluster, own_written: set[RestridedArg]) -> list[RestridedArg | None]:
    """The new values the inner function returns for ``cluster``: one per written member, or, written back
    whole, the base's copy (None) and the members with their own history (``own_written``)."""
    if not cluster.whole:
        return list(cluster.written)
    return [None, *(m for m in cluster.written if m in own_written)]


def _written(cluster: tuple[RestridedArg, ...], meta: ViewAndMutationMeta[Any, Any]) -> tuple[RestridedArg, ...]:
    """The members to write back: those written through, whose regions hold every write.

    A member that only overlaps a written one sees the write through shared
    memory; writing it back too would copy more than changed.
    """
    through = tuple(m for m in cluster if meta.input_info[m].written_through)
    return through or tuple(m for m in cluster if meta.input_info[m].mutates_data)


def _writes_anywhere(infos: Sequence[InputAliasInfo]) -> bool:
    """Whether a write into the members' storage may have landed outside the elements of the member it went
    through (an ``as_strided`` at an absolute offset): then the whole base is written back, not each member."""
    return any(info.offset_sensitive for info in infos) and not all(info.writes_within_inputs for info in infos)


@dataclasses.dataclass(frozen=True)
class _Cluster:
    """Inputs merged into one base; ``whole`` writes the whole base back (``_writes_anywhere``), else each
    member in ``written`` is written back alone."""

    members: tuple[RestridedArg, ...]
    written: tuple[RestridedArg, ...]
    whole: bool


class SyntheticBase:
    """Inner arguments: the inputs outside any cluster, then one base per cluster."""

    def __init__(self) -> None:
        self._meta: ViewAndMutationMeta[RestridedArg, RestridedOut] | None = None
        self._clusters: list[_Cluster] = []
        self._plain: tuple[RestridedArg, ...] = ()
        self._split: OutputSplit[RestridedOut, BaseOut] | None = None
        self._counter_groups: list[int] = []
        self._rerouted: tuple[RestridedArg, ...] = ()
        self._own_leaves: set[RestridedArg] = set()  # leaves, and views with own nodes: passed themselves
        self._steps: tuple[Any, Counters, Any] | None = None
        self._own_written: set[RestridedArg] = set()

    def pre_compile(
        self, outer: Stage[RestridedArg, RestridedOut]
    ) -> Stage[RestridedArg, RestridedOut] | Stage[BaseArg, BaseOut]:
        meta, args = outer.meta, outer.args
        self._meta = meta
        self._counter_groups = counter_groups(args)
        clusters = [
            _Cluster(members, written, bool(written) and _writes_anywhere([meta.input_info[m] for m in members]))
            for members in clusters_to_merge(args, meta)
            for written in [_written(members, meta)]
        ]
        self._clusters = clusters
        if not clusters:
            return outer
        in_cluster = {m for cluster in clusters for m in cluster.members}
        plain = tuple(RestridedArg(i) for i in range(len(args)) if RestridedArg(i) not in in_cluster)
        self._plain = plain
        split = OutputSplit.of(meta, lambda info: info.base_input in in_cluster, BaseOut)
        self._split = split
        spans = [_span([args[m] for m in c.members], [meta.input_info[m] for m in c.members]) for c in clusters]
        bases = [span_base([args[m] for m in c.members], span) for c, span in zip(clusters, spans, strict=True)]
        # Each member as (size, stride, offset from its base's start): fixed by the input signature.
        geometry = {
            m: (args[m].shape, args[m].stride(), args[m].storage_offset() - span[0])
            for cluster, span in zip(clusters, spans, strict=True)
            for m in cluster.members
        }
        flat_fn, num_args = outer.fn, len(args)
        # A member needing no grad of a base needing it (a ``detach()`` alias) has no history in eager: its
        # reads must not reach the base's gradient. Of a base needing none, it is a view like the others:
        # a write of a value needing grad through one gives them all a history, as in eager.
        detached = {
            m
            for cluster, base in zip(clusters, bases, strict=True)
            if base.requires_grad
            for m in cluster.members
            if not meta.input_info[m].requires_grad
        }
        # Of those, a ``.data`` alias has a version counter of its own, shared with no other member: a write
        # through the others does not invalidate what autograd saved of it, nor the reverse.
        groups = self._counter_groups
        own_counter = {
            m
            for cluster in clusters
            for m in cluster.members
            if [groups[other] for other in cluster.members].count(groups[m]) == 1
        }
        # Of a cluster written back whole, the members of ``detached`` eager's autograd saw written: the copy's
        # history has none of their writes (they went through detached views of it), each has its own, written
        # back after the whole, into its own elements.
        own_written = {
            m
            for cluster in clusters
            if cluster.whole
            for m in cluster.written
            if m in detached and meta.input_info[m].mutation_visible_to_autograd
        }
        self._own_written = own_written
        # Members with a history of their own (``_own_histories``): the base carries one, so each reads the
        # base's memory and sends its gradient to the caller's tensor, passed too (after the bases).
        rerouted = _rerouted(clusters, args)
        # And views whose own node eager keeps (``_own_nodes``): passed themselves, as leaves are.
        own_nodes = _own_nodes(clusters, args, meta)
        rerouted += tuple(m for m in own_nodes if m not in rerouted)
        self._rerouted = rerouted
        own_leaves = {m for m in rerouted if args[m].grad_fn is None} | set(own_nodes)
        self._own_leaves = own_leaves
        # Eager's views of these follow the base requiring none they are leaf views of, not the leaf; a member's
        # would follow the base's copy (``meta.stand_ins``).
        ungraded = {m for cluster in clusters for m in cluster.members if leaf_of_ungraded_base(args[m])}
        first_rerouted = len(plain) + len(clusters)

        def inner_fn(*inner_args: torch.Tensor) -> list[torch.Tensor]:
            working: list[Any] = [None] * num_args
            for position, arg in enumerate(plain):
                working[arg] = inner_args[position]
            copies = []
            for k, cluster in enumerate(clusters):
                # The base is read, never written: the members are views of a copy of it, if written. Else of
                # the base itself: an autograd.Function's backward writing a member it saved writes the input.
                base = inner_args[len(plain) + k]
                # Made in grad mode where the members require grad, whatever the caller's, as the caller's
                # members are: under no_grad a copy, its views and the Functions rerouting members' gradients
                # would need none, and the function reads that (``requires_grad``; an autograd.Function returns
                # a detached alias of an input requiring grad, the input itself otherwise); an enable_grad region
                # writing a member would find a view made under no_grad.
                rerouted_here = any(m in rerouted for m in cluster.members)
                with torch.set_grad_enabled(torch.is_grad_enabled() or base.requires_grad or rerouted_here):
                    # At the base's storage offset: ops reading the members' offsets (view_as_complex wants them
                    # even) judge them as eager's.
                    copy = clone_at_offset(base) if cluster.written else base
                    copies.append(copy)
                    for m in cluster.members:
                        size, stride, offset = geometry[m]
                        member = copy.as_strided(size, stride, copy.storage_offset() + offset)
                        working[m] = member
                        if m in detached:
                            working[m] = member.data if m in own_counter else member.detach()
                        if m in rerouted:
                            own = inner_args[first_rerouted + rerouted.index(m)]
                            if m in own_leaves:  # its gradient covers its own elements
                                working[m] = GradientTo.apply(own, member)  # type: ignore[no-untyped-call]
                            else:
                                # The base's memory with the member's own history (its root over the same span):
                                # views of it, as_strided ones too, reach every element the member's root has there.
                                # Unwritten, the base is no copy: the member's root over the span is that memory,
                                # read itself, so a differentiated backward recomputes from it, not the base.
                                if cluster.written:
                                    own = GradientTo.apply(own, copy)  # type: ignore[no-untyped-call]
                                working[m] = own.as_strided(size, stride, own.storage_offset() + offset)
                        if m in ungraded:
                            working[m] = leaf_standing_for(working[m])
            outs = list(flat_fn(*working))
            new_values = [
                copy if m is None else working[m]
                for cluster, copy in zip(clusters, copies, strict=True)
                for m in _new_values(cluster, own_written)
            ]
            return [*(outs[out] for out in split.kept), *new_values]

        def base_info(cluster: _Cluster, base: torch.Tensor) -> InputAliasInfo:
            name = "base_of_" + "_".join(meta.input_info[m].name for m in cluster.members)
            return InputAliasInfo(name=name, requires_grad=base.requires_grad, is_leaf=base.is_leaf)

        new_values: tuple[OutputAliasInfo[BaseArg, BaseOut], ...] = tuple(
            OutputAliasInfo(
                OutputType.NON_ALIAS,
                requires_grad=any(meta.input_info[w].requires_grad_after for w in cluster.written)
                if m is None
                else meta.input_info[m].requires_grad_after,
                spec=TensorSpec.of(base if m is None else args[m]),
                new_value_in=(BaseArg(len(plain) + k), _own_geometry(base) if m is None else geometry[m]),
            )
            for k, (cluster, base) in enumerate(zip(clusters, bases, strict=True))
            for m in _new_values(cluster, own_written)
        )
        # Kept outputs alias plain inputs only (a Function's view of a merged input: the graph's value is returned,
        # a view of no caller tensor there): renumbered into this layer's inner positions.
        inner_position = {arg: BaseArg(position) for position, arg in enumerate(plain)}
        kept_info = split.inner_output_info(meta.output_info, inner_position.get)
        own_bases = _own_bases(args, rerouted, own_leaves, clusters, spans)
        inner_meta = meta.below(
            tuple(meta.input_info[arg] for arg in plain)
            + tuple(base_info(cluster, base) for cluster, base in zip(clusters, bases, strict=True))
            + tuple(
                InputAliasInfo(name=f"own_base_of_{meta.input_info[m].name}", requires_grad=True, is_leaf=own.is_leaf)
                for m, own in zip(rerouted, own_bases, strict=True)
            ),
            kept_info + new_values,
        )
        copied = frozenset(BaseArg(len(plain) + k) for k, cluster in enumerate(clusters) if cluster.written)
        return Stage(inner_fn, [args[arg] for arg in plain] + bases + own_bases, inner_meta, copied)

    def post_compile(self, inner: Runtime) -> Runtime:
        meta, clusters, plain, split, rerouted = self._meta, self._clusters, self._plain, self._split, self._rerouted
        assert meta is not None, "post_compile before pre_compile"
        if not clusters:
            return inner
        assert split is not None
        num_kept = len(split.kept)
        members = [m for cluster in clusters for m in cluster.members]
        function_views = _function_views(meta, split, set(members))
        infos = [[meta.input_info[m] for m in cluster.members] for cluster in clusters]
        # The layer below sets the counters of the plain inputs it moves itself, from what it reads before.
        moved_inside = [arg for arg in plain if meta.input_info[arg].version_bumps]
        bumps = [(m, meta.input_info[m].version_bumps) for m in members]
        counters = Counters(bumps, self._counter_groups, moved_inside)

        own_leaves = self._own_leaves
        own_written = self._own_written

        def enter(args: list[torch.Tensor]) -> tuple[list[torch.Tensor], list[torch.Tensor], list[InputAliasInfo]]:
            """Before the inner call: its arguments (plain inputs, a base per cluster, own bases), and the
            tensors the new values are written back into (one per new value, in ``_new_values``' order), with
            their infos."""
            bases = []
            spans = []
            targets: list[torch.Tensor] = []
            target_infos: list[InputAliasInfo] = []
            for cluster, cluster_infos in zip(clusters, infos, strict=True):
                cluster_args = [args[m] for m in cluster.members]
                spans.append(_span(cluster_args, cluster_infos))
                base = span_base(cluster_args, spans[-1])
                bases.append(base)
                if not cluster.whole:
                    targets += [args[m] for m in cluster.written]
                    target_infos += [meta.input_info[m] for m in cluster.written]
                    continue
                # The whole is written back as the members eager's autograd saw written through the base wrote it;
                # then each member with a history of its own (``own_written``) its own elements, with that history.
                tracked = [m for m in cluster.written if m not in own_written]
                whole = _write_target([args[m] for m in tracked or cluster.written], base)
                merged = _merged([meta.input_info[m] for m in tracked or cluster.written])
                targets.append(whole)
                target_infos.append(
                    merged if tracked else dataclasses.replace(merged, mutations_hidden_from_autograd=True)
                )
                for m in cluster.written:
                    if m in own_written:
                        targets.append(args[m])
                        target_infos.append(meta.input_info[m])
            own = _own_bases(args, rerouted, own_leaves, clusters, spans)
            return [*(args[arg] for arg in plain), *bases, *own], targets, target_infos

        def leave(
            args: list[torch.Tensor],
            inner_outs: list[Any],
            before: tuple[int, ...],
            targets: list[torch.Tensor],
            target_infos: list[InputAliasInfo],
        ) -> list[Any]:
            """After the inner call: the write-back, the outputs rebuilt on the caller's tensors."""
            made: dict[int, torch.Tensor] = {}

            def rebuild(
                out: RestridedOut, info: OutputAliasInfo[RestridedArg, RestridedOut], early: bool = False
            ) -> torch.Tensor:
                base = info.base_input
                assert base is not None
                if info.output_type == OutputType.IS_INPUT:
                    return args[base]
                at = counters.before_of(before, base)
                view = replay_views(args[base], info.view_chain, made, at)
                # A view taken before the write-back gets its requires_grad from it, as eager's view of a
                # detach() alias does from the write of a value requiring grad: not from a copy made here.
                return view if early else info.with_requires_grad_set_inside(view)

            early = {
                RestridedOut(i): rebuild(RestridedOut(i), info, early=True)
                for i, info in enumerate(meta.output_info)
                if RestridedOut(i) in split.rebuilt and info.replay_before_write_back
            }
            write_back(targets, inner_outs[num_kept:], target_infos)
            outs = split.assemble(
                meta, inner_outs[:num_kept], lambda out, info: early[out] if out in early else rebuild(out, info)
            )
            counters.finish(args, before)  # before the views below are made: not stale
            for out, alias in function_views.items():
                # A Function's view of a merged input, computed on the base's copy: eager's aliases the caller's.
                of_input = replay_views(args[alias.base_input], alias.view_chain, made)
                if alias.in_place:  # eager's in-place write was counted already
                    outs[out] = adopted(of_input, outs[out], made_a_leaf(meta.output_info[out]))
                elif meta.output_info[out].is_leaf and of_input.is_leaf:
                    outs[out] = of_input  # a view of it taken under no_grad: no history, as eager's
                else:
                    outs[out] = with_history(ViewWithHistory, of_input, outs[out])
            for i, info in enumerate(meta.output_info):
                if info.output_type == OutputType.IS_OUTPUT and info.base_output in function_views:
                    outs[i] = outs[info.base_output]
            return outs

        # The call's plan, in three steps the generated code calls too (``emit_post_compile``).
        self._steps = (enter, counters, leave)

        def run(args: list[torch.Tensor]) -> list[Any]:
            inner_args, targets, target_infos = enter(args)
            inner_outs, before = counters.call(inner, inner_args, args)
            return leave(args, inner_outs, before, targets, target_infos)

        return run

    def emit_post_compile(self, inner: Emitter) -> Emitter:
        """``post_compile``'s ``run`` with the layers below inlined: the same steps, called from the source."""
        assert self._steps is not None, "emit_post_compile before post_compile"
        enter, counters, leave = self._steps
        merged = ", ".join(
            "(" + ", ".join(self._meta.input_info[m].name for m in c.members) + ")"  # type: ignore[union-attr]
            for c in self._clusters
        )

        def emit(source: Source, args: str) -> str:
            source.line(f"# synthetic base: {merged} merged, one base each")
            inner_args, targets, infos = source.fresh("based"), source.fresh("targets"), source.fresh("target_infos")
            source.line(f"{inner_args}, {targets}, {infos} = {source.const(enter, 'merge_bases')}({args})")
            inner_outs, before = counted_call(source, counters, inner, inner_args, args, no_counters="()")
            outs = source.fresh("outs")
            leave_name = source.const(leave, "write_back_members")
            source.line(f"{outs} = {leave_name}({args}, {inner_outs}, {before}, {targets}, {infos})")
            return outs

        return emit


def _own_geometry(base: torch.Tensor) -> tuple[Any, Any, int]:
    """``base``'s geometry as a member's: (size, stride, offset from its start)."""
    return (base.shape, base.stride(), 0)


def _rerouted(clusters: Sequence[_Cluster], args: Sequence[torch.Tensor]) -> tuple[RestridedArg, ...]:
    return tuple(cluster.members[k] for cluster in clusters for k in _own_histories([args[m] for m in cluster.members]))


def _own_nodes(
    clusters: Sequence[_Cluster], args: Sequence[torch.Tensor], meta: ViewAndMutationMeta[RestridedArg, Any]
) -> tuple[RestridedArg, ...]:
    """Members that are views requiring grad whose counter the call leaves (the writes went through a ``.data``
    alias): eager's reads of such a view, and the caller's ``autograd.grad`` w.r.t. it after, go through its own
    view node, which a base taken from its root skips; an ``as_strided`` of it reaching past its elements sends
    them no gradient. (Where the counter moves, eager's node is taken again from the root's history after the
    write: only a second autograd node after the write-back gives that.)"""
    return tuple(
        m
        for cluster in clusters
        for m in cluster.members
        if args[m].requires_grad
        and args[m].grad_fn is not None
        and args[m]._base is not None
        and meta.input_info[m].version_bumps == 0
    )


def _own_bases(
    args: Sequence[torch.Tensor],
    rerouted: tuple[RestridedArg, ...],
    leaves: set[RestridedArg],
    clusters: Sequence[_Cluster],
    spans: Sequence[tuple[int, int]],
) -> list[torch.Tensor]:
    """For each member with a history of its own, where its gradient goes: itself if a leaf, else its root
    over its cluster's span."""
    span_of = {m: span for cluster, span in zip(clusters, spans, strict=True) for m in cluster.members}
    return [args[m] if m in leaves else span_base([args[m]], span_of[m]) for m in rerouted]


def _function_views(
    meta: ViewAndMutationMeta[RestridedArg, RestridedOut], split: OutputSplit[RestridedOut, Any], members: set[Any]
) -> dict[RestridedOut, ComputedAlias[RestridedArg]]:
    """Kept outputs an autograd.Function made as views of merged inputs (the inner layers see plain values)."""
    return {
        out: info.computed_alias
        for out in split.kept
        if (info := meta.output_info[out]).computed_alias is not None and info.computed_alias.base_input in members
    }


def _merged(infos: Sequence[InputAliasInfo]) -> InputAliasInfo:
    """One write standing for several inputs' writes: seen by autograd if any of theirs was, past a base if any
    of theirs went there."""
    visible = [info for info in infos if info.mutation_visible_to_autograd]
    past_base = any(info.writes_recorded_past_base for info in infos)
    return dataclasses.replace(visible[0] if visible else infos[0], writes_recorded_past_base=past_base)
