"""Generated straight-line runtime code: one Python function per compiled entry.

The layers' runtimes (``post_compile``) are the reference: small interpreted
closures, each walking its own plan on every call. A layer (or the core) may
also *emit* its part of the call as source, with everything its plan decides
once (index maps, which outputs to rebuild, which inputs to write back) baked
in as constants, so the call is one flat function with no per-call loops over
plans. The emitted parts of all layers are stitched into that one function;
a layer that emits nothing is called as it is today (its closure, wrapped
around the generated code of the layers below it).

An *emitter* appends the lines of one part to a :class:`Source`: given the name
of the variable that holds its arguments (a list of tensors), it returns the name
of the variable that holds its outputs (a list).
"""

from __future__ import annotations

import itertools
import linecache
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from meta.versions import Counters

__all__ = [
    "Emitter",
    "Generated",
    "Source",
    "attach",
    "counted_call",
    "emitter_of",
    "generate",
    "opaque",
]

# The ``aot.runtime`` channel (``AOTFX_LOGS=runtime``); named here so this package does not import ``aot``.
_log = logging.getLogger("aot.runtime")
_serial = itertools.count()


class Source:
    """The source of one generated function: lines, and the constants they name."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.constants: dict[str, Any] = {}
        self._by_id: dict[int, str] = {}
        self._used: set[str] = set()
        self._indent = 1
        # The grad mode the code emitted next runs in, where a guard above checked it; None: unknown.
        self.grad_mode: bool | None = None
        # Whether the code emitted next runs while counters started above may mark views as made in grad mode
        # (``meta.versions.Counters.relaxes``).
        self.relaxing = False

    def fresh(self, hint: str) -> str:
        """A variable name not used yet in this function."""
        for k in itertools.count():
            name = hint if k == 0 and hint not in self._used else f"{hint}{k}"
            if name not in self._used:
                self._used.add(name)
                return name
        raise AssertionError("unreachable")

    def const(self, value: Any, hint: str) -> str:
        """The name the generated code reads ``value`` by (the same object: the same name)."""
        name = self._by_id.get(id(value))
        if name is None or self.constants[name] is not value:
            name = self.fresh(hint)
            self.constants[name] = value
            self._by_id[id(value)] = name
        return name

    def line(self, text: str) -> None:
        self.lines.append("    " * self._indent + text)

    @contextmanager
    def block(self, header: str) -> Iterator[None]:
        """Lines indented under ``header`` (an ``if``, a ``try``)."""
        self.line(header)
        self._indent += 1
        try:
            yield
        finally:
            self._indent -= 1

    def build(self, name: str, params: str) -> tuple[Callable[..., Any], str]:
        """Compile the function; its source shows in tracebacks (``linecache``)."""
        text = "\n".join([f"def {name}({params}):", *self.lines]) + "\n"
        filename = f"<aotfx runtime {next(_serial)}>"
        linecache.cache[filename] = (len(text), None, text.splitlines(keepends=True), filename)
        namespace = dict(self.constants)
        exec(compile(text, filename, "exec"), namespace)  # our own generated source
        fn = namespace[name]
        if _log.isEnabledFor(logging.DEBUG):
            _log.debug("generated %s:\n%s", filename, text, extra={"aot": {"source": text}})
        return fn, text


class Emitter(Protocol):
    def __call__(self, source: Source, args: str) -> str: ...


@dataclass
class Generated:
    """A runtime compiled from generated source; ``source`` is what a reader sees."""

    fn: Callable[[list[Any]], list[Any]]
    source: str
    emit: Emitter  # to emit the same call again, inside a bigger function


def attach(runtime: Callable[..., Any], emitter: Emitter) -> Callable[..., Any]:
    """``runtime`` (the interpreted reference), able to emit itself as source."""
    runtime.emit = emitter  # type: ignore[attr-defined]
    return runtime


def counted_call(
    source: Source, counters: Counters | None, inner: Emitter, inner_args: str, args: str, no_counters: str
) -> tuple[str, str]:
    """Emit ``Counters.call``: the counters started before the layers below, put back if they raise. Returns
    the names of their outputs and of the counters before (``no_counters`` where there are none)."""
    if not counters:
        return inner(source, inner_args), no_counters
    c, before = source.const(counters, "counters"), source.fresh("before")
    source.line(f"{before} = {c}.start({args})")
    relaxing, source.relaxing = source.relaxing, source.relaxing or counters.relaxes
    with source.block("try:"):
        inner_outs = inner(source, inner_args)
    source.relaxing = relaxing
    with source.block("except BaseException:"):
        source.line(f"{c}.restore({args}, {before})")
        source.line("raise")
    return inner_outs, before


def opaque(runtime: Callable[[list[Any]], list[Any]], hint: str = "inner") -> Emitter:
    """An emitter calling ``runtime`` as it is: a part with no source of its own."""

    def emit(source: Source, args: str) -> str:
        outs = source.fresh("outs")
        source.line(f"{outs} = {source.const(runtime, hint)}({args})")
        return outs

    return emit


def emitter_of(runtime: Callable[[list[Any]], list[Any]]) -> Emitter:
    """The runtime's own emitter, or a call to it."""
    emit: Emitter | None = getattr(runtime, "emit", None)
    return emit if emit is not None else opaque(runtime)


def generate(emit: Emitter, name: str = "aotfx_runtime") -> Generated:
    """One function ``name(args) -> outs`` from ``emit``."""
    source = Source()
    outs = emit(source, "args")
    source.line(f"return {outs}")
    fn, text = source.build(name, "args")
    return Generated(fn, text, emit)
