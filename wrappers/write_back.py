"""Writing a mutated value back into the caller's tensor, as eager's in-place ops left it.

Shared by the runtime epilogue (whole inputs) and the synthetic-base layer
(only the regions its aliased inputs cover).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from meta.storage import one_index_per_element
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
            target.copy_(new_value)
