"""Failure behaviour: clear errors naming the culprit, nothing half-done, threads, odd inputs, module state."""

from __future__ import annotations

import copy
import os
import threading

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import aot
from aot.errors import BackendCompilerError, DataDependentError, UnsupportedOperatorError
from tests.oracle import assert_close, check


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _leaf(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=_gen(seed)).requires_grad_()


class Counting:
    """A nop compiler that counts its calls, optionally raising."""

    def __init__(self, raise_on: int | None = None) -> None:
        self.calls = 0
        self.raise_on = raise_on

    def __call__(self, gm, example_inputs):
        self.calls += 1
        if self.calls == self.raise_on:
            raise ValueError("backend exploded")
        return gm


def _snapshot(tensors):
    return [(t.detach().clone(), t.shape, t.stride(), t.storage_offset(), t._version) for t in tensors]


def _assert_untouched(tensors, snapshot):
    for t, (values, shape, stride, offset, version) in zip(tensors, snapshot, strict=True):
        assert t.shape == shape and t.stride() == stride and t.storage_offset() == offset
        assert torch.equal(t.detach(), values) and t._version == version


# 1. errors that name the culprit


def test_wrong_arguments_raise_eagers_type_error_before_tracing():
    compiler = Counting()

    def f(x, y):
        return x + y

    compiled = aot.aot_function(f, compiler)
    with pytest.raises(TypeError) as eager:
        f(torch.randn(2))
    with pytest.raises(TypeError, match="missing a required argument: 'y'"):
        compiled(torch.randn(2))
    with pytest.raises(TypeError):
        compiled(torch.randn(2), torch.randn(2), torch.randn(2))
    assert compiler.calls == 0 and not compiled.entries and eager.type is TypeError


def test_item_in_control_flow_names_the_op_and_the_line():
    def f(x):
        if x.sum().item() > 0:  # data-dependent
            return x * 2
        return x

    named = r"_local_scalar_dense.*test_failures\.py:\d+: if x\.sum\(\)\.item\(\)"
    with pytest.raises(DataDependentError, match=named):
        aot.aot_function(f, aot.nop)(torch.randn(3))


def test_data_dependent_error_in_a_torch_nn_module_names_the_module_line():
    # Every frame is torch.nn code under aot_module: the error names the line in torch.nn that asked.
    loss = aot.aot_module(nn.GaussianNLLLoss(), aot.nop)
    with pytest.raises(DataDependentError, match=r"functional\.py:\d+: .*torch\.any\(var < 0\)"):
        loss(_leaf(4, 3), torch.randn(4, 3), torch.rand(4, 1))


def test_kernel_reading_an_index_tensor_is_a_data_dependent_error():
    # tensor_split's C++ kernel reads its index tensor's values, which a fake does not have.
    def f(x, indices):
        return x.tensor_split(indices)

    x, indices = torch.randn(5, 3), torch.tensor([1, 3])
    assert len(f(x, indices)) == 3  # eager runs it
    before = x.clone()
    with pytest.raises(DataDependentError, match=r"test_failures\.py:\d+: return x\.tensor_split\(indices\)"):
        aot.aot_function(f, aot.nop)(x, indices)
    assert torch.equal(x, before)


def _seeding(p):
    torch.manual_seed(42)
    return torch.bernoulli(p)


def _seeding_and_putting_back(p):
    # OpInfo's random ops (wrapper_set_seed): the caller's state is back after the call, the draws were seeded.
    state = torch.random.get_rng_state()
    torch.manual_seed(42)
    out = torch.bernoulli(p)
    torch.random.set_rng_state(state)
    return out


def _seeding_after_the_draw(p):
    out = torch.bernoulli(p)
    torch.manual_seed(42)
    return out


def _seeding_twice(p):
    torch.manual_seed(42)
    out = torch.bernoulli(p)
    torch.manual_seed(7)
    return out * torch.bernoulli(p)


@pytest.mark.parametrize("f", [_seeding_after_the_draw, _seeding_twice])
def test_function_seeding_the_global_generator_between_draws_is_refused_and_the_callers_state_kept(f):
    # Eager's draws depend on where the seed falls among them; the compiled graph keeps no such place.
    p = torch.rand(3, requires_grad=True)
    torch.manual_seed(1)
    state = torch.random.get_rng_state()
    with pytest.raises(UnsupportedOperatorError, match="global random state"):
        aot.aot_function(f, aot.nop)(p)
    assert torch.equal(torch.random.get_rng_state(), state)


@pytest.mark.parametrize("f", [_seeding, _seeding_and_putting_back])
def test_function_seeding_the_global_generator_before_its_draws_runs_as_eager(f):
    # Eager seeds at every call (OpInfo's wrapper_set_seed): the compiled call does too, and puts the
    # caller's state back where the function does; compiling leaves the caller's state alone.
    compiled = aot.aot_function(f, aot.nop)
    p = torch.rand(3, requires_grad=True)
    results = []
    for fn in (f, compiled, compiled):
        torch.manual_seed(1)
        before = torch.random.get_rng_state()
        out = fn(p)
        out.sum().backward()
        results.append((out.detach(), torch.random.get_rng_state(), torch.equal(torch.random.get_rng_state(), before)))
    assert_close(results[1], results[0])
    assert_close(results[2], results[0])


def test_op_without_fake_kernel_whose_real_fallback_fails_names_the_op():
    # Eval, no_grad, a padding mask: TransformerEncoder's fast path builds a nested tensor
    # (aten::_nested_tensor_from_mask has no fake kernel; its real output cannot be faked).
    layer = nn.TransformerEncoderLayer(4, 2, dim_feedforward=8, dropout=0.0, batch_first=True)
    encoder = nn.TransformerEncoder(layer, 1).eval()
    pad = torch.tensor([[False, False, True], [False, False, False]])
    with torch.no_grad(), pytest.raises(UnsupportedOperatorError, match=r"_nested_tensor_from_mask.*transformer\.py"):
        aot.aot_module(encoder, aot.nop)(torch.randn(2, 3, 4), src_key_padding_mask=pad)


@pytest.mark.parametrize(
    "op",
    [
        lambda x: torch.linalg.lstsq(x, x).solution,  # no fake kernel giving its sizes as unbacked symbols
        lambda x: x * 2 if torch.equal(x, x.round()) else x,  # a Python branch on a value
        lambda x: x[x > 0] * 2 if x[x > 0].shape[0] > 2 else x,  # a Python branch on a data-dependent size
    ],
    ids=["lstsq", "equal", "branch_on_count"],
)
def test_data_dependent_value_or_size_without_unbacked_symbol_is_a_clear_error(op):
    # nonzero, unique, masked_select compile (tests/test_data_dependent.py); these still need a value.
    with pytest.raises(DataDependentError, match="outside the compiled function") as raised:
        aot.aot_function(lambda x: op(x), aot.nop)(torch.randn(5, 5))
    assert isinstance(raised.value, RuntimeError)


def test_custom_op_without_fake_kernel_names_the_op():
    @torch.library.custom_op("aotfx_test::opaque", mutates_args=())
    def opaque(x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    with pytest.raises((UnsupportedOperatorError, DataDependentError, RuntimeError)) as raised:
        aot.aot_function(lambda x: opaque(x) * 2, aot.nop)(torch.randn(3))
    assert "opaque" in str(raised.value)


def test_backend_compiler_error_names_backend_graph_and_code_path():
    compiled = aot.aot_function(lambda x: x.sin() * 2, Counting(raise_on=1))
    with pytest.raises(BackendCompilerError, match=r"'Counting'.*forward graph") as raised:
        compiled(_leaf(3))
    assert isinstance(raised.value.__cause__, ValueError)
    path = str(raised.value).rsplit(" ", 1)[-1].rstrip(".")
    assert os.path.exists(path) and "sin" in open(path).read()
    assert not compiled.entries  # a failed compile leaves no entry: the next call retries


def test_backward_compiler_error_then_retry():
    bw = Counting(raise_on=1)
    compiled = aot.aot_function(lambda x: (x.sin() * 2).sum(), aot.nop, bw_compiler=bw)
    x = _leaf(3)
    out = compiled(x)
    with pytest.raises(BackendCompilerError, match="backward graph"):
        out.backward(retain_graph=True)
    out.backward()  # the forward's results stay valid: the second backward compiles and runs
    torch.testing.assert_close(x.grad, 2 * x.detach().cos())


# 2. nothing half-done


def _mutating(x, y):
    x.mul_(2)
    return (x * y).sum()


def _restriding(x, y):
    x.unsqueeze_(0)
    x.mul_(2)
    return (x * y).sum()


@pytest.mark.parametrize("stage", ["trace", "backend_compile", "run", "run_after_metadata_change"])
def test_failure_at_each_stage_leaves_inputs_untouched(stage):
    x, y = torch.randn(4), _leaf(4, seed=1)
    snapshot = _snapshot([x, y])
    if stage == "trace":
        compiled = aot.aot_function(lambda a, b: (_mutating(a, b), a.sum().item())[0], aot.nop)
        error = DataDependentError
    elif stage == "backend_compile":
        compiled = aot.aot_function(_mutating, Counting(raise_on=1))
        error = BackendCompilerError
    else:

        def failing_at_runtime(gm, example_inputs):
            def run(*args):
                raise RuntimeError("kernel failed")

            return run

        compiled = aot.aot_function(
            _restriding if stage == "run_after_metadata_change" else _mutating, failing_at_runtime
        )
        error = RuntimeError
    with pytest.raises(error):
        compiled(x, y)
    _assert_untouched([x, y], snapshot)
    assert not compiled.entries or stage.startswith("run")


def test_backward_compile_failure_after_the_forward_leaves_eagers_forward_state():
    x, y = torch.randn(4), _leaf(4, seed=1)
    ex, ey = x.clone(), y.detach().clone().requires_grad_()
    compiled = aot.aot_function(_mutating, aot.nop, bw_compiler=Counting(raise_on=1))
    out = compiled(x, y)
    _mutating(ex, ey)
    with pytest.raises(BackendCompilerError):
        out.backward()
    assert torch.equal(x, ex) and x._version == ex._version and y.grad is None


# 3. threads


def test_threads_compile_each_signature_once():
    compiler = Counting()
    compiled = aot.aot_function(lambda x, w: (x @ w).relu().sum(1), compiler)
    w = _leaf(8, 4, seed=1)
    results, errors = {}, []

    def work(i):
        try:
            x = torch.randn(3, 8, generator=_gen(10 + i))
            results[i] = (compiled(x, w), (x @ w).relu().sum(1))
        except Exception as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for out, expected in results.values():
        torch.testing.assert_close(out, expected)
    assert compiler.calls == 1 and len(compiled.entries) == 1


# 4. odd but valid inputs


@pytest.mark.parametrize(
    "make",
    [
        lambda: (torch.tensor(3.0, requires_grad=True),),
        lambda: (torch.randn(0, 4, requires_grad=True),),
        lambda: (torch.randn(4, 6, generator=_gen(0)).t().requires_grad_(),),
        lambda: (torch.randn(1, 4, generator=_gen(0)).expand(3, 4),),
        lambda: (torch.randn(3, 2, generator=_gen(0), dtype=torch.complex64),),
        lambda: (torch.arange(12).view(3, 4),),
    ],
    ids=["0-dim", "zero-size", "non-contiguous", "expanded", "complex", "int"],
)
def test_odd_inputs(make):
    def f(x):
        y = x * 2 + x
        return y, y.sum(), x.flatten()

    check(f, make)


def test_inference_mode_tensors_error_like_eager():
    with torch.inference_mode():
        x = torch.randn(3)
    w = _leaf(3)
    check(lambda a, b: (a * b).sum(), lambda: (x, w.detach().clone().requires_grad_()))


def test_requires_grad_on_some_outputs_and_nested_grad_modes():
    def f(x):
        with torch.no_grad():
            a = x * 2
            with torch.enable_grad():
                b = x.sin()
        return a, b, x.cos()

    check(f, lambda: (_leaf(4),))


def test_random_ops_give_eagers_values_for_the_same_seed():
    def f(x):
        return F.dropout(x, 0.5, training=True) + torch.rand(x.shape), torch.randn(2)

    compiled = aot.aot_function(f, aot.nop)
    x = _leaf(6)
    compiled(x)  # compile first: compiling must not consume random numbers
    torch.manual_seed(123)
    out = compiled(x)
    torch.manual_seed(123)
    expected = f(x)
    for a, b in zip(out, expected, strict=True):
        torch.testing.assert_close(a, b)


# 5. module state


def test_replaced_parameter_is_used():
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    compiled = aot.aot_module(model, aot.nop)
    x = torch.randn(4, 3)
    compiled(x)
    model.weight = nn.Parameter(torch.ones(2, 3))
    torch.testing.assert_close(compiled(x), model(x))
    compiled(x).sum().backward()
    assert model.weight.grad is not None


def test_train_eval_switch_retraces():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Dropout(0.5))
    reference = copy.deepcopy(model)
    compiled = aot.aot_module(model, aot.nop)
    x = torch.randn(8, 4)
    torch.manual_seed(1)
    a = compiled(x)
    torch.manual_seed(1)
    torch.testing.assert_close(a, reference(x))
    model.eval()
    reference.eval()
    torch.testing.assert_close(compiled(x), reference(x))
    assert len(compiled.compiled.entries) == 2
