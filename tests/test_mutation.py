"""Input mutations, data and metadata, exactly as eager: values, geometry, versions, aliasing, grads."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import aot
from tests.oracle import assert_close, check


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def leaves(*shapes: tuple[int, ...], requires_grad: bool = True):
    return lambda: tuple(torch.randn(*s, generator=_gen(i)).requires_grad_(requires_grad) for i, s in enumerate(shapes))


def non_leaves(*shapes: tuple[int, ...]):
    return lambda: tuple(torch.randn(*s, generator=_gen(i)).requires_grad_() * 1 for i, s in enumerate(shapes))


def buffers_and_weight(buffer_shape: tuple[int, ...], weight_shape: tuple[int, ...]):
    return lambda: (
        torch.randn(*buffer_shape, generator=_gen(0)),
        torch.randn(*weight_shape, generator=_gen(1)).requires_grad_(),
    )


def _no_grad_add(x, w):
    with torch.no_grad():
        x.add_(1)
    return x * w


def _detached_add(x, w):
    x.detach().mul_(2)
    return x * w


PROGRAMS = {
    # data mutations
    "add_": (lambda x: x.add_(1), leaves((3, 4), requires_grad=False)),
    "slice_mul_": (lambda a: (a[2:5].mul_(3), a.sum())[1], leaves((8,), requires_grad=False)),
    "view_select_zero_": (lambda a: a.view(2, 4)[1].zero_().sum() + a.sum(), leaves((8,), requires_grad=False)),
    "copy_into_input": (lambda x, y: x.copy_(y * 2), leaves((3,), (3,), requires_grad=False)),
    "iadd_buffer": (lambda b, w: (b.__iadd__(w.detach()), b * w)[1], buffers_and_weight((3,), (3,))),
    "mutation_under_no_grad": (_no_grad_add, leaves((3,), (3,))),
    "mutation_hidden_from_autograd": (_detached_add, non_leaves((3,), (3,))),
    "non_leaf_requiring_grad": (lambda x, w: (x.mul_(w), x.sum())[1], non_leaves((3,), (3,))),
    "non_leaf_returned": (lambda x, w: x.mul_(w), non_leaves((3,), (3,))),
    "copy_grad_into_buffer": (lambda b, w: (b.copy_(w * 2), b * 3)[1], buffers_and_weight((3,), (3,))),
    "view_of_mutated_input": (lambda x: (x.add_(1), x.t())[1], leaves((3, 4), requires_grad=False)),
    "view_chain_of_mutated_input": (
        lambda x: (x.mul_(2), x.transpose(0, 2)[1:].unsqueeze(-1).expand(-1, 3, 2, 5))[1],
        leaves((2, 3, 4), requires_grad=False),
    ),
    "two_mutations": (lambda x: (x.add_(1), x[0].mul_(2), x.sin())[2], leaves((3, 3), requires_grad=False)),
    "leaf_requiring_grad_raises": (lambda x: x.add_(1), leaves((3,))),
    "out_into_input": (lambda x, y: torch.mul(y, 2, out=x), leaves((3,), (3,), requires_grad=False)),
    "empty_tensor_mul_": (lambda x: x.mul_(2), non_leaves((1, 0, 3))),
    # metadata mutations
    "t_": (lambda x: x.t_(), leaves((3, 4), requires_grad=False)),
    "transpose_": (lambda x: (x.transpose_(0, 1), x + 1)[1], leaves((3, 4), requires_grad=False)),
    "unsqueeze_then_view": (lambda x: (x.unsqueeze_(0), x[0, 1])[1], leaves((3, 4), requires_grad=False)),
    "squeeze_": (lambda x: (x.squeeze_(0), x * 2), leaves((1, 4), requires_grad=False)),
    "as_strided_": (lambda x: x.as_strided_((2, 2), (1, 2), 1) * 2, leaves((3, 4), requires_grad=False)),
    "t_then_data": (lambda x: x.t_().mul_(2)[0], leaves((3, 4), requires_grad=False)),
    "non_leaf_t_": (lambda x: (x.t_(), x * 2)[1], non_leaves((3, 4))),
    # intermediates
    "view_of_intermediate_mutated_after": (lambda x: (lambda y: (y[0], y.add_(1))[0])(x * 2), leaves((3, 4))),
    "intermediate_mutated_through_view": (lambda x: (lambda y: (y[1:].mul_(2), y)[1])(x * 3), leaves((3, 4))),
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_training(name):
    fn, make = PROGRAMS[name]
    check(fn, make)


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_inference(name):
    fn, make = PROGRAMS[name]
    with torch.no_grad():
        check(fn, make, backward=False)


def test_leaf_requiring_grad_raises_like_eager_and_leaves_input_untouched():
    x = torch.randn(3, requires_grad=True)
    before = x.detach().clone()
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        aot.aot_function(lambda t: t.add_(1), aot.nop)(x)
    assert torch.equal(x.detach(), before) and x._version == 0


def test_batchnorm_train_mode_running_stats_match_eager():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
    reference = copy.deepcopy(model)
    compiled = aot.aot_module(model, aot.nop)
    for step in range(3):
        x = torch.randn(2, 3, 6, 6)
        out, expected = compiled(x), reference(x)
        assert_close(out, expected, model=True)
        out.sum().backward()
        expected.sum().backward()
        for (name, a), b in zip(model.named_buffers(), reference.buffers(), strict=True):
            torch.testing.assert_close(a, b, msg=f"step {step}: {name}")
            assert a._version == b._version, f"step {step}: {name} version {a._version} != {b._version}"
        for p, q in zip(model.parameters(), reference.parameters(), strict=True):
            assert_close(p.grad, q.grad, model=True, grad=True)
    assert len(compiled.compiled.entries) == 1


def test_mutated_saved_input_is_detected_by_autograd():
    def f(x, w):
        return x * w

    x, w = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    out = aot.aot_function(f, aot.nop)(x, w)
    with torch.no_grad():
        w.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


def test_optimizer_style_update_in_compiled_function():
    def sgd_step(param, grad, lr):
        with torch.no_grad():
            param.sub_(grad * lr)
        return param.norm()

    check(
        sgd_step, lambda: (torch.randn(5, generator=_gen(0)).requires_grad_(), torch.randn(5, generator=_gen(1)), 0.1)
    )


def test_mutation_with_gradient_through_functional_loss():
    def f(cache, x):
        cache.copy_(x.tanh())
        return F.mse_loss(cache, torch.ones_like(cache))

    check(f, lambda: (torch.zeros(4), torch.randn(4, generator=_gen(0)).requires_grad_()))
