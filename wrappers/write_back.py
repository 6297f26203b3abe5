"""Writing a mutated value back into the caller's tensor, as eager's in-place ops left it.

Shared by the runtime epilogue (whole inputs) and the synthetic-base layer
(only the regions its aliased inputs cover).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from meta.storage import one_index_per_element, storage_extent
from meta.view_and_mutation import InputAliasInfo

__all__ = ["write_back"]


def write_back(
    targets: Sequence[torch.Tensor],
    new_values: Sequence[torch.Tensor | None],
    infos: Sequence[InputAliasInfo],
) -> None:
    """Copy each new value into its target; autograd ends as eager's did.

    The copy is recorded by autograd exactly when eager's mutation was (not under
    ``no_grad``, not through ``.data``/``detach()``); the caller then sets the
    version counters (``meta.versions.Counters``).
    """
    for target, new_value, info in zip(targets, new_values, infos, strict=True):
        if new_value is None:
            continue  # the graph wrote it (``keep_inference_input_mutations``)
        target, new_value = one_index_per_element(target, new_value)
        # The meta says whether eager's write was recorded (its grad mode at the write, an enable_grad
        # region under an outer no_grad included), not the caller's mode. A write leaving an input without
        # gradient that had none records nothing either: the target may overlap an input requiring grad
        # now, which eager's write did not touch (its requires_grad_() came after).
        if target.is_inference() and not torch.is_inference_mode_enabled():
            target = target.detach()  # eager wrote it through a detach()/.data alias, the only way it allows
        recorded = info.mutation_visible_to_autograd and (info.requires_grad or info.requires_grad_after)
        with torch.set_grad_enabled(recorded):
            # A view whose base an earlier write-back gave a history has its own taken again only when asked:
            # unasked, autograd judges it a leaf requiring grad and refuses the write eager made before that.
            if recorded:
                target.grad_fn  # noqa: B018
            if recorded and not info.writes_recorded_past_base:
                target, new_value = _past_its_base_unrecorded(target, new_value)
            target.copy_(new_value)


def _past_its_base_unrecorded(target: torch.Tensor, new_value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A flat target (a synthetic base's whole) reaching past the elements of the tensor it is a view of, into
    memory a storage grown by ``out=``/``resize_`` holds beyond them, where eager's recorded writes did not go:
    that part is written here, unrecorded, as eager wrote it, and the rest returned. (Recorded, the write's
    backward would read a view past the base out of the base's gradient, which autograd refuses.)"""
    base = target._base
    if base is None or target.dim() != 1 or target.stride() != (1,):
        return target, new_value
    start, end = storage_extent(target)
    within = storage_extent(base)[1] - start
    if not start < start + within < end:
        return target, new_value
    with torch.no_grad():
        target[within:].copy_(new_value[within:])
    return target[:within], new_value[:within]
