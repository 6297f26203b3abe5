"""Issue 11: programs we did not write, compared with eager (items 0, 4, 5, 6, 9, 10, 11)."""

from __future__ import annotations

import pytest
import torch

import aot
from aot.errors import DoubleBackwardError
from tests.oracle import check


def seeded(*shapes: tuple[int, ...], requires_grad: bool = True, seed: int = 0) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(shape, generator=generator).requires_grad_(requires_grad) for shape in shapes)


# Item 11: partitioners written for torch's AOTAutograd find primals and tangents by placeholder target.


def test_item11_joint_placeholder_targets_are_their_names():
    def f(x, w):
        return (x @ w).tanh().sum(1)

    joint = aot.aot_export_joint(f, seeded((3, 4), (4, 5)))
    placeholders = [node for node in joint.graph.nodes if node.op == "placeholder"]
    assert [node.target for node in placeholders] == [node.name for node in placeholders]
    assert [node.name for node in placeholders] == ["primals_1", "primals_2", "tangents_1"]


@pytest.mark.parametrize("name", ["default_partition", "min_cut_rematerialization_partition"])
def test_item11_torch_partitioners_as_partition_fn(name):
    from torch._functorch import partitioners  # the test only: the package stays functorch-free

    partition_fn = getattr(partitioners, name)

    def f(x, w, b):
        h = torch.nn.functional.linear(x, w, b).tanh()
        return h.relu().sum(1), h * 2

    compiled = aot.aot_function(f, aot.nop, partition_fn=partition_fn)
    check(f, seeded((3, 4), (5, 4), (5,)), compiled_fn=compiled)


# Item 0: a second derivative through a compiled function raises, never zeros, never a dropped edge.


def test_item0_hvp_raises_instead_of_zeros():
    a = seeded((5, 4), requires_grad=False)[0]

    def f(a, w):
        return torch.tanh(a @ w).pow(2).sum()

    compiled = aot.aot_function(f, aot.nop)
    w, v = seeded((4,), (4,), requires_grad=False, seed=1)
    eager = torch.autograd.functional.hvp(lambda w: f(a, w), w, v)[1]
    assert eager.abs().sum() > 0
    with pytest.raises(DoubleBackwardError):
        torch.autograd.functional.hvp(lambda w: compiled(a, w), w, v)


def test_item0_create_graph_keeps_the_path_to_parameters():
    def f(x, p):
        return torch.tanh(x * p).pow(2).sum()

    compiled = aot.aot_function(f, aot.nop)
    x, p = seeded((4,), (4,))
    (gx,) = torch.autograd.grad(compiled(x, p), x, create_graph=True)
    assert gx.requires_grad and gx.grad_fn is not None
    with pytest.raises(DoubleBackwardError):
        torch.autograd.grad(gx.pow(2).sum(), p)
    with pytest.raises(DoubleBackwardError):
        gx.sum().backward()


def test_item0_gradient_penalty_through_module_raises():
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    compiled = aot.aot_module(model, aot.nop)
    x = seeded((3, 4))[0]
    (gx,) = torch.autograd.grad(compiled(x).sum(), x, create_graph=True)
    with pytest.raises(DoubleBackwardError):
        gx.norm().backward()


def test_item0_first_order_backward_unchanged():
    def f(x, p):
        return torch.tanh(x * p).pow(2).sum()

    check(f, seeded((4,), (4,)))
    compiled = aot.aot_function(f, aot.nop)
    x, p = seeded((4,), (4,))
    (gx,) = torch.autograd.grad(compiled(x, p), x)
    assert not gx.requires_grad and gx.grad_fn is None
