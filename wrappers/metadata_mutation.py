"""The metadata-mutation layer: below it, no input's size, stride or offset ever changes.

Inside, each input whose metadata the function changes (``t_``, ``transpose_``,
``unsqueeze_``, ``as_strided_`` ...) is replaced by a stand-in whose geometry the
function changes instead. Outside, after the call, the layer gives the user's
tensor its final size, stride and offset. An output that is such an input is
returned here, after that; views of it replay below, from the original
geometry, each chain starting with the geometry the input had when the view was
taken.

The stand-in is a copy, unless the input shares storage with another input:
autograd on fake tensors cannot write data through, or regenerate older views
of, an alias whose geometry changed in place, so a copy is preferred; data the
function writes into the copy is written into the input, in the input's own
geometry, after the function ran. An input aliasing another must stay an alias,
so the other input sees its writes.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from meta.collect import storage_key
from meta.indices import UserArg, UserOut
from meta.view_and_mutation import OutputAliasInfo, OutputType, ViewAndMutationMeta
from wrappers.base import Runtime, Stage
from wrappers.output_split import OutputSplit

__all__ = ["MetadataMutation"]


class MetadataMutation:
    """Inputs with metadata mutations get a stand-in inside and are restrided outside."""

    def __init__(self) -> None:
        self._meta: ViewAndMutationMeta | None = None
        self._mutated: tuple[UserArg, ...] = ()
        self._split: OutputSplit | None = None

    def pre_compile(self, outer: Stage) -> Stage:
        meta = outer.meta
        self._meta = meta
        mutated = tuple(UserArg(i) for i, info in enumerate(meta.input_info) if info.mutates_metadata)
        self._mutated = mutated
        if not mutated:
            return outer
        split = OutputSplit.of(
            meta, lambda info: info.output_type == OutputType.IS_INPUT and info.base_input in mutated
        )
        self._split = split
        storages = [storage_key(arg) for arg in outer.args]
        shared = {i for i in mutated if storages.count(storages[i]) > 1}
        copied = [i for i in mutated if i not in shared]
        written_back = [i for i in copied if meta.input_info[i].mutates_data]
        flat_fn = outer.fn

        def inner_fn(*args: torch.Tensor) -> list[torch.Tensor]:
            working = list(args)
            geometry = {}
            for arg_idx in shared:
                working[arg_idx] = torch.ops.aten.alias.default(args[arg_idx])
            for arg_idx in copied:
                working[arg_idx] = args[arg_idx].clone()
                geometry[arg_idx] = (working[arg_idx].shape, working[arg_idx].stride())
            outs = list(flat_fn(*working))
            for arg_idx in written_back:
                size, stride = geometry[arg_idx]
                args[arg_idx].copy_(working[arg_idx].as_strided(size, stride, 0))
            return [outs[out] for out in split.kept]

        inner_meta = ViewAndMutationMeta(
            input_info=tuple(
                dataclasses.replace(info, mutates_metadata=False, final_metadata=None) for info in meta.input_info
            ),
            output_info=split.inner_output_info(meta),
            intermediate_bases=meta.intermediate_bases,
        )
        return Stage(inner_fn, outer.args, inner_meta)

    def post_compile(self, inner: Runtime) -> Runtime:
        meta, mutated, split = self._meta, self._mutated, self._split
        assert meta is not None, "post_compile before pre_compile"
        if not mutated:
            return inner
        assert split is not None
        final = [(arg_idx, meta.input_info[arg_idx]) for arg_idx in mutated]

        def run(args: list[torch.Tensor]) -> list[Any]:
            offsets = [args[arg_idx].storage_offset() for arg_idx, _ in final]
            versions = [args[arg_idx]._version for arg_idx, _ in final]
            inner_outs = inner(args)
            for (arg_idx, info), offset in zip(final, offsets, strict=True):
                assert info.final_metadata is not None
                size, stride, relative_offset = info.final_metadata
                # Under the caller's grad mode: eager's t_() on a tensor with history is recorded too.
                args[arg_idx].as_strided_(size, stride, offset + relative_offset)
            # The version counter ends where eager's did, whatever the layers below bumped.
            torch._C._autograd._unsafe_set_version_counter(
                tuple(args[arg_idx] for arg_idx, _ in final),
                tuple(v + info.version_bumps for v, (_, info) in zip(versions, final, strict=True)),
            )

            def the_input(out: UserOut, info: OutputAliasInfo) -> torch.Tensor:
                assert info.base_input is not None
                return args[info.base_input]

            return split.assemble(meta, inner_outs, the_input)

        return run
