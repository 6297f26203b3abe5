"""Differential tests on real programs: compiled vs eager, everything observable compared."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import aot
from tests.oracle import MODEL_RTOL, assert_close, check


def seeded(*shapes: tuple[int, ...], requires_grad: bool = True, seed: int = 0) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(shape, generator=generator).requires_grad_(requires_grad) for shape in shapes)


def mlp(x, w1, b1, w2, b2):
    return F.linear(F.relu(F.linear(x, w1, b1)), w2, b2)


def test_mlp():
    check(mlp, seeded((8, 16), (32, 16), (32,), (4, 32), (4,)))


def test_mlp_input_without_grad():
    def make():
        x, *params = seeded((8, 16), (32, 16), (32,), (4, 32), (4,))
        return (x.detach(), *params)

    check(mlp, make)


def attention(x, wq, wk, wv, wo):
    batch, seq, dim = x.shape
    heads = 4
    q, k, v = (F.linear(x, w).view(batch, seq, heads, dim // heads).transpose(1, 2) for w in (wq, wk, wv))
    scores = q @ k.transpose(-2, -1) / (dim // heads) ** 0.5
    mask = torch.ones(seq, seq, dtype=torch.bool).tril()
    scores = scores.masked_fill(~mask, float("-inf"))
    out = scores.softmax(-1) @ v
    return F.linear(out.transpose(1, 2).reshape(batch, seq, dim), wo)


def test_multi_head_attention():
    check(attention, seeded((2, 6, 16), (16, 16), (16, 16), (16, 16), (16, 16)))


def test_layernorm_softmax():
    def f(x, weight, bias):
        y = F.layer_norm(x, (x.shape[-1],), weight, bias)
        return y.softmax(-1), y.log_softmax(0)

    check(f, seeded((5, 7), (7,), (7,)))


def lstm_cell_loop(xs, h, c, w_ih, w_hh, bias):
    outs = []
    for x in xs.unbind(0):
        gates = x @ w_ih.t() + h @ w_hh.t() + bias
        i, f, g, o = gates.chunk(4, 1)
        c = f.sigmoid() * c + i.sigmoid() * g.tanh()
        h = o.sigmoid() * c.tanh()
        outs.append(h)
    return torch.stack(outs), (h, c)


def test_lstm_cell_loop():
    check(lstm_cell_loop, seeded((5, 3, 8), (3, 6), (3, 6), (24, 8), (24, 6), (24,)), rtol=MODEL_RTOL)


def test_reductions():
    def f(x):
        return x.sum(), x.mean(0), x.amax(1), x.var(1), x.norm(), x.logsumexp(0), x.cumsum(1), x.prod(1)

    check(f, seeded((4, 5)))


def test_broadcasting():
    def f(a, b, c):
        return a * b + c, (a - c).pow(2) / (b.abs() + 1)

    check(f, seeded((4, 1, 3), (5, 1), (3,)))


def test_integer_and_bool_outputs():
    def f(x):
        return x.argmax(1), x > 0, (x * 2).sum(), x.to(torch.int32)

    compiled = check(f, seeded((4, 5)))
    x = seeded((4, 5))[0]
    idx, mask, total, ints = compiled(x)
    assert not idx.requires_grad and not mask.requires_grad and total.requires_grad and not ints.requires_grad


def test_integer_inputs():
    def f(x, idx):
        return x.index_select(0, idx) * 2, idx + 1

    check(f, lambda: (seeded((5, 3))[0], torch.tensor([4, 0, 2])))


def test_pytree_inputs_and_outputs():
    def f(inputs, scale, *, extra=None):
        a, (b, c) = inputs["a"], inputs["bc"]
        out = {"sum": a + b * scale, "list": [c.sin(), None, (a * c).sum()]}
        if extra is not None:
            out["extra"] = extra.exp()
        return out, 3, "tag"

    def make():
        a, b, c = seeded((3,), (3,), (3,))
        return ({"a": a, "bc": [b, c]}, 2.5)

    check(f, make)
    check(f, make, kwargs={"extra": seeded((2,))[0]})


def test_non_tensor_arguments_are_specialized():
    calls = []

    def f(x, n, mode, flag, nothing):
        calls.append(1)
        y = x * n if mode == "mul" else x + n
        return y.relu() if flag else y, nothing

    compiled = aot.aot_function(f, aot.nop)
    (x,) = seeded((4,))
    for n, mode, flag in [(2, "mul", True), (3, "mul", True), (2, "add", False), (2, "mul", True)]:
        out, none = compiled(x, n, mode, flag, None)
        expected, _ = f(x, n, mode, flag, None)
        torch.testing.assert_close(out, expected)
        assert none is None
    assert len(compiled.entries) == 3


def test_size_outputs_come_back_as_sizes():
    # pytree rebuilds a torch.Size as a plain tuple; eager's function returned the Size.
    def f(x):
        shape = torch.broadcast_shapes(x.shape, (3, 1))
        return {"shape": shape, "pair": (x.expand(shape) * 2, x.size())}, torch.Size([])

    compiled = aot.aot_function(f, aot.nop)
    (x,) = seeded((1, 4))
    expected = f(x)
    for _ in range(2):  # the first call, then the entry's generated function
        out = compiled(x)
        assert type(out[1]) is type(expected[1]) and out[1] == expected[1]
        assert type(out[0]["shape"]) is torch.Size and out[0]["shape"] == expected[0]["shape"]
        assert type(out[0]["pair"][1]) is torch.Size and out[0]["pair"][1] == expected[0]["pair"][1]
        torch.testing.assert_close(out[0]["pair"][0], expected[0]["pair"][0])


def test_module_mlp_parameter_grads():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 3))
    compiled_model = aot.aot_module(model, aot.nop)
    reference = nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 3))
    reference.load_state_dict(model.state_dict())
    x = torch.randn(5, 6)
    compiled_model(x).pow(2).sum().backward()
    reference(x).pow(2).sum().backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
        assert p.grad is not None, name
        torch.testing.assert_close(p.grad, q.grad, msg=name)
    assert [n.meta["desc"].name for n in compiled_model.compiled.entries[0].forward.graph.find_nodes(op="placeholder")][
        :4
    ] == ["0.weight", "0.bias", "2.weight", "2.bias"]


def test_module_training_loop_matches_eager():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    reference = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    reference.load_state_dict(model.state_dict())
    compiled_model = aot.aot_module(model, aot.nop)
    opt_a = torch.optim.SGD(model.parameters(), lr=0.1)
    opt_b = torch.optim.SGD(reference.parameters(), lr=0.1)
    for step in range(4):
        x, y = torch.randn(16, 4), torch.randn(16, 1)
        for m, opt in ((compiled_model, opt_a), (reference, opt_b)):
            opt.zero_grad()
            F.mse_loss(m(x), y).backward()
            opt.step()
        for p, q in zip(model.parameters(), reference.parameters(), strict=True):
            torch.testing.assert_close(p, q, msg=f"step {step}")
    assert len(compiled_model.compiled.entries) == 1


def test_tied_weights_are_one_input():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(10, 4)
            self.head = nn.Linear(4, 10, bias=False)
            self.head.weight = self.embed.weight

        def forward(self, idx):
            return self.head(self.embed(idx))

    torch.manual_seed(0)
    model = Tied()
    idx = torch.tensor([[1, 2, 3]])
    aot.aot_module(model, aot.nop)(idx).sum().backward()
    compiled_grad = model.embed.weight.grad.clone()
    model.zero_grad()
    model(idx).sum().backward()
    torch.testing.assert_close(compiled_grad, model.embed.weight.grad)


class ConvNet(nn.Module):
    def __init__(self, track_running_stats: bool = True):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8, track_running_stats=track_running_stats)
        self.fc = nn.Linear(8, 2)

    def forward(self, x):
        return self.fc(F.relu(self.bn(self.conv(x))).mean((2, 3)))


def _convnet_pair(track_running_stats: bool, train: bool):
    torch.manual_seed(0)
    model = ConvNet(track_running_stats).train(train)
    with torch.no_grad():
        if track_running_stats:
            model.bn.running_mean.uniform_(-1, 1)
            model.bn.running_var.uniform_(0.5, 2)
    reference = ConvNet(track_running_stats).train(train)
    reference.load_state_dict(model.state_dict())
    return model, reference


def test_convnet_batchnorm_eval_uses_buffers():
    model, reference = _convnet_pair(track_running_stats=True, train=False)
    compiled_model = aot.aot_module(model, aot.nop)
    x = torch.randn(2, 3, 5, 5)
    out, expected = compiled_model(x), reference(x)
    torch.testing.assert_close(out, expected)
    out.sum().backward()
    expected.sum().backward()
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad)
    buffers = [n for n in compiled_model.compiled.entries[0].forward.graph.find_nodes(op="placeholder")]
    assert any("running_mean" in n.meta["desc"].name for n in buffers)


def test_convnet_batchnorm_train_batch_statistics():
    model, reference = _convnet_pair(track_running_stats=False, train=True)
    compiled_model = aot.aot_module(model, aot.nop)
    x = torch.randn(4, 3, 5, 5)
    out, expected = compiled_model(x), reference(x)
    assert_close(out, expected, model=True)
    out.pow(2).sum().backward()
    expected.pow(2).sum().backward()
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        assert_close(p.grad, q.grad, model=True, grad=True)


def test_intermediate_mutation_is_fine():
    def f(x):
        y = x * 2
        y.add_(1)
        y[0].mul_(3)
        return F.relu(y, inplace=True) + x

    check(f, seeded((3, 4)))


def test_no_grad_call_gives_inference_graph():
    compiled = aot.aot_function(mlp, aot.nop)
    args = seeded((8, 16), (32, 16), (32,), (4, 32), (4,))
    with torch.no_grad():
        out = compiled(*args)
    assert not out.requires_grad
    assert compiled.entries[0].inference is not None and compiled.entries[0].forward is None
    out = compiled(*args)  # grad mode is part of the signature: a training entry now
    assert out.requires_grad and len(compiled.entries) == 2
    check(mlp, args, compiled_fn=compiled)


@pytest.mark.parametrize(
    "change",
    ["shape", "dtype", "requires_grad", "stride", "grad_mode", "storage_sharing"],
)
def test_signature_change_retraces(change):
    def f(a, b):
        return a * b + a.sin()

    compiled = aot.aot_function(f, aot.nop)
    a, b = seeded((4, 4), (4, 4))
    compiled(a, b)
    variants = {
        "shape": lambda: (torch.randn(2, 4, requires_grad=True), torch.randn(2, 4, requires_grad=True)),
        "dtype": lambda: (a.detach().double().requires_grad_(), b.detach().double().requires_grad_()),
        "requires_grad": lambda: (a.detach(), b),
        "stride": lambda: (a.detach().t().requires_grad_(), b),
        "grad_mode": lambda: (a, b),
        "storage_sharing": lambda: (lambda base: (base[0], base[1]))(torch.randn(2, 4, 4)),
    }
    new_args = variants[change]()
    with torch.set_grad_enabled(change != "grad_mode"):
        out = compiled(*new_args)
        expected = f(*new_args)
    torch.testing.assert_close(out, expected)
    assert out.requires_grad == expected.requires_grad
    assert len(compiled.entries) == 2
    compiled(*new_args) if change != "grad_mode" else None
    assert len(compiled.entries) == 2


def test_boxed_and_plain_compilers():
    seen = []

    def plain(gm, example_inputs):
        seen.append(("plain", len(example_inputs)))
        return gm

    def boxed(gm, example_inputs):
        seen.append(("boxed", len(example_inputs)))

        def run(args):
            assert isinstance(args, list)
            values = list(args)
            args.clear()
            return gm(*values)

        run._boxed_call = True
        return run

    compiled = aot.aot_function(mlp, fw_compiler=plain, bw_compiler=boxed)
    check(mlp, seeded((8, 16), (32, 16), (32,), (4, 32), (4,)), compiled_fn=compiled)
    assert seen[0][0] == "plain" and seen[1][0] == "boxed" and len(seen) == 2
    check(mlp, seeded((8, 16), (32, 16), (32,), (4, 32), (4,)), compiled_fn=aot.aot_function(mlp, aot.boxed_nop))
    check(mlp, seeded((8, 16), (32, 16), (32,), (4, 32), (4,)), compiled_fn=aot.aot_function(mlp, aot.eager))


def test_backward_is_compiled_lazily_once():
    compiled_graphs = []

    def compiler(gm, example_inputs):
        compiled_graphs.append(gm)
        return gm

    compiled = aot.aot_function(mlp, compiler)
    args = seeded((8, 16), (32, 16), (32,), (4, 32), (4,))
    out = compiled(*args)
    assert len(compiled_graphs) == 1
    out.sum().backward()
    assert len(compiled_graphs) == 2
    compiled(*args).sum().backward()
    assert len(compiled_graphs) == 2


def test_non_contiguous_and_expanded_tangents():
    def f(x):
        return x.sin() * 2, x.cos()

    compiled = aot.aot_function(f, aot.nop)
    x = seeded((4, 6))[0]
    a, b = compiled(x)
    grad_a = torch.randn(6, 4).t()  # non-contiguous
    grad_b = torch.randn(1, 6).expand(4, 6)  # zero stride
    torch.autograd.backward([a, b], [grad_a, grad_b])
    compiled_grad = x.grad.clone()
    x.grad = None
    ea, eb = f(x)
    torch.autograd.backward([ea, eb], [grad_a, grad_b])
    torch.testing.assert_close(compiled_grad, x.grad)


def test_output_used_partially_in_loss():
    def f(x, w):
        y = x @ w
        return y.relu(), y.sigmoid()

    compiled = aot.aot_function(f, aot.nop)
    x, w = seeded((3, 4), (4, 2))
    compiled(x, w)[1].sum().backward()
    grads = x.grad.clone(), w.grad.clone()
    x.grad = w.grad = None
    f(x, w)[1].sum().backward()
    torch.testing.assert_close(grads[0], x.grad)
    torch.testing.assert_close(grads[1], w.grad)


def test_unused_input_gets_no_grad():
    def f(x, unused):
        return x * 2

    check(f, seeded((3,), (3,)))


def test_double_backward_is_eagers():
    def f(x):
        return (x**3).sum()

    x = seeded((3,))[0]
    out = aot.aot_function(f, aot.nop)(x)
    (grad,) = torch.autograd.grad(out, x, create_graph=True)
    torch.testing.assert_close(grad, 3 * x.detach() ** 2)
    assert grad.requires_grad
    grad.sum().backward()
    torch.testing.assert_close(x.grad, 6 * x.detach())


def test_create_graph_for_first_order_only_works():
    def f(x):
        return x.exp().sum()

    x = seeded((3,))[0]
    out = aot.aot_function(f, aot.nop)(x)
    (grad,) = torch.autograd.grad(out, x, create_graph=True)
    torch.testing.assert_close(grad, x.detach().exp())


def test_eager_error_type_is_kept():
    def f(a, b):
        return a @ b

    check(f, seeded((3, 4), (5, 6)))


def test_decompositions_are_applied():
    from torch._decomp import get_decompositions

    decomps = get_decompositions([torch.ops.aten.gelu])
    compiled = aot.aot_function(lambda x: F.gelu(x), aot.nop, decompositions=decomps)
    check(lambda x: F.gelu(x), seeded((4,)), compiled_fn=compiled)
    ops = {n.target for n in compiled.entries[0].forward.graph.nodes if n.op == "call_function"}
    assert torch.ops.aten.gelu.default not in ops


def test_aot_module_simplified():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 5), nn.GELU())
    gm = torch.fx.symbolic_trace(model)
    x = torch.randn(2, 3)
    forward = aot.aot_module_simplified(gm, [x], aot.nop)
    out = forward(x)
    expected = model(x)
    torch.testing.assert_close(out, expected)
    out.sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    expected.sum().backward()
    for g, p in zip(grads, model.parameters(), strict=True):
        torch.testing.assert_close(g, p.grad)


def test_aot_export_joint():
    joint = aot.aot_export_joint(mlp, seeded((8, 16), (32, 16), (32,), (4, 32), (4,)))
    placeholders = [n.name for n in joint.graph.find_nodes(op="placeholder")]
    assert placeholders == [*(f"primals_{i}" for i in range(1, 6)), "tangents_1"]
    outputs = joint.graph.output_node().args[0]
    assert len(outputs) == 1 + 5
    assert {n.name for n in outputs[1:]} >= {"grad_w1", "grad_b2"}
    assert joint.meta["aot_meta"].output_info[0].requires_grad


def test_report_lists_graphs_and_saved_values():
    compiled = aot.aot_function(mlp, aot.nop)
    compiled(*seeded((8, 16), (32, 16), (32,), (4, 32), (4,)))
    text = compiled.report()
    assert "forward graph" in text and "backward graph" in text and "saved for backward" in text
    assert "f32[8, 32]" in text


def test_saved_tensor_hooks_are_not_traced_but_apply_at_runtime():
    def f(x, w):
        return (x * w).sin().sum()

    packed = []

    def pack(t):
        packed.append(type(t).__name__)
        return t.clone()

    compiled = aot.aot_function(f, aot.nop)
    x, w = seeded((4,), (4,))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        compiled(x, w).backward()
    assert "FakeTensor" not in packed and packed, packed
    clones = [n for n in compiled.entries[0].backward.graph.nodes if n.target is torch.ops.aten.clone.default]
    assert not clones
    grads = x.grad.clone(), w.grad.clone()
    x.grad = w.grad = None
    f(x, w).backward()
    torch.testing.assert_close(grads[0], x.grad)
    torch.testing.assert_close(grads[1], w.grad)


def test_gradient_computed_without_tangents():
    """copysign's grad w.r.t. its sign argument is zeros made in the forward: it must reach the backward."""
    check(lambda a, b: torch.copysign(a, b), seeded((3,), (3,)))


def test_storage_alias_made_by_a_non_view_op():
    """unsafe_split shares storage without autograd view tracking: same as eager, no _base."""
    check(lambda x: torch.unsafe_split(x, 2), seeded((4, 3)))
    check(lambda x: torch.unsafe_chunk(x * 2, 2), seeded((4, 3)))


MODULE_ZOO = {
    "lstm": (lambda: nn.LSTM(8, 16, num_layers=2, batch_first=True), lambda: (torch.randn(2, 5, 8),)),
    "gru": (lambda: nn.GRU(8, 16), lambda: (torch.randn(5, 2, 8),)),
    "multihead_attention": (
        lambda: nn.MultiheadAttention(16, 4, batch_first=True),
        lambda: (lambda q: (q, q, q))(torch.randn(2, 5, 16)),
    ),
    "transformer_encoder_layer": (
        lambda: nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True),
        lambda: (torch.randn(2, 5, 16),),
    ),
    "embedding_bag": (lambda: nn.EmbeddingBag(10, 4, mode="mean"), lambda: (torch.tensor([[1, 2], [3, 4]]),)),
}


@pytest.mark.parametrize("name", list(MODULE_ZOO))
def test_torch_nn_modules_match_eager(name):
    make_module, make_args = MODULE_ZOO[name]
    torch.manual_seed(0)
    model = make_module()
    reference = copy.deepcopy(model)
    compiled = aot.aot_module(model, aot.nop)
    torch.manual_seed(1)
    args = make_args()
    outs = [t for t in torch.utils._pytree.tree_leaves(compiled(*args)) if isinstance(t, torch.Tensor)]
    expected = [t for t in torch.utils._pytree.tree_leaves(reference(*args)) if isinstance(t, torch.Tensor)]
    for out, exp in zip(outs, expected, strict=True):
        assert_close(out, exp, model=True)
    sum(t.sum() for t in outs if t.requires_grad).backward()
    sum(t.sum() for t in expected if t.requires_grad).backward()
    for (param_name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
        assert_close(p.grad, q.grad, model=True, grad=True, msg=param_name)
