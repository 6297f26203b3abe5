"""OpInfo double-backward sweep: the ops of ``tests/test_opinfo.py`` differentiated twice, compiled vs eager.

Usage::

    python benchmarks/opinfo_double_backward.py [--ops tanh,mm] [--samples 3] [--order 2] [--all]

For each differentiable op of the OpInfo CI subset (``tests.test_opinfo.OPS``) the first
``--samples`` sample inputs (the dtype ``tests/test_opinfo.py`` uses, inputs requiring grad)
become a function of the sample's tensors, and ``tests.oracle.derivatives`` runs it eagerly and
through ``aot.aot_function(f, aot.nop)``: the outputs, the first ``--order`` derivatives (each the
gradient of a fixed weighted sum of the previous ones, ``create_graph=True``) and the ``.grad`` of
a final backward must agree (the oracle's gradient tolerance).

An op's outcome: ``pass``; ``eager fails`` when eager's own higher-order backward raises on every
sample (nothing to compare: such ops do not count against aotfx); otherwise the first compiled
error or mismatch. Samples needing a tensor's value as a Python number (``DATA_DEPENDENT`` of
``tests/test_opinfo.py``, refused by tracing) are skipped. The summary line gives passes
out of the ops where eager's works.

``--all``: every op of ``op_db`` that declares a second derivative (``supports_gradgrad``) and
runs in float32 or complex64, not only the CI subset. Output sizes that depend on tensor values
trace as unbacked symbols; a sample needing a value itself (a branch or check on it, an op whose
fake kernel has no unbacked sizes) raises aotfx's ``DataDependentError`` (and a function seeding the
global generator between its draws is refused; OpInfo's random ops seed it once before them, which
runs); an op refused so on every sample is counted apart (``refused``), not as a pass. Samples are
compared NaN-equal: a NaN where eager has one is eager's answer.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

import aot
from tests.oracle import assert_close, clone_args, derivatives
from tests.test_opinfo import DATA_DEPENDENT, OPS, _as_function, _dtype, _op_db

__all__ = ["check_op", "differentiable_ops", "main"]


def differentiable_ops() -> list[str]:
    """The ops of the CI subset with a gradient (``supports_autograd``)."""
    return [name for name in OPS if _op_db()[name].supports_autograd]


def every_gradgrad_op() -> list[str]:
    """Every op of ``op_db`` with a second derivative, in a dtype the sweep runs."""
    names = []
    for name, op in _op_db().items():
        supported = op.supported_dtypes("cpu")
        if op.supports_autograd and op.supports_gradgrad and {torch.float32, torch.complex64} & supported:
            names.append(name)
    return names


def check_op(name: str, samples: int = 3, order: int = 2) -> str:
    """``pass``, ``eager fails``, ``refused``, or why aotfx differs from eager on ``name``'s first
    ``samples`` samples."""
    op = _op_db()[name]
    compared = refused = 0
    for index, sample in enumerate(op.sample_inputs("cpu", _dtype(op), requires_grad=True)):
        if index == samples:
            break
        f, tensors = _as_function(op, sample)
        if index in DATA_DEPENDENT.get(name, ()) or not any(t.requires_grad for t in tensors):
            # Shapes from tensor values: static tracing refuses them (tests/test_opinfo.py checks how).
            continue
        try:
            torch.manual_seed(0)
            eager = derivatives(f, clone_args(tensors), order)
        except Exception:
            continue  # eager's own higher-order backward raises on this sample
        try:
            torch.manual_seed(0)
            actual = derivatives(aot.aot_function(f, aot.nop), clone_args(tensors), order)
            assert_close(actual, eager, grad=True, equal_nan=True)  # a sample at a pole: eager's NaN is its answer
        except (aot.errors.DataDependentError, aot.errors.UnsupportedOperatorError) as error:
            if not isinstance(error, aot.errors.DataDependentError) and "global random state" not in str(error):
                return f"{type(error).__name__} on sample {index}: {str(error).splitlines()[0][:200]}"
            refused += 1  # clear refusals: values the trace lacks, or a seed the function sets (OpInfo's random ops)
            continue
        except Exception as error:
            first = str(error).strip().splitlines()[0] if str(error).strip() else ""
            return f"{type(error).__name__} on sample {index}: {first[:200]}"
        compared += 1
    return "pass" if compared else "refused" if refused else "eager fails"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", default="", help="comma-separated op names (default: the whole CI subset)")
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--order", type=int, default=2)
    parser.add_argument("--all", action="store_true", help="every op of op_db with a second derivative")
    args = parser.parse_args(argv)
    names = args.ops.split(",") if args.ops else every_gradgrad_op() if args.all else differentiable_ops()
    outcomes = {}
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in names:
            outcomes[name] = check_op(name, args.samples, args.order)
            print(f"{name:40s} {outcomes[name]}", flush=True)
    eager_works = [name for name, outcome in outcomes.items() if outcome not in ("eager fails", "refused")]
    passed = [name for name in eager_works if outcomes[name] == "pass"]
    refused = sum(outcome == "refused" for outcome in outcomes.values())
    eager_fails = sum(outcome == "eager fails" for outcome in outcomes.values())
    print(
        f"\norder {args.order}: {len(passed)}/{len(eager_works)} ops pass where eager's higher-order backward works "
        f"({eager_fails} where eager's raises, {refused} refused with a clear error; "
        f"{time.perf_counter() - start:.0f} s)"
    )
    return 0 if len(passed) == len(eager_works) else 1


if __name__ == "__main__":
    raise SystemExit(main())
