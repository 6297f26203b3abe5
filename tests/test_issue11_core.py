"""Issue 11: programs we did not write, compared with eager (items 0, 4, 5, 6, 9, 10, 11)."""

from __future__ import annotations

import copy

import pytest
import torch

import aot
from aot.errors import UnsupportedInputError
from tests.oracle import AUTOCAST_ATOL, AUTOCAST_RTOL, assert_close, check


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


# Item 0 (issue 16 since): a second derivative through a compiled function is eager's, never zeros,
# never a dropped edge.


def test_item0_hvp_is_eagers():
    a = seeded((5, 4), requires_grad=False)[0]

    def f(a, w):
        return torch.tanh(a @ w).pow(2).sum()

    compiled = aot.aot_function(f, aot.nop)
    w, v = seeded((4,), (4,), requires_grad=False, seed=1)
    eager = torch.autograd.functional.hvp(lambda w: f(a, w), w, v)[1]
    assert eager.abs().sum() > 0
    assert_close(torch.autograd.functional.hvp(lambda w: compiled(a, w), w, v)[1], eager)


def test_item0_captured_tensor_is_refused_clearly_never_zeros():
    a = seeded((5, 4), requires_grad=False)[0]

    def f(w):
        return torch.tanh(a @ w).pow(2).sum()  # ``a`` is not an argument: a real tensor in the trace

    w, v = seeded((4,), (4,), requires_grad=False, seed=1)
    with pytest.raises(UnsupportedInputError, match=r"aten\.mv.*test_issue11_core\.py:\d+.*not one of its arguments"):
        torch.autograd.functional.hvp(aot.aot_function(f, aot.nop), w, v)


def test_item0_create_graph_keeps_the_path_to_parameters():
    def f(x, p):
        return torch.tanh(x * p).pow(2).sum()

    compiled = aot.aot_function(f, aot.nop)
    results = []
    for fn in (f, compiled):
        x, p = seeded((4,), (4,))
        (gx,) = torch.autograd.grad(fn(x, p), x, create_graph=True)
        assert gx.requires_grad and gx.grad_fn is not None
        (gp,) = torch.autograd.grad(gx.pow(2).sum(), p, retain_graph=True)
        gx.sum().backward()
        results.append((gp, x.grad, p.grad))
    assert_close(results[1], results[0])


def test_item0_gradient_penalty_through_module():
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    compiled = aot.aot_module(copy.deepcopy(model), aot.nop)
    grads = []
    for fn in (model, compiled):
        x = seeded((3, 4))[0]
        (gx,) = torch.autograd.grad(fn(x).sum(), x, create_graph=True)
        gx.norm().backward()
        grads.append([x.grad, *(p.grad for p in fn.parameters())])
    assert_close(grads[1], grads[0])


def test_item0_first_order_backward_unchanged():
    def f(x, p):
        return torch.tanh(x * p).pow(2).sum()

    check(f, seeded((4,), (4,)))
    compiled = aot.aot_function(f, aot.nop)
    x, p = seeded((4,), (4,))
    (gx,) = torch.autograd.grad(compiled(x, p), x)
    assert not gx.requires_grad and gx.grad_fn is None


# Item 6: torch.autograd.grad inside the compiled function is traced into the forward.


def _inner_grad(x):
    y = torch.exp(x)
    return torch.autograd.grad(y.sum(), x)


def test_item6_autograd_grad_inside_the_function():
    check(_inner_grad, seeded((3,)))


def test_item6_autograd_grad_inside_under_no_grad_raises_as_eager():
    with torch.no_grad():
        check(_inner_grad, seeded((3,)))


def test_item6_autograd_grad_inside_enable_grad_under_no_grad():
    def f(x):
        with torch.enable_grad():
            y = torch.exp(x) * x
            return torch.autograd.grad(y.sum(), x)

    check(f, seeded((3,)))
    with torch.no_grad():
        check(f, seeded((3,)))


def test_item6_create_graph_inside_then_outer_backward():
    def f(x, w):
        y = (x * w).sin().sum()
        (gx,) = torch.autograd.grad(y, x, create_graph=True)
        return gx * w, y

    check(f, seeded((4,), (4,)))


# Item 4: grad mode and autocast inside the function are traced as eager executes them.


def _sin_then_enable_grad_cos(x):
    out1 = x.sin()
    with torch.enable_grad():
        out2 = x.cos()
    return out1, out2


def test_item4_enable_grad_region_under_no_grad():
    with torch.no_grad():
        check(_sin_then_enable_grad_cos, seeded((3,)))
    compiled = aot.aot_function(_sin_then_enable_grad_cos, aot.nop)
    x = seeded((3,))[0]
    with torch.no_grad():
        out1, out2 = compiled(x)
    assert not out1.requires_grad and out2.requires_grad
    out2.sum().backward()
    torch.testing.assert_close(x.grad, -x.detach().sin())


def test_item4_enable_grad_region_under_no_grad_with_mutated_input():
    def f(x, p):
        with torch.enable_grad():
            out = (x * p).sum()
        p.mul_(0.5)  # an optimizer-style update under no_grad
        return out

    def make():
        return seeded((3,), requires_grad=False)[0], seeded((3,), seed=1)[0]

    with torch.no_grad():
        check(f, make)


def _leaves_grad_off(x):
    y = x.sin()
    torch.set_grad_enabled(False)
    z = x.cos()
    return y, z


@pytest.mark.parametrize("calls", [1, 3])
def test_item4_set_grad_enabled_left_off(calls):
    compiled = aot.aot_function(_leaves_grad_off, aot.nop)
    x = seeded((3,))[0]
    try:
        y_eager, z_eager = _leaves_grad_off(x)
        assert not torch.is_grad_enabled()
        for _ in range(calls):
            torch.set_grad_enabled(True)
            y, z = compiled(x)
            assert not torch.is_grad_enabled(), "the compiled call must leave grad mode as eager does"
            assert (y.requires_grad, z.requires_grad) == (y_eager.requires_grad, z_eager.requires_grad)
            torch.testing.assert_close(y, y_eager)
            torch.testing.assert_close(z, z_eager)
        torch.set_grad_enabled(True)
        y.sum().backward()
        torch.testing.assert_close(x.grad, x.detach().cos())
    finally:
        torch.set_grad_enabled(True)


def test_item4_set_grad_enabled_restored_inside_is_left_alone():
    def f(x):
        torch.set_grad_enabled(False)
        y = x * 2
        torch.set_grad_enabled(True)
        return y, x.sin()

    check(f, seeded((3,)))
    assert torch.is_grad_enabled()


def _autocast_regions(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = x @ w
        with torch.autocast("cpu", enabled=False):
            z = y.float() @ w
        u = z @ w
    return y, z, u


def test_item4_autocast_regions_forward_and_backward_dtypes():
    check(_autocast_regions, seeded((3, 4), (4, 4)), rtol=AUTOCAST_RTOL, atol=AUTOCAST_ATOL)
    compiled = aot.aot_function(_autocast_regions, aot.nop)
    grads, dtypes = [], []
    for fn in (_autocast_regions, compiled):
        x, w = seeded((3, 4), (4, 4))
        y, z, u = fn(x, w)
        dtypes.append((y.dtype, z.dtype, u.dtype))
        seen = []
        y.register_hook(lambda g, seen=seen: seen.append(g.dtype))
        (y.float().sum() + z.sum() + u.float().pow(2).sum()).backward()
        grads.append((x.grad, w.grad, seen))
    assert dtypes[0] == dtypes[1] == (torch.bfloat16, torch.float32, torch.bfloat16)
    assert grads[0][2] == grads[1][2] == [torch.bfloat16]
    # The backward ran in eager's dtypes: bfloat16 rounding included, the gradients agree closely.
    assert_close(grads[1][0], grads[0][0], model=True)
    assert_close(grads[1][1], grads[0][1], model=True)


# Item 5: inference mode, and inference tensors used outside it.


def _inference_tensor(*shape: int, seed: int = 0) -> torch.Tensor:
    with torch.inference_mode():
        return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def test_item5_aot_module_inside_inference_mode():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    reference = copy.deepcopy(model)
    compiled = aot.aot_module(model, aot.nop)
    for _ in range(2):
        x = torch.randn(5, 4)
        with torch.inference_mode():
            out, expected = compiled(x), reference(x)
        assert out.is_inference() and expected.is_inference()
        torch.testing.assert_close(out, expected)
        for a, b in zip(model.buffers(), reference.buffers(), strict=True):
            torch.testing.assert_close(a, b)
    # The same module still trains outside inference mode.
    x = torch.randn(5, 4)
    compiled(x).sum().backward()
    reference(x).sum().backward()
    for a, b in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad)


def _mutate_and_view(x, y):
    x.mul_(2)
    return x + y, x.t()


def test_item5_programs_inside_inference_mode():
    def make():
        return seeded((3, 4), (3, 4), requires_grad=False)

    with torch.inference_mode():
        check(_mutate_and_view, make)
        check(lambda x, y: (x * y + 1, x.view(-1)), make)


def test_item5_inference_tensor_inputs_outside_inference_mode():
    def make():
        return _inference_tensor(3, 4), seeded((3, 4), seed=1)[0]

    check(lambda x, w: (x + w, x.view(-1) * 2), make)  # eager allows: nothing saves x
    check(lambda x, w: x * w, make)  # eager refuses to save an inference tensor: the same error
    check(_mutate_and_view, make)  # eager refuses the in-place update outside inference mode
    with torch.inference_mode():
        check(_mutate_and_view, make)


def test_item5_entry_for_normal_tensors_is_not_reused_for_inference_tensors():
    # Same shapes, strides and dtype: only is_inference() tells the two calls apart, and eager
    # refuses the second one's in-place update.
    def make_normal():
        return seeded((3, 4), (3, 4), requires_grad=False)

    def make_inference():
        return _inference_tensor(3, 4), seeded((3, 4), requires_grad=False)[0]

    compiled = check(_mutate_and_view, make_normal)
    check(_mutate_and_view, make_inference, compiled_fn=compiled)


@pytest.mark.parametrize(
    "write",
    [
        lambda x: x.detach().mul_(2),  # eager allows writes through a detach()/.data alias itself
        lambda x: x.data.add_(1),
        lambda x: torch.neg(x, out=x.detach()),
        lambda x: x.detach().t_(),
        lambda x: x[1:].detach().mul_(2),
        lambda x: x.detach()[1:].mul_(2),  # ... and refuses them through a view of one
        lambda x: torch.neg(x, out=x),
        lambda x: x.t_(),
    ],
)
def test_item5_inference_tensor_written_outside_inference_mode(write):
    check(write, lambda: (_inference_tensor(3, 2).t(),))


def test_item5_view_of_input_inside_inference_mode_requires_no_grad():
    with torch.inference_mode():
        check(lambda x: (x.view(-1),), lambda: seeded((5,)), backward=False)


# Item 9: non-reentrant activation checkpointing under aot_module.


class _Checkpointed(torch.nn.Module):
    def __init__(self, dropout: float = 0.0) -> None:
        super().__init__()
        self.a = torch.nn.Linear(4, 16)
        self.b = torch.nn.Linear(16, 2)
        self.drop = torch.nn.Dropout(dropout)

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint

        h = checkpoint(lambda t: self.drop(self.a(t).relu()), x, use_reentrant=False)
        return self.b(h)


@pytest.mark.parametrize("dropout", [0.0, 0.5])
def test_item9_non_reentrant_checkpoint_under_aot_module(dropout):
    torch.manual_seed(0)
    model = _Checkpointed(dropout)
    reference = copy.deepcopy(model)
    compiled = aot.aot_module(model, aot.nop)
    for step in range(2):
        x = seeded((3, 4), seed=step)[0]
        x_ref = x.detach().clone().requires_grad_()
        torch.manual_seed(step)  # eager's checkpoint re-draws the forward's dropout mask: so must we
        out = compiled(x)
        out.sum().backward()
        torch.manual_seed(step)
        expected = reference(x_ref)
        expected.sum().backward()
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close(x.grad, x_ref.grad)
        for p, q in zip(model.parameters(), reference.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad)
    # The module's own parameters are bound again after tracing.
    assert all(isinstance(p, torch.nn.Parameter) for p in model.parameters())


def test_item9_two_draws_in_the_forward_stay_distinct():
    def f(x):
        return torch.nn.functional.dropout(x, 0.5) * torch.nn.functional.dropout(x, 0.5)

    compiled = aot.aot_function(f, aot.nop)
    x = torch.ones(64, 64, requires_grad=True)
    compiled(x).sum().backward()
    forward = compiled.entries[0].forward.code
    assert forward.count("aten.bernoulli") == 2, forward


# Item 10: torch.nn.functional.grouped_mm in float32 on CPU; other fake-kernel failures named clearly.


class _Experts(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.up = torch.nn.Parameter(torch.randn(3, 8, 16, generator=generator))
        self.down = torch.nn.Parameter(torch.randn(3, 16, 4, generator=generator))

    def forward(self, x, offs):
        h = torch.nn.functional.grouped_mm(x, self.up, offs=offs).relu()
        return torch.nn.functional.grouped_mm(h, self.down, offs=offs)


def test_item10_grouped_mm_float32_under_aot_module():
    model = _Experts()
    reference = copy.deepcopy(model)
    compiled = aot.aot_module(model, aot.nop)
    offs = torch.tensor([3, 7, 12], dtype=torch.int32)
    for step in range(2):
        x = seeded((12, 8), seed=step)[0]
        x_ref = x.detach().clone().requires_grad_()
        cotangent = seeded((12, 4), requires_grad=False, seed=10 + step)[0]
        out, expected = compiled(x, offs), reference(x_ref, offs)
        assert_close(out, expected, model=True)
        (out * cotangent).sum().backward()
        (expected * cotangent).sum().backward()
        assert_close(x.grad, x_ref.grad, model=True)
        for p, q in zip(model.parameters(), reference.parameters(), strict=True):
            assert_close(p.grad, q.grad, model=True)


@pytest.mark.parametrize("shapes", [((4, 12), (12, 4)), ((3, 4, 8), (8, 12)), ((3, 4, 8), (3, 8, 4))])
def test_item10_grouped_mm_other_layouts(shapes):
    def f(a, b, offs):
        return torch._grouped_mm(a, b, offs=None if a.dim() == b.dim() == 3 else offs)

    def make():
        a, b = seeded(*shapes)
        return a, b, torch.tensor([3, 7, 12], dtype=torch.int32)

    check(f, make, backward=False)


def test_item10_other_fake_kernel_failure_names_op_and_line():
    from aot.errors import FakeKernelError

    def f(a, b, offs):
        return torch._grouped_mm(a, b, offs=offs, bias=torch.zeros(4))  # the fake kernel refuses float32

    with pytest.raises(FakeKernelError, match=r"aten\._grouped_mm.*test_issue11_core\.py:\d+") as raised:
        aot.aot_function(f, aot.nop)(torch.randn(12, 8), torch.randn(3, 8, 4), torch.tensor([3, 7, 12]).int())
    assert isinstance(raised.value, RuntimeError)  # what eager raises for an op it refuses


def test_item4_input_written_in_enable_grad_region_under_no_grad():
    def f(x, w):
        with torch.enable_grad():
            x.mul_(w)
        return x, x.sin()

    def make():
        x, w = seeded((3,), (3,))
        return x * 1, w  # under no_grad: x is a plain tensor the region gives history

    with torch.no_grad():
        check(f, make)
