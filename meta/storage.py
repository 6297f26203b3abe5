"""Storage geometry, and fake inputs that mirror the real inputs' memory exactly.

A tensor is a window (size, stride, storage offset) on a storage. What a
program does can depend on all of it: ``as_strided`` takes absolute storage
offsets, a write through one input is read through another that shares its
storage, a view of a leaf requiring grad may not be written in place. So the
fakes a program is run on (for metadata collection and tracing) share a fake
storage exactly where the real inputs share one, sit at the real offsets with
the real strides in a storage of the real size, and mirror ``requires_grad``,
leafness and which tensor each input is a view of.
"""

from __future__ import annotations

import contextvars
from collections.abc import Sequence
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import guard_or_false, guard_or_true

from meta.symbolic import span_end, symbolic_fake, symbolic_geometry
from meta.versions import counter_groups, uncounted

__all__ = [
    "CALLER_IN_INFERENCE_MODE",
    "Extent",
    "clone_at_offset",
    "expanded_dims",
    "fake_input",
    "fake_inputs",
    "has_gaps",
    "has_version_counter",
    "how_made",
    "intersect",
    "leaf_of_ungraded_base",
    "offset_of",
    "one_index_per_element",
    "overlaps",
    "overlaps_itself",
    "storage_extent",
    "storage_key",
    "storage_numel",
    "touch_interval",
    "view_root",
    "whole_storage",
    "whole_storage_in",
]

# A half-open interval ``[start, end)`` of storage elements.
Extent = tuple[int, int]


def view_root(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor ``tensor`` is a view of (autograd's ``_base``), or ``tensor`` itself."""
    return tensor._base if tensor._base is not None else tensor


# Whether the compiled function's caller runs under inference mode: collection itself runs outside
# it (inference tensors have no version counter to watch), see ``aot.api``; fakes of views are made for it.
CALLER_IN_INFERENCE_MODE: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "CALLER_IN_INFERENCE_MODE", default=False
)


def has_version_counter(tensor: torch.Tensor) -> bool:
    """Whether in-place writes may bump ``tensor``'s version counter outside inference mode: an inference
    tensor has none, unless it is a ``detach()``/``.data`` of one taken outside inference mode."""
    if not tensor.is_inference():
        return True
    try:
        return tensor._version >= 0
    except RuntimeError:  # "Inference tensors do not track version counter."
        return False


def how_made(tensor: torch.Tensor) -> int:
    """For a view requiring grad, how autograd recorded its making (``CreationMeta``: in grad mode, under
    no_grad, in inference mode, as one output of several ...), which decides whether it refuses the view's
    history once its memory is written; 0 (grad mode) for any other tensor."""
    if tensor._base is None or not tensor.requires_grad or tensor.is_inference():
        return 0
    creation: int = torch._C._autograd._get_creation_meta(tensor).value
    return creation


def leaf_of_ungraded_base(tensor: torch.Tensor) -> bool:
    """A leaf view requiring grad of a base requiring none (``requires_grad_()`` on a view): eager takes its views
    from that base, so those made under no_grad require no grad (a fake made a leaf of its own has them require it)."""
    base = tensor._base
    return bool(tensor.requires_grad and base is not None and not base.requires_grad and tensor.is_leaf)


def storage_key(tensor: torch.Tensor) -> int:
    """An id of the tensor's storage: equal for tensors that share memory. A sparse COO tensor's memory is its
    values' (and indices'): keyed by its values."""
    if tensor.layout == torch.sparse_coo:
        return storage_key(tensor._values())
    return int(tensor.untyped_storage()._cdata)


def storage_numel(tensor: torch.Tensor) -> int:
    """How many elements of the tensor's dtype its storage holds."""
    return int(tensor.untyped_storage().nbytes()) // tensor.element_size()


def offset_of(tensor: torch.Tensor) -> int:
    """The storage offset: an int, or a SymInt (which acts as one) on a fake with symbolic sizes.

    Never ``int()`` of it: that would specialize the sizes it is computed from.
    """
    return tensor.storage_offset()  # type: ignore[return-value]


def storage_extent(tensor: torch.Tensor) -> Extent:
    """The storage interval ``[start, end)`` a tensor's elements lie in (over-approximated by strides)."""
    start = offset_of(tensor)
    # A size that depends on data (an unbacked symbol) may be 0: counted as reaching, an over-approximation.
    if guard_or_false(tensor.numel() == 0):
        return start, start
    return start, span_end(tensor.shape, tensor.stride(), start)


def expanded_dims(shape: Sequence[int], stride: Sequence[int]) -> list[int]:
    """The dimensions along which several indices reach one memory element (stride 0, size > 1)."""
    # (a data-dependent size, unknown to the trace, may be above 1; a data-dependent stride, that of a
    # data-dependent op's dense output, is not known to be 0)
    return [
        dim
        for dim, (size, step) in enumerate(zip(shape, stride, strict=True))
        if guard_or_false(step == 0) and guard_or_true(size > 1)
    ]


def overlaps_itself(shape: Sequence[int], stride: Sequence[int]) -> bool:
    """Whether two indices may reach one memory element along dimensions of nonzero stride (an ``unfold``,
    an ``as_strided`` view): by increasing stride, each must step past everything the smaller ones span."""
    # A size that depends on data (an unbacked symbol) is not known: each check errs towards overlap.
    spanned = 0
    dims = sorted(
        (abs(st), n) for n, st in zip(shape, stride, strict=True) if guard_or_true(st != 0) and guard_or_true(n > 1)
    )
    for step, size in dims:
        if guard_or_true(step <= spanned):
            return True
        spanned += (size - 1) * step
    return False


def has_gaps(shape: Sequence[int], stride: Sequence[int]) -> bool:
    """Whether memory between a tensor's elements is none of them (``x[::2]``, ``as_strided((2,), (2,))``): by
    increasing stride, some step passes over an element nothing smaller reached."""
    # A size that depends on data (an unbacked symbol) is not known: each check errs towards a gap.
    spanned = 0
    dims = sorted(
        (abs(st), n) for n, st in zip(shape, stride, strict=True) if guard_or_true(st != 0) and guard_or_true(n > 1)
    )
    for step, size in dims:
        if guard_or_true(step > spanned + 1):
            return True
        spanned += (size - 1) * step
    return False


def touch_interval(tensor: torch.Tensor) -> Extent:
    """The storage extent in bytes (tensors of several dtypes may share a storage), an empty tensor
    counted as touching its offset: an in-place op on it is still a mutation of that input to eager
    (its version counter moves), so it must meet it."""
    start, end = storage_extent(tensor)
    size = tensor.element_size()
    return (start * size, (start + 1) * size) if guard_or_false(end == start) else (start * size, end * size)


def intersect(a: Extent, b: Extent) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors may share an element: same storage and intersecting extents."""
    return storage_key(a) == storage_key(b) and intersect(touch_interval(a), touch_interval(b))


class _NonLeafAlias(torch.autograd.Function):
    """A non-leaf, non-view tensor on ``source``'s storage with a given geometry.

    Autograd has no other way to make a non-leaf whose strides and offset are
    chosen freely; the fake stands for a real non-leaf input, which may be
    written in place where a leaf or a view of a leaf may not.
    """

    @staticmethod
    def forward(ctx: Any, leaf: torch.Tensor, carrier: torch.Tensor) -> torch.Tensor:
        return _on_storage(carrier.untyped_storage(), carrier, carrier)  # the carrier's counter too

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        return None, None  # behind the input: nothing asks for it


def _on_storage(
    storage: torch.UntypedStorage, like: torch.Tensor, counter_of: torch.Tensor | None = None
) -> torch.Tensor:
    """A plain (non-view, no grad) tensor with ``like``'s dtype and geometry on ``storage``; sharing
    ``counter_of``'s version counter if given (as a ``detach()`` does), where the dtypes agree."""
    if counter_of is None or counter_of.dtype != like.dtype:
        empty = torch.empty(0, dtype=like.dtype, device=like.device)
        return empty.set_(storage, like.storage_offset(), like.shape, like.stride())
    alias = counter_of.detach()
    with uncounted(alias), torch.no_grad():
        alias.set_(storage, like.storage_offset(), like.shape, like.stride())
    return alias


def _fake_root(
    storage: torch.UntypedStorage, root: torch.Tensor, counter_of: torch.Tensor | None = None
) -> torch.Tensor:
    """The fake of a tensor that is no view: same geometry, ``requires_grad`` and leafness; sharing
    ``counter_of``'s version counter if given."""
    return _with_autograd_state(_on_storage(storage, root, counter_of), root)


def _with_autograd_state(fake: torch.Tensor, root: torch.Tensor) -> torch.Tensor:
    """``fake`` (a plain tensor) with ``root``'s ``requires_grad`` and leafness."""
    if not root.requires_grad:
        return fake
    if root.is_leaf:
        return fake.requires_grad_()
    leaf = torch.empty(0, dtype=root.dtype, device=root.device, requires_grad=True)
    with torch.enable_grad():  # made in the caller's no_grad too (it is traced in it): a non-leaf still
        return _NonLeafAlias.apply(leaf, fake)  # type: ignore[no-any-return,no-untyped-call]


def fake_inputs(
    fake_mode: FakeTensorMode, tensors: Sequence[torch.Tensor], independent: bool = False
) -> list[torch.Tensor]:
    """Fakes of ``tensors`` with their exact memory layout and autograd structure.

    One fake storage of the real size per real storage; a tensor passed twice
    gets one fake; a view gets a view of its base's fake (its base need not be
    among ``tensors``), so autograd treats writes through it as eager does.
    ``independent``: no fake is a view (graph inputs: a view's base would be a
    tensor the trace does not know); a leaf stays a leaf, the rest are non-leaves.
    """
    fakes: dict[int, torch.Tensor] = {}
    storages: dict[int, torch.UntypedStorage] = {}
    roots: dict[int, torch.Tensor] = {}
    # Eager's views of one base and detach() aliases of them share one version counter: so do the fakes.
    # Each real a fake root is made for, by its counter's group; each group's first fake root.
    candidates = [t for t in tensors if t.layout == torch.strided] if not independent else []
    candidates += [t._base for t in candidates if t._base is not None]
    group_of = dict(zip(map(id, candidates), counter_groups(candidates), strict=True))
    counters: dict[int, torch.Tensor] = {}

    def root_of(real: torch.Tensor) -> torch.Tensor:
        group = group_of.get(id(real))
        fake = _fake_root(storages[storage_key(real)], real, counters.get(group) if group is not None else None)
        if group is not None:
            counters.setdefault(group, fake)
        return fake

    with fake_mode:
        for tensor in tensors:
            if id(tensor) in fakes:
                continue
            geometry = symbolic_geometry(tensor)
            if geometry is not None:
                # A storage of its own: the size of a storage it may share is not the caller's to vary.
                fakes[id(tensor)] = _with_autograd_state(symbolic_fake(tensor, geometry), tensor)
                continue
            if tensor.layout != torch.strided:
                fakes[id(tensor)] = _plain_fake(tensor)
                continue
            key = storage_key(tensor)
            if key not in storages:
                nbytes = max(int(tensor.untyped_storage().nbytes()), storage_extent(tensor)[1] * tensor.element_size())
                storages[key] = torch.empty(nbytes, dtype=torch.uint8, device=tensor.device).untyped_storage()
            storage = storages[key]
            if independent:
                fakes[id(tensor)] = _fake_root(storage, tensor)
                continue
            base = view_root(tensor)
            if id(base) not in roots:
                roots[id(base)] = root_of(base)
            root = roots[id(base)]
            if base is tensor:
                fake = root
            elif leaf_of_ungraded_base(tensor) and tensor.dtype == base.dtype:
                # requires_grad_() on a view of a base requiring none: made so on the fake too, so its own views
                # follow that base as eager's do (those made under no_grad require no grad); a root of its own
                # has them require it.
                fake = _fake_view(root, tensor).requires_grad_()
            elif tensor.dtype != base.dtype or (tensor.requires_grad and not base.requires_grad):
                # A dtype view (view_as_real ...) or a view the function set requires_grad on: its own tensor.
                fake = root_of(tensor)
            else:
                fake = _fake_view(root, tensor)
            fakes[id(tensor)] = fake
    return [fakes[id(tensor)] for tensor in tensors]


def _fake_view(root: torch.Tensor, view: torch.Tensor) -> torch.Tensor:
    """A view of ``root`` with ``view``'s geometry, made as eager made ``view`` (under no_grad, as one
    output of several ...): autograd then refuses on the fake what it refuses on the real view."""
    creation = torch._C._autograd._get_creation_meta(view)
    with torch.set_grad_enabled(creation != torch._C._autograd.CreationMeta.NO_GRAD_MODE):
        fake = root.as_strided(view.shape, view.stride(), view.storage_offset())
    # A view made in inference mode is refused a write in normal mode; under the caller's inference mode (which
    # collection runs outside of) eager writes it.
    in_inference_mode = creation == torch._C._autograd.CreationMeta.INFERENCE_MODE and CALLER_IN_INFERENCE_MODE.get()
    if not in_inference_mode and fake.requires_grad:
        torch._C._autograd._set_creation_meta(fake, creation)
    return fake


def _plain_fake(tensor: torch.Tensor) -> torch.Tensor:
    fake = torch.empty_like(tensor)
    return fake.requires_grad_(tensor.requires_grad)


def fake_input(fake_mode: FakeTensorMode, tensor: torch.Tensor) -> torch.Tensor:
    """The fake of one tensor (see ``fake_inputs``), a view of nothing."""
    return fake_inputs(fake_mode, [tensor], independent=True)[0]


def one_index_per_element(target: torch.Tensor, new_value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """An expanded target (stride 0) has several indices per memory element, which ``copy_`` refuses:
    write each element once, from an index whose value the function changed (``index_put_`` at one
    index), else any: all of them then hold the old value."""
    dims = expanded_dims(target.shape, target.stride())
    if not dims:
        return target, new_value
    compared = target.detach()
    for dim in dims:
        with torch.no_grad():
            changed = new_value.ne(compared).to(torch.int8).argmax(dim, keepdim=True)
        compared, new_value = compared.narrow(dim, 0, 1), new_value.gather(dim, changed)
    base = target._base
    if base is not None and base.requires_grad and base.dtype == target.dtype and not target.is_conj():
        # Taken from the base by strides, not as a view of ``target``: that would ask ``target`` for its history,
        # which autograd keeps as of the counter now; the write-back moves the counter, and the value eager's bumps
        # set it to after may be that one again, so ``target`` would keep a history from before this write (and
        # the others of its base), one eager takes again after them.
        return base.as_strided(compared.shape, compared.stride(), compared.storage_offset()), new_value
    for dim in dims:
        target = target.narrow(dim, 0, 1)
    return target, new_value


def clone_at_offset(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor.clone()`` at ``tensor``'s storage offset: ops that read the offset (``view_as_complex`` wants
    it even, as eager's is) judge the copy as they judge the input."""
    offset = int(tensor.storage_offset())
    copy = tensor.clone()
    if offset == 0 or tensor.layout != torch.strided or copy.storage_offset() != 0:
        return copy
    memory = copy.new_empty(offset + storage_extent(copy)[1])
    placed = memory.as_strided(copy.shape, copy.stride(), offset)
    if torch.is_inference_mode_enabled() or CALLER_IN_INFERENCE_MODE.get():
        # Detached: no view autograd knows of, as a clone is none. A view's history is taken again from its base
        # once its counter moves (a write under no_grad), which autograd on fakes does by replaying the view op:
        # under the caller's inference mode that records nothing, and an autograd.Function's apply then fails.
        # (Outside inference mode the view stays: the backward of a write through a column of a shared base
        # takes its geometry from it; detached, setStorage ran out of the copy's memory.)
        placed = placed.detach()
    return placed.copy_(copy)


def whole_storage(tensor: torch.Tensor) -> torch.Tensor:
    """All of ``tensor``'s storage (elements of its dtype), as a 1-D tensor from the storage's start."""
    numel = int(tensor.untyped_storage().nbytes()) // tensor.element_size()
    return tensor.detach().as_strided((numel,), (1,), 0)


def whole_storage_in(tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``tensor``'s whole storage from its start, as a 1-D view in ``dtype``'s elements, keeping its history."""
    whole = tensor.as_strided((tensor.untyped_storage().nbytes() // tensor.element_size(),), (1,), 0)
    if whole.is_complex() and not dtype.is_complex and dtype.itemsize * 2 == whole.element_size():
        whole = torch.view_as_real(whole).flatten()  # (differentiable, as view(dtype) is not)
    return whole if whole.dtype == dtype else whole.view(dtype)
