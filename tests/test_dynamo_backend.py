"""aotfx as a ``torch.compile`` backend: by name, custom-built, with graph breaks, training and eval."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import aot
from aot.dynamo import make_backend
from tests.oracle import MODEL_RTOL


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(6, 16), nn.Linear(16, 3)
        self.norm = nn.LayerNorm(16)

    def forward(self, x):
        h = self.norm(F.gelu(self.fc1(x)))
        torch._dynamo.graph_break()  # two graphs, each through aotfx
        return self.fc2(h).log_softmax(-1)


def _pair():
    torch.manual_seed(0)
    model = Net()
    return model, copy.deepcopy(model)


def test_backend_by_name_matches_eager_with_graph_break():
    model, reference = _pair()
    compiled = torch.compile(model, backend="aotfx")
    x = torch.randn(4, 6)
    out, expected = compiled(x), reference(x)
    torch.testing.assert_close(out, expected)
    out.sum().backward()
    expected.sum().backward()
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad)


def test_custom_backend_sees_forward_and_backward_graphs():
    seen = []

    def counting(gm, example_inputs):
        seen.append(sum(1 for n in gm.graph.nodes if n.op == "call_function"))
        return gm

    model, reference = _pair()
    compiled = torch.compile(model, backend=make_backend(counting))
    x = torch.randn(4, 6)
    compiled(x).sum().backward()
    reference(x).sum().backward()
    assert len(seen) == 4 and all(count > 0 for count in seen)  # forward and backward of each of two graphs
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad)


def test_training_loop_matches_eager():
    model, reference = _pair()
    compiled = torch.compile(model, backend="aotfx")
    opt_a, opt_b = torch.optim.SGD(model.parameters(), lr=0.1), torch.optim.SGD(reference.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(1)
    for _ in range(3):
        x, y = torch.randn(8, 6, generator=generator), torch.randint(0, 3, (8,), generator=generator)
        for net, opt in ((compiled, opt_a), (reference, opt_b)):
            opt.zero_grad()
            F.nll_loss(net(x), y).backward()
            opt.step()
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p, q)


def test_eval_mode_inference():
    model, reference = _pair()
    model.eval()
    reference.eval()
    compiled = torch.compile(model, backend=make_backend(aot.nop))
    with torch.no_grad():
        x = torch.randn(4, 6)
        out = compiled(x)
        torch.testing.assert_close(out, reference(x))
    assert not out.requires_grad


def test_buffer_mutation_through_torch_compile():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend="aotfx")
    x = torch.randn(8, 4)
    torch.testing.assert_close(compiled(x), reference(x))
    for (name, a), b in zip(model.named_buffers(), reference.buffers(), strict=True):
        torch.testing.assert_close(a, b, msg=name)


@pytest.mark.slow
def test_inductor_behind_aotfx_training_matches_eager():
    """Generated C++ kernels from Inductor, fed our functional forward/backward graphs (slow: C++ builds)."""
    model, reference = _pair()
    compiled = torch.compile(model, backend="aotfx_inductor")
    opt_a, opt_b = torch.optim.SGD(model.parameters(), lr=0.1), torch.optim.SGD(reference.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(2)
    for _ in range(3):
        x, y = torch.randn(8, 6, generator=generator), torch.randint(0, 3, (8,), generator=generator)
        losses = []
        for net, opt in ((compiled, opt_a), (reference, opt_b)):
            opt.zero_grad()
            loss = F.nll_loss(net(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[0] == pytest.approx(losses[1], rel=MODEL_RTOL)
