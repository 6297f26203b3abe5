"""Eager's version-counter rule, stated once.

Every view of one base and every ``detach()`` of any of them share ONE
version counter (``.data`` gets a counter of its own, an inference tensor has
none); each in-place op bumps it once. A compiled call replaces eager's
in-place ops with one ``copy_`` (or none), so a layer writing an input back
sets its counter itself: read before the call, set to eager's final value
before the inner call (what the compiled forward saves is checked against the
version eager's reads saw), back to the value before if the call raises, and
to eager's final value after the write-back. :class:`Counters` does it, once
per shared counter, over groups computed when the function is compiled. The
histories the compiled Function reads are those eager's reads took, at the
counters before the call (:func:`as_read`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import torch

T = TypeVar("T")

__all__ = [
    "Counters",
    "as_read",
    "counter_groups",
    "history_refused",
    "inherit_creation",
    "recorded_stale",
    "refuse_history",
    "set_versions",
    "uncounted",
    "version",
]

# A value no counter reaches (they count to 2**32 - 1): a history recorded at it is stale for good.
_NEVER_COUNTED = 2**32 - 1
# On a view :func:`_relaxed` marked as made in grad mode for the call: the creation it really has.
_RELAXED_CREATION = "_aot_relaxed_creation"
# The ids of the views :func:`_relaxed` marks now, any call's: none (the common case) spares :func:`as_read` its
# look. (A set: adding and discarding are atomic, a count's ``+=`` is not.)
_RELAXED_NOW: set[int] = set()
# On a view :func:`_relaxed` marked: its counter then, before the call moved it.
_RELAXED_AT = "_aot_relaxed_at"


def version(tensor: torch.Tensor) -> int:
    """The version counter; 0 for an inference tensor, which has none."""
    return 0 if tensor.is_inference() else tensor._version


def set_versions(tensors: Sequence[torch.Tensor], versions: Sequence[int]) -> None:
    """Set version counters (shared by every view of the same memory) to eager's values."""
    pairs = [(t, v) for t, v in zip(tensors, versions, strict=True) if not t.is_inference()]
    torch._C._autograd._unsafe_set_version_counter(tuple(t for t, _ in pairs), tuple(v for _, v in pairs))


@contextlib.contextmanager
def uncounted(tensor: torch.Tensor) -> Iterator[None]:
    """An in-place op standing for none of eager's (or for one counted elsewhere): the counter stays."""
    counter = version(tensor)
    yield
    set_versions([tensor], [counter])


def counter_groups(tensors: Sequence[object]) -> list[int]:
    """Each tensor's group: the position of the first of ``tensors`` sharing its version counter (its own
    position where none does, and for a non-tensor or an inference tensor). Python cannot name a counter:
    setting each to a distinct value in turn leaves the last set value on every member of a group."""
    probed = [(i, t) for i, t in enumerate(tensors) if isinstance(t, torch.Tensor) and not t.is_inference()]
    before = tuple(t._version for _, t in probed)
    start = max(before, default=0) + 1
    torch._C._autograd._unsafe_set_version_counter(
        tuple(t for _, t in probed), tuple(range(start, start + len(probed)))
    )
    marks = [t._version for _, t in probed]
    torch._C._autograd._unsafe_set_version_counter(tuple(t for _, t in probed), before)
    groups = list(range(len(tensors)))
    first: dict[int, int] = {}
    for (position, _), mark in zip(probed, marks, strict=True):
        groups[position] = first.setdefault(mark, position)
    return groups


class Counters:
    """The counters of some of a layer's arguments, each moved by eager's bumps.

    ``bumps`` pairs an argument position with the bumps eager made to its
    counter; of arguments sharing one counter (``groups``, from
    :func:`counter_groups` at compile time) only the first is set: setting it
    sets them all. ``moved_inside``: positions whose counters the inner layer
    reads before its call and moves itself, not set before it.
    """

    def __init__(
        self, bumps: Iterable[tuple[int, int]], groups: Sequence[int], moved_inside: Iterable[int] = ()
    ) -> None:
        first: dict[int, int] = {}  # group -> slot
        positions: list[int] = []
        counts: list[int] = []
        self._slot: dict[int, int] = {}
        for position, count in bumps:
            slot = self._slot[position] = first.setdefault(groups[position], len(positions))
            if slot == len(positions):
                positions.append(position)
                counts.append(count)
        self.positions, self.bumps = tuple(positions), tuple(counts)
        inner = {groups[p] for p in moved_inside}
        self._early = tuple((slot, p, counts[slot]) for slot, p in enumerate(positions) if groups[p] not in inner)
        # Every argument whose counter is set early to a later value: any autograd judges by its creation.
        moved_early = {groups[p] for _, p, count in self._early if count}
        self._sharing_early = tuple(p for p, group in enumerate(groups) if group in moved_early)

    def __bool__(self) -> bool:
        return bool(self.positions)

    @property
    def relaxes(self) -> bool:
        """Whether :meth:`start` may mark views as made in grad mode (:func:`_relaxed`) for the call."""
        return bool(self._sharing_early)

    def read(self, args: Sequence[torch.Tensor]) -> tuple[int, ...]:
        """The counters before the call."""
        return tuple(version(args[p]) for p in self.positions)

    def before_of(self, before: Sequence[int], position: int) -> int | None:
        """``position``'s counter before the call, if it is one of these."""
        slot = self._slot.get(position)
        return None if slot is None else before[slot]

    def slot_of(self, position: int) -> int | None:
        """Where ``position``'s counter is in what :meth:`read` returns, if it is one of these."""
        return self._slot.get(position)

    def call(
        self, inner: Callable[[Any], T], inner_args: Any, args: Sequence[torch.Tensor]
    ) -> tuple[T, tuple[int, ...]]:
        """``inner(inner_args)`` with the counters at eager's final values already (what the compiled forward
        saves is checked against the version eager's reads saw), back where they were if it raises; and the
        counters before."""
        before = self.start(args)
        try:
            return inner(inner_args), before
        except BaseException:
            self.restore(args, before)  # nothing half-done
            raise

    def start(self, args: Sequence[torch.Tensor]) -> tuple[int, ...]:
        """Before the inner call: the counters before it, and those not moved inside set to eager's final values."""
        before = _Before(self.read(args))
        before.relaxed = _relaxed([args[p] for p in self._sharing_early])
        set_versions([args[p] for _, p, _ in self._early], [before[s] + b for s, _, b in self._early])
        return before

    def finish(self, args: Sequence[torch.Tensor], before: Sequence[int]) -> None:
        """Set the counters to eager's values after the call: however many in-place ops (or none) a write-back
        stands for, eager's bumps."""
        set_versions([args[p] for p in self.positions], [v + b for v, b in zip(before, self.bumps, strict=True)])
        _judged_again(getattr(before, "relaxed", ()), stale=True)

    def restore(self, args: Sequence[torch.Tensor], before: Sequence[int]) -> None:
        """Set the counters back to their values before the call."""
        set_versions([args[p] for p in self.positions], before)
        _judged_again(getattr(before, "relaxed", ()), stale=False)


class _Before(tuple[int, ...]):
    """The counters before a call, and the views :func:`_relaxed` for it."""

    relaxed: list[tuple[torch.Tensor, Any]]


def _relaxed(tensors: Sequence[torch.Tensor]) -> list[tuple[torch.Tensor, Any]]:
    """Views requiring grad made under no_grad or inference mode (or as one of several outputs), marked as made
    in grad mode, with their creation. Autograd refuses the history of such a view once its counter moved; a
    counter set early moves before the compiled call reads the history, which eager's function read, if at
    all, before its write (reading it after raises in eager, and in meta collection); :func:`as_read` gives the
    call the history eager's read took where autograd would take another."""
    relaxed: list[tuple[torch.Tensor, Any]] = []
    for tensor in tensors:
        if tensor._base is None or not tensor.requires_grad or tensor.is_inference():
            continue
        creation = torch._C._autograd._get_creation_meta(tensor)
        if creation != torch._C._autograd.CreationMeta.DEFAULT and all(t is not tensor for t, _ in relaxed):
            torch._C._autograd._set_creation_meta(tensor, torch._C._autograd.CreationMeta.DEFAULT)
            setattr(tensor, _RELAXED_CREATION, creation)
            setattr(tensor, _RELAXED_AT, tensor._version)
            _RELAXED_NOW.add(id(tensor))
            relaxed.append((tensor, creation))
    return relaxed


def _unrelaxed(tensor: torch.Tensor, creation: Any) -> None:
    """A view :func:`_relaxed` marked gets its creation back."""
    torch._C._autograd._set_creation_meta(tensor, creation)
    vars(tensor).pop(_RELAXED_CREATION, None)  # (a layer's epilogue may finish twice)
    vars(tensor).pop(_RELAXED_AT, None)
    _RELAXED_NOW.discard(id(tensor))


def as_read(tensors: list[Any]) -> list[Any]:
    """``tensors`` as the compiled call reads their histories: a view :func:`_relaxed` marks stands as a tensor on
    its memory and counter whose history is the one the view had at its counter before the call. Eager's function
    read it, if at all, then, before its write; read at the counter moved early, its creation relaxed, autograd
    would take one again from its base by strides: a gradient eager's never gives the base of a view made under
    no_grad (it has none), one skipping an autograd.Function's backward (of a view it returned), or an internal
    assert (of a view that is not the first of several outputs, as ``unbind``'s)."""
    if not _RELAXED_NOW:
        return tensors
    read = list(tensors)
    for position, tensor in enumerate(tensors):
        counter = getattr(tensor, _RELAXED_AT, None) if isinstance(tensor, torch.Tensor) else None
        if counter is not None:
            moved = tensor._version
            set_versions([tensor], [counter])
            try:
                with torch.enable_grad():
                    read[position] = _AsRead.apply(tensor)  # type: ignore[no-untyped-call]
            finally:
                set_versions([tensor], [moved])
    return read


class _AsRead(torch.autograd.Function):
    """Its input's memory and counter (``detach()`` shares both), with the history the input has now, kept
    whatever the counter does later: a tensor that is no view has no history to take again."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.detach()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad


def _judged_again(relaxed: Sequence[tuple[torch.Tensor, Any]], stale: bool) -> None:
    """Give :func:`_relaxed` views their creation back, their history's record taken at their counter now, or,
    ``stale``, at another value: eager's read (if any) was before its write, so its next read refuses. (Autograd
    cannot take again the record of a view that is not the first of several outputs: nothing took it during the
    call, it stays at the counter before the call, which ``stale`` has moved past.)"""
    for tensor, creation in relaxed:
        if tensor.output_nr != 0:
            _unrelaxed(tensor, creation)
            continue
        counter = tensor._version
        if stale:
            set_versions([tensor], [counter + 1])
        _ = tensor.grad_fn  # taken again while the view counts as made in grad mode
        if stale:
            set_versions([tensor], [counter])
        _unrelaxed(tensor, creation)


def inherit_creation(view: torch.Tensor, source: torch.Tensor) -> None:
    """``view``, just taken of ``source`` while :func:`_relaxed` marks it as made in grad mode, gets the creation
    eager's view of it inherits (autograd's ``propagate_creation_meta``): eager refuses its history, as the
    source's, once its memory is written after it was made."""
    creation = getattr(source, _RELAXED_CREATION, None)
    if creation is None or view is source or view._base is None or not view.requires_grad:
        return
    own = torch._C._autograd._get_creation_meta(view)
    CreationMeta = torch._C._autograd.CreationMeta
    if own == CreationMeta.DEFAULT or creation == CreationMeta.INFERENCE_MODE:
        torch._C._autograd._set_creation_meta(view, creation)


def history_refused(tensor: torch.Tensor) -> bool:
    """Whether autograd refuses to take ``tensor``'s history again: a view requiring grad made under no_grad (or
    inference mode, or as one of several outputs) whose counter moved since its history was taken. (Reading
    ``grad_fn`` of such a view takes nothing again: it raises, or returns the history it has.) Read past the
    torch-function modes tracing runs under: they may stand a fresh view in for it."""
    with torch._C.DisableTorchFunction():
        if tensor._base is None or not tensor.requires_grad or tensor.is_inference():
            return False
        if torch._C._autograd._get_creation_meta(tensor) == torch._C._autograd.CreationMeta.DEFAULT:
            return False
        try:
            _ = tensor.grad_fn
        except RuntimeError:
            return True
        return False


def refuse_history(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` with its history refused as eager's: eager's output is a view made under no_grad (or inference
    mode, or as one of several outputs) of memory requiring grad, written or restrided after it was made, whose
    history autograd refuses to the caller. Autograd's record of the view is taken at a counter value it never
    reaches (its own stays), whatever the layers above bump later. A tensor whose record autograd would take
    again by strides (no view, one made in grad mode) or cannot take again at all (one of several outputs) gives
    a view of itself made under no_grad instead, refused so."""
    if history_refused(tensor) or not tensor.requires_grad:
        return tensor
    creation = torch._C._autograd._get_creation_meta(tensor) if tensor._base is not None else None
    if creation in (None, torch._C._autograd.CreationMeta.DEFAULT) or tensor.output_nr != 0:
        with torch.no_grad():
            tensor = tensor.view_as(tensor)
    for view, creation in _relaxed([tensor]):
        with recorded_stale(view):
            _ = view.grad_fn  # taken while the view counts as made in grad mode
        _unrelaxed(view, creation)
    return tensor


@contextlib.contextmanager
def recorded_stale(tensor: torch.Tensor) -> Iterator[None]:
    """Views of ``tensor`` taken inside have autograd's record of them taken at a counter value it never
    reaches, its own set back after: eager's were written after they were made, and a view autograd cannot take
    again at all (one of several outputs) is made stale only so."""
    counter = version(tensor)
    set_versions([tensor], [_NEVER_COUNTED])
    try:
        yield
    finally:
        set_versions([tensor], [counter])
