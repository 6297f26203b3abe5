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
from torch._prims_common import compute_elementwise_output_strides
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

__all__ = ["OutResize", "resize_outs_as_eager"]


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
    inputs = [t for t in args if isinstance(t, torch.Tensor) and t.dim() > 0]
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
                with _disable_current_modes():
                    stride = tuple(compute_elementwise_output_strides(*(t.expand(shape) for t in inputs)))
            found[id(out)] = (shape, stride)
    return found


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


class OutResize(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Issues eager's resizing of ``out=`` arguments as ``resize_``/``as_strided_`` calls before the op."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        resize_outs_as_eager(func, args, kwargs)
        return func(*args, **kwargs)
