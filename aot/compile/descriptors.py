"""Typed descriptors stored in ``node.meta["desc"]``: which input or output a graph value is.

Placeholders and outputs of every graph aotfx hands a backend carry one, so a
backend or a report can ask "which user input is ``primals_3``?" without parsing
names.
"""

from __future__ import annotations

from dataclasses import dataclass

from meta.indices import GraphArg, GraphOut

__all__ = ["DESC", "Descriptor", "ForwardOutput", "Grad", "InputWrite", "Primal", "Saved", "Tangent"]

DESC = "desc"


@dataclass(frozen=True)
class Primal:
    """A graph input: the tensor argument ``arg`` of the flat function, named ``name``.

    ``written``: the function writes the input's data, so the caller's tensor holds other values once
    the forward has run; a backward may read it only where eager's backward reads it (a partitioner
    must not recompute from it)."""

    arg: GraphArg
    name: str
    written: bool = False


@dataclass(frozen=True)
class Tangent:
    """The incoming gradient of forward output ``out``."""

    out: GraphOut


@dataclass(frozen=True)
class ForwardOutput:
    """Output ``out`` of the flat function."""

    out: GraphOut


@dataclass(frozen=True)
class Grad:
    """The gradient of input ``arg``."""

    arg: GraphArg
    name: str


@dataclass(frozen=True)
class Saved:
    """A value the forward saves for the backward."""

    name: str


@dataclass(frozen=True)
class InputWrite:
    """The new value of graph input ``placeholder`` (its position among the placeholders, primals then
    tangents), which an autograd.Function's backward wrote in place: the runtime copies it into the
    tensor passed there, as eager's write landed in it."""

    placeholder: int
    name: str


Descriptor = Primal | Tangent | ForwardOutput | Grad | Saved | InputWrite
