"""The metadata-mutation layer: below it, no input's size, stride or offset ever changes.

Inside, each input whose metadata the function changes (``t_``, ``transpose_``,
``unsqueeze_``, ``as_strided_`` ...) is replaced by a stand-in whose geometry the
function changes instead. Outside, after the call, the layer gives the user's
tensor its final size, stride and offset, before the layers below run, which
get a view of it in its original geometry: so the writes and view replays
below come after the geometry change, as in eager. An output that is such an
input is returned here; views of it replay below, each chain starting from the
geometry the input had when eager took the view.

The stand-in is a copy, unless the input shares storage with another input:
autograd on fake tensors cannot write data through, or regenerate older views
of, an alias whose geometry changed in place, so a copy is preferred; data the
function writes into the copy is written into the input, in the input's own
geometry, after the function ran. An input aliasing another must stay an alias,
so the other input sees its writes; writing its data after changing its
geometry, under autograd, is refused with ``UnsupportedMutationError``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from meta.collect import storage_key
from meta.errors import UnsupportedMutationError
from meta.indices import UserArg, UserOut
from meta.view_and_mutation import OutputAliasInfo, OutputType, ViewAndMutationMeta
from wrappers.base import Runtime, Stage
from wrappers.output_split import OutputSplit
from wrappers.write_back import set_versions, version

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
        for i in shared:
            info = meta.input_info[i]
            if info.mutates_data and info.requires_grad and torch.is_grad_enabled():
                raise UnsupportedMutationError(
                    f"input '{info.name}' shares memory with another input and has its metadata changed in "
                    "place, then its data written, with autograd on: not supported yet. Pass it as its own "
                    "tensor, or change its metadata outside the compiled function."
                )
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

        inner_meta = dataclasses.replace(
            meta,
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
            versions = [version(args[arg_idx]) for arg_idx, _ in final]
            # Restride first, as eager's in-place metadata op came before what follows it; the layers below
            # get a view in the original geometry, so views eager took after the change replay after it.
            stand_ins = list(args)
            originals = []
            for arg_idx, info in final:
                target = args[arg_idx]
                size, stride, offset = target.shape, target.stride(), target.storage_offset()
                originals.append((target, size, stride, offset))
                assert info.final_metadata is not None
                final_size, final_stride, relative_offset = info.final_metadata
                # Under the caller's grad mode: eager's t_() on a tensor with history is recorded too.
                target.as_strided_(final_size, final_stride, offset + relative_offset)
                stand_ins[arg_idx] = target.as_strided(size, stride, offset)
            # The layers below count eager's bumps (this restride's too) from the count before the call.
            targets = [args[arg_idx] for arg_idx, _ in final]
            set_versions(targets, versions)
            try:
                inner_outs = inner(stand_ins)
            except BaseException:
                with torch.no_grad():  # nothing half-done: the caller's tensors get their geometry back
                    for target, size, stride, offset in originals:
                        target.as_strided_(size, stride, offset)
                set_versions(targets, versions)
                raise
            set_versions(targets, [v + info.version_bumps for v, (_, info) in zip(versions, final, strict=True)])

            def the_input(out: UserOut, info: OutputAliasInfo) -> torch.Tensor:
                assert info.base_input is not None
                return args[info.base_input]

            return split.assemble(meta, inner_outs, the_input)

        return run
