"""The activation memory budget: values and gradients as eager, the budget kept, saved bytes monotone.

``aot_function(..., activation_memory_budget=b)`` partitions with an integer program
(``aot/compile/memory_budget.py``); each model here is swept over budgets from the default
partitioner's bytes down to nothing, and each point checked against eager.
"""

from __future__ import annotations

import itertools
import warnings

import pytest
import torch
import torch.fx as fx
import torch.nn.functional as F

import aot
from aot.compile.memory_budget import ActivationMemoryBudget, MemoryPlan
from aot.compile.min_cut import node_bytes
from aot.compile.partition import JointParts, ancestors, default_saved
from aot.demo import GPTConfig, make_model
from tests import test_aliasing, test_mutation, test_programs
from tests.oracle import MODEL_RTOL, RTOL, assert_close, check
from tests.test_min_cut import SMALL_PROGRAMS, forward_of, mlp_gelu, pointwise_chain, saved_bytes, seeded

BUDGETS = [1.0, 0.75, 0.5, 0.25, 0.1, 0.0]


def plan_of(compiled) -> MemoryPlan:
    forward = forward_of(compiled)
    assert forward is not None
    plan = forward.meta["activation_plan"]
    assert isinstance(plan, MemoryPlan)
    return plan


def sweep(fn, make_args, *, rtol: float = RTOL) -> list[MemoryPlan]:
    """Check ``fn`` under each budget of :data:`BUDGETS` against eager; return the plans."""
    plans = []
    for budget in BUDGETS:
        compiled = aot.aot_function(fn, aot.nop, activation_memory_budget=budget)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a budget below what any plan saves: checked apart
            check(fn, make_args, compiled_fn=compiled, rtol=rtol)
        plan = plan_of(compiled)
        assert plan.saved_bytes == activation_bytes(forward_of(compiled))
        plans.append(plan)
    assert_budget_kept_and_monotone(plans)
    return plans


def activation_bytes(forward: fx.GraphModule) -> int:
    """Bytes of the saved values the forward computes (graph inputs it passes on cost nothing)."""
    placeholders = {node.name for node in forward.graph.nodes if node.op == "placeholder"}
    saved = forward.meta["activation_plan"].saved
    nodes = {node.name: node for node in forward.graph.nodes}
    total = sum(int(node_bytes(nodes[name])) for name in saved if name not in placeholders)
    assert total <= saved_bytes(forward)
    return total


def assert_budget_kept_and_monotone(plans: list[MemoryPlan]) -> None:
    least = min(plan.saved_bytes for plan in plans)
    for plan in plans:
        assert plan.gap == 0.0, plan
        assert plan.saved_bytes <= max(plan.budget_bytes, least), plan
    for larger, smaller in itertools.pairwise(plans):  # budgets decrease along the list
        assert larger.saved_bytes >= smaller.saved_bytes, (larger, smaller)
        assert larger.recompute_flops <= smaller.recompute_flops, (larger, smaller)
    assert plans[0].budget_bytes == plans[0].default_bytes
    assert plans[0].recompute_flops == 0  # the whole default budget: nothing forward-computed runs again


# ----------------------------------------------------------------------------- models


def test_mlp_gelu_sweep():
    plans = sweep(mlp_gelu, lambda: seeded((8, 16), (32, 16), (32,), (32, 32), (32,), (4, 32), (4,)))
    assert plans[-1].saved_bytes == 0  # budget 0: everything recomputed from the inputs
    assert plans[-1].recompute_flops > plans[2].recompute_flops


def test_attention_block_sweep():
    def block(x, wq, wk, wv, wo, ln_w, ln_b):
        y = F.layer_norm(x, (x.shape[-1],), ln_w, ln_b)
        return x + test_programs.attention(y, wq, wk, wv, wo)

    args = ((2, 6, 16), (16, 16), (16, 16), (16, 16), (16, 16), (16,), (16,))
    sweep(block, lambda: seeded(*args), rtol=MODEL_RTOL)


def test_lstm_sweep():
    args = ((5, 3, 8), (3, 6), (3, 6), (24, 8), (24, 6), (24,))
    sweep(test_programs.lstm_cell_loop, lambda: seeded(*args), rtol=MODEL_RTOL)


def test_conv_net_sweep():
    def convnet(x, w1, b1, w2, b2, w3):
        h = F.relu(F.conv2d(x, w1, b1, padding=1))
        h = F.silu(F.conv2d(h, w2, b2, padding=1))
        return F.linear(h.mean((2, 3)), w3)

    args = ((2, 3, 8, 8), (8, 3, 3, 3), (8,), (8, 8, 3, 3), (8,), (4, 8))
    sweep(convnet, lambda: seeded(*args), rtol=MODEL_RTOL)


def test_pointwise_chain_sweep():
    plans = sweep(pointwise_chain, lambda: seeded((64,), (64,), (64,)))
    assert plans[-1].saved_bytes == 0


def test_demo_gpt_sweep():
    config = GPTConfig(n_layers=1, seq_len=8, batch_size=2)
    tokens = torch.randint(0, config.vocab_size, (config.batch_size, config.seq_len), generator=torch.Generator())
    plans = []
    for budget in BUDGETS:
        model, reference = make_model(config, seed=0), make_model(config, seed=0)
        compiled = aot.aot_module(model, aot.nop, activation_memory_budget=budget)
        loss, expected = compiled(tokens, tokens), reference(tokens, tokens)
        assert_close(loss, expected, model=True)
        loss.backward()
        expected.backward()
        for p, q in zip(model.parameters(), reference.parameters(), strict=True):
            assert_close(p.grad, q.grad, model=True, grad=True)
        plans.append(plan_of(compiled.compiled))
    assert_budget_kept_and_monotone(plans)
    assert plans[3].saved_bytes <= plans[0].default_bytes // 4


# ----------------------------------------------------------------------------- optimality


def test_plan_is_optimal_by_enumeration():
    """On a graph small enough to enumerate every saved set, no plan under the budget recomputes less."""

    def f(x, w):
        h = torch.sin(x @ w)
        return (torch.exp(h) * h).cos()

    args = seeded((4, 6), (6, 6))
    joint = aot.aot_export_joint(f, args)
    parts = JointParts.of(joint, 1)
    budget_partition = ActivationMemoryBudget(0.5)
    forward, _ = budget_partition(joint, num_fwd_outputs=1)
    plan = forward.meta["activation_plan"]
    candidates = [n for n in joint.graph.nodes if n.op == "call_function" and n not in parts.tangent_dependent]
    assert len(candidates) <= 16
    best = None
    for size in range(len(candidates) + 1):
        for chosen in itertools.combinations(candidates, size):
            flops = _recompute_flops_of(parts, set(chosen))
            bytes_ = sum(int(node_bytes(n)) for n in chosen)
            if flops is not None and bytes_ <= plan.budget_bytes and (best is None or flops < best):
                best = flops
    assert plan.recompute_flops == best


def _recompute_flops_of(parts: JointParts, saved: set[fx.Node]) -> int | None:
    from aot.compile.memory_budget import node_flops

    stop = saved | set(parts.primals)
    backward = ancestors(parts.grads, stop=stop)
    if any(n.target is not None and _is_random(n) for n in backward - parts.tangent_dependent):
        return None
    forward_required = ancestors([*parts.fwd_outputs, *parts.random_in_backward])
    return sum(node_flops(n) for n in backward if n in forward_required)


def _is_random(node: fx.Node) -> bool:
    from aot.compile.partition import is_random

    return is_random(node)


def test_full_budget_saves_no_more_than_the_default():
    def f(x, w):
        return torch.tanh(x @ w).exp().sum()

    joint = aot.aot_export_joint(f, seeded((4, 6), (6, 6)))
    parts = JointParts.of(joint, 1)
    default_bytes = sum(int(node_bytes(n)) for n in default_saved(parts) if n.op != "placeholder")
    forward, _ = ActivationMemoryBudget(1.0)(joint, num_fwd_outputs=1)
    assert forward.meta["activation_plan"].saved_bytes <= default_bytes


# ----------------------------------------------------------------------------- budgets that cannot be met, options


def test_unmeetable_budget_warns_with_the_least_bytes():
    def f(x):
        return F.dropout(x, 0.5, training=True).sin()

    x = torch.randn(64, requires_grad=True)
    compiled = aot.aot_function(f, aot.nop, activation_memory_budget=0)
    with pytest.warns(UserWarning, match=r"cannot be met; the least any plan saves is \d+ bytes"):
        torch.manual_seed(0)
        out = compiled(x)
    torch.manual_seed(0)
    expected = f(x)
    assert_close(out, expected)
    (grad,) = torch.autograd.grad(out.sum(), x)
    (expected_grad,) = torch.autograd.grad(expected.sum(), x)
    assert_close(grad, expected_grad, grad=True)
    assert plan_of(compiled).saved_bytes > 0  # the mask (or its draw) is saved: a second draw would differ


def test_budget_in_bytes():
    args = seeded((8, 16), (32, 16), (32,), (32, 32), (32,), (4, 32), (4,))
    compiled = aot.aot_function(mlp_gelu, aot.nop, activation_memory_budget=1024)
    check(mlp_gelu, lambda: args, compiled_fn=compiled)
    plan = plan_of(compiled)
    assert plan.budget_bytes == 1024 and plan.saved_bytes <= 1024


@pytest.mark.parametrize(
    ("budget", "error"), [(-1, ValueError), (1.5, ValueError), ("half", TypeError), (True, TypeError)]
)
def test_bad_budget_is_refused(budget, error):
    with pytest.raises(error, match="activation_memory_budget"):
        aot.aot_function(mlp_gelu, aot.nop, activation_memory_budget=budget)


def test_budget_and_partition_fn_are_exclusive():
    with pytest.raises(ValueError, match="not both"):
        aot.aot_function(mlp_gelu, aot.nop, partition_fn=aot.default_partition, activation_memory_budget=0.5)


def test_budgets_do_not_share_compiled_entries():
    assert ActivationMemoryBudget(0.5).cache_key != ActivationMemoryBudget(0.25).cache_key
    assert ActivationMemoryBudget(0.5).cache_key != ActivationMemoryBudget(1).cache_key


def test_torch_compile_backend_with_budget():
    from aot.dynamo import make_backend

    torch._dynamo.reset()
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    reference = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    reference.load_state_dict(model.state_dict())
    compiled = torch.compile(model, backend=make_backend(activation_memory_budget=0.0))
    x = torch.randn(4, 8)
    out, expected = compiled(x), reference(x)
    assert_close(out, expected)
    out.sum().backward()
    expected.sum().backward()
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        assert_close(p.grad, q.grad, grad=True)
    torch._dynamo.reset()


# ----------------------------------------------------------------------------- the differential programs at 0.5


def _at_half(fn, make_args, rtol: float = RTOL) -> None:
    compiled = aot.aot_function(fn, aot.nop, activation_memory_budget=0.5)
    check(fn, make_args, compiled_fn=compiled, rtol=rtol)


@pytest.mark.parametrize("name", [n for n in test_mutation.PROGRAMS if n != "leaf_requiring_grad_raises"])
def test_mutation_programs_at_half_budget(name):
    fn, make = test_mutation.PROGRAMS[name]
    _at_half(fn, make)


@pytest.mark.parametrize("name", list(test_aliasing.ALIASING_PROGRAMS))
def test_aliasing_programs_at_half_budget(name):
    _at_half(test_aliasing.ALIASING_PROGRAMS[name], lambda: (test_aliasing.leaf(2, 3, 4),))


@pytest.mark.parametrize("name", list(SMALL_PROGRAMS))
def test_small_programs_at_half_budget(name):
    fn, make = SMALL_PROGRAMS[name]
    _at_half(fn, make)
