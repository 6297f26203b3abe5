"""The input signature: everything about a call that a compiled entry is specialized on.

Shapes, strides, dtypes, devices, ``requires_grad`` (and view-ness or
leafness where it matters), grad mode, which tensor inputs share storage (and version counters), the
pytree structure and every non-tensor value. Two calls with equal signatures
can share one compiled entry; any difference traces again.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import torch

from aot.errors import UnsupportedInputError
from meta.storage import has_version_counter, how_made, leaf_of_ungraded_base
from meta.versions import counter_groups

__all__ = ["constant_key", "input_signature"]

_PLAIN_CONSTANTS = (int, bool, str, type(None), torch.dtype, torch.device, torch.memory_format, torch.layout)


def constant_key(value: Any, name_of: Callable[[int], str], position: int) -> Hashable:
    """A hashable key standing for a non-tensor argument, specialized into the graph."""
    if isinstance(value, float):
        # Distinguish -0.0 from 0.0 and let NaN equal itself.
        return (float, value.hex() if math.isfinite(value) else repr(value))
    if isinstance(value, _PLAIN_CONSTANTS):
        return (type(value), value)
    try:
        hash(value)
    except TypeError:
        raise UnsupportedInputError(
            f"argument '{name_of(position)}' is a {type(value).__name__}, which aotfx cannot specialize on: "
            "pass tensors, numbers, strings, None, or containers (tuple/list/dict) of them"
        ) from None
    return (type(value), value)


def input_signature(
    leaves: Sequence[Any],
    structure: Hashable,
    name_of: Callable[[int], str],
    dynamic: Mapping[int, frozenset[int]] | None = None,
) -> Hashable:
    """The signature of one call, from its flattened arguments and their tree structure.

    For tensors that share storage it adds which object each is (a repeat of an
    earlier argument or not), its storage offset and whether it is a view: what
    the dedupe and synthetic-base layers decide on.

    ``dynamic`` (leaf position -> dimensions traced as symbols): those tensors enter
    with their rank and dynamic dimensions only; their sizes, strides and offset are
    what the entry's guard (``meta.symbolic.Guard``) checks.
    """
    parts: list[Hashable] = [structure, torch.is_grad_enabled(), torch.is_inference_mode_enabled()]
    first_in_storage: dict[int, int] = {}  # storage -> position of its first tensor
    shared: set[int] = set()  # positions of tensors whose storage another tensor argument shares
    for position, leaf in enumerate(leaves):
        if isinstance(leaf, torch.Tensor):
            storage = int(leaf.untyped_storage()._cdata)
            first = first_in_storage.setdefault(storage, position)
            if first != position:
                shared.update((first, position))
            requires_grad = leaf.requires_grad
            dims = dynamic.get(position) if dynamic else None
            parts.append(
                (
                    leaf.shape if dims is None else ("dynamic", leaf.dim(), dims),
                    leaf.stride() if dims is None else None,
                    leaf.dtype,
                    leaf.device,
                    requires_grad,
                    requires_grad and leaf.is_leaf,
                    # a view made under no_grad or in inference mode: autograd refuses its history once written
                    how_made(leaf) if requires_grad else 0,
                    # requires_grad_() on a view makes a leaf whose own views follow its base: no grad
                    not requires_grad and leaf._is_view(),
                    # ... requiring grad: a leaf whose own no_grad views follow its base, which requires none
                    requires_grad and leaf_of_ungraded_base(leaf),
                    first,
                    # eager refuses in-place writes into an inference tensor outside inference mode,
                    # unless it is a detach()/.data of one (which has a version counter)
                    has_version_counter(leaf) if leaf.is_inference() else None,
                )
            )
        else:
            parts.append(constant_key(leaf, name_of, position))
    if shared:
        # Aliasing is rare: only then pay for identity, offsets, view-ness and shared version counters.
        objects: dict[int, int] = {}
        positions = sorted(shared)
        counters = counter_groups([leaves[p] for p in positions])
        parts.append(
            tuple(
                (p, objects.setdefault(id(leaves[p]), p), leaves[p].storage_offset(), leaves[p]._is_view(), counter)
                for p, counter in zip(positions, counters, strict=True)
            )
        )
    return tuple(parts)
