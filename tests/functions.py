"""Custom autograd.Functions the differential tests share (issue 11: Functions returning their input,
marking it dirty, writing in their backward)."""

from __future__ import annotations

import torch

__all__ = [
    "DoublesInPlace",
    "DoublesScaledInBackward",
    "ExpWithOtherBackward",
    "Identity",
    "PairWithOtherBackward",
    "ScaledBySaved",
    "ScalesBySavedThenDoublesIt",
    "TimesConstant",
    "TriplesGradOutput",
    "ViewOf",
    "WithSign",
]


class Identity(torch.autograd.Function):
    """Returns its input as is: eager's output is a view of it whose backward halves the gradient."""

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad * 0.5


class DoublesInPlace(torch.autograd.Function):
    """Doubles its input in place and marks it dirty: eager records the write."""

    @staticmethod
    def forward(ctx, x):
        x.mul_(2)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


class ScalesBySavedThenDoublesIt(torch.autograd.Function):
    """Saves ``scale`` (no grad) and doubles it in its backward, as eager allows."""

    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(scale)
        return x * scale

    @staticmethod
    def backward(ctx, grad):
        (scale,) = ctx.saved_tensors
        scale.mul_(2)
        return grad * scale, None


class TriplesGradOutput(torch.autograd.Function):
    """Writes ``grad_output`` in place and returns it."""

    @staticmethod
    def forward(ctx, x):
        return x * 3

    @staticmethod
    def backward(ctx, grad):
        grad.mul_(3)
        return grad


class ViewOf(torch.autograd.Function):
    """Returns a view of its input; its backward doubles the gradient."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


class ScaledBySaved(torch.autograd.Function):
    """Scales by the sum of a saved second argument, which its backward doubles in place."""

    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(scale)
        return x * scale.sum()

    @staticmethod
    def backward(ctx, grad):
        (scale,) = ctx.saved_tensors
        scale.mul_(2)
        return grad * scale.sum(), None


class WithSign(torch.autograd.Function):
    """Returns 3 * x and the non-differentiable sign of x."""

    @staticmethod
    def forward(ctx, x):
        sign = x.sign()
        ctx.mark_non_differentiable(sign)
        return x * 3, sign

    @staticmethod
    def backward(ctx, grad, grad_sign):
        return grad * 3


# Functions whose backward is not their forward's derivative (issue 16): eager's higher-order derivatives go
# through the backward, so a recomputation of the forward's ops differentiates something else.


class DoublesScaledInBackward(torch.autograd.Function):
    """Doubles ``x``; its backward scales by the sum of the saved ``scale`` instead."""

    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(scale)
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        (scale,) = ctx.saved_tensors
        return grad * scale.sum(), None


class ExpWithOtherBackward(torch.autograd.Function):
    """``exp(x)``, saving its input and output (both with history); its backward is ``grad * y * cos(x)``."""

    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.save_for_backward(x, y)
        return y

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        return grad * y * x.cos()


class TimesConstant(torch.autograd.Function):
    """``x * k`` for a Python number ``k``; its backward scales by ``k + 1``."""

    @staticmethod
    def forward(ctx, x, k):
        ctx.k = k
        return x * k

    @staticmethod
    def backward(ctx, grad):
        return grad * (ctx.k + 1), None


class PairWithOtherBackward(torch.autograd.Function):
    """Returns ``(2 * x, 3 * x)``; its backward is ``5 * grad_a + 7 * grad_b``."""

    @staticmethod
    def forward(ctx, x):
        return x * 2, x * 3

    @staticmethod
    def backward(ctx, grad_a, grad_b):
        return grad_a * 5 + grad_b * 7
