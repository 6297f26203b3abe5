"""Module database differential tests: a fixed subset of torch's ``module_db`` through ``aot_module(m, aot.nop)``.

For each module, the first ``SAMPLES_PER_MODE`` samples its ``module_inputs_func``
gives (CPU float32, inputs requiring grad), in train and in eval mode, run
eagerly and through ``aot.aot_module(copy, aot.nop)``, twice each, with the same
seed; ``benchmarks.module_db_sweep.check_module_sample`` compares outputs
(values, ``requires_grad``, structure), buffers and parameters after each call,
and the ``.grad`` of every parameter and input. A sample eager cannot run is
skipped; every module's test asserts some sample passed with a gradient
compared. The whole database is ``benchmarks/module_db_sweep.py``.
"""

from __future__ import annotations

import pytest
import torch

import aot
from aot.errors import UnsupportedInputError
from benchmarks.module_db_sweep import check_module, find_module_info

SAMPLES_PER_MODE = 2

MODULES = [
    "nn.Linear", "nn.Bilinear", "nn.Conv1d", "nn.Conv2d", "nn.ConvTranspose2d", "nn.BatchNorm1d", "nn.BatchNorm2d",
    "nn.InstanceNorm2d", "nn.LayerNorm", "nn.GroupNorm", "nn.RMSNorm", "nn.Embedding", "nn.LSTM", "nn.GRU",
    "nn.RNN", "nn.LSTMCell", "nn.MultiheadAttention", "nn.TransformerEncoderLayer", "nn.MaxPool2d",
    "nn.AvgPool2d", "nn.AdaptiveAvgPool2d", "nn.GELU", "nn.ReLU", "nn.SiLU", "nn.Softmax", "nn.LogSoftmax",
    "nn.PReLU", "nn.Hardswish", "nn.ReflectionPad2d", "nn.CrossEntropyLoss", "nn.MSELoss", "nn.NLLLoss",
    "nn.BCEWithLogitsLoss", "nn.FractionalMaxPool2d", "nn.LazyConv1d",
]  # fmt: skip

# Known aotfx failures, each found by the sweep; strict, so a fix shows up as XPASS and the mark must go.
# module -> what fails
XFAIL: dict[str, str] = {
    "nn.GaussianNLLLoss": (
        "refused: F.gaussian_nll_loss checks `torch.any(var < 0)` in Python, a data-dependent branch "
        "(DataDependentError naming torch/nn/functional.py)"
    ),
    "nn.CTCLoss": "refused: aten._ctc_loss's fake kernel needs the target lengths' values (DataDependentError)",
}

# Samples (mode and ``sample.desc``) that branch in Python on a buffer's or input's values: static tracing
# must refuse them with aotfx's clear error. BatchNorm with momentum=None, training, divides by
# float(num_batches_tracked).
DATA_DEPENDENT = {"nn.BatchNorm1d": {"train affine_simple_average"}, "nn.BatchNorm2d": {"train 2d_simple_average"}}


def _param(name: str) -> object:
    if name not in XFAIL:
        return pytest.param(name, id=name)
    return pytest.param(name, marks=pytest.mark.xfail(strict=True, raises=AssertionError, reason=XFAIL[name]), id=name)


def test_subset_is_well_formed() -> None:
    assert len(MODULES) == len(set(MODULES)), "a module is listed twice"
    assert not set(MODULES) & set(XFAIL), "a module is both expected to pass and to fail"
    for name in [*MODULES, *XFAIL]:
        find_module_info(name)


@pytest.mark.parametrize("name", [_param(name) for name in [*MODULES, *XFAIL]])
def test_module_matches_eager(name: str) -> None:
    results = check_module(name, calls=2, limit=SAMPLES_PER_MODE)
    refused = DATA_DEPENDENT.get(name, set())

    def key(where: str) -> str:
        mode, _, desc = where.split(" ")[:3]
        return f"{mode} {desc}"

    for where, outcome in results:
        if key(where) in refused:
            assert outcome.error_type == "DataDependentError", f"{where}: {outcome}"
    results = [(where, o) for where, o in results if key(where) not in refused]
    failed = [f"{where}: {o.status} {o.stage} {o.error_type}: {o.message}" for where, o in results if o.status
              not in ("pass", "skip")]  # fmt: skip
    assert not failed, f"{name}: {len(failed)} of {len(results)} samples differ from eager:\n" + "\n".join(failed)
    assert any(o.ok for _, o in results), f"{name}: every sample was skipped: {results}"
    assert any(o.grad_checked for _, o in results), f"{name}: no sample had a gradient to compare"


# Dynamic shapes (issue 13): every dimension of every forward input symbolic (``--dynamic`` of the sweep).
DYNAMIC_MODULES = [
    "nn.Linear", "nn.Conv2d", "nn.BatchNorm2d", "nn.LayerNorm", "nn.Embedding", "nn.LSTM", "nn.MaxPool2d",
    "nn.GELU", "nn.CrossEntropyLoss", "nn.TransformerEncoderLayer",
]  # fmt: skip


@pytest.mark.parametrize("name", DYNAMIC_MODULES)
def test_module_matches_eager_with_symbolic_shapes(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AOTFX_SWEEP_DYNAMIC", "1")
    results = check_module(name, calls=2, limit=1)
    failed = [f"{where}: {o.status} {o.stage} {o.error_type}: {o.message}" for where, o in results if o.status
              not in ("pass", "skip")]  # fmt: skip
    assert not failed, f"{name}: {len(failed)} of {len(results)} samples differ from eager:\n" + "\n".join(failed)
    assert any(o.grad_checked for _, o in results), f"{name}: no sample had a gradient to compare"


def test_lazy_module_is_initialized_by_the_first_call_as_in_eager() -> None:
    torch.manual_seed(0)
    eager = torch.nn.LazyLinear(3)
    torch.manual_seed(0)
    compiled = aot.aot_module(torch.nn.LazyLinear(3), aot.nop)
    x = torch.randn(2, 4, requires_grad=True)
    torch.manual_seed(1)
    expected = eager(x)  # the pre-hook draws the initial weights from the global RNG
    torch.manual_seed(1)
    got = compiled(x)
    torch.testing.assert_close(got, expected)
    assert type(compiled.orig_module) is torch.nn.Linear and compiled.orig_module.weight.shape == (3, 4)
    got.sum().backward()
    expected.sum().backward()
    torch.testing.assert_close(compiled.orig_module.weight.grad, eager.weight.grad)


def test_lazy_submodule_is_refused_with_a_clear_error() -> None:
    compiled = aot.aot_module(torch.nn.Sequential(torch.nn.LazyLinear(3), torch.nn.ReLU()), aot.nop)
    with pytest.raises(UnsupportedInputError, match=r"lazy submodule\(s\) \['0'\].*call the module once eagerly"):
        compiled(torch.randn(2, 4))
