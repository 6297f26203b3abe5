"""The functionalization pass: the functional graph computes what the mutating graph did.

Each program is traced with ``make_fx``; the original graph runs on clones of
the inputs, the functionalized graph on other clones. Outputs must match, the
extra outputs must equal the original graph's final input values, inputs not
listed as mutated must be untouched, and no mutating op may remain.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.fx as fx
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

from aot.compile.functionalize import FUNCTIONAL_RULES, functional_variant, functionalize
from meta.alias import written_positions
from tests.oracle import assert_close

aten = torch.ops.aten


def _as_list(out: Any) -> list[Any]:
    return list(out) if isinstance(out, (list, tuple)) else [out]


def _assert_functional(gm: fx.GraphModule) -> None:
    for node in gm.graph.nodes:
        if isinstance(node.target, torch._ops.OpOverload):
            assert not node.target._schema.is_mutable, node.format_node()
            assert not written_positions(node.target, node.args), node.format_node()


def check(fn: Callable[..., Any], *args: torch.Tensor, mutated: list[int] | None = None, seed: int | None = None):
    """Trace ``fn``, functionalize it, and compare against the original graph (and eager)."""
    original = make_fx(fn)(*[a.clone() for a in args])
    functional = functionalize(make_fx(fn)(*[a.clone() for a in args]))
    _assert_functional(functional)
    functional.graph.lint()

    def run(callable_: Callable[..., Any]) -> tuple[list[Any], list[torch.Tensor]]:
        inputs = [a.clone() for a in args]
        if seed is not None:
            torch.manual_seed(seed)
        return _as_list(callable_(*inputs)), inputs

    expected, expected_inputs = run(original)
    eager, eager_inputs = run(fn)
    got, got_inputs = run(functional)
    mutated_inputs = functional.meta["mutated_inputs"]
    if mutated is not None:
        assert mutated_inputs == mutated
    assert len(got) == len(expected) + len(mutated_inputs)
    for want, have, eager_out in zip(expected, got[: len(expected)], eager, strict=True):
        assert_close(have, want)
        assert_close(have, eager_out)
    for arg_idx, final in zip(mutated_inputs, got[len(expected) :], strict=True):
        assert_close(final, expected_inputs[arg_idx])
        assert_close(final, eager_inputs[arg_idx])
    for arg_idx, (before, after) in enumerate(zip(args, expected_inputs, strict=True)):
        if arg_idx not in mutated_inputs:
            assert torch.equal(before, after), f"input {arg_idx} mutated but not reported"
    for before, after in zip(args, got_inputs, strict=True):
        assert torch.equal(before, after), "the functional graph mutated an input"
    return functional


def randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------ inputs


def test_add_inplace_on_input():
    def fn(x):
        x.add_(1)
        return x * 2

    gm = check(fn, randn(4), mutated=[0])
    assert gm.code.count("aten.add.Tensor") == 1


def test_slice_of_input_mutated():
    def fn(a):
        a[2:5].mul_(3)
        return a.sum()

    gm = check(fn, randn(8), mutated=[0])
    assert "slice_scatter" in gm.code


def test_view_select_zero_on_input():
    def fn(a):
        a.view(2, 4)[1].zero_()
        return a + 1

    check(fn, randn(8), mutated=[0])


def test_copy_into_input():
    def fn(x, y):
        x.copy_(y * 2)
        return y + 1

    check(fn, randn(3, 4), randn(4), mutated=[0])


def test_buffer_iadd():
    def fn(x, buf):
        buf += x.mean(0)
        return x * buf

    check(fn, randn(5, 3), randn(3, seed=1), mutated=[1])


def test_input_mutations_follow_placeholder_order():
    def fn(a, b, c):
        c.mul_(2)
        a.sub_(1)
        return b + 1

    gm = check(fn, randn(2), randn(2), randn(2), mutated=[0, 2])
    assert [n.name for n in gm.graph.output_node().args[0][1:]] == ["mutated_a_1", "mutated_c_1"]


# ------------------------------------------------------------------ intermediates and their views


def test_copy_into_slice_of_intermediate():
    def fn(x, y):
        z = x * 2
        z[1:3].copy_(y)
        return z

    check(fn, randn(5, 2), randn(2, 2), mutated=[])


def test_view_taken_before_mutation_sees_new_values():
    def fn(x):
        y = x + 1
        row = y[0]
        col = y[:, 1]
        y[1:].mul_(10)
        return row, col, y

    check(fn, randn(3, 3))


def test_view_taken_after_mutation():
    def fn(x):
        y = x.clone()
        y.add_(1)
        return y.t()[0]

    check(fn, randn(3, 3))


def test_ops_before_mutation_read_old_value():
    def fn(x):
        y = x * 1
        before = y.sum()
        y.add_(1)
        return before, y.sum()

    check(fn, randn(4))


def test_chain_of_views_mutated():
    def fn(x):
        y = x.clone()
        y.transpose(0, 2)[1:].mul_(-1)
        return y

    check(fn, randn(2, 3, 4))


def test_diagonal_add():
    def fn(x):
        y = x.clone()
        y.diagonal().add_(100)
        return y

    gm = check(fn, randn(4, 4))
    assert "diagonal_scatter" in gm.code


def test_as_strided_view_mutated():
    def fn(x):
        y = x.clone()
        y.as_strided((2, 2), (1, 3), 1).sub_(5)
        return y

    gm = check(fn, randn(4, 4))
    assert "as_strided_scatter" in gm.code


def test_split_and_unbind_elements_mutated():
    def fn(x):
        y = x * 1
        y.split(2)[1].add_(7)
        y.unbind(1)[0].mul_(3)
        return y

    check(fn, randn(5, 3))


def test_multiple_views_of_one_base():
    def fn(x):
        y = x * 1
        a, b = y[0], y[:, 2]
        a.add_(1)
        b.mul_(2)
        y.view(-1)[4].fill_(9)
        return y, a, b

    check(fn, randn(3, 3))


def test_mutation_in_a_loop():
    def fn(x, w):
        h = torch.zeros(4, 3)
        for step in range(4):
            h[step].copy_(torch.tanh(x[step] @ w + (h[step - 1] if step else 0)))
        return h

    check(fn, randn(4, 3), randn(3, 3, seed=1))


def test_relu_and_clamp_inplace():
    def fn(x):
        y = x * 3
        y.relu_()
        y[0].clamp_(max=0.5)
        return y

    check(fn, randn(3, 4))


def test_index_put_accumulate_and_masked_assignment():
    def fn(x, index, values):
        x.index_put_((index,), values, accumulate=True)
        x[x > 0.5] = 0
        x[1] = 5
        return x.relu_()

    check(fn, randn(6), torch.tensor([0, 2, 2]), randn(3, seed=1), mutated=[0])


def test_inplace_keeps_dtype():
    def fn(x):
        y = x.clone()
        y.add_(torch.ones(3, dtype=torch.float64))
        return y

    check(fn, randn(3))


def test_chained_inplace_results():
    def fn(x):
        y = x * 1
        z = y.add_(1).mul_(2)
        return z, y

    check(fn, randn(3))


# ------------------------------------------------------------------ out=


def test_out_into_fresh_and_into_input_view():
    def fn(x, o):
        fresh = torch.empty(3)
        torch.add(x, 1, out=fresh)
        torch.mul(x, fresh, out=o[1])
        return fresh

    check(fn, randn(3), randn(2, 3, seed=1), mutated=[1])


def test_multi_out():
    def fn(x, values, indices):
        torch.max(x, 0, out=(values, indices))
        return values * 2

    check(fn, randn(3, 4), torch.zeros(4), torch.zeros(4, dtype=torch.long), mutated=[1, 2])


# ------------------------------------------------------------------ metadata mutations


def test_t_then_data_mutation():
    def fn(x):
        y = x * 2
        before = y[0]
        y.t_()
        y[0].add_(1)
        return y, before

    check(fn, randn(3, 4))


def test_inplace_views_on_intermediate():
    def fn(x):
        y = x * 1
        y.unsqueeze_(0).squeeze_(0).transpose_(0, 1)
        y.as_strided_((2, 3), (1, 2), 0)
        y.mul_(10)
        return y

    check(fn, randn(3, 2))


def test_metadata_mutation_of_input_raises():
    def fn(x):
        x.t_()
        return x + 1

    def through_inplace_result(x):
        x.mul_(2).unsqueeze_(0)
        return x

    for program in (fn, through_inplace_result):
        gm = make_fx(program)(randn(2, 3))
        with pytest.raises(NotImplementedError, match="metadata of graph input x_1"):
            functionalize(gm)


# ------------------------------------------------------------------ batch norm, random, foreach


def test_batch_norm_training_updates_running_stats():
    def fn(x, running_mean, running_var, weight, bias):
        return F.batch_norm(x, running_mean, running_var, weight, bias, training=True, momentum=0.3)

    args = (randn(6, 3), torch.zeros(3), torch.ones(3), randn(3, seed=1), randn(3, seed=2))
    gm = check(fn, *args, mutated=[1, 2])
    assert "_native_batch_norm_legit_functional" in gm.code


def test_native_batch_norm_op():
    def fn(x, running_mean, running_var):
        out, _, _ = aten.native_batch_norm.default(x, None, None, running_mean, running_var, True, 0.1, 1e-5)
        return out

    check(fn, randn(4, 2, 3), torch.zeros(2), torch.ones(2), mutated=[1, 2])


def test_batch_norm_eval_is_untouched():
    def fn(x, running_mean, running_var):
        return F.batch_norm(x, running_mean, running_var, training=False)

    check(fn, randn(4, 3), torch.zeros(3), torch.ones(3), mutated=[])


def test_random_inplace_ops_stay_random():
    def fn(x):
        y = torch.empty_like(x).bernoulli_(0.3)
        coin = torch.empty_like(x).bernoulli_()  # p defaults to 0.5: the functional overload needs it spelled
        unused = torch.empty(3).uniform_()  # noqa: F841 - its draw must still be consumed
        noise = torch.empty(2, 3).normal_(1.0, 2.0)
        return y * x, coin, noise, torch.rand(3)

    gm = check(fn, randn(6), seed=0)
    assert "bernoulli.p" in gm.code and "uniform.default" in gm.code and "normal_functional" in gm.code


def test_rrelu_training_writes_noise():
    def fn(x):
        return F.rrelu(x * 1, training=True), F.rrelu_(x * 1, training=True)

    check(fn, randn(8), seed=0)


def test_arguments_bound_by_name():
    def fn(x):
        y = x.abs() + 1
        y.polygamma_(1)  # polygamma_(self, n) -> polygamma(n, self)
        return y

    check(fn, randn(5))


def test_foreach_inplace():
    def fn(x, y):
        torch._foreach_add_([x, y], [y * 2, x * 3])
        return x + y

    check(fn, randn(3), randn(3, seed=1), mutated=[0, 1])


# ------------------------------------------------------------------ graph-level contracts


def test_graph_without_mutation_only_loses_dead_code():
    def fn(x):
        x.sin()
        return x.cos()

    gm = functionalize(make_fx(fn)(randn(3)))
    assert gm.meta["mutated_inputs"] == []
    assert "sin" not in gm.code


def test_traced_on_fake_tensors():
    def fn(x, buf):
        y = x.t()
        buf[0].add_(y.sum(1))
        y[1].mul_(2)
        return y

    with FakeTensorMode() as mode:
        fakes = [mode.from_tensor(randn(4, 2)), mode.from_tensor(randn(3, 2))]
        gm = functionalize(make_fx(fn)(*fakes))
    _assert_functional(gm)
    assert gm.meta["mutated_inputs"] == [0, 1]
    for node in gm.graph.nodes:
        if node.op == "call_function":
            assert "val" in node.meta, node.format_node()
    x, buf = randn(4, 2), randn(3, 2)
    want_x, want_buf = x.clone(), buf.clone()
    want = fn(want_x, want_buf)
    out, new_x, new_buf = gm(x.clone(), buf.clone())
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(new_x, want_x)
    torch.testing.assert_close(new_buf, want_buf)


def test_joint_graph_with_backward():
    """Forward in-place ops plus the backward autograd writes (as_strided/copy_ into new_empty_strided)."""

    def joint(x, tangent):
        with torch.enable_grad():
            y = x * 2
            y.add_(1)
            y[0].mul_(3)
            y.t_()
            y[1].relu_()
            out = y.sin()
            (grad,) = torch.autograd.grad(out, x, tangent)
        return out, grad

    x, tangent = randn(3, 4).requires_grad_(), randn(4, 3, seed=1)
    gm = functionalize(make_fx(joint)(x, tangent))
    _assert_functional(gm)
    with torch.no_grad():  # as the runtime runs compiled graphs
        got = gm(x, tangent)
    for want, have in zip(joint(x, tangent), got, strict=True):
        assert_close(have, want)


def test_write_to_constant_raises():
    graph = fx.Graph()
    module = torch.nn.Module()
    module.register_buffer("const", torch.zeros(3))
    const = graph.get_attr("const")
    const.meta["val"] = torch.zeros(3)
    added = graph.call_function(aten.add_.Tensor, (const, 1))
    added.meta["val"] = torch.zeros(3)
    graph.output((added,))
    with pytest.raises(NotImplementedError, match="constant const"):
        functionalize(fx.GraphModule(module, graph))


@torch.library.custom_op("aotfx_test::bump", mutates_args=["x"])
def bump(x: torch.Tensor) -> None:
    x.add_(1)


bump.register_fake(lambda x: None)


def test_op_without_functional_variant_raises():
    def forward(x):  # make_fx records stack traces from the first frame named ``forward``
        y = x * 2
        torch.ops.aotfx_test.bump(y)
        return y

    gm = make_fx(forward, record_stack_traces=True)(randn(3))
    with pytest.raises(NotImplementedError, match=r"bump.*no functional variant.*torch.ops.aotfx_test.bump\(y\)`"):
        functionalize(gm)


@pytest.mark.parametrize(
    ("op", "variant"),
    [
        (aten.add_.Tensor, aten.add.Tensor),
        (aten.add.out, aten.add.Tensor),
        (aten.copy_.default, aten.copy.default),
        (aten.index_put_.default, aten.index_put.default),
        (aten.bernoulli_.float, aten.bernoulli.p),
        (aten.t_.default, aten.t.default),
        (aten.transpose_.default, aten.transpose.int),
        (aten.max.dim_max, aten.max.dim),
        (aten.normal_.default, aten.normal_functional.default),
        (aten.polygamma_.default, aten.polygamma.default),
    ],
)
def test_functional_variant_convention(op, variant):
    assert functional_variant(op) == variant


def test_functional_rules_keep_arguments():
    """The table's variants take the mutating op's positional arguments, as the pass passes them."""
    for op, variant in FUNCTIONAL_RULES.items():
        assert not variant._schema.is_mutable

        def kinds(arguments):
            # Optional is dropped: the pass only calls the variant where the mutating op writes.
            return [re.sub(r"Optional\[(.*)\]", r"\1", str(arg.type)) for arg in arguments if not arg.kwarg_only]

        positional = kinds(op._schema.arguments)
        assert kinds(variant._schema.arguments)[: len(positional)] == positional, op
