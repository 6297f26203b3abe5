"""Higher-order gradients through compiled functions (issue 16): eager is the oracle.

Each test differentiates the compiled function two or three times (``create_graph=True``, then
a gradient of the gradient) and compares every derivative with eager's on the same inputs.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import aot
from aot.demo import Block, GPTConfig
from tests.oracle import assert_close, check, clone_args, derivatives


def seeded(*shapes: tuple[int, ...], requires_grad: bool = True, seed: int = 0) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(shape, generator=generator).requires_grad_(requires_grad) for shape in shapes)


def _returning(value: Any) -> Callable[[], Any]:
    """A function of no arguments returning ``value`` (already computed from the leaves differentiated)."""
    return lambda: value


def check_orders(
    fn: Callable[..., Any], args: Sequence[torch.Tensor], order: int = 2, model: bool = False, **kw: Any
) -> Any:
    """Eager and ``aot_function(fn)`` agree on every derivative up to ``order`` (and the final ``.grad``)."""
    compiled = kw.pop("compiled", None) or aot.aot_function(fn, aot.nop)
    eager = derivatives(fn, clone_args(args), order)
    actual = derivatives(compiled, clone_args(args), order)
    assert_close(actual, eager, grad=True, model=model)
    return compiled


def _module_orders(model: torch.nn.Module, x: torch.Tensor, order: int, **compile_kw: Any) -> None:
    """A module and ``aot_module`` of its copy agree on every derivative w.r.t. the input and parameters."""
    compiled = aot.aot_module(copy.deepcopy(model), aot.nop, **compile_kw)
    results = []
    for module in (model, compiled):
        inp = x.detach().clone().requires_grad_()
        results.append(derivatives(module, [inp], order, wrt=[inp, *module.parameters()]))
    assert_close(results[1], results[0], grad=True, model=True)


# --------------------------------------------------------------------------------------------
# Models


@pytest.mark.parametrize("activation", [torch.nn.Tanh, torch.nn.GELU])
@pytest.mark.parametrize("order", [2, 3])
def test_mlp(activation: type[torch.nn.Module], order: int) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(5, 8), activation(), torch.nn.Linear(8, 8), activation(), torch.nn.Linear(8, 2)
    )
    _module_orders(model, seeded((4, 5))[0], order)


@pytest.mark.parametrize("order", [2, 3])
def test_conv_net(order: int) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(2, 4, 3, padding=1),
        torch.nn.Softplus(),
        torch.nn.AvgPool2d(2),
        torch.nn.Conv2d(4, 3, 3),
        torch.nn.Tanh(),
        torch.nn.Flatten(),
        torch.nn.Linear(3, 2),
    )
    _module_orders(model, seeded((2, 2, 6, 6))[0], order)


def test_attention_block() -> None:
    torch.manual_seed(0)
    config = GPTConfig(seq_len=6, d_model=16, n_heads=2)
    _module_orders(Block(config), seeded((2, 6, 16))[0], 2)


def test_attention_block_third_order() -> None:
    torch.manual_seed(0)
    config = GPTConfig(seq_len=4, d_model=8, n_heads=2)
    _module_orders(Block(config), seeded((1, 4, 8))[0], 3)


@pytest.mark.parametrize("partitioner", ["min_cut", "budget"])
def test_mlp_under_rematerializing_partitioners(partitioner: str) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))
    options: dict[str, Any] = (
        {"partition_fn": aot.min_cut_rematerialization_partition}
        if partitioner == "min_cut"
        else {"activation_memory_budget": 0.3}
    )
    _module_orders(model, seeded((4, 5))[0], 2, **options)


# --------------------------------------------------------------------------------------------
# Hessian-vector products, gradient penalties


def test_hvp_over_a_compiled_function() -> None:
    a = seeded((5, 4), requires_grad=False)[0]

    def f(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.gelu(a @ w).pow(2).sum() + w.sin().sum()

    compiled = aot.aot_function(f, aot.nop)
    w, v = seeded((4,), (4,), requires_grad=False, seed=1)
    eager = torch.autograd.functional.hvp(lambda w: f(a, w), w, v)
    actual = torch.autograd.functional.hvp(lambda w: compiled(a, w), w, v)
    assert eager[1].abs().sum() > 0
    assert_close(actual, eager, grad=True)
    # Again: the higher-order backward compiled once, reused.
    higher = compiled.entries[-1].higher_order
    assert higher is not None and len(higher.entries) == 1
    assert_close(torch.autograd.functional.hvp(lambda w: compiled(a, w), w, v), eager, grad=True)
    assert compiled.entries[-1].higher_order is higher and len(higher.entries) == 1


def _critic() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 16), torch.nn.GELU(), torch.nn.Linear(16, 1)
    )


def _wgan_gp_steps(critic: torch.nn.Module, steps: int = 3) -> list[torch.Tensor]:
    """WGAN-GP critic steps: Wasserstein loss plus the penalty on the gradient norm at interpolates."""
    optimizer = torch.optim.SGD(critic.parameters(), lr=0.05)
    generator = torch.Generator().manual_seed(3)
    for _ in range(steps):
        real, fake = torch.randn(8, 6, generator=generator), torch.randn(8, 6, generator=generator)
        alpha = torch.rand(8, 1, generator=generator)
        interpolates = (alpha * real + (1 - alpha) * fake).requires_grad_()
        (grad,) = torch.autograd.grad(critic(interpolates).sum(), interpolates, create_graph=True)
        penalty = ((grad.norm(2, dim=1) - 1) ** 2).mean()
        loss = critic(fake).mean() - critic(real).mean() + 10 * penalty
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return [p.detach().clone() for p in critic.parameters()]


def test_wgan_gp_with_aot_module() -> None:
    eager = _wgan_gp_steps(_critic())
    assert_close(_wgan_gp_steps(aot.aot_module(_critic(), aot.nop)), eager, model=True, grad=True)


def test_wgan_gp_with_torch_compile() -> None:
    torch._dynamo.reset()
    eager = _wgan_gp_steps(_critic())
    compiled = torch.compile(_critic(), backend="aotfx")
    assert_close(_wgan_gp_steps(compiled), eager, model=True, grad=True)  # type: ignore[arg-type]


def test_gradient_penalty_inside_the_compiled_function() -> None:
    """``autograd.grad(create_graph=True)`` inside the function is traced into the forward, and the
    outer backward differentiates it again."""

    def step(w1: torch.Tensor, w2: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        x = x.detach().requires_grad_()
        out = torch.tanh(x @ w1) @ w2
        (grad,) = torch.autograd.grad(out.sum(), x, create_graph=True)
        return out.mean() + ((grad.norm(2, dim=1) - 1) ** 2).mean()

    w1, w2 = seeded((6, 8), (8, 1))
    x = seeded((4, 6), requires_grad=False, seed=1)[0]
    check_orders(step, (w1, w2, x), order=1)  # the penalty's own second derivative, traced in the forward
    check_orders(step, (w1, w2, x), order=2)  # and its third


# --------------------------------------------------------------------------------------------
# Entries and reuse


def test_double_backward_after_a_first_order_backward() -> None:
    """The same entry first differentiated once (grad mode off in its backward), then twice: the
    higher-order backward is compiled then, the first-order one is not reused for it."""

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x * w).pow(3).sum()

    compiled = aot.aot_function(f, aot.nop)
    x, w = seeded((5,), (5,))
    compiled(x, w).backward()
    assert_close((x.grad, w.grad), torch.autograd.grad(f(x, w), (x, w)), grad=True)
    entry = compiled.entries[-1]
    assert entry.higher_order is None  # grad mode off in the backward: nothing more compiled
    check_orders(f, (x, w), compiled=compiled)
    assert len(compiled.entries) == 1 and entry.higher_order is not None


def test_create_graph_where_the_gradient_is_constant() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return (x * 2).sum()

    compiled = aot.aot_function(f, aot.nop)
    for fn in (f, compiled):
        x = seeded((3,))[0]
        (grad,) = torch.autograd.grad(fn(x), x, create_graph=True)
        assert not grad.requires_grad
        assert_close(grad, torch.full((3,), 2.0))
    assert compiled.entries[-1].higher_order is None  # nothing to differentiate again: first-order graph


def test_inspection_shows_the_higher_order_graphs() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x.sin().sum()

    compiled = aot.aot_function(f, aot.nop)
    check_orders(f, seeded((4,)), order=3, compiled=compiled)
    graphs = aot.inspect.graphs(compiled)
    assert {"forward", "backward", "order2_forward", "order2_backward", "order3_forward"} <= set(graphs)
    assert "order2_backward" in compiled.report()


# --------------------------------------------------------------------------------------------
# Mutation and aliasing programs


def test_buffer_written_in_place() -> None:
    def f(x: torch.Tensor, buf: torch.Tensor) -> torch.Tensor:
        buf.add_(1)
        return (x * buf).tanh()

    x = seeded((4,))[0]
    buf = seeded((4,), requires_grad=False, seed=1)[0]
    eager_buf, compiled_buf = buf.clone(), buf.clone()
    eager = derivatives(f, [x.detach().clone().requires_grad_(), eager_buf], 2, wrt=[])
    compiled = aot.aot_function(f, aot.nop)
    actual = derivatives(compiled, [x.detach().clone().requires_grad_(), compiled_buf], 2)
    assert_close(actual, eager, grad=True)
    assert_close(compiled_buf, eager_buf)


def test_non_leaf_input_written_in_place() -> None:
    def f(y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        y.mul_(w)
        return (y * y).sin()

    results = []
    for fn in (f, aot.aot_function(f, aot.nop)):
        x, w = seeded((4,), (4,))
        y = x * 1
        out = fn(y, w)
        found = derivatives(_returning(out), [], 2, wrt=[x, w])
        results.append((found, y.detach()))
    assert_close(results[1], results[0], grad=True)


def test_view_outputs() -> None:
    def f(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = (x @ w).tanh()
        return h.t(), h.view(-1)[1:], x.unsqueeze(0)

    check_orders(f, seeded((3, 4), (4, 5)), order=3)


def test_aliased_inputs() -> None:
    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return (a * b).sin() + a.exp()

    base = seeded((6,))[0]
    results = []
    for fn in (f, aot.aot_function(f, aot.nop)):
        x = base.detach().clone().requires_grad_()
        y = x * 2
        out = fn(y[:3], y[3:])
        results.append(derivatives(_returning(out), [], 2, wrt=[x]))
    assert_close(results[1], results[0], grad=True)


def test_same_tensor_twice() -> None:
    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return (a * b.tanh()).sum()

    results = []
    for fn in (f, aot.aot_function(f, aot.nop)):
        x = seeded((5,))[0]
        out = fn(x, x)
        results.append(derivatives(_returning(out), [], 3, wrt=[x]))
    assert_close(results[1], results[0], grad=True)


def test_dropout_reuses_the_forwards_draw() -> None:
    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.dropout((x @ w).tanh(), 0.5, training=True).pow(2).sum()

    x, w = seeded((4, 6), (6, 5))
    torch.manual_seed(7)
    eager = derivatives(f, clone_args((x, w)), 2)
    compiled = aot.aot_function(f, aot.nop)
    torch.manual_seed(7)
    actual = derivatives(compiled, clone_args((x, w)), 2)
    assert_close(actual, eager, grad=True)


def test_tangents_requiring_grad() -> None:
    """A vector-Jacobian product differentiated w.r.t. its vector (the tangent) and the primals."""

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (x @ w).sigmoid()

    results = []
    for fn in (f, aot.aot_function(f, aot.nop)):
        x, w, v = seeded((3, 4), (4, 2), (3, 2))
        (gx,) = torch.autograd.grad(fn(x, w), x, v, create_graph=True)
        (gx * gx).sum().backward()
        results.append((gx.detach(), x.grad, w.grad, v.grad))
    assert_close(results[1], results[0], grad=True)


@pytest.mark.parametrize(
    "fn",
    [F.silu, F.mish, lambda x: torch.logit(x.sigmoid(), 1e-3), lambda x: F.group_norm(x, 2)],
    ids=["silu", "mish", "logit", "group_norm"],
)
@pytest.mark.parametrize("order", [2, 3])
def test_backward_ops_eager_differentiates_through_their_formula(fn: Callable[..., Any], order: int) -> None:
    """``silu_backward`` and kin have no derivative: with grad mode on, eager's backward computes them with
    differentiable ops, and so must the higher-order backward (not defer the missing derivative's error)."""
    check_orders(fn, seeded((2, 4, 3)), order)


def _no_grad_factor(x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        factor = x * 2
    return (factor * x).sin()


@pytest.mark.parametrize(
    "fn",
    [lambda x: (x.detach() * x).sin(), _no_grad_factor, lambda x: (x.data * x).sin()],
    ids=["detach", "no_grad", "data"],
)
@pytest.mark.parametrize("order", [2, 3])
def test_values_eager_made_without_history_stay_so(fn: Callable[..., Any], order: int) -> None:
    """The graphs drop ``detach()`` and ignore ``no_grad``; the higher-order backward, which runs the forward
    again with autograd, must still read those values without history (no extra terms in the derivative)."""
    check_orders(fn, seeded((4,)), order)


@pytest.mark.parametrize("order", [2, 3])
def test_saved_outputs_keep_their_history(order: int) -> None:
    """Autograd's own detach of a saved output is no stop: eager's backward reads ``exp``'s result with history."""
    check_orders(lambda x: x.exp().tanh(), seeded((4,)), order)


@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("contiguous", [True, False])
def test_solves_with_the_matrix_as_eager_under_grad_mode(left: bool, contiguous: bool) -> None:
    """A backward's lu_solve with a forward factorization's LU (no derivative) solves with the matrix instead."""

    def f(a: torch.Tensor, b: torch.Tensor) -> Any:
        a = a if contiguous else a.mT
        return torch.linalg.solve(a, b, left=left), torch.linalg.slogdet(a)[1], torch.logdet(a @ a.mT)

    a, b = seeded((4, 4), (4, 4))
    check_orders(f, (a.detach().add(4 * torch.eye(4)).requires_grad_(), b), order=3)


@pytest.mark.parametrize("order", [2, 3])
@pytest.mark.parametrize("contiguous", [True, False])
def test_determinant_solves_with_the_matrix(order: int, contiguous: bool) -> None:
    """det's backward solves with its LU perturbed on zero pivots; eager's under grad mode with the matrix. At the
    third order the LU is a value the second-order function's forward made without history: the perturbation
    and the solve must read the one detached LU for the rewrite to see ``LU + perturbation(LU)`` (the solve
    kept the LU, without derivative, and the third derivative lost its terms through the matrix)."""

    def f(a: torch.Tensor) -> Any:
        a = a if contiguous else a.mT
        return torch.linalg.det(a), torch.linalg.det(a[:2, :2] + a[2:, 2:])

    a = seeded((4, 4))[0].detach().add(4 * torch.eye(4)).requires_grad_()
    check_orders(f, (a,), order=order)


@pytest.mark.parametrize("fn", [torch.linalg.inv, torch.logdet, lambda a: torch.linalg.slogdet(a)[1]])
def test_lu_based_ops_third_order(fn: Callable[..., Any]) -> None:
    a = seeded((2, 3, 3))[0].detach().add(3 * torch.eye(3)).requires_grad_()
    check_orders(fn, (a,), order=3)


def test_factorizations_factor_the_matrix_the_higher_order_backward_assumes() -> None:
    """``higher_order.FACTORIZATIONS`` says which matrix torch's kernels factor: checked against them."""
    from aot.compile.higher_order import FACTORIZATIONS

    a = torch.tensor([[2.0, 1.0], [0.0, 1.0]])
    rhs = torch.tensor([[1.0], [2.0]])
    for op, (lu, pivots, transposes) in FACTORIZATIONS.items():
        for matrix in (a, a.mT):
            out = op(matrix, rhs) if op is torch.ops.aten._linalg_solve_ex.default else op(matrix)
            factored = matrix.mT if transposes and matrix.is_contiguous() else matrix
            assert_close(torch.linalg.lu_solve(out[lu], out[pivots], rhs), torch.linalg.solve(factored, rhs))


# --------------------------------------------------------------------------------------------
# OpInfo: a few ops in CI; benchmarks/opinfo_double_backward.py sweeps the whole subset.

CI_OPS = ["tanh", "mul", "pow", "mm", "softmax", "nn.functional.layer_norm", "nn.functional.conv2d", "logsumexp"]
# Ops the --all sweep found differing, fixed: a backward formula eager computes otherwise under grad mode
# (the solves), a value eager's forward detached (the chunked loss), a mutating op's functional twin, NaN samples.
SWEEP_FOUND = [
    "linalg.solve", "linalg.solve_ex", "linalg.tensorsolve", "linalg.slogdet", "logdet",
    "nn.functional.linear_cross_entropy.chunked", "nn.functional.linear_cross_entropy.chunked_none",
    "_batch_norm_with_update", "__rpow__", "linalg.norm.subgradients_at_zero",
    # refused before: seeding the global generator before the draws (OpInfo's wrapper_set_seed), values a
    # draw chose without derivative (fractional_max_pool's indices, rrelu's noise)
    "nn.functional.fractional_max_pool2d", "nn.functional.rrelu", "bernoulli", "normal", "svd_lowrank",
    "nn.functional.multi_head_attention_forward",
]  # fmt: skip


@pytest.mark.parametrize("order", [2, 3])
@pytest.mark.parametrize("name", SWEEP_FOUND)
def test_opinfo_double_backward_sweep_finds(name: str, order: int) -> None:
    from benchmarks.opinfo_double_backward import check_op

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert check_op(name, samples=1, order=order) == "pass"


@pytest.mark.parametrize("name", CI_OPS)
def test_opinfo_double_backward(name: str) -> None:
    from benchmarks.opinfo_double_backward import check_op

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outcome = check_op(name, samples=2)
    assert outcome in ("pass", "eager fails"), f"{name}: {outcome}"
    assert outcome == "pass"


# --------------------------------------------------------------------------------------------
# Limits left: a clear DoubleBackwardError at the second backward, first-order gradients still eager's.


def test_function_whose_backward_writes_its_saved_input_refuses_the_second_derivative() -> None:
    from aot.errors import DoubleBackwardError
    from tests.functions import ScalesBySavedThenDoublesIt

    def f(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return ScalesBySavedThenDoublesIt.apply(x.sin(), scale).pow(2).sum()

    firsts = []
    for fn in (f, aot.aot_function(f, aot.nop)):
        x, scale = seeded((3,))[0], torch.full((3,), 2.0)
        (grad,) = torch.autograd.grad(fn(x, scale), x, create_graph=True)
        firsts.append((grad.detach(), scale))
    assert_close(firsts[1], firsts[0], grad=True)
    assert grad.requires_grad
    with pytest.raises(DoubleBackwardError, match="writes its saved input"):
        grad.sum().backward()


def test_op_without_a_second_derivative_raises_eagers_error_at_the_second_backward() -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.cdist(x, y).pow(2).sum()  # _cdist_backward has no derivative, in eager too

    errors = []
    for fn in (f, aot.aot_function(f, aot.nop)):
        x, y = seeded((3, 2), (4, 2))
        (gx,) = torch.autograd.grad(fn(x, y), x, create_graph=True)
        with pytest.raises(RuntimeError) as raised:
            gx.sum().backward()
        errors.append((type(raised.value), str(raised.value)))
    assert errors[1] == errors[0]


# --------------------------------------------------------------------------------------------
# Lifetime of the primals the higher-order backward recomputes from.


def _scaled_exp(x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    return (x * 2).exp() * c


def test_held_inputs_die_with_the_saved_tensors_after_backward() -> None:
    """Eager frees what it saved once the backward ran (no ``retain_graph``); the primals held for a
    higher-order backward go then too, though the outputs (and so the graph) live on."""
    import gc
    import weakref

    alive = []
    for fn in (_scaled_exp, aot.aot_function(_scaled_exp, aot.nop)):
        a = torch.randn(4, requires_grad=True)
        x, c = a * 1, torch.randn(4)
        y = fn(x, c)
        refs = [weakref.ref(x), weakref.ref(c)]
        del x, c
        torch.autograd.grad(y.sum(), a)
        gc.collect()
        alive.append([ref() is not None for ref in refs])
    assert alive[1] == alive[0] == [False, False]


@pytest.mark.parametrize("retain", [False, True])
def test_held_inputs_die_with_the_saved_tensors_under_saved_tensor_hooks(retain: bool) -> None:
    """Under the caller's pack hooks the held primals are kept on the Function's context (a packed marker
    may lose them): still freed when autograd frees the saved tensors, not when the graph dies; kept
    while ``retain_graph`` keeps what was saved."""
    import gc
    import weakref

    alive = []
    for fn in (_scaled_exp, aot.aot_function(_scaled_exp, aot.nop)):
        a = torch.randn(4, requires_grad=True)
        x, c = a * 1, torch.randn(4)
        with torch.autograd.graph.saved_tensors_hooks(lambda t: t.clone(), lambda t: t):
            y = fn(x, c)
        refs = [weakref.ref(x), weakref.ref(c)]
        del x, c
        torch.autograd.grad(y.sum(), a, retain_graph=retain)
        gc.collect()
        alive.append(refs[0]() is not None or refs[1]() is not None)
        if retain:
            (grad,) = torch.autograd.grad(y.sum(), a, create_graph=True)  # still has them
            alive.append(grad.requires_grad)
    assert alive == ([False, True, True, True] if retain else [False, False])


def test_retained_graph_differentiated_twice() -> None:
    """``retain_graph=True`` keeps the held primals: a later ``create_graph`` backward still has them."""
    results = []
    for fn in (_scaled_exp, aot.aot_function(_scaled_exp, aot.nop)):
        x, c = seeded((4,), (4,), requires_grad=True)
        y = fn(x, c).sum()
        first = torch.autograd.grad(y, x, retain_graph=True)[0]
        (second,) = torch.autograd.grad(y, x, create_graph=True)
        second.pow(2).sum().backward()
        results.append((first, second.detach(), x.grad, c.grad))
    assert_close(results[1], results[0], grad=True)


def test_double_backward_under_saved_tensor_hooks() -> None:
    """The caller's pack hooks (offloading) may copy what is saved: the held primals are kept apart then."""
    results = []
    for fn in (_scaled_exp, aot.aot_function(_scaled_exp, aot.nop)):
        x, c = seeded((4,), (4,), requires_grad=True)
        with torch.autograd.graph.saved_tensors_hooks(lambda t: t.clone(), lambda t: t):
            y = fn(x, c).sum()
        (grad,) = torch.autograd.grad(y, x, create_graph=True)
        grad.pow(2).sum().backward()
        results.append((grad.detach(), x.grad, c.grad))
    assert_close(results[1], results[0], grad=True)


# --------------------------------------------------------------------------------------------
# Sparse outputs


def _sparse_then_dense(x: torch.Tensor) -> torch.Tensor:
    return (x.to_sparse() * 2).to_dense().sin()


@pytest.mark.parametrize("order", [2, 3])
def test_sparse_coo_output(order: int) -> None:
    """A sparse COO output has no storage of its own (its memory is its values'): the metadata collection keys
    it by its values' storage rather than failing on it, and its derivatives are eager's."""
    (x,) = seeded((3, 3))
    check(torch.Tensor.to_sparse, [x])
    check_orders(torch.Tensor.to_sparse, [x], order)


def test_sparse_coo_intermediate_third_order_raises_as_eager() -> None:
    """Through a sparse intermediate eager's third derivative raises (``_sparse_mask_projection`` has none);
    compiled raises it too, and agrees up to the second."""
    (x,) = seeded((3, 3))
    check_orders(_sparse_then_dense, [x], 2)
    for fn in (_sparse_then_dense, aot.aot_function(_sparse_then_dense, aot.nop)):
        with pytest.raises(RuntimeError, match="_sparse_mask_projection is not implemented"):
            derivatives(fn, clone_args([x]), 3)
