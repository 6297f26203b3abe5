"""OpInfo differential tests: a fixed subset of torch's ``op_db``, compiled with ``aot.nop`` vs eager.

For each op, the first ``SAMPLES_PER_OP`` float32 CPU sample inputs become a
function of the sample's tensor leaves (everything else baked in), which
``tests.oracle.check`` runs eagerly and compiled, twice, comparing values,
gradients, ``requires_grad``/``grad_fn``, inputs after the call, version
counters, and which outputs alias which inputs (storage and ``_base``).

Every op's test also asserts it was not vacuous: some sample ran, a
differentiable op had a gradient compared, and a view op returned, in eager,
an output that aliases an input (so the aliasing comparison had something to
compare). The whole op_db, side by side with torch's AOTAutograd, is
``benchmarks/opinfo_sweep.py``.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import pytest
import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

import aot
from aot.errors import DataDependentError
from tests.oracle import check, clone_args

SAMPLES_PER_OP = 3

ELEMENTWISE = [
    "abs", "neg", "exp", "log", "sin", "tanh", "sigmoid", "sqrt", "rsqrt", "erf", "floor", "sign", "clamp",
    "nan_to_num", "nn.functional.relu", "nn.functional.gelu", "nn.functional.silu",
    "add", "sub", "mul", "div.no_rounding_mode", "pow", "maximum", "atan2", "eq", "addcmul", "rsub", "hypot",
    "lerp", "where", "masked_fill", "copysign",
]  # fmt: skip
REDUCTIONS = [
    "sum", "mean", "amax", "prod", "var", "std", "logsumexp", "max.reduction_with_dim", "argmax", "cumsum",
    "cummax", "norm", "linalg.vector_norm", "all", "sort", "topk",
]  # fmt: skip
MATMUL = ["mm", "bmm", "addmm", "matmul", "mv", "dot", "einsum", "nn.functional.linear", "baddbmm", "outer"]
# Every sample of these returns, in eager, at least one output that aliases an input.
VIEWS = [
    "view", "reshape", "view_as", "reshape_as", "transpose", "permute", "expand", "expand_as", "narrow", "select",
    "split", "split.list_args", "split_with_sizes", "unbind", "chunk", "hsplit", "unsafe_split", "unsafe_chunk",
    "diagonal", "squeeze", "squeeze.multiple", "unsqueeze", "t", "T", "mT", "H", "as_strided",
    "as_strided.partial_views", "unflatten", "flatten", "ravel", "movedim", "slice", "unfold", "view_as_real", "real",
    "__getitem__", "contiguous", "atleast_2d", "broadcast_to", "conj", "resolve_conj",
]  # fmt: skip
INDEXING = [
    "index_select", "gather", "scatter", "scatter_add", "index_add", "index_copy", "index_fill", "index_put",
    "take_along_dim", "masked_scatter", "select_scatter", "slice_scatter", "diagonal_scatter",
]  # fmt: skip
NN = [
    "softmax", "log_softmax", "nn.functional.softmin", "nn.functional.layer_norm", "native_layer_norm",
    "nn.functional.group_norm", "nn.functional.rms_norm", "nn.functional.conv1d", "nn.functional.conv2d",
    "nn.functional.conv_transpose2d", "nn.functional.max_pool2d", "nn.functional.avg_pool2d",
    "nn.functional.cross_entropy", "nn.functional.mse_loss", "nn.functional.embedding", "nn.functional.pad.constant",
    "nn.functional.interpolate.bilinear",
]  # fmt: skip
OTHER = ["cat", "stack", "flip", "roll", "repeat", "tril", "triu", "to", "clone"]

OPS = ELEMENTWISE + REDUCTIONS + MATMUL + VIEWS + INDEXING + NN + OTHER

# Known aotfx bugs, each found by this file; strict, so a fix shows up as XPASS and the mark must go.
# name -> (exception the bug raises, what the bug is)
XFAIL: dict[str, tuple[type[BaseException], str]] = {}

# Samples needing a tensor's value as a Python number (narrow's start given as a tensor): refused with
# aotfx's clear error. (Sizes from data, index_put's boolean mask, trace as unbacked symbols and compile.)
DATA_DEPENDENT = {"narrow": {1}}


@functools.cache
def _op_db() -> dict[str, Any]:
    from torch.testing._internal.common_methods_invocations import op_db

    return {op.name + (f".{op.variant_test_name}" if op.variant_test_name else ""): op for op in op_db}


def _dtype(op: Any) -> torch.dtype:
    supported = op.supported_dtypes("cpu")
    for dtype in (torch.float32, torch.complex64):
        if dtype in supported:
            return dtype
    raise AssertionError(f"{op.name} supports neither float32 nor complex64: pick another op")


def _as_function(op: Any, sample: Any) -> tuple[Any, tuple[torch.Tensor, ...]]:
    """``f(*tensors)`` calling the op's functional variant on the sample; the sample's tensors are its inputs."""
    leaves, spec = tree_flatten((sample.input, tuple(sample.args), dict(sample.kwargs)))
    positions = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]

    def f(*tensors: torch.Tensor) -> Any:
        filled = list(leaves)
        for position, tensor in zip(positions, tensors, strict=True):
            filled[position] = tensor
        inp, args, kwargs = tree_unflatten(filled, spec)
        return op.op(inp, *args, **kwargs)

    return f, tuple(leaves[i] for i in positions)


def _eager_facts(f: Any, tensors: tuple[torch.Tensor, ...]) -> tuple[bool, bool]:
    """(some output aliases an input, some differentiable output depends on an input that requires grad)."""
    inputs = clone_args(tensors)
    try:
        outs = [o for o in tree_flatten(f(*inputs))[0] if isinstance(o, torch.Tensor)]
    except Exception:
        return False, False
    storages = {t.untyped_storage()._cdata for t in inputs}
    aliases = any(o.untyped_storage()._cdata in storages for o in outs)
    grads = any(o.requires_grad and (o.is_floating_point() or o.is_complex()) for o in outs)
    return aliases, grads and any(t.requires_grad for t in inputs)


def op_is_differentiable(name: str) -> bool:
    return bool(_op_db()[name].supports_autograd)


def _param(name: str) -> Any:
    if name not in XFAIL:
        return pytest.param(name, id=name)
    raises, reason = XFAIL[name]
    marks = [pytest.mark.xfail(strict=True, raises=raises, reason=reason)]
    return pytest.param(name, marks=marks, id=name)


def test_subset_is_well_formed():
    assert len(OPS) == len(set(OPS)), "an op is listed twice"
    missing = [name for name in [*OPS, *XFAIL, *DATA_DEPENDENT] if name not in _op_db()]
    assert not missing, f"not in op_db: {missing}"


@pytest.mark.parametrize("name", [_param(name) for name in OPS])
def test_op_matches_eager(name: str) -> None:
    op = _op_db()[name]
    dtype = _dtype(op)
    differentiable = op.supports_autograd
    samples = []
    for sample in op.sample_inputs("cpu", dtype, requires_grad=differentiable):
        samples.append(sample)
        if len(samples) == SAMPLES_PER_OP:
            break
    assert samples, f"{name}: no sample inputs"
    aliased = grad_checked = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for index, sample in enumerate(samples):
            f, tensors = _as_function(op, sample)
            if index in DATA_DEPENDENT.get(name, ()):
                with pytest.raises(DataDependentError):
                    aot.aot_function(f, aot.nop)(*clone_args(tensors))
                continue
            check(f, tensors)
            aliases, grads = _eager_facts(f, tensors)
            aliased += aliases
            grad_checked += grads
    if differentiable:
        assert grad_checked, f"{name}: no sample had a gradient to compare"
    if name in VIEWS:
        assert aliased, f"{name}: no sample returned a view of an input in eager; the alias check compared nothing"


PARTITIONERS = {
    "min_cut": {"partition_fn": aot.min_cut_rematerialization_partition},
    "budget_half": {"activation_memory_budget": 0.5},
}


@pytest.mark.parametrize("partitioner", list(PARTITIONERS))
@pytest.mark.parametrize("name", [_param(name) for name in OPS if op_is_differentiable(name)])
def test_op_under_partitioner(name: str, partitioner: str) -> None:
    """The first sample of each differentiable op, split by min-cut and by a half budget: as eager."""
    op = _op_db()[name]
    sample = next(iter(op.sample_inputs("cpu", _dtype(op), requires_grad=True)))
    f, tensors = _as_function(op, sample)
    if 0 in DATA_DEPENDENT.get(name, ()):
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check(f, tensors, compiled_fn=aot.aot_function(f, aot.nop, **PARTITIONERS[partitioner]))
