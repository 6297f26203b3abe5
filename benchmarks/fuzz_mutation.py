"""Run the mutation fuzzer for many examples outside CI: ``python benchmarks/fuzz_mutation.py --examples 2000``.

Random programs of views, in-place ops, metadata mutations and returns over 1-3
inputs are compiled and compared with eager (values, gradients, inputs after the
call, aliasing, version counters, requires_grad, errors), in training and under
``no_grad``. Prints the number of examples run and the first failure, if any.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import torch
from hypothesis import HealthCheck, given, settings

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from tests.fuzz_programs import Program, programs, refused_clearly
from tests.oracle import check


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--examples", type=int, default=2000)
    args = parser.parse_args()
    counts = {"training": 0, "inference": 0, "refused": 0}

    @settings(max_examples=args.examples, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(programs())
    def run(program: Program) -> None:
        counts["training"] += 1
        with refused_clearly(counts):
            check(program, program.make_args)
        counts["inference"] += 1
        with refused_clearly(counts), torch.no_grad():
            check(program, program.make_args, backward=False)

    start = time.perf_counter()
    try:
        run()
    except Exception as error:  # report each distinct failure with its shrunk program, then fail
        print(f"FAILED after {counts['training']} examples")
        for failure in getattr(error, "exceptions", [error]):
            print(f"- {type(failure).__name__}: {str(failure)[:400]}")
            print("\n".join(getattr(failure, "__notes__", [])))
        return 1
    print(f"{counts['training']} programs, each in training and under no_grad: no difference from eager")
    print(f"({counts['refused']} runs refused with UnsupportedMutationError, a documented limitation)")
    print(f"({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
