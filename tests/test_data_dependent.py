"""Sizes that depend on tensor data (issue 13 item 6): unbacked symbols, static shapes and dynamic.

``nonzero``, ``masked_select``, a boolean mask, ``unique`` ... have outputs whose size eager reads
from the data. aotfx traces such a size as an unbacked symbol of a shape environment (as torch's
AOTAutograd does), through meta collection, the joint trace, the partition and the layers; what the
trace assumed of those sizes is checked by the graphs at every call. A Python branch on such a size
or on a value stays a ``DataDependentError``. Eager is the oracle.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn as nn

import aot
from aot.compile.min_cut import min_cut_rematerialization_partition
from aot.errors import DataDependentError
from tests.oracle import MODES, assert_close, check, check_in_mode, clone_args, derivatives
from tests.test_opinfo import _as_function, _dtype, _op_db


def _mask(x):
    return x[x > 0] * 2


def _two_outputs_of_one_mask(x):
    y = x[x > 0]
    return y, y.view(-1, 1)


def _nonzero_transposed(x):
    return x.nonzero().t()


def _written_then_masked(x):
    x.add_(1)
    return x[x > 1.5] * 2


def _mask_assigned(x):
    y = x.clone()
    y[y > 0] = 0
    return y


def _unique_with_counts(x):
    u, inverse, counts = torch.unique(x.detach().round(), return_inverse=True, return_counts=True)
    return u * 2, inverse, counts


def _unique_count_scales(x):
    u = torch.unique(x.detach().round())
    return x.sum() * u.numel() + u.float().sum()


def _masked_select(x):
    return torch.masked_select(x, x > 0).sin()


def _mask_reshaped(x):
    return x[x > 0].reshape(-1, 1) * 3


def _nonzero_as_tuple(x):
    i, j = (x > 0).nonzero(as_tuple=True)
    return x[i, j] * 2 + j


def _mask_and_input_view(x):
    return x[x > 0], x.view(-1)


def _mask_maybe_empty(x):
    return x[x > 100].sum() + x.sum()


def _count_as_size(x):
    n = x.nonzero()
    return x.new_zeros(n.shape[0]) + 1, x * 2


def _picks_written_then_viewed(x):
    y = x[x > 0]
    y.mul_(2)
    return y.view(-1)


def _mask_assigned_into_input(x):
    x[x > 0] = x[x > 0] * 2
    return x


def _masked_select_broadcast(x, y):
    # The mask broadcasts x's one column to four: more elements selected than x has.
    return torch.masked_select(x[:, :1], y > -0.5).sin()


def _one_mask_twice(x, y):
    # Two nonzero calls on one mask: the trace assumes their counts equal, which they are.
    mask = x > 0
    return (x[mask] * y[mask]).sum() + x[mask].exp().mean()


PROGRAMS: list[Callable[..., Any]] = [
    _mask,
    _two_outputs_of_one_mask,
    _nonzero_transposed,
    _written_then_masked,
    _mask_assigned,
    _unique_with_counts,
    _unique_count_scales,
    _masked_select,
    _mask_reshaped,
    _nonzero_as_tuple,
    _mask_and_input_view,
    _mask_maybe_empty,
    _count_as_size,
    _one_mask_twice,
    _masked_select_broadcast,
    _picks_written_then_viewed,
    _mask_assigned_into_input,
]


def _args(fn: Callable[..., Any], seed: int, rows: int = 6) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(seed)
    grad = fn not in (_written_then_masked, _mask_assigned_into_input)
    count = fn.__code__.co_argcount
    return tuple(torch.randn(rows, 4, generator=generator).requires_grad_(grad) for _ in range(count))


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("fn", PROGRAMS, ids=[fn.__name__.lstrip("_") for fn in PROGRAMS])
def test_data_dependent_size_matches_eager(fn: Callable[..., Any], dynamic: bool) -> None:
    compiled = aot.aot_function(fn, aot.nop, dynamic=dynamic)
    # Other data, other counts: the same entry computes each call's sizes.
    for seed in (0, 1):
        check(fn, _args(fn, seed), compiled_fn=compiled)
    with torch.no_grad():
        check(fn, _args(fn, 2), compiled_fn=compiled)
    if dynamic:
        check(fn, _args(fn, 3, rows=9), compiled_fn=compiled)
        # training, no_grad: one entry each, whatever the counts (and the rows, but where a fake kernel of
        # torch's specializes them: masked_select's, as under torch.compile)
        assert len(compiled.entries) == (3 if fn in (_masked_select, _masked_select_broadcast) else 2)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_data_dependent_size_has_second_derivatives(dynamic: bool) -> None:
    def f(x, y):
        picked = x[y > 0]
        return (picked.pow(3) * torch.masked_select(y, y > 0)).sum() + x.nonzero().shape[0]

    args = _args(f, 0)
    eager = derivatives(f, clone_args(args), 3)
    actual = derivatives(aot.aot_function(f, aot.nop, dynamic=dynamic), clone_args(args), 3)
    assert_close(actual, eager, grad=True)


def _routed(x, w):
    rows = (x.sum(1) > 0).nonzero().squeeze(1)
    h = torch.tanh(x[rows] @ w)
    return (h * h.sin()).sum(), x[x > 0.5].exp()


def _routed_args() -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(0)
    return torch.randn(6, 4, generator=generator).requires_grad_(), torch.randn(
        4, 3, generator=generator
    ).requires_grad_()


@pytest.mark.parametrize(
    "options",
    [{"partition_fn": min_cut_rematerialization_partition}, {"activation_memory_budget": 0.3}],
    ids=["min_cut", "memory_budget"],
)
def test_partitioners_weigh_data_dependent_sizes_without_guarding(options: dict[str, Any]) -> None:
    check(_routed, _routed_args(), compiled_fn=aot.aot_function(_routed, aot.nop, **options))


@pytest.mark.parametrize("mode", MODES)
def test_data_dependent_sizes_in_each_grad_mode(mode: str) -> None:
    check_in_mode(_routed, _routed_args, mode)


class _Router(nn.Module):
    """Rows with a positive sum go through an expert, as a mixture-of-experts router picks tokens."""

    def __init__(self) -> None:
        super().__init__()
        self.expert = nn.Linear(4, 4)
        self.out = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rows = (x.sum(1) > 0).nonzero().squeeze(1)
        routed = x.index_add(0, rows, torch.relu(self.expert(x[rows])))
        kept = routed[routed.abs() > 0.5]
        labels = torch.unique(x.detach().sign(), sorted=True)
        return self.out(routed).sum(0) + kept.sum() * labels.numel(), labels


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_model_with_nonzero_mask_and_unique_trains_as_eager(dynamic: bool) -> None:
    torch.manual_seed(0)
    eager_model = _Router()
    compiled_model = _Router()
    compiled_model.load_state_dict(eager_model.state_dict())
    compiled = aot.aot_module(compiled_model, aot.nop, dynamic=dynamic)
    for step, rows in enumerate((5, 5, 7) if dynamic else (5, 5, 5)):
        x = torch.randn(rows, 4, generator=torch.Generator().manual_seed(step))
        expected, expected_labels = eager_model(x)
        actual, labels = compiled(x)
        assert_close(actual, expected)
        assert torch.equal(labels, expected_labels)
        expected.sum().backward()
        actual.sum().backward()
        for (name, p), q in zip(eager_model.named_parameters(), compiled_model.parameters(), strict=True):
            assert_close(q.grad, p.grad, grad=True, msg=name)
    assert len(compiled.compiled.entries if hasattr(compiled, "compiled") else ()) <= 2


def test_an_assumption_the_data_breaks_raises_and_leaves_inputs_alone() -> None:
    # Adding two masks' picks: the trace assumes equal counts (not a count of 1 broadcast), as torch's
    # does; a call whose counts differ raises rather than compute another case, its inputs untouched.
    def f(x, y):
        x.mul_(1)
        return x[x > 0] + y[y > 0]

    compiled = aot.aot_function(f, aot.nop)
    x, y = torch.tensor([1.0, -1, 2, 3]), torch.tensor([1.0, 2, -1, 3])
    check(f, (x, y), compiled_fn=compiled)
    x = torch.tensor([1.0, -1, -2, -3])
    before, version = x.clone(), x._version
    with pytest.raises(RuntimeError, match=r"Eq\(u\d+, u\d+\).*assumed this of sizes that depend on tensor data"):
        compiled(x, y)
    assert torch.equal(x, before) and x._version == version


def test_a_branch_on_a_data_dependent_size_names_the_line() -> None:
    def f(x):
        picked = x[x > 0]
        return picked * 2 if picked.shape[0] > 2 else picked

    with pytest.raises(DataDependentError, match=r"test_data_dependent\.py:\d+: return picked \* 2 if"):
        aot.aot_function(f, aot.nop)(torch.randn(6))


def test_an_output_view_with_a_data_dependent_view_argument_is_a_clear_error() -> None:
    # The layers replay an output's views after the call from the inputs' sizes; a count is none of them.
    def f(x):
        y = x[x > 0]
        return y, y.expand(3, y.shape[0])

    x = torch.randn(6)
    before = x.clone()
    with pytest.raises(DataDependentError, match=r"view arguments hold a size that depends on tensor data"):
        aot.aot_function(f, aot.nop)(x)
    assert torch.equal(x, before)


# The OpInfo ops benchmarks/opinfo_double_backward.py refused before unbacked symbols, on their first sample.
COMPILING = ["masked_select", "combinations", "istft"]
# Still refused, each for a data-dependent value or branch torch's tracing refuses too.
REFUSED = {
    "tensor_split": "the split points are read from a tensor (.tolist()): values, not sizes",
    "linalg.lstsq": "no fake kernel gives lstsq's data-dependent residuals size as an unbacked symbol",
    "linalg.lstsq.grad_oriented": "as linalg.lstsq",
    "cov": "checks its weights' values (aten.equal)",
    "corrcoef": "as cov",
    "nn.functional.gaussian_nll_loss": "branches on torch.any(var < 0)",
}


def _first_sample(name: str) -> tuple[Any, tuple[torch.Tensor, ...]]:
    op = _op_db()[name]
    sample = next(iter(op.sample_inputs("cpu", _dtype(op), requires_grad=True)))
    return _as_function(op, sample)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("name", COMPILING)
def test_opinfo_op_with_data_dependent_size_matches_eager_to_second_order(name: str, dynamic: bool) -> None:
    f, tensors = _first_sample(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check(f, tensors, compiled_fn=aot.aot_function(f, aot.nop, dynamic=dynamic))
        eager = derivatives(f, clone_args(tensors), 2)
        actual = derivatives(aot.aot_function(f, aot.nop, dynamic=dynamic), clone_args(tensors), 2)
    assert_close(actual, eager, grad=True, equal_nan=True)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_opinfo_op_needing_a_value_stays_a_clear_error(name: str) -> None:
    f, tensors = _first_sample(name)
    f(*clone_args(tensors))  # eager runs it
    with warnings.catch_warnings(), pytest.raises(DataDependentError, match="outside the compiled function"):
        warnings.simplefilter("ignore")
        aot.aot_function(f, aot.nop)(*clone_args(tensors))


def test_torch_compile_capturing_dynamic_output_shapes() -> None:
    # Dynamo keeps nonzero in the graph it hands aotfx only when asked to; aotfx then traces it unbacked.
    import torch._dynamo

    def f(x):
        return x[x > 0].sin() * 2

    torch._dynamo.reset()
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        compiled = torch.compile(f, backend="aotfx", fullgraph=True)
        for seed in range(3):
            x = torch.randn(6, 4, generator=torch.Generator().manual_seed(seed), requires_grad=True)
            expected = f(x)
            (expected_grad,) = torch.autograd.grad(expected.sum(), x)
            actual = compiled(x)
            (actual_grad,) = torch.autograd.grad(actual.sum(), x)
            assert_close(actual, expected)
            assert_close(actual_grad, expected_grad, grad=True)
    torch._dynamo.reset()
