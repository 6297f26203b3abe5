"""The metadata-mutation layer: below it, no input's size, stride or offset ever changes.

Inside, each input whose metadata the function changes (``t_``, ``transpose_``,
``unsqueeze_``, ``as_strided_`` ...) is replaced by a copy of it, so the
function changes the copy's geometry instead; data it writes into the copy is
written into the input, in the input's own geometry, after the function ran.
Outside, after the call, the layer gives the user's tensor its final size,
stride and offset. An output that is such an input is returned
here, after that; views of it replay below, from the original geometry, each
chain starting with the geometry the input had when the view was taken.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from meta.indices import IndexMap, UserArg, UserOut
from meta.view_and_mutation import OutputType, ViewAndMutationMeta
from wrappers.base import Runtime, Stage

__all__ = ["MetadataMutation"]



class MetadataMutation:
    """Inputs with metadata mutations are copied inside and restrided outside."""

    def __init__(self) -> None:
        self._meta: ViewAndMutationMeta | None = None
        self._mutated: tuple[UserArg, ...] = ()
        self._kept: IndexMap[UserOut, UserOut] = IndexMap()  # outer output -> inner output

    def pre_compile(self, outer: Stage) -> Stage:
        meta = outer.meta
        self._meta = meta
        mutated = tuple(UserArg(i) for i, info in enumerate(meta.input_info) if info.mutates_metadata)
        self._mutated = mutated
        if not mutated:
            return outer
        rebuilt = {
            out_idx
            for out_idx, info in enumerate(meta.output_info)
            if info.output_type == OutputType.IS_INPUT and info.base_input in mutated
        }
        # A repeat of a rebuilt output is rebuilt here too; other repeats keep pointing below.
        for out_idx, info in enumerate(meta.output_info):
            if info.output_type == OutputType.IS_OUTPUT and info.base_output in rebuilt:
                rebuilt.add(out_idx)
        kept = [UserOut(i) for i in range(len(meta.output_info)) if i not in rebuilt]
        self._kept = IndexMap((out, UserOut(inner)) for inner, out in enumerate(kept))
        flat_fn = outer.fn

        data_too = [arg_idx for arg_idx in mutated if meta.input_info[arg_idx].mutates_data]

        def inner_fn(*args: torch.Tensor) -> list[torch.Tensor]:
            # The function changes the geometry of a copy. (Not of an alias: autograd mishandles views
            # taken before an in-place metadata change of another view of the same base.)
            working = list(args)
            geometry = {}
            for arg_idx in mutated:
                working[arg_idx] = args[arg_idx].clone()
                geometry[arg_idx] = (working[arg_idx].shape, working[arg_idx].stride())
            outs = list(flat_fn(*working))
            for arg_idx in data_too:
                # The copy's data, read in the input's own geometry, is the input's new value.
                size, stride = geometry[arg_idx]
                args[arg_idx].copy_(working[arg_idx].as_strided(size, stride, 0))
            return [outs[i] for i in kept]

        inner_meta = ViewAndMutationMeta(
            input_info=tuple(
                dataclasses.replace(info, mutates_metadata=False, final_metadata=None) for info in meta.input_info
            ),
            output_info=tuple(self._reindexed(meta.output_info[i]) for i in kept),
            intermediate_bases=meta.intermediate_bases,
        )
        return Stage(inner_fn, outer.args, inner_meta)

    def _reindexed(self, info: Any) -> Any:
        """An output's info with ``base_output`` moved to the inner output space."""
        if info.base_output is None:
            return info
        return dataclasses.replace(info, base_output=self._kept[info.base_output])

    def post_compile(self, inner: Runtime) -> Runtime:
        meta, mutated, kept = self._meta, self._mutated, self._kept
        assert meta is not None, "post_compile before pre_compile"
        if not mutated:
            return inner
        final = [(arg_idx, meta.input_info[arg_idx].final_metadata) for arg_idx in mutated]
        plan = list(enumerate(meta.output_info))

        def run(args: list[torch.Tensor]) -> list[Any]:
            offsets = [args[arg_idx].storage_offset() for arg_idx, _ in final]
            versions = [args[arg_idx]._version for arg_idx, _ in final]
            inner_outs = inner(args)
            for (arg_idx, metadata), offset in zip(final, offsets, strict=True):
                assert metadata is not None
                size, stride, relative_offset = metadata
                # Under the caller's grad mode: eager's t_() on a tensor with history is recorded too.
                args[arg_idx].as_strided_(size, stride, offset + relative_offset)
            # The version counter ends where eager's did, whatever the layers below bumped.
            torch._C._autograd._unsafe_set_version_counter(
                tuple(args[arg_idx] for arg_idx, _ in final),
                tuple(
                    v + meta.input_info[arg_idx].version_bumps for v, (arg_idx, _) in zip(versions, final, strict=True)
                ),
            )
            outs: list[Any] = [None] * len(plan)
            for out_idx, info in plan:
                if UserOut(out_idx) in kept:
                    outs[out_idx] = inner_outs[kept[UserOut(out_idx)]]
                elif info.output_type == OutputType.IS_INPUT:
                    assert info.base_input is not None
                    outs[out_idx] = args[info.base_input]
                else:  # a repeat of an output rebuilt above
                    assert info.base_output is not None
                    outs[out_idx] = outs[info.base_output]
            return outs

        return run
