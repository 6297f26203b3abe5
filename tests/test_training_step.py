"""Whole training steps under ``torch.compile(backend="aotfx")``: equal to eager after N steps.

Forward, backward, gradient clipping, ``optimizer.step()`` and ``zero_grad`` in one compiled
function (Dynamo splits it at ``backward()``: the forward and the optimizer step each go
through aotfx; the step's in-place updates of parameters and optimizer state are input
mutations), the learning-rate scheduler stepped between steps. Parameters and every
optimizer state tensor are compared with eager's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn as nn

import aot.dynamo
from tests.oracle import assert_close

STEPS = 4


@pytest.fixture(autouse=True)
def fresh_dynamo() -> Any:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.norm, self.fc2 = nn.Linear(6, 16), nn.LayerNorm(16), nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.tanh(self.norm(self.fc1(x))))  # type: ignore[no-any-return]


def _batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(step)
    return torch.randn(8, 6, generator=generator), torch.randn(8, 3, generator=generator)


OPTIMIZERS: dict[str, Callable[[Any], torch.optim.Optimizer]] = {
    "sgd_momentum": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-3),
    "adam_foreach": lambda p: torch.optim.Adam(p, lr=0.01, foreach=True),
    "adam_single_tensor": lambda p: torch.optim.Adam(p, lr=0.01, foreach=False),
    "adamw_foreach": lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1, foreach=True),
    "adamw_single_tensor": lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1, foreach=False, amsgrad=True),
}


def _train(optimizer_name: str, clip: bool, compile_step: bool) -> tuple[nn.Module, torch.optim.Optimizer, list[Any]]:
    torch.manual_seed(0)
    model = Net()
    optimizer = OPTIMIZERS[optimizer_name](model.parameters())
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        if clip:
            nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.5)
        optimizer.step()
        optimizer.zero_grad()
        return loss.detach()

    run = torch.compile(step, backend="aotfx") if compile_step else step
    losses = []
    for index in range(STEPS):
        losses.append(run(*_batch(index)))
        scheduler.step()
    return model, optimizer, losses


@pytest.mark.parametrize(
    ("optimizer_name", "clip"),
    [(name, clip) for name, clip in zip(OPTIMIZERS, (True, False, True, True, False), strict=True)],
)
def test_compiled_training_step_equals_eager(optimizer_name: str, clip: bool) -> None:
    model, optimizer, losses = _train(optimizer_name, clip, compile_step=True)
    want_model, want_optimizer, want_losses = _train(optimizer_name, clip, compile_step=False)
    assert_close(torch.stack(losses), torch.stack(want_losses), model=True)
    for (name, p), q in zip(model.named_parameters(), want_model.parameters(), strict=True):
        assert_close(p, q, model=True, msg=name)
        assert p.grad is None or not p.grad.any()
    got_state, want_state = optimizer.state_dict(), want_optimizer.state_dict()
    assert got_state["param_groups"] == want_state["param_groups"]  # the scheduler's lr included
    for index, state in want_state["state"].items():
        assert sorted(got_state["state"][index]) == sorted(state)
        for key, value in state.items():
            assert_close(got_state["state"][index][key], value, model=True, msg=f"state {index} {key}")


def test_python_float_changing_between_calls_compiles_one_graph_per_value() -> None:
    """Dynamo passes a float that changed (the scheduler's lr) as a tensor read by ``.item()``: aotfx
    specializes on its value, computing with the same Python float as eager."""
    graphs: list[int] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        return aot.dynamo.make_backend(lambda g, _: graphs.append(1) or g)(gm, example_inputs)

    def update(p: torch.Tensor, grad: torch.Tensor, lr: float) -> torch.Tensor:
        return p.add_(grad, alpha=-lr)

    compiled = torch.compile(update, backend=backend)
    for lr in (0.1, 0.05, 0.1, 1 / 3):
        p, grad = _batch(0)[0], _batch(1)[0]
        want = update(p.clone(), grad, lr)
        assert torch.equal(compiled(p, grad, lr), want)
        assert torch.equal(p, want)
    assert len(graphs) == 4  # 0.1 baked in by Dynamo, then one graph per new value: 0.05, 0.1, 1/3
