"""Random draws run again in the backward replay the forward's numbers: gradients as eager's for the same seed.

Each program draws (dropout, ``bernoulli``, ``rand_like``) and is compiled under every partitioner
and several budgets; eager with the same seed is the oracle for the values, the gradients and the
caller's generator after the call (a replay must not advance it).
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

import aot
from aot.compile.rng_replay import STATE_BYTES
from tests.oracle import assert_close


def attention_dropout(x, w):
    probs = torch.softmax(x @ w, -1)
    return F.dropout(probs, 0.3) @ w


def noisy_gate(x, w):
    gate = torch.bernoulli(torch.sigmoid(x @ w))
    noise = torch.rand_like(x)
    return (gate * torch.tanh(x @ w) + noise * x).sin()


def dropout_twice(x, w):
    h = F.dropout(torch.tanh(x @ w), 0.5)
    return F.dropout(h, 0.2).sum(-1)


PROGRAMS = {"attention_dropout": attention_dropout, "noisy_gate": noisy_gate, "dropout_twice": dropout_twice}
OPTIONS = {
    "default": {},
    "min_cut": {"partition_fn": aot.min_cut_rematerialization_partition},
    "budget_1": {"activation_memory_budget": 1.0},
    "budget_0.5": {"activation_memory_budget": 0.5},
    "budget_0": {"activation_memory_budget": 0},
}


def _args():
    generator = torch.Generator().manual_seed(0)
    return torch.randn(64, 128, generator=generator).requires_grad_(), torch.randn(128, 128, generator=generator).div(
        10
    ).requires_grad_()


def _run(fn, args, seed=0):
    torch.manual_seed(seed)
    out = fn(*args)
    grads = torch.autograd.grad(out.sum(), args)
    return out, grads, torch.get_rng_state()


@pytest.mark.parametrize("options", list(OPTIONS))
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_draws_equal_eager(name, options):
    fn = PROGRAMS[name]
    compiled = aot.aot_function(fn, aot.nop, **OPTIONS[options])
    for seed in (0, 1):  # a second call: the entry's replay follows the new draw
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # budget 0: no plan saves nothing (a state is needed)
            out, grads, state = _run(compiled, _args(), seed)
        expected, expected_grads, expected_state = _run(fn, _args(), seed)
        assert_close(out, expected)
        for grad, expected_grad in zip(grads, expected_grads, strict=True):
            assert_close(grad, expected_grad, grad=True)
        assert torch.equal(state, expected_state), "the caller's generator differs from eager's after the call"


def test_min_cut_saves_the_state_not_the_mask():
    compiled = aot.aot_function(attention_dropout, aot.nop, partition_fn=aot.min_cut_rematerialization_partition)
    _run(compiled, _args())
    rows = aot.inspect.saved_values(compiled)
    states = [row for row in rows if row.why == "replays a draw"]
    assert len(states) == 1 and states[0].nbytes == STATE_BYTES
    kept = [row for row in rows if row.why != "replays a draw"]
    assert not any(row.dtype == torch.bool or "bernoulli" in row.producer for row in kept)
    assert any("(replayed)" in op.producer for op in aot.inspect.recomputed_ops(compiled))
    default = aot.aot_function(attention_dropout, aot.nop)
    _run(default, _args())
    assert aot.inspect.saved_bytes(compiled) < aot.inspect.saved_bytes(default)


def test_small_draws_are_saved_not_replayed():
    """A draw smaller than the generator's state is cheaper to keep."""

    def f(x):
        return F.dropout(x, 0.5).sin()

    compiled = aot.aot_function(f, aot.nop, partition_fn=aot.min_cut_rematerialization_partition)
    x = torch.randn(16, requires_grad=True)
    torch.manual_seed(0)
    compiled(x).sum().backward()
    assert not any(row.why == "replays a draw" for row in aot.inspect.saved_values(compiled))


OWN_GENERATOR = torch.Generator().manual_seed(3)


def own_generator_draw(x):
    return (torch.rand(x.shape, generator=OWN_GENERATOR) * x).sin()


def test_draw_with_its_own_generator_is_not_replayed():
    f = own_generator_draw

    compiled = aot.aot_function(f, aot.nop, partition_fn=aot.min_cut_rematerialization_partition)
    compiled(torch.randn(4096, requires_grad=True)).sum().backward()
    assert not any(row.why == "replays a draw" for row in aot.inspect.saved_values(compiled))


def test_replayed_graphs_are_cacheable(tmp_path):
    aot.cache.clear()
    before = aot.cache.stats().uncacheable
    options = {"partition_fn": aot.min_cut_rematerialization_partition, "cache_dir": tmp_path}
    out, grads, _ = _run(aot.aot_function(attention_dropout, aot.nop, **options), _args())
    assert aot.cache.stats().uncacheable == before  # the op a replay runs is named in the key
    assert aot.cache.stats().disk_writes >= 2
    aot.cache.clear()
    again, again_grads, _ = _run(aot.aot_function(attention_dropout, aot.nop, **options), _args())
    assert torch.equal(out, again) and all(torch.equal(a, b) for a, b in zip(grads, again_grads, strict=True))
