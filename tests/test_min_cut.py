"""The min-cut partitioner: values and gradients as eager, and never more saved bytes than the default.

Each program runs through ``aot_function(..., partition_fn=aot.min_cut_rematerialization_partition)``
under the oracle, then both partitioners' saved bytes (the forward's saved outputs) are compared.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.fx as fx
import torch.nn.functional as F
from torch import nn
from torch.utils._pytree import tree_leaves

import aot
from aot.compile.descriptors import DESC, Saved
from aot.compile.min_cut import node_bytes
from aot.dynamo import make_backend
from tests import test_aliasing, test_mutation, test_programs
from tests.oracle import MODEL_RTOL, RTOL, assert_close, check, clone_args

min_cut = aot.min_cut_rematerialization_partition


def seeded(*shapes: tuple[int, ...], seed: int = 0) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(shape, generator=generator).requires_grad_() for shape in shapes)


def saved_bytes(forward: fx.GraphModule) -> int:
    """Sum of the bytes of the values a partitioned forward saves for the backward."""
    descs = forward.graph.output_node().meta[DESC]
    outputs = forward.graph.output_node().args[0]
    return sum(int(node_bytes(out)) for out, desc in zip(outputs, descs, strict=True) if isinstance(desc, Saved))


def forward_of(compiled) -> fx.GraphModule | None:
    entry = aot.inspect.entries(compiled)[-1]
    return entry.forward


def run_both(fn, make_args, *, rtol: float = RTOL, strictly_less: bool = False) -> tuple[int, int]:
    """Check ``fn`` through the min-cut partitioner; return (default's, min-cut's) saved bytes."""
    factory = make_args if callable(make_args) else (lambda: clone_args(make_args))
    ours = check(fn, factory, compiled_fn=aot.aot_function(fn, aot.nop, partition_fn=min_cut), rtol=rtol)
    default = aot.aot_function(fn, aot.nop)
    try:
        default(*factory())
    except RuntimeError:  # eager raises too (the oracle checked that)
        return 0, 0
    if forward_of(ours) is None:  # an inference graph or a forward-only entry: nothing to partition
        return 0, 0
    default_bytes, ours_bytes = saved_bytes(forward_of(default)), saved_bytes(forward_of(ours))
    assert ours_bytes <= default_bytes, f"min-cut saves {ours_bytes} bytes, default {default_bytes}"
    if strictly_less:
        assert ours_bytes < default_bytes, f"min-cut saves {ours_bytes} bytes, default {default_bytes}"
    return default_bytes, ours_bytes


# ----------------------------------------------------------------------------- models


def mlp_tanh(x, w1, b1, w2, b2):
    return F.linear(torch.tanh(F.linear(x, w1, b1)), w2, b2)


def mlp_gelu(x, w1, b1, w2, b2, w3, b3):
    h = F.gelu(F.linear(x, w1, b1))
    h = F.gelu(F.linear(h, w2, b2))
    return F.linear(h, w3, b3)


def test_mlp_tanh():
    run_both(mlp_tanh, seeded((8, 16), (32, 16), (32,), (4, 32), (4,)))


def test_mlp_gelu_saves_less():
    run_both(mlp_gelu, seeded((8, 16), (32, 16), (32,), (32, 32), (32,), (4, 32), (4,)), strictly_less=True)


def test_attention_block():
    def block(x, wq, wk, wv, wo, ln_w, ln_b):
        y = F.layer_norm(x, (x.shape[-1],), ln_w, ln_b)
        return x + test_programs.attention(y, wq, wk, wv, wo)

    run_both(block, seeded((2, 6, 16), (16, 16), (16, 16), (16, 16), (16, 16), (16,), (16,)), rtol=MODEL_RTOL)


def test_lstm_cell():
    run_both(
        test_programs.lstm_cell_loop,
        seeded((5, 3, 8), (3, 6), (3, 6), (24, 8), (24, 6), (24,)),
        rtol=MODEL_RTOL,
        strictly_less=True,
    )


def test_conv_net():
    def convnet(x, w1, b1, w2, b2, w3):
        h = F.relu(F.conv2d(x, w1, b1, padding=1))
        h = F.silu(F.conv2d(h, w2, b2, padding=1))
        return F.linear(h.mean((2, 3)), w3)

    run_both(convnet, seeded((2, 3, 8, 8), (8, 3, 3, 3), (8,), (8, 8, 3, 3), (8,), (4, 8)), rtol=MODEL_RTOL)


def test_batchnorm_convnet_module():
    torch.manual_seed(0)
    model = test_programs.ConvNet(track_running_stats=False).train()
    reference = test_programs.ConvNet(track_running_stats=False).train()
    reference.load_state_dict(model.state_dict())
    compiled = aot.aot_module(model, aot.nop, partition_fn=min_cut)
    x = torch.randn(4, 3, 5, 5)
    out, expected = compiled(x), reference(x)
    assert_close(out, expected, model=True)
    out.pow(2).sum().backward()
    expected.pow(2).sum().backward()
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        assert_close(p.grad, q.grad, model=True, grad=True)


def pointwise_chain(x, w, b):
    for i in range(200):
        x = torch.sin(x) if i % 3 == 0 else (x * w if i % 3 == 1 else x + b)
    return x


def test_200_op_pointwise_chain_saves_only_its_inputs():
    default_bytes, ours_bytes = run_both(pointwise_chain, seeded((64,), (64,), (64,)), strictly_less=True)
    assert ours_bytes == 3 * 64 * 4  # x, w, b: everything else is recomputed
    assert default_bytes > 40 * ours_bytes


def test_matmul_is_never_recomputed():
    def f(x, w):
        return torch.sin(x @ w).sum()

    compiled = aot.aot_function(f, aot.nop, partition_fn=min_cut)
    check(f, seeded((4, 8), (8, 8)), compiled_fn=compiled)
    backward = aot.inspect.entries(compiled)[-1].backward
    from_tangents = {n for n in backward.graph.nodes if n.op == "placeholder" and n.name.startswith("tangents")}
    for node in backward.graph.nodes:
        if any(arg in from_tangents for arg in node.all_input_nodes):
            from_tangents.add(node)
    mms = [n for n in backward.graph.nodes if n.target is torch.ops.aten.mm.default]
    assert mms and all(n in from_tangents for n in mms)  # gradients only: the forward's mm is not run again


# ----------------------------------------------------------------------------- randomness


def _dropout_model(x, w):
    h = F.dropout(torch.tanh(x @ w), 0.5, training=True)
    return (F.gelu(h) * h).sum(-1)


@pytest.mark.parametrize("partition_fn", [min_cut, aot.default_partition], ids=["min_cut", "default"])
def test_dropout_gradients_equal_eager_for_the_same_seed(partition_fn):
    x, w = seeded((6, 8), (8, 8))
    compiled = aot.aot_function(_dropout_model, aot.nop, partition_fn=partition_fn)
    for seed in (0, 1):
        grads = []
        for fn in (_dropout_model, compiled):
            xs, ws = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
            torch.manual_seed(seed)
            out = fn(xs, ws)
            torch.manual_seed(seed + 100)  # the backward must not draw again
            out.sum().backward()
            grads.append((out.detach(), xs.grad, ws.grad))
        for got, expected in zip(grads[1], grads[0], strict=True):
            assert_close(got, expected, grad=True)
    backward = aot.inspect.entries(compiled)[-1].backward
    assert not any(
        isinstance(n.target, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in n.target.tags
        for n in backward.graph.nodes
    )


def test_checkpointed_dropout_under_min_cut():
    def f(x, w):
        return torch.utils.checkpoint.checkpoint(_dropout_model, x, w, use_reentrant=False)

    x, w = seeded((6, 8), (8, 8))
    compiled = aot.aot_function(f, aot.nop, partition_fn=min_cut)
    grads = []
    for fn in (f, compiled):
        xs, ws = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
        torch.manual_seed(3)
        fn(xs, ws).sum().backward()
        grads.append((xs.grad, ws.grad))
    assert_close(grads[1], grads[0], grad=True)


# ----------------------------------------------------------------------------- other programs

PROGRAM_SAMPLE = [name for name in test_mutation.PROGRAMS if name != "leaf_requiring_grad_raises"]


@pytest.mark.parametrize("name", PROGRAM_SAMPLE)
def test_mutation_programs(name):
    fn, make = test_mutation.PROGRAMS[name]
    run_both(fn, make)


@pytest.mark.parametrize("name", list(test_aliasing.ALIASING_PROGRAMS))
def test_aliasing_programs(name):
    run_both(test_aliasing.ALIASING_PROGRAMS[name], lambda: (test_aliasing.leaf(2, 3, 4),))


def test_multi_output_op_projections():
    def f(x, w, b):
        y = F.layer_norm(x * 2, (x.shape[-1],), w, b)
        m, s = torch.var_mean(y, -1, keepdim=True)
        q, k = (y.exp() * s + m).split(4, -1)
        return (q * k).sigmoid()

    run_both(f, seeded((3, 8), (8,), (8,)), rtol=MODEL_RTOL)


def test_gradient_computed_without_tangents():
    def f(x, y):
        return x.sum() * 0 + (y * 2).detach().sum(), y * 3

    check(f, seeded((3,), (3,)), compiled_fn=aot.aot_function(f, aot.nop, partition_fn=min_cut))


def test_dynamic_shapes_through_dynamo():
    def f(x, w):
        return (torch.sin(x) * w).cos().sum(-1)

    backend = make_backend(aot.nop, partition_fn=min_cut)
    compiled = torch.compile(f, backend=backend, dynamic=True)
    for n in (3, 5):
        x, w = seeded((n, 4), (4,))
        x2, w2 = (t.detach().clone().requires_grad_() for t in (x, w))
        compiled(x, w).sum().backward()
        f(x2, w2).sum().backward()
        assert_close(x.grad, x2.grad, grad=True)
        assert_close(w.grad, w2.grad, grad=True)


def test_module_training_through_min_cut():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 2))
    reference = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 2))
    reference.load_state_dict(model.state_dict())
    compiled = aot.aot_module(model, aot.nop, partition_fn=min_cut)
    x = torch.randn(5, 8)
    for module in (compiled, reference):
        module(x).square().sum().backward()
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        assert_close(p.grad, q.grad, model=True, grad=True)


def test_inductor_backend_defaults_to_min_cut(monkeypatch):
    from aot import dynamo

    seen = []

    def capture(gm, inputs, fw, bw, partition_fn, *args, **kwargs):
        seen.append(partition_fn)

    monkeypatch.setattr(dynamo, "aot_module_simplified", capture)
    gm = fx.symbolic_trace(lambda x: x + 1)
    dynamo.aotfx_inductor(gm, [torch.randn(2)])
    dynamo.aotfx(gm, [torch.randn(2)])
    assert seen == [min_cut, None]  # aotfx (nop) keeps the default partitioner


SMALL_PROGRAMS = {
    "reductions": (
        lambda x: (x.sum(), x.mean(0), x.amax(1), x.var(1), x.norm(), x.logsumexp(0), x.cumsum(1), x.prod(1)),
        lambda: seeded((4, 5)),
    ),
    "broadcasting": (
        lambda a, b, c: (a * b + c, (a - c).pow(2) / (b.abs() + 1)),
        lambda: seeded((4, 1, 3), (5, 1), (3,)),
    ),
    "integer_and_bool_outputs": (
        lambda x: (x.argmax(1), x > 0, (x * 2).sum(), x.to(torch.int32)),
        lambda: seeded((4, 5)),
    ),
    "integer_inputs": (
        lambda x, idx: (x.index_select(0, idx) * 2, idx + 1),
        lambda: (seeded((5, 3))[0], torch.tensor([4, 0, 2])),
    ),
    "unused_input": (lambda x, unused: x * 2, lambda: seeded((3,), (3,))),
    "copysign_zeros_grad": (torch.copysign, lambda: seeded((3,), (3,))),
    "unsafe_split": (lambda x: torch.unsafe_split(x, 2), lambda: seeded((4, 3))),
    "unsafe_chunk_of_intermediate": (lambda x: torch.unsafe_chunk(x * 2, 2), lambda: seeded((4, 3))),
    "softmax_cross_entropy": (
        lambda x, w, y: F.cross_entropy(F.gelu(x @ w).softmax(-1).log(), y),
        lambda: (*seeded((6, 5), (5, 4)), torch.tensor([0, 1, 2, 3, 0, 1])),
    ),
    "where_masked_fill_index": (
        lambda x, i: torch.where(x > 0, x.exp(), x.masked_fill(x < -1, 0.0))[i].tanh(),
        lambda: (seeded((5, 4))[0], torch.tensor([3, 1, 1])),
    ),
    "layer_norm_softmax": (
        lambda x, w, b: (lambda y: (y.softmax(-1), y.log_softmax(0)))(F.layer_norm(x, (x.shape[-1],), w, b)),
        lambda: seeded((5, 7), (7,), (7,)),
    ),
}


@pytest.mark.parametrize("name", list(SMALL_PROGRAMS))
def test_small_programs(name):
    fn, make = SMALL_PROGRAMS[name]
    run_both(fn, make)


@pytest.mark.parametrize("name", list(test_programs.MODULE_ZOO))
def test_torch_nn_modules(name):
    make_module, make_args = test_programs.MODULE_ZOO[name]
    torch.manual_seed(0)
    model = make_module()
    reference = copy.deepcopy(model)
    compiled = aot.aot_module(model, aot.nop, partition_fn=min_cut)
    torch.manual_seed(1)
    args = make_args()
    outs = [t for t in tree_leaves(compiled(*args)) if isinstance(t, torch.Tensor)]
    expected = [t for t in tree_leaves(reference(*args)) if isinstance(t, torch.Tensor)]
    for out, exp in zip(outs, expected, strict=True):
        assert_close(out, exp, model=True)
    sum(t.sum() for t in outs if t.requires_grad).backward()
    sum(t.sum() for t in expected if t.requires_grad).backward()
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        assert_close(p.grad, q.grad, model=True, grad=True)


def test_non_contiguous_and_expanded_tangents():
    def f(x):
        return x.sin() * 2, x.cos()

    compiled = aot.aot_function(f, aot.nop, partition_fn=min_cut)
    x = seeded((4, 6))[0]
    a, b = compiled(x)
    grad_a = torch.randn(6, 4).t()
    grad_b = torch.randn(1, 6).expand(4, 6)
    torch.autograd.backward([a, b], [grad_a, grad_b])
    compiled_grad = x.grad.clone()
    x.grad = None
    ea, eb = f(x)
    torch.autograd.backward([ea, eb], [grad_a, grad_b])
    assert_close(compiled_grad, x.grad, grad=True)
