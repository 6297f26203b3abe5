"""Ops whose fake kernel refuses what their real kernel runs, traced through an equivalent.

``torch._grouped_mm`` (``F.grouped_mm``, the mixture-of-experts path of current
transformers) runs in float32 on CPU, but its fake kernel accepts bfloat16 only,
so tracing it fails where eager does not. While aotfx traces, a torch-function
mode replaces such calls on fake tensors with an equivalent of standard ops
(static shapes: the jagged groups become masks over the offsets), whose
gradients autograd derives as usual. Outside tracing nothing changes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.overrides import TorchFunctionMode

from aot.compile.failures import _fake_kernel_op

__all__ = ["fake_kernel_fallbacks", "fallback_applies", "grouped_mm_reference"]


def _group_of(offs: torch.Tensor, length: int) -> torch.Tensor:
    """The group of each index along a jagged dimension: ``offs[g-1] <= i < offs[g]``; past the end: ``G``."""
    positions = torch.arange(length, dtype=offs.dtype, device=offs.device)
    return torch.searchsorted(offs, positions, right=True)


def _one_hot(groups: torch.Tensor, num_groups: int, dtype: torch.dtype) -> torch.Tensor:
    """``(num_groups, n)`` mask: 1 where index ``i`` belongs to group ``g``."""
    ids = torch.arange(num_groups, dtype=groups.dtype, device=groups.device)
    return (ids[:, None] == groups[None, :]).to(dtype)


def grouped_mm_reference(
    mat_a: torch.Tensor,
    mat_b: torch.Tensor,
    offs: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """``torch._grouped_mm`` in standard ops; rows outside every group (past ``offs[-1]``) are zeros."""
    if bias is not None:
        raise NotImplementedError("grouped_mm with bias")
    dtype = mat_a.dtype
    if mat_a.dim() == 3 and mat_b.dim() == 3:
        out = torch.bmm(mat_a, mat_b)
    else:
        if offs is None:
            raise RuntimeError("grouped_mm: offs is required when an operand is 2D")
        num_groups = offs.shape[0]
        if mat_a.dim() == 2 and mat_b.dim() == 3:  # tokens (jagged rows of a) x per-group weights
            mask = _one_hot(_group_of(offs, mat_a.shape[0]), num_groups, dtype)
            out = torch.einsum("tk,gkn,gt->tn", mat_a, mat_b, mask)
        elif mat_a.dim() == 2 and mat_b.dim() == 2:  # jagged contraction dimension: one product per group
            mask = _one_hot(_group_of(offs, mat_a.shape[1]), num_groups, dtype)
            out = torch.einsum("mk,gk,kn->gmn", mat_a, mask, mat_b)
        else:  # 3D a, 2D b: jagged columns of b
            mask = _one_hot(_group_of(offs, mat_b.shape[1]), num_groups, dtype)
            out = torch.einsum("gmk,kn,gn->mn", mat_a, mat_b, mask)
    if out_dtype is not None:
        out = out.to(out_dtype)
    # Fresh memory, as the real kernel returns (einsum may hand back a view of its product).
    return out.clone(memory_format=torch.contiguous_format) if out._is_view() else out


def _grouped_mm_refused(mat_a: Any, mat_b: Any, *args: Any, **kwargs: Any) -> bool:
    """The fake kernel accepts bfloat16 operands only (and no bias here)."""
    return (
        isinstance(mat_a, FakeTensor)
        and isinstance(mat_b, FakeTensor)
        and not (mat_a.dtype == torch.bfloat16 and mat_b.dtype == torch.bfloat16)
        and kwargs.get("bias") is None
        and (len(args) < 2 or args[1] is None)
    )


# torch-level function -> (its fake kernel refuses these arguments, an equivalent in standard ops)
_FALLBACKS: dict[Any, tuple[Callable[..., bool], Callable[..., torch.Tensor]]] = {
    torch._grouped_mm: (_grouped_mm_refused, grouped_mm_reference),
}


class _FallbackMode(TorchFunctionMode):
    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        fallback = _FALLBACKS.get(func)
        if fallback is not None and fallback[0](*args, **kwargs):
            return fallback[1](*args, **kwargs)
        return func(*args, **kwargs)


@contextlib.contextmanager
def fake_kernel_fallbacks() -> Iterator[None]:
    """While tracing: calls a fake kernel refuses, on fake tensors, go through their equivalent."""
    with _FallbackMode():
        yield


def fallback_applies(error: BaseException) -> bool:
    """Whether ``error`` (or what it chains) is a fake kernel refusing an op that has a fallback here."""
    names = [getattr(func, "__name__", str(func)) for func in _FALLBACKS]
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        op = _fake_kernel_op(current.__traceback__)
        if any(name in str(current) or name in str(op) for name in names):
            return True
        current = current.__cause__ or current.__context__
    return False
