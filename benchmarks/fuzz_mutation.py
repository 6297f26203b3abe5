"""Long run of the mutation/aliasing fuzzer: ``python benchmarks/fuzz_mutation.py --examples 2000``.

Draws programs with ``tests/fuzz_programs.py`` (``draw_program``, see its docstring for
what is drawn) from a plain seeded ``random.Random`` per program (program ``i`` of seed
``s`` is always the same program), runs each compiled vs eager with ``tests/oracle.py``
``check(..., deep=True)`` in training and under ``no_grad``, and does not stop at the
first failure: every failing program is collected and classified by a signature (the
exception type and the first line of its message with numbers stripped, or
``wrong: <which check>`` when the oracle found a difference). It prints the count per
class and, for each class, its smallest program (shrunk further by removing steps while
the signature stays), as a runnable script. Refusals (``aot.errors.UnsupportedMutationError``,
the documented one) are counted apart with their messages. ``--report PATH`` writes the
same as Markdown. Exit status 1 when any program differed from eager.

A program drawing ``reuse`` calls its compiled function again on ``make_args_again()``
(other kinds of arguments); a difference there that a function compiled afresh for those
arguments does not show is the reused entry's, and its signature starts with ``reuse:``.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import logging
import os
import pathlib
import random
import re
import sys
import time
import traceback
import warnings
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from aot.errors import UnsupportedMutationError
from tests import oracle
from tests.fuzz_programs import ALL, BASELINE, FEATURES, Program, draw_program
from tests.oracle import check

MODES = ("training", "no_grad", "inference_mode")
REFUSALS: tuple[type[BaseException], ...] = (UnsupportedMutationError,)


@dataclasses.dataclass(frozen=True)
class Outcome:
    kind: str  # "ok", "refusal", "failure"
    signature: str = ""
    message: str = ""


def _normalize(text: str, limit: int = 140) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    line = re.sub(r"0x[0-9a-f]+", "0x…", line)
    line = re.sub(r"\d+", "N", line)
    line = re.sub(r"\[N(, N)*\]", "[N…]", line)  # shapes and strides of any rank
    line = re.sub(r"node (\w+?)_N \(", r"node \1 (", line)  # FX node names: t__1 is t_
    return line[:limit]


def _wrong(message: str) -> str:
    """The signature of a difference the oracle's own assertions found."""
    line = message.strip().splitlines()[0] if message.strip() else ""
    match = re.match(r"eager raised (\w+)\((.*), compiled did not$", line)
    if match:
        return f"wrong: eager raises {match[1]} ({_normalize(match[2], 70)}), compiled does not"
    match = re.match(r"eager raised (\w+)\(.*\), compiled (\w+)\((.*)\)$", line)
    if match:
        return f"wrong error: eager raises {match[1]}, compiled {match[2]}: {_normalize(match[3], 90)}"
    if line.startswith("backward: eager "):  # eager's gradients (a list over lines) or error, vs compiled's
        eager, _, compiled = message.strip()[len("backward: eager ") :].rpartition(" vs ")
        eager_type, compiled_type = re.match(r"\w*", eager)[0], re.match(r"\w*", compiled)[0]  # type: ignore[index]
        return f"wrong: backward: eager {eager_type or 'runs'}, compiled {compiled_type or 'runs'}"
    line = _normalize(line, 200)
    for pattern, name in [
        (r"^output N: (shape|dtype|device|requires_grad)", r"output \1"),
        (r"^output N: \(", "output grad_fn/is_leaf"),
        (r"^output N: .* is not a tensor", "output type"),
        (r"^output N$", "output values"),
        (r"^output N: ", "output value"),
        (r"^input N after the call: (shape|dtype)", r"input after the call: \1"),
        (r"^input N after the call$", "input after the call: values"),
        (r"^input N metadata", "input after the call: strides/storage offset"),
        (r"^storage of input N after the call: size", "storage after the call: size"),
        (r"^storage of input N after the call", "storage after the call: values (outside the inputs' views too)"),
        (r"^grad of input N: ", "grad: None vs a tensor"),
        (r"^grad of input N: (shape|dtype)", r"grad: \1"),
        (r"^grad of input N$", "grad: values"),
        (r"^autograd.grad w.r.t. input N: ", "autograd.grad w.r.t. an input: None vs a tensor"),
        (r"^autograd.grad w.r.t. input N$", "autograd.grad w.r.t. an input: values"),
        (r"^inputs with history after the call", "inputs with history after the call"),
        (r"^aliasing differs", "aliasing (storage/_base of outputs)"),
        (r"^version counter bumps", "version counter bumps"),
        (r"^output structure", "output structure"),
    ]:
        if re.match(pattern, line):
            return "wrong: " + re.sub(pattern + ".*", name, line)
    return "wrong: " + line


def classify(error: BaseException) -> Outcome:
    text = f"{type(error).__name__}: {error}"
    if isinstance(error, REFUSALS):
        return Outcome("refusal", f"{type(error).__name__}: {_normalize(str(error))}", text)
    frames = traceback.extract_tb(error.__traceback__)
    oracle = [i for i, frame in enumerate(frames) if frame.filename.endswith("oracle.py")]
    under_test = any(frames[i].name in ("_run", "grads") and i != len(frames) - 1 for i in oracle)
    if under_test:
        where = "backward" if any(frames[i].name == "grads" for i in oracle) else "compiled"
        return Outcome("failure", f"{where} raises {type(error).__name__}: {_normalize(str(error))}", text)
    if isinstance(error, AssertionError):
        return Outcome("failure", _wrong(str(error)), text)
    return Outcome("failure", f"oracle raises {type(error).__name__}: {_normalize(str(error))}", text)


def run_one(program: Program, mode: str) -> Outcome:
    logging.disable(logging.ERROR)  # fake tensors log the errors that the outcome reports anyway
    grad_mode = torch.is_grad_enabled()
    options = {"deep": True, **program.tolerances(), **({} if mode == "training" else {"backward": False})}
    context = {"training": contextlib.nullcontext, "no_grad": torch.no_grad, "inference_mode": torch.inference_mode}
    try:
        f, make_args = program.compile()
        make_args_again = program.compile_again()
        with warnings.catch_warnings(), context[mode]():
            warnings.simplefilter("ignore")
            compiled = check(f, make_args, **options)
            if make_args_again is not None:
                return _second_call(program, f, compiled, make_args_again, options)
    except Exception as error:
        return _which_output(classify(error), program)
    finally:
        torch.set_grad_enabled(grad_mode)
    return Outcome("ok")


def _second_call(program: Program, f: Any, compiled: Any, make_args_again: Any, options: dict[str, Any]) -> Outcome:
    """``reuse``: the compiled function called again on other kinds of arguments. A difference there that a
    function compiled afresh for them does not show is the reuse's: its signature says ``reuse:``."""
    try:
        check(f, make_args_again, compiled_fn=compiled, **options)
    except Exception as error:
        try:
            # A new function object: aotfx reuses a trace of the same one for an equal input signature.
            check(program.compile()[0], make_args_again, **options)
        except Exception as fresh_error:
            return _which_output(classify(fresh_error), program)
        outcome = _which_output(classify(error), program)
        return dataclasses.replace(outcome, kind="failure", signature=f"reuse: {outcome.signature}")
    return Outcome("ok")


def _which_output(outcome: Outcome, program: Program) -> Outcome:
    """Say which kind of output a wrong output is: a returned input, another returned value, or the total."""
    match = re.match(r"AssertionError: output (\d+)", outcome.message)
    if not (match and outcome.signature.startswith("wrong: output")):
        return outcome
    index = int(match[1])
    if index >= len(program.returns):
        what = "the sum of all values"
    elif program.returns[index] in program.params:
        what = "a returned input"
    else:
        what = "a returned view or new value"
    return dataclasses.replace(outcome, signature=f"{outcome.signature} ({what})")


def program_of(seed: int, index: int, features: frozenset[str]) -> Program:
    return draw_program(random.Random(f"{seed}:{index}"), features)


def _work(job: tuple[int, int, frozenset[str], tuple[str, ...]]) -> tuple[int, Program, dict[str, Outcome]]:
    seed, index, features, modes = job
    torch.set_num_threads(1)
    program = program_of(seed, index, features)
    return index, program, {mode: run_one(program, mode) for mode in modes}


def _drop_arg(program: Program, k: int) -> Program:
    """``program`` without its ``k``-th argument (later parameters renumbered)."""

    def rename(text: str) -> str:
        return re.sub(r"\ba(\d+)\b", lambda m: f"a{int(m[1]) - (int(m[1]) > k)}", text)

    steps = tuple(
        dataclasses.replace(step, lines=tuple(map(rename, step.lines)), defines=tuple(map(rename, step.defines)))
        for step in program.steps
    )
    returns = tuple(rename(r) for r in program.returns if r != f"a{k}")
    args = program.args[:k] + program.args[k + 1 :]
    # make_args_again's lines index the arguments: a[k]'s go, later ones move down.
    again = tuple(
        re.sub(r"\ba\[(\d+)\]", lambda m: f"a[{int(m[1]) - (int(m[1]) > k)}]", line)
        for line in program.again
        if f"a[{k}]" not in line
    )
    return dataclasses.replace(program, args=args, steps=steps, returns=returns, again=again)


def _smaller(program: Program) -> list[Program]:
    """Candidate simplifications: drop an argument, a setup line, a step, a return, the total or a line of
    ``make_args_again``; unwrap a block."""
    out = []
    for k in range(len(program.args)):
        if len(program.args) > 1 and not any(
            re.search(rf"\ba{k}\b", line) for step in program.steps for line in step.lines
        ):
            out.append(_drop_arg(program, k))
    for k in range(len(program.args)):
        if len(program.args) > 1:
            out.append(_drop_arg(program, k))
    for i, line in enumerate(program.setup):
        name = line.split(" = ")[0].split()[-1]  # also "with torch.inference_mode(): i3 = ..."
        rest = program.setup[:i] + program.setup[i + 1 :]
        if not any(re.search(rf"\b{name}\b", other) for other in (*rest, *program.args)):
            out.append(dataclasses.replace(program, setup=rest))
    steps = program.steps
    for i, step in enumerate(steps):
        dropped = {*step.defines}
        returns = tuple(r for r in program.returns if r not in dropped)
        out.append(dataclasses.replace(program, steps=steps[:i] + steps[i + 1 :], returns=returns))
        if step.lines[0].startswith("with ") and len(step.lines) > 1:
            inner = dataclasses.replace(step, lines=tuple(line[4:] for line in step.lines[1:]))
            out.append(dataclasses.replace(program, steps=(*steps[:i], inner, *steps[i + 1 :])))
    for i in range(len(program.returns)):
        out.append(dataclasses.replace(program, returns=program.returns[:i] + program.returns[i + 1 :]))
    if program.total:
        out.append(dataclasses.replace(program, total=False))
    for i in range(len(program.again)):
        out.append(dataclasses.replace(program, again=program.again[:i] + program.again[i + 1 :]))
    return out


def shrink(program: Program, mode: str, signature: str, budget: int) -> Program:
    """Greedily simplify ``program`` while it fails with the same signature."""
    progress = True
    while progress and budget > 0:
        progress = False
        for candidate in _smaller(program):
            if budget <= 0:
                break
            budget -= 1
            outcome = run_one(candidate, mode)
            if outcome.kind == "failure" and outcome.signature == signature:
                program, progress = candidate, True
                break
    return program


def _shrink_job(job: tuple[Program, str, str, int]) -> tuple[Program, Outcome]:
    program, mode, signature, budget = job
    torch.set_num_threads(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        shrunk = shrink(program, mode, signature, budget)
    return shrunk, run_one(shrunk, mode)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=2000, help="programs to draw (each run in both modes)")
    parser.add_argument("--seed", type=int, default=0, help="program i of seed s is always the same program")
    parser.add_argument("--start", type=int, default=0, help="index of the first program")
    parser.add_argument(
        "--features", default="all", help="'all', 'baseline' or a comma-separated subset of: " + ", ".join(FEATURES)
    )
    parser.add_argument("--modes", default=",".join(MODES), help="a subset of " + ",".join(MODES))
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument("--shrink-budget", type=int, default=40, help="oracle runs to shrink each class's program")
    parser.add_argument("--report", type=pathlib.Path, help="also write the report as Markdown here")
    parser.add_argument(
        "--input-grads",
        default="",
        help="also compare the gradient w.r.t. non-leaf inputs that are 'written' or 'aliased' (comma-separated):"
        " classes known to differ, off by default (tests/oracle.py)",
    )
    args = parser.parse_args()
    chosen = set(args.input_grads.split(",")) - {""}
    if chosen - {"written", "aliased"}:
        parser.error(f"unknown --input-grads: {sorted(chosen - {'written', 'aliased'})}")
    os.environ["AOTFX_ORACLE_INPUT_GRADS"] = args.input_grads  # a spawned worker imports tests/oracle.py anew
    oracle.WRITTEN_INPUT_GRADS, oracle.ALIASED_INPUT_GRADS = "written" in chosen, "aliased" in chosen
    named = {"all": ALL, "baseline": BASELINE}
    features = named.get(args.features) or frozenset(args.features.split(","))
    unknown = features - ALL
    if unknown:
        parser.error(f"unknown features: {sorted(unknown)}")
    modes = tuple(args.modes.split(","))

    start = time.perf_counter()
    failures: dict[str, list[tuple[Program, str, Outcome, int]]] = collections.defaultdict(list)
    refusals: collections.Counter[str] = collections.Counter()
    refusal_messages: dict[str, str] = {}
    by_feature: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    runs = failed_programs = 0
    jobs = [(args.seed, i, features, modes) for i in range(args.start, args.start + args.examples)]
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for done, (index, program, outcomes) in enumerate(pool.map(_work, jobs, chunksize=4), 1):
            failed = False
            for mode, outcome in outcomes.items():
                runs += 1
                if outcome.kind == "refusal":
                    refusals[f"[{mode}] {outcome.signature}"] += 1
                    refusal_messages.setdefault(f"[{mode}] {outcome.signature}", outcome.message)
                elif outcome.kind == "failure":
                    if not failed:  # named as found, so a long run's programs can be rerun before it ends
                        print(f"... program {index} differs [{mode}]: {outcome.signature}", flush=True)
                    failed = True
                    failures[outcome.signature].append((program, mode, outcome, index))
            failed_programs += failed
            for feature in program.features:
                by_feature[feature][0] += 1
                by_feature[feature][1] += failed
            if done % 100 == 0:
                print(f"... {done} programs, {failed_programs} differ, {time.perf_counter() - start:.0f} s", flush=True)

        classes = sorted(failures.items(), key=lambda item: -len(item[1]))
        chosen = [min(found, key=lambda item: item[0].size()) for _, found in classes]
        shrink_jobs = [
            (program, mode, signature, args.shrink_budget)
            for (signature, _), (program, mode, _, _) in zip(classes, chosen, strict=True)
        ]
        smallest: dict[str, tuple[Program, str, Outcome, int]] = {}
        for (signature, _), (_, mode, outcome, index), (shrunk, final) in zip(
            classes, chosen, pool.map(_shrink_job, shrink_jobs), strict=True
        ):
            smallest[signature] = (shrunk, mode, final if final.kind == "failure" else outcome, index)

    elapsed = time.perf_counter() - start
    lines = [
        "# Mutation/aliasing fuzzer findings",
        "",
        f"`python benchmarks/fuzz_mutation.py --examples {args.examples} --seed {args.seed}"
        + (f" --start {args.start}" if args.start else "")
        + (f" --features {args.features}" if args.features != "all" else "")
        + f"`: {args.examples} programs, {runs} runs ({', '.join(modes)}), {elapsed:.0f} s.",
        "",
        f"- programs differing from eager in at least one mode: **{failed_programs}** of {args.examples}",
        f"- failing runs: {sum(len(found) for found in failures.values())} of {runs}, in {len(failures)} classes",
        f"- refused runs (documented refusals, not counted as failures): {sum(refusals.values())}",
        "",
        "## Failure classes",
        "",
        "| # | runs | " + " | ".join(modes) + " | signature |",
        "| --- | --- | " + " | ".join("---" for _ in modes) + " | --- |",
    ]
    for number, (signature, found) in enumerate(classes, 1):
        per_mode = collections.Counter(mode for _, mode, _, _ in found)
        cell = signature.replace("|", "\\|")
        counts = " | ".join(str(per_mode[mode]) for mode in modes)
        lines.append(f"| {number} | {len(found)} | {counts} | `{cell}` |")
    lines += ["", "## Refusals", ""]
    if not refusals:
        lines.append("None.")
    for signature, count in refusals.most_common():
        lines.append(f"- {count} x {signature}")
        lines.append(f"  - e.g. `{refusal_messages[signature].splitlines()[0][:300]}`")
    lines += ["", "## Programs drawing each feature, and how many of them differ", ""]
    lines += ["| feature | programs | differing |", "| --- | --- | --- |"]
    for feature in FEATURES:
        total, failed_count = by_feature.get(feature, [0, 0])
        lines.append(f"| {feature} | {total} | {failed_count} |")
    lines += ["", "## Smallest program of each class", ""]
    for number, (signature, _) in enumerate(classes, 1):
        program, mode, outcome, index = smallest[signature]
        lines += [
            f"### {number}. `{signature}`",
            "",
            f"Program {index} of seed {args.seed}, shrunk; {mode}. Message:",
            "",
            "```",
            outcome.message[:1200],
            "```",
            "",
            "```python",
            program.source(mode).rstrip(),
            "```",
            "",
        ]
    report = "\n".join(lines) + "\n"
    print(report)
    if args.report:
        args.report.write_text(report)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
