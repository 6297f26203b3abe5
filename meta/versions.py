"""Eager's version-counter rule, stated once.

Every view of one base and every ``detach()`` of any of them share ONE
version counter (``.data`` gets a counter of its own, an inference tensor has
none); each in-place op bumps it once. A compiled call replaces eager's
in-place ops with one ``copy_`` (or none), so a layer writing an input back
sets its counter itself: read before the call, set to eager's final value
before the inner call (what the compiled forward saves is checked against the
version eager's reads saw), back to the value before if the call raises, and
to eager's final value after the write-back. :class:`Counters` does it, once
per shared counter, over groups computed when the function is compiled.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["Counters", "counter_groups", "set_versions", "version"]


def version(tensor: torch.Tensor) -> int:
    """The version counter; 0 for an inference tensor, which has none."""
    return 0 if tensor.is_inference() else tensor._version


def set_versions(tensors: Sequence[torch.Tensor], versions: Sequence[int]) -> None:
    """Set version counters (shared by every view of the same memory) to eager's values."""
    pairs = [(t, v) for t, v in zip(tensors, versions, strict=True) if not t.is_inference()]
    torch._C._autograd._unsafe_set_version_counter(tuple(t for t, _ in pairs), tuple(v for _, v in pairs))


def counter_groups(tensors: Sequence[object]) -> list[int]:
    """Each tensor's group: the position of the first of ``tensors`` sharing its version counter (its own
    position where none does, and for a non-tensor or an inference tensor). Python cannot name a counter:
    setting each to a distinct value in turn leaves the last set value on every member of a group."""
    positions = [i for i, t in enumerate(tensors) if isinstance(t, torch.Tensor) and not t.is_inference()]
    probed = [tensors[i] for i in positions]
    assert all(isinstance(t, torch.Tensor) for t in probed)
    before = [t._version for t in probed]  # type: ignore[union-attr]
    start = max(before, default=0) + 1
    torch._C._autograd._unsafe_set_version_counter(tuple(probed), tuple(range(start, start + len(probed))))
    marks = [t._version for t in probed]  # type: ignore[union-attr]
    torch._C._autograd._unsafe_set_version_counter(tuple(probed), tuple(before))
    groups = list(range(len(tensors)))
    first: dict[int, int] = {}
    for position, mark in zip(positions, marks, strict=True):
        groups[position] = first.setdefault(mark, position)
    return groups


class Counters:
    """The counters of some of a layer's arguments, each moved by eager's bumps.

    ``bumps`` pairs an argument position with the bumps eager made to its
    counter; of arguments sharing one counter (``groups``, from
    :func:`counter_groups` at compile time) only the first is kept: setting
    it sets them all.
    """

    def __init__(self, bumps: Sequence[tuple[int, int]], groups: Sequence[int]) -> None:
        seen: set[int] = set()
        kept = [(p, b) for p, b in bumps if groups[p] not in seen and not seen.add(groups[p])]  # type: ignore[func-returns-value]
        self.positions = tuple(p for p, _ in kept)
        self.bumps = tuple(b for _, b in kept)

    def __bool__(self) -> bool:
        return bool(self.positions)

    def read(self, args: Sequence[torch.Tensor]) -> tuple[int, ...]:
        """The counters before the call."""
        return tuple(version(args[p]) for p in self.positions)

    def finish(self, args: Sequence[torch.Tensor], before: Sequence[int]) -> None:
        """Set the counters to eager's values after the call."""
        set_versions([args[p] for p in self.positions], [v + b for v, b in zip(before, self.bumps, strict=True)])

    def restore(self, args: Sequence[torch.Tensor], before: Sequence[int]) -> None:
        """Set the counters back to their values before the call (it raised: nothing half-done)."""
        set_versions([args[p] for p in self.positions], before)
