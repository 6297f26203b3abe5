"""The runtime epilogue: outputs that alias come back exactly as eager returns them.

Below this layer every output is fresh memory computed by the graph. Above it:

- an output that *is* an input is that input object;
- an output that is a view of an input is regenerated after the call by
  replaying its view chain on the caller's input, so its ``_base``, storage,
  ``grad_fn`` and ``requires_grad`` are what eager gives;
- an output that is a view of an intermediate is replayed from that
  intermediate, which the graph returns instead (as a user output or as a
  hidden extra output), so views of one intermediate share its storage;
- an output returned twice is the same object twice.

(The mutation half, writing mutated inputs back, arrives with the mutation layers.)
"""

from __future__ import annotations

from typing import Any

import torch

from meta.collect import ViewRecorder
from meta.indices import GraphOut, IndexMap, IntermediateBase, UserOut
from meta.view_and_mutation import OutputType, ViewAndMutationMeta, replay_views
from wrappers.base import Runtime, Stage

__all__ = ["RuntimeEpilogue"]


class RuntimeEpilogue:
    """Graph outputs: user outputs of type ``NON_ALIAS``, then the hidden intermediate bases."""

    def __init__(self) -> None:
        self._outer_meta: ViewAndMutationMeta | None = None
        self._user_to_graph: IndexMap[UserOut, GraphOut] = IndexMap()
        self._base_to_graph: IndexMap[IntermediateBase, GraphOut] = IndexMap()

    def pre_compile(self, outer: Stage) -> Stage:
        meta = outer.meta
        self._outer_meta = meta
        computed = [UserOut(i) for i, info in enumerate(meta.output_info) if info.output_type == OutputType.NON_ALIAS]
        self._user_to_graph = IndexMap((out, GraphOut(i)) for i, out in enumerate(computed))
        self._base_to_graph = IndexMap(
            (IntermediateBase(k), GraphOut(len(computed) + k)) for k in range(meta.num_intermediate_bases)
        )
        # For each hidden base: one output that is a view of it, and how many steps up the base is.
        base_witness: dict[int, tuple[int, int]] = {}
        for out_idx, info in enumerate(meta.output_info):
            if info.base_intermediate is not None:
                base_witness.setdefault(info.base_intermediate, (out_idx, len(info.view_chain)))
        witnesses = [base_witness[k] for k in range(meta.num_intermediate_bases)]
        flat_fn = outer.fn

        def inner_fn(*args: torch.Tensor) -> list[torch.Tensor]:
            if not witnesses:
                outs = list(flat_fn(*args))
                return [outs[i] for i in computed]
            recorder = ViewRecorder()
            with recorder:
                outs = list(flat_fn(*args))
            bases = [recorder.root(outs[out_idx], depth) for out_idx, depth in witnesses]
            return [*(outs[i] for i in computed), *bases]

        inner_meta = ViewAndMutationMeta(
            input_info=meta.input_info,
            output_info=tuple(meta.output_info[i] for i in computed) + meta.intermediate_bases,
        )
        return Stage(inner_fn, outer.args, inner_meta)

    def post_compile(self, inner: Runtime) -> Runtime:
        meta = self._outer_meta
        assert meta is not None, "post_compile before pre_compile"
        user_to_graph, base_to_graph = self._user_to_graph, self._base_to_graph
        if all(info.output_type == OutputType.NON_ALIAS for info in meta.output_info) and len(user_to_graph) == len(
            meta.output_info
        ):
            return inner  # nothing to regenerate: the graph's outputs are the user's
        plan = list(enumerate(meta.output_info))

        def run(args: list[torch.Tensor]) -> list[Any]:
            graph_outs = inner(args)
            outs: list[Any] = [None] * len(plan)
            for out_idx, info in plan:
                kind = info.output_type
                if kind == OutputType.NON_ALIAS:
                    outs[out_idx] = graph_outs[user_to_graph[UserOut(out_idx)]]
            for out_idx, info in plan:
                kind = info.output_type
                if kind == OutputType.NON_ALIAS:
                    continue
                if kind == OutputType.IS_INPUT:
                    assert info.base_input is not None
                    outs[out_idx] = args[info.base_input]
                elif kind == OutputType.ALIAS_OF_INPUT:
                    assert info.base_input is not None
                    outs[out_idx] = replay_views(args[info.base_input], info.view_chain)
                elif kind == OutputType.IS_OUTPUT:
                    assert info.base_output is not None
                    outs[out_idx] = outs[info.base_output]
                elif info.base_output is not None:
                    outs[out_idx] = replay_views(outs[info.base_output], info.view_chain)
                else:
                    assert info.base_intermediate is not None
                    base = graph_outs[base_to_graph[info.base_intermediate]]
                    outs[out_idx] = replay_views(base, info.view_chain)
            return outs

        return run
