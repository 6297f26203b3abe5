"""Random programs of views, in-place ops, metadata mutations and returns, for differential fuzzing.

A program is a list of steps over a growing list of tensor values (the inputs
first). Each step reads values by index modulo the current count, so every
drawn program is well formed; steps whose op does not apply to a value's shape
are skipped the same way eagerly and compiled, since both run the same Python.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import reject
from hypothesis import strategies as st

from aot.errors import UnsupportedMutationError

__all__ = ["Program", "programs", "refused_clearly"]

# name -> (applies to a value?, make the new value). Views and fresh values append to the list.
VIEWS: dict[str, tuple[Callable[[torch.Tensor], bool], Callable[[torch.Tensor], torch.Tensor]]] = {
    "t": (lambda v: v.dim() == 2, lambda v: v.t()),
    "transpose": (lambda v: v.dim() >= 2, lambda v: v.transpose(0, -1)),
    "narrow": (lambda v: v.dim() >= 1 and v.shape[0] > 1, lambda v: v.narrow(0, 1, v.shape[0] - 1)),
    "select": (lambda v: v.dim() >= 2, lambda v: v.select(0, 0)),
    "unsqueeze": (lambda v: v.dim() < 4, lambda v: v.unsqueeze(0)),
    "flatten_view": (lambda v: v.is_contiguous() and v.dim() >= 2, lambda v: v.view(-1)),
    "diagonal": (lambda v: v.dim() >= 2, lambda v: v.diagonal()),
    "slice_step": (lambda v: v.dim() >= 1 and v.shape[-1] > 1, lambda v: v[..., ::2]),
    "detach": (lambda v: True, lambda v: v.detach()),
    "fresh_mul": (lambda v: True, lambda v: v * 2),
    "fresh_sin": (lambda v: True, lambda v: v.sin()),
}
# name -> in-place data mutation of a value
INPLACE: dict[str, Callable[[torch.Tensor], Any]] = {
    "add_": lambda v: v.add_(0.5),
    "mul_": lambda v: v.mul_(1.5),
    "zero_": lambda v: v.zero_(),
    "clamp_": lambda v: v.clamp_(min=-0.5),
    "sigmoid_": lambda v: v.sigmoid_(),
}
# name -> (applies?, in-place metadata mutation)
METADATA: dict[str, tuple[Callable[[torch.Tensor], bool], Callable[[torch.Tensor], Any]]] = {
    "t_": (lambda v: v.dim() == 2, lambda v: v.t_()),
    "unsqueeze_": (lambda v: v.dim() < 4, lambda v: v.unsqueeze_(0)),
    "transpose_": (lambda v: v.dim() >= 2, lambda v: v.transpose_(0, -1)),
}


@dataclass(frozen=True)
class Step:
    kind: str  # "view", "inplace", "metadata", "no_grad_inplace"
    op: str
    target: int


@dataclass(frozen=True)
class Program:
    """``num_inputs`` inputs of ``shape``; ``grad`` says per input: 'leaf', 'non_leaf' or 'none'.

    ``layout`` says how the inputs share memory: 'independent'; 'duplicates' (the
    second input is the first object again); 'overlapping' or 'disjoint' views of
    one storage (whose grad is the first input's).
    """

    shape: tuple[int, ...]
    grad: tuple[str, ...]
    steps: tuple[Step, ...]
    returns: tuple[int, ...]
    layout: str = "independent"

    @staticmethod
    def _tensor(shape: tuple[int, ...], grad: str, seed: int) -> torch.Tensor:
        value = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
        if grad == "leaf":
            value.requires_grad_()
        elif grad == "non_leaf":
            value = value.requires_grad_() * 1
        return value

    def make_args(self) -> tuple[torch.Tensor, ...]:
        count, numel = len(self.grad), math.prod(self.shape)
        if self.layout in ("overlapping", "disjoint"):
            step = numel // 2 + 1 if self.layout == "overlapping" else numel
            storage = self._tensor((step * (count - 1) + numel,), self.grad[0], 0)
            return tuple(storage[i * step : i * step + numel].view(self.shape) for i in range(count))
        args = [self._tensor(self.shape, grad, i) for i, grad in enumerate(self.grad)]
        if self.layout == "duplicates" and count > 1:
            args[1] = args[0]
        return tuple(args)

    def __call__(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        values = list(inputs)
        for step in self.steps:
            value = values[step.target % len(values)]
            if step.kind == "view":
                applies, make = VIEWS[step.op]
                if applies(value):
                    values.append(make(value))
            elif step.kind == "inplace":
                INPLACE[step.op](value)
            elif step.kind == "no_grad_inplace":
                with torch.no_grad():
                    INPLACE[step.op](value)
            else:
                applies, mutate = METADATA[step.op]
                # Metadata mutations only on inputs with no view taken yet: autograd on fake tensors
                # cannot regenerate an older view's grad_fn after its base changed geometry in place.
                if applies(value) and len(values) == len(inputs):
                    mutate(value)
        returned = [values[index % len(values)] for index in self.returns]
        return (*returned, sum(v.sum() for v in values))

    def __repr__(self) -> str:
        lines = [f"Program(shape={self.shape}, grad={self.grad}, layout={self.layout})"]
        for step in self.steps:
            lines.append(f"  {step.kind:15s} {step.op:12s} on v{step.target}")
        lines.append(f"  return {list(self.returns)}")
        return "\n".join(lines)


@contextlib.contextmanager
def refused_clearly(counts: dict[str, int] | None = None) -> Iterator[None]:
    """A program aotfx refuses with its documented ``UnsupportedMutationError`` is not a finding."""
    try:
        yield
    except UnsupportedMutationError:
        if counts is not None:
            counts["refused"] += 1
        reject()


def _steps() -> st.SearchStrategy[Step]:
    return st.one_of(
        st.builds(Step, st.just("view"), st.sampled_from(sorted(VIEWS)), st.integers(0, 20)),
        st.builds(Step, st.just("inplace"), st.sampled_from(sorted(INPLACE)), st.integers(0, 20)),
        st.builds(Step, st.just("no_grad_inplace"), st.sampled_from(sorted(INPLACE)), st.integers(0, 20)),
        st.builds(Step, st.just("metadata"), st.sampled_from(sorted(METADATA)), st.integers(0, 20)),
    )


@st.composite
def programs(draw: Any) -> Program:
    num_inputs = draw(st.integers(1, 3))
    shape = draw(st.sampled_from([(4, 6), (3, 4), (2, 3, 4), (5,)]))
    grad = tuple(draw(st.sampled_from(["none", "non_leaf", "leaf"])) for _ in range(num_inputs))
    steps = tuple(draw(st.lists(_steps(), min_size=1, max_size=8)))
    returns = tuple(draw(st.lists(st.integers(0, 20), min_size=0, max_size=3)))
    layout = draw(st.sampled_from(["independent", "duplicates", "overlapping", "disjoint"]))
    return Program(shape, grad, steps, returns, layout)
