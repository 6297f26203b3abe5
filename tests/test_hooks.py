"""Hooks around compiled code: eager's effect on the real tensors at every call, or a refusal naming them.

The module ``aot_module`` compiles runs its own hooks outside the graph; a hooked module
or a tensor hook inside the traced region is refused at compile time (never called on
fake tensors, never dropped). ``torch.compile(backend="aotfx")`` runs every hook: Dynamo
handles them before aotfx sees a graph. Eager is the oracle.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
import torch.nn as nn

import aot
from aot.errors import UnsupportedHookError
from tests.oracle import assert_close


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))


def _x() -> torch.Tensor:
    return torch.randn(5, 3, generator=torch.Generator().manual_seed(1))


def _register_all(module: nn.Module, log: list[Any]) -> None:
    """Every kind of hook the top module can have, each logging what it saw and changing something."""

    def pre(mod: nn.Module, args: tuple[Any, ...]) -> Any:
        log.append(("pre", type(args[0]).__name__))
        return (args[0] * 2,)

    def pre_kwargs(mod: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        log.append(("pre_kwargs", sorted(kwargs)))
        return None

    def fwd(mod: nn.Module, args: tuple[Any, ...], out: torch.Tensor) -> Any:
        log.append(("fwd", type(out).__name__, out.detach().clone()))
        return out + 1

    def fwd_kwargs(mod: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], out: torch.Tensor) -> Any:
        log.append(("fwd_kwargs", type(out).__name__))
        return None

    def bwd_pre(mod: nn.Module, grad_out: tuple[torch.Tensor, ...]) -> Any:
        log.append(("bwd_pre", grad_out[0].clone()))
        return (grad_out[0] * 3,)

    def bwd(mod: nn.Module, grad_in: tuple[Any, ...], grad_out: tuple[Any, ...]) -> Any:
        log.append(("bwd", grad_in[0].clone(), grad_out[0].clone()))
        return (grad_in[0] * 5,)

    module.register_forward_pre_hook(pre)
    module.register_forward_pre_hook(pre_kwargs, with_kwargs=True)
    module.register_forward_hook(fwd)
    module.register_forward_hook(fwd_kwargs, with_kwargs=True)
    module.register_full_backward_pre_hook(bwd_pre)
    module.register_full_backward_hook(bwd)


def _same_logs(compiled: list[Any], eager: list[Any]) -> None:
    assert [entry[0] for entry in compiled] == [entry[0] for entry in eager]
    for got, want in zip(compiled, eager, strict=True):
        for a, b in zip(got[1:], want[1:], strict=True):
            if isinstance(b, torch.Tensor):
                assert_close(a, b, grad=True)
            else:
                assert a == b


def test_top_module_hooks_run_on_real_tensors_every_call_in_eager_order() -> None:
    logs: list[list[Any]] = [[], []]
    results = []
    for log, compile_it in zip(logs, (False, True), strict=True):
        model = _model()
        _register_all(model, log)
        run = aot.aot_module(model, aot.nop) if compile_it else model
        for _ in range(2):
            x = _x().requires_grad_()
            out = run(x)
            out.sum().backward()
            results.append((out.detach(), x.grad, model[0].weight.grad.clone()))
    _same_logs(logs[1], logs[0])
    assert all(entry[1] == "Tensor" for entry in logs[1] if entry[0] in ("pre", "fwd", "fwd_kwargs"))
    assert len([entry for entry in logs[1] if entry[0] == "fwd"]) == 2
    for got, want in zip(results[2:], results[:2], strict=True):
        for a, b in zip(got, want, strict=True):
            assert_close(a, b, grad=True)


def test_top_module_hook_added_and_removed_after_compiling() -> None:
    model = _model()
    compiled = aot.aot_module(model, aot.nop)
    compiled(_x())
    seen: list[str] = []
    handle = model.register_forward_hook(lambda mod, args, out: seen.append(type(out).__name__))
    compiled(_x())
    handle.remove()
    compiled(_x())
    assert seen == ["Tensor"]


def test_submodule_hook_refused_naming_module_and_hook_never_called_on_fakes() -> None:
    model = _model()
    calls: list[str] = []

    def record_activation(mod: nn.Module, args: Any, out: torch.Tensor) -> None:
        calls.append(type(out).__name__)

    model[0].register_forward_hook(record_activation)
    compiled = aot.aot_module(model, aot.nop)
    with pytest.raises(UnsupportedHookError, match=r"submodule '0' \(Linear\).*forward hook.*record_activation"):
        compiled(_x())
    assert calls == []


@pytest.mark.parametrize("kind", ["forward_pre", "full_backward", "full_backward_pre"])
def test_submodule_hook_kinds_refused(kind: str) -> None:
    model = _model()
    hook: Any = {"forward_pre": lambda m, a: None, "full_backward": lambda m, gi, go: None}.get(kind, lambda m, g: None)
    getattr(model[2], f"register_{kind}_hook")(hook)
    with pytest.raises(UnsupportedHookError, match=r"submodule '2' \(Linear\)"):
        aot.aot_module(model, aot.nop)(_x().requires_grad_())


def test_submodule_hook_added_after_compiling_refused_at_next_call_not_dropped() -> None:
    model = _model()
    compiled = aot.aot_module(model, aot.nop)
    compiled(_x())
    calls: list[str] = []
    handle = model[1].register_forward_hook(lambda mod, args, out: calls.append(type(out).__name__))
    with pytest.raises(UnsupportedHookError, match=r"submodule '1' \(ReLU\)"):
        compiled(_x())
    handle.remove()
    assert_close(compiled(_x()), model(_x()))
    assert calls == []


def test_module_called_inside_aot_function_with_hook_refused() -> None:
    model = _model()
    model.register_forward_pre_hook(lambda mod, args: None)
    compiled = aot.aot_function(lambda x: model(x).sum(), aot.nop)
    with pytest.raises(UnsupportedHookError, match="module Sequential has the forward pre-hook"):
        compiled(_x())


def test_global_module_hook_refused_when_a_module_is_called_inside() -> None:
    calls: list[str] = []
    handle = nn.modules.module.register_module_forward_hook(lambda mod, args, out: calls.append(type(out).__name__))
    try:
        with pytest.raises(UnsupportedHookError, match="global module forward hook"):
            aot.aot_module(_model(), aot.nop)(_x())
    finally:
        handle.remove()
    assert "FakeTensor" not in calls


def test_non_full_backward_hook_on_top_module_refused() -> None:
    model = _model()
    model.register_backward_hook(lambda mod, gi, go: None)
    with pytest.raises(UnsupportedHookError, match="register_full_backward_hook"):
        aot.aot_module(model, aot.nop)(_x())


def test_old_weight_norm_refused_parametrizations_weight_norm_equals_eager() -> None:
    old = torch.nn.utils.weight_norm(nn.Linear(3, 2))
    with pytest.raises(UnsupportedHookError, match="parametrizations"):
        aot.aot_module(old, aot.nop)(_x())
    inside = nn.Sequential(torch.nn.utils.weight_norm(nn.Linear(3, 2)), nn.Tanh())
    with pytest.raises(UnsupportedHookError, match=r"submodule '0' \(Linear\).*WeightNorm.*parametrizations"):
        aot.aot_module(inside, aot.nop)(_x())
    torch.manual_seed(0)
    model = nn.Sequential(torch.nn.utils.parametrizations.weight_norm(nn.Linear(3, 2)), nn.Tanh())
    reference = copy.deepcopy(model)
    out, want = aot.aot_module(model, aot.nop)(_x()), reference(_x())
    out.sum().backward()
    want.sum().backward()
    assert_close(out, want)
    for (name, got), (_, expected) in zip(model.named_parameters(), reference.named_parameters(), strict=True):
        assert_close(got.grad, expected.grad, grad=True, msg=name)


def _hook_on_intermediate(x: torch.Tensor, seen: list[str]) -> torch.Tensor:
    y = x * 2
    y.register_hook(lambda g: seen.append(type(g).__name__))
    return y.sum()


def _hook_on_input(x: torch.Tensor, seen: list[str]) -> torch.Tensor:
    x.register_hook(lambda g: seen.append(type(g).__name__))
    return (x * 2).sum()


@pytest.mark.parametrize("fn", [_hook_on_intermediate, _hook_on_input])
def test_tensor_hook_inside_compiled_function_refused(fn: Any) -> None:
    seen: list[str] = []
    compiled = aot.aot_function(lambda x: fn(x, seen), aot.nop)
    with pytest.raises(UnsupportedHookError, match=r"Tensor.register_hook\(.*<lambda>"):
        compiled(torch.randn(3, requires_grad=True))
    assert seen == []


def test_tensor_hooks_registered_outside_on_inputs_parameters_and_outputs_equal_eager() -> None:
    logs: list[list[Any]] = [[], []]
    grads = []
    for log, compile_it in zip(logs, (False, True), strict=True):
        model = _model()
        model[0].weight.register_hook(lambda g, log=log: log.append(("weight", g.clone())) or g * 2)
        model[2].bias.register_post_accumulate_grad_hook(lambda p, log=log: log.append(("bias", p.grad.clone())))
        run = aot.aot_module(model, aot.nop) if compile_it else model
        for _ in range(2):
            x = _x().requires_grad_()
            x.register_hook(lambda g, log=log: log.append(("x", g.clone())))
            out = run(x)
            out.register_hook(lambda g, log=log: log.append(("out", g.clone())) or g + 1)
            out.pow(2).sum().backward()
            grads.append((x.grad, model[0].weight.grad.clone()))
    # Per tensor, in order. Across tensors the order differs: the compiled backward is one autograd
    # node, so all its gradients come out together (the graph's output order), not op by op.
    for key in ("x", "weight", "bias", "out"):
        _same_logs([e for e in logs[1] if e[0] == key], [e for e in logs[0] if e[0] == key])
    for got, want in zip(grads[2:], grads[:2], strict=True):
        assert_close(got, want, grad=True)


def test_torch_compile_aotfx_runs_module_and_tensor_hooks_as_eager() -> None:
    logs: list[list[Any]] = [[], []]
    for log, compile_it in zip(logs, (False, True), strict=True):
        model = _model()
        model[0].register_forward_hook(lambda mod, args, out, log=log: log.append(("fwd", type(out).__name__)))
        model[2].register_full_backward_hook(lambda mod, gi, go, log=log: log.append(("bwd", go[0].clone())))

        def step(x: torch.Tensor, model: nn.Module = model, log: list[Any] = log) -> torch.Tensor:
            x.register_hook(lambda g: log.append(("x", g.clone())))
            return model(x).sum()

        run = torch.compile(step, backend="aotfx") if compile_it else step
        for _ in range(2):
            run(_x().requires_grad_()).backward()
    _same_logs(logs[1], logs[0])


def test_hook_added_after_a_trace_reused_by_another_compiled_function_refused() -> None:
    model = nn.Sequential(nn.Tanh(), nn.ReLU())  # no parameters: aot_function takes tensors as arguments only

    def loss(x: torch.Tensor) -> torch.Tensor:
        return model(x).sum()

    aot.aot_function(loss, aot.nop)(_x())
    reusing = aot.aot_function(loss, aot.nop)  # same function, same config: the trace is reused
    reusing(_x())
    model[1].register_forward_hook(lambda mod, args, out: None)
    with pytest.raises(UnsupportedHookError, match=r"module ReLU has the forward hook"):
        reusing(_x())
