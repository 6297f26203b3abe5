"""Hypothesis fuzzing: random programs of views, in-place ops and returns, compiled vs eager.

CI runs a bounded number of examples; ``benchmarks/fuzz_mutation.py`` runs thousands.
"""

from __future__ import annotations

import os

import torch
from hypothesis import HealthCheck, given, settings

from tests.fuzz_programs import Program, programs, refused_clearly
from tests.oracle import check

EXAMPLES = int(os.environ.get("AOTFX_FUZZ_EXAMPLES", "60"))
FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)


@FUZZ_SETTINGS
@given(programs())
def test_random_program_training(program: Program) -> None:
    with refused_clearly():
        check(program, program.make_args)


@FUZZ_SETTINGS
@given(programs())
def test_random_program_inference(program: Program) -> None:
    with refused_clearly(), torch.no_grad():
        check(program, program.make_args, backward=False)
