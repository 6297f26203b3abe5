"""Eager's resizing of ``out=`` arguments, made explicit.

An op writing ``out=`` a tensor of another shape first resizes it, as
``resize_output`` does in eager: ``resize_`` to the result's shape (contiguous
strides, the same storage offset, the storage grown if too small), then, for
elementwise ops, restrided to the layout of the inputs, as TensorIterator
allocates its outputs. Fake kernels resize inside the op, where no dispatch
mode sees it, and always contiguously (eager too, for an empty result). ``OutResize`` issues the ``resize_``
(and ``as_strided_``) itself before the op, so metadata collection records a
geometry change and a trace holds one, as for a ``resize_`` the user wrote;
the op then finds an output of the right shape.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._prims_common import is_non_overlapping_and_dense_or_false, make_contiguous_strides_for
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

__all__ = ["OutResize", "resize_outs_as_eager", "restride_as_eager"]


def _out_names(func: Any) -> list[str]:
    schema = func._schema
    outs = [arg.name for arg in schema.arguments if arg.kwarg_only and arg.alias_info and arg.alias_info.is_write]
    writes = [arg for arg in schema.arguments if arg.alias_info is not None and arg.alias_info.is_write]
    # Ops writing more than their outputs (running stats ...) are not run twice: their other writes would count.
    return outs if len(outs) == len(writes) else []


def _eager_geometry(func: Any, args: Any, kwargs: dict[str, Any], names: list[str]) -> dict[int, tuple[Any, Any]]:
    """(size, stride) eager gives each ``out=`` tensor whose shape the result does not have, by id."""
    stand_ins: dict[str, Any] = {}
    with _disable_current_modes():  # on the fakes themselves: nothing recorded or traced
        for name in names:
            value = kwargs[name]
            is_list = isinstance(value, (list, tuple))
            stand_ins[name] = [t.new_empty(0) for t in value] if is_list else value.new_empty(0)
        func(*args, **{**kwargs, **stand_ins})
    pointwise = torch.Tag.pointwise in func.tags
    inputs = _tensor_operands(func, args, kwargs, names)
    found: dict[int, tuple[Any, Any]] = {}
    for name in names:
        value, stand_in = kwargs[name], stand_ins[name]
        pairs = zip(value, stand_in, strict=True) if isinstance(value, (list, tuple)) else [(value, stand_in)]
        for out, result in pairs:
            if out.shape == result.shape:
                continue  # eager keeps the output's own strides
            shape = tuple(result.shape)
            stride = tuple(result.stride())
            if pointwise and inputs and result.numel() > 0:  # an empty result stays contiguous
                stride = _tensor_iterator_strides(inputs, shape) or stride
            found[id(out)] = (shape, stride)
    return found


# A number's stand-in, only ever measured (made once: one made per op would be a fake under the fake mode collecting).
_WRAPPED_NUMBER = torch.empty((), device="meta")


def _tensor_operands(func: Any, args: Any, kwargs: dict[str, Any], names: list[str]) -> list[torch.Tensor]:
    """The op's tensor inputs, a number passed for a ``Tensor`` argument as the 0-dim tensor eager wraps it in
    (``torch.add(x, 1, out=y)``): TensorIterator counts it among its operands."""
    found = []
    schema_args = [arg for arg in func._schema.arguments if arg.name not in names]
    values = [*args, *(kwargs[arg.name] for arg in schema_args[len(args) :] if arg.name in kwargs)]
    for arg, value in zip(schema_args, values, strict=False):
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif isinstance(value, (int, float, complex, bool)) and isinstance(arg.type, torch.TensorType):
            found.append(_WRAPPED_NUMBER)
    return found


def _tensor_iterator_strides(inputs: list[torch.Tensor], shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """The strides TensorIterator gives an output it allocates of ``shape`` (None: contiguous), as its
    ``fast_set_up`` and ``reorder_dimensions`` choose them, ties between size-1 and equal-stride dimensions
    broken as it breaks them (``compute_elementwise_output_strides`` breaks them otherwise)."""
    shapes = [tuple(t.shape) for t in inputs]
    scalars_and_tensors = any(not s for s in shapes) and any(shapes)
    if all(s == shapes[0] for s in shapes) and not scalars_and_tensors:
        if all(t.is_contiguous() for t in inputs):
            return None
        if all(t.is_contiguous(memory_format=torch.channels_last) for t in inputs):
            return tuple(torch.empty(shape, device="meta", memory_format=torch.channels_last).stride())
        if all(is_non_overlapping_and_dense_or_false(t) and t.stride() == inputs[-1].stride() for t in inputs):
            return tuple(inputs[-1].stride())
    ndim = len(shape)
    # Each input's strides over the output's dimensions; 0 where it broadcasts.
    strides = []
    for t in inputs:
        padded = [0] * (ndim - t.dim()) + list(t.stride())
        sizes = [1] * (ndim - t.dim()) + list(t.shape)
        strides.append([0 if n == 1 and size != 1 else st for n, size, st in zip(sizes, shape, padded, strict=True)])

    def should_swap(dim0: int, dim1: int) -> int:
        for st in strides:
            if st[dim0] == 0 or st[dim1] == 0:
                continue
            if st[dim0] != st[dim1]:
                return 1 if st[dim0] > st[dim1] else -1
            if shape[dim0] > shape[dim1]:
                return 1
        return 0

    # Fastest-moving dimension first; an insertion sort that stops at the first strict preference.
    perm = list(reversed(range(ndim)))
    for i in range(1, ndim):
        dim1 = i
        for dim0 in reversed(range(i)):
            comparison = should_swap(perm[dim0], perm[dim1])
            if comparison > 0:
                perm[dim0], perm[dim1] = perm[dim1], perm[dim0]
                dim1 = dim0
            elif comparison < 0:
                break
    result = [0] * ndim
    next_stride = 1
    for dim in perm:
        result[dim] = next_stride
        next_stride *= shape[dim]
    return tuple(result)


def resize_outs_as_eager(func: Any, args: Any, kwargs: dict[str, Any]) -> None:
    """Resize (and restride) the ``out=`` tensors of ``func(*args, **kwargs)`` as eager's op would."""
    names = [name for name in _out_names(func) if isinstance(kwargs.get(name), (torch.Tensor, list, tuple))]
    if not names:
        return
    try:
        geometry = _eager_geometry(func, args, kwargs, names)
    except Exception:
        return  # the op itself raises, or resizes as its kernel does
    for name in names:
        value = kwargs[name]
        for out in value if isinstance(value, (list, tuple)) else [value]:
            if id(out) not in geometry:
                continue
            shape, stride = geometry[id(out)]
            out.resize_(shape)
            if tuple(out.stride()) != stride:
                out.as_strided_(shape, stride, out.storage_offset())


def restride_as_eager(func: Any, args: Any, kwargs: dict[str, Any], out: Any) -> None:
    """Give the fake result of an elementwise op eager's strides at its size-1 dimensions, where fake kernels
    (``compute_elementwise_output_strides``) break ties otherwise than TensorIterator: the layout is the same,
    but an ``out=`` resize after restrides by them (``a.t_()``, ``b = a * 2``, ``torch.neg(b.expand(..), out=a)``)."""
    if torch.Tag.pointwise not in func.tags or func.is_view or func._schema.is_mutable:
        return
    if any(arg.name == "memory_format" for arg in func._schema.arguments):
        return  # (``clone``: eager keeps the input's strides, as fake kernels do)
    if not isinstance(out, torch.Tensor) or out.layout != torch.strided:
        return
    if not all(type(n) is int for n in (*out.shape, *out.stride())):
        return  # (symbolic sizes: a size-1 dimension is specialized, and comparing the others would guard on them)
    if out.numel() == 0:
        return
    inputs = _tensor_operands(func, args, kwargs, [])
    if not inputs:
        return
    shape = tuple(out.shape)
    stride = _tensor_iterator_strides(inputs, shape)
    if stride is None:
        # Computed, not read off ``torch.empty(shape, device="meta")``: that runs under the fake mode below (a
        # fake tensor made per elementwise op collected), for the same contiguous strides.
        stride = tuple(make_contiguous_strides_for(shape))
    differing = [dim for dim, (a, b) in enumerate(zip(stride, out.stride(), strict=True)) if a != b]
    if differing and all(shape[dim] == 1 for dim in differing):
        with _disable_current_modes(), torch.no_grad():
            out.as_strided_(shape, stride, out.storage_offset())


class OutResize(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Issues eager's resizing of ``out=`` arguments as ``resize_``/``as_strided_`` calls before the op."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        resize_outs_as_eager(func, args, kwargs)
        return func(*args, **kwargs)
