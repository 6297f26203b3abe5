"""Activation policies: the user names what to save or recompute; gradients stay eager's.

``aot.checkpoint_name`` + ``aot.save_only_these_names`` (JAX's way), torch's selective-checkpoint
policy functions (``CheckpointPolicy`` per op), and ``torch.utils.checkpoint`` regions inside a
compiled function, under the min-cut partitioner and the memory budget.
"""

from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import CheckpointPolicy, checkpoint

import aot
from aot.compile.policy import ActivationPolicy
from tests.oracle import check

aten = torch.ops.aten


def seeded(*shapes: tuple[int, ...]) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(0)
    return tuple(torch.randn(shape, generator=generator).requires_grad_() for shape in shapes)


def named_mlp(x, w1, w2, w3):
    h1 = aot.checkpoint_name(F.gelu(torch.tanh(x @ w1)), "h1")
    h2 = aot.checkpoint_name(F.gelu(torch.tanh(h1 @ w2)), "h2")
    return (h2 @ w3).sin()


ARGS = ((8, 16), (16, 32), (32, 32), (32, 4))


def saved_producers(compiled) -> list[str]:
    return [row.producer for row in aot.inspect.saved_values(compiled) if not row.is_input]


def recomputed(compiled) -> list[str]:
    return [op.producer for op in aot.inspect.recomputed_ops(compiled)]


def test_checkpoint_name_is_the_identity_eagerly():
    x = torch.randn(3)
    assert aot.checkpoint_name(x, "x") is x


@pytest.mark.parametrize("budget", [None, 1.0], ids=["min_cut", "budget"])
def test_save_only_these_names(budget):
    compiled = aot.aot_function(
        named_mlp, aot.nop, activation_policy=aot.save_only_these_names("h1", "h2"), activation_memory_budget=budget
    )
    check(named_mlp, lambda: seeded(*ARGS), compiled_fn=compiled)
    saved = aot.inspect.saved_values(compiled)
    activations = [row for row in saved if not row.is_input]
    # h1 and h2 (gelu outputs, or views of them) and nothing else: the tanh and matmul outputs are recomputed
    assert sorted(row.producer for row in activations) == ["aten.gelu.default", "aten.gelu.default"], activations
    assert "aten.mm.default" in recomputed(compiled)  # even a matmul: only the named values are saved


def test_save_only_one_name_recomputes_the_rest():
    compiled = aot.aot_function(named_mlp, aot.nop, activation_policy=aot.save_only_these_names("h2"))
    check(named_mlp, lambda: seeded(*ARGS), compiled_fn=compiled)
    assert saved_producers(compiled) == ["aten.gelu.default"]


def _save_matmuls(ctx, op, *args, **kwargs):
    matmul = op in (aten.mm.default, aten.addmm.default)
    return CheckpointPolicy.MUST_SAVE if matmul else CheckpointPolicy.PREFER_RECOMPUTE


def test_selective_checkpoint_policy_by_op():
    def mlp(x, w1, w2, w3):
        return (F.gelu(torch.tanh(F.gelu(torch.tanh(x @ w1)) @ w2)) @ w3).sin()

    compiled = aot.aot_function(mlp, aot.nop, activation_policy=ActivationPolicy(policy_fn=_save_matmuls))
    check(mlp, lambda: seeded(*ARGS), compiled_fn=compiled)
    saved = saved_producers(compiled)
    assert saved.count("aten.mm.default") == 3 and "aten.tanh.default" not in saved and "aten.gelu.default" not in saved
    assert "aten.tanh.default" in recomputed(compiled)


def test_must_recompute_a_matmul():
    def must_recompute_mm(ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_RECOMPUTE if op is aten.mm.default else CheckpointPolicy.PREFER_SAVE

    def f(x, w):
        return torch.sin(x @ w).sum()  # the backward reads x @ w (for cos)

    compiled = aot.aot_function(f, aot.nop, activation_policy=ActivationPolicy(policy_fn=must_recompute_mm))
    check(f, lambda: seeded((4, 8), (8, 8)), compiled_fn=compiled)
    assert "aten.mm.default" in recomputed(compiled)


def _must_recompute_all(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_RECOMPUTE


def test_must_recompute_a_draw_replays_it():
    def f(x):
        return F.dropout(x, 0.5).sin()

    compiled = aot.aot_function(f, aot.nop, activation_policy=ActivationPolicy(policy_fn=_must_recompute_all))
    x = torch.randn(64, requires_grad=True)
    torch.manual_seed(0)
    (grad,) = torch.autograd.grad(compiled(x).sum(), x)
    torch.manual_seed(0)
    (expected,) = torch.autograd.grad(f(x).sum(), x)
    torch.testing.assert_close(grad, expected)
    assert any("(replayed)" in op for op in recomputed(compiled))


def test_must_recompute_a_draw_from_its_own_generator_is_refused():
    from tests.test_rng_replay import own_generator_draw

    policy = ActivationPolicy(policy_fn=_must_recompute_all)
    compiled = aot.aot_function(own_generator_draw, aot.nop, activation_policy=policy)
    with pytest.raises(ValueError, match=r"must be recomputed, but it cannot run again"):
        compiled(torch.randn(8, requires_grad=True))


def test_policy_with_default_partition_is_refused():
    with pytest.raises(ValueError, match="follows no policy"):
        aot.aot_function(
            named_mlp, aot.nop, partition_fn=aot.default_partition, activation_policy=aot.save_only_these_names("h1")
        )


def test_policies_key_compiled_entries_apart():
    keys = {
        aot.save_only_these_names("h1").cache_key,
        aot.save_only_these_names("h2").cache_key,
        ActivationPolicy(policy_fn=_save_matmuls).cache_key,
    }
    assert len(keys) == 3


# ----------------------------------------------------------------------------- torch.utils.checkpoint inside


def _block(x, w):
    return F.gelu(torch.tanh(x @ w)).sin()


def checkpointed(x, w1, w2):
    h = checkpoint(_block, x, w1, use_reentrant=False)
    return checkpoint(_block, h, w2, use_reentrant=False).sum()


def plain(x, w1, w2):
    return _block(_block(x, w1), w2).sum()


@pytest.mark.parametrize(
    "options",
    [{}, {"partition_fn": aot.min_cut_rematerialization_partition}, {"activation_memory_budget": 1.0}],
    ids=["default", "min_cut", "budget"],
)
def test_checkpoint_regions_are_recomputed(options):
    args = lambda: seeded((16, 16), (16, 16), (16, 16))  # noqa: E731
    compiled = aot.aot_function(checkpointed, aot.nop, **options)
    check(checkpointed, args, compiled_fn=compiled)
    unchecked = aot.aot_function(plain, aot.nop, **options)
    check(plain, args, compiled_fn=unchecked)
    # Only the regions' inputs and outputs are kept: the block's tanh and gelu run again in the backward.
    assert saved_producers(compiled) == ["aten.sin.default"]
    assert aot.inspect.saved_bytes(compiled) < aot.inspect.saved_bytes(unchecked)


def test_policy_through_torch_compile():
    from aot.dynamo import make_backend

    torch._dynamo.reset()
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    reference = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    reference.load_state_dict(model.state_dict())
    backend = make_backend(activation_policy=ActivationPolicy(policy_fn=functools.partial(_save_matmuls)))
    compiled = torch.compile(model, backend=backend)
    x = torch.randn(4, 8)
    compiled(x).sum().backward()
    reference(x).sum().backward()
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad)
    torch._dynamo.reset()
