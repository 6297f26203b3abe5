"""Logging under the ``aot`` logger, and the ``AOTFX_LOGS`` switch that turns channels on.

aotfx logs with the standard :mod:`logging` module, one child logger per channel:

- ``aot.graphs``: every graph handed to a backend compiler, as code with shapes and strides;
- ``aot.cache``: compile-cache hits, misses and disk traffic;
- ``aot.layers``: each layer's calling-convention rewrite (argument and output counts,
  which inputs are mutated), logged by ``wrappers.base.compile_through``;
- ``aot.runtime``: the generated source of each compiled entry's call (``wrappers.codegen``).

They are silent until enabled: ``AOTFX_LOGS=graphs,cache,layers,runtime`` (or ``all``) in the
environment when ``aot`` is imported, or ``aot.logs.configure("graphs,layers")`` in code.
Enabling a channel sets its logger to ``DEBUG`` and attaches one stderr handler to it
(once, however often it is enabled); records still propagate to the root logger, so
``logging.basicConfig`` or pytest's ``caplog`` see them too. Records carry their fields
as ``record.aot`` (a dict), for tools that want more than the message.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import sys
import warnings
from collections.abc import Iterable, Iterator
from typing import Any

import torch.fx as fx

__all__ = ["CHANNELS", "ENV_VAR", "configure", "disable", "log_graph", "logger", "parse", "silenced"]

ENV_VAR = "AOTFX_LOGS"
CHANNELS = ("graphs", "cache", "layers", "runtime")

_HANDLER_MARK = "_aotfx_handler"


def logger(channel: str) -> logging.Logger:
    """The logger of one channel: ``aot.<channel>``."""
    return logging.getLogger(f"aot.{channel}")


def parse(spec: str | Iterable[str] | None) -> tuple[str, ...]:
    """The channels named by ``spec`` (``"graphs,layers"``, ``"all"``, a list of names), in ``CHANNELS`` order.

    Raises:
        ValueError: a name that is not a channel; the message lists the valid ones.
    """
    if spec is None:
        return ()
    names = spec.replace(" ", ",").split(",") if isinstance(spec, str) else list(spec)
    wanted = {name.strip().lower() for name in names if name.strip()}
    if "all" in wanted:
        return CHANNELS
    unknown = sorted(wanted - set(CHANNELS))
    if unknown:
        raise ValueError(f"unknown {ENV_VAR} channel(s) {unknown}: choose from {', '.join(CHANNELS)}, or all")
    return tuple(channel for channel in CHANNELS if channel in wanted)


def configure(spec: str | Iterable[str] | None = None) -> tuple[str, ...]:
    """Turn on the channels in ``spec`` (default: ``$AOTFX_LOGS``); returns the channels turned on.

    Each enabled channel logs at ``DEBUG`` to stderr (the ``sys.stderr`` of this call,
    so a notebook shows the logs in the cell's output). Channels not named are left
    as they are; :func:`disable` turns channels off again.
    """
    channels = parse(os.environ.get(ENV_VAR) if spec is None else spec)
    for channel in channels:
        log = logger(channel)
        log.setLevel(logging.DEBUG)
        if not any(getattr(handler, _HANDLER_MARK, False) for handler in log.handlers):
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
            setattr(handler, _HANDLER_MARK, True)
            log.addHandler(handler)
    return channels


def disable(spec: str | Iterable[str] | None = "all") -> None:
    """Undo :func:`configure` for the channels in ``spec``: level back to unset, our handler removed."""
    for channel in parse(spec):
        log = logger(channel)
        log.setLevel(logging.NOTSET)
        for handler in [h for h in log.handlers if getattr(h, _HANDLER_MARK, False)]:
            log.removeHandler(handler)


# Set while a function compiled with ``enable_log=False`` compiles: its records are dropped.
_SILENCED: contextvars.ContextVar[bool] = contextvars.ContextVar("aotfx_logs_silenced", default=False)


def _not_silenced(record: logging.LogRecord) -> bool:
    return not _SILENCED.get()


@contextlib.contextmanager
def silenced(silent: bool = True) -> Iterator[None]:
    """Drop every channel's records in this context (this thread or task only), if ``silent``."""
    token = _SILENCED.set(silent or _SILENCED.get())
    try:
        yield
    finally:
        _SILENCED.reset(token)


for _channel in CHANNELS:
    logger(_channel).addFilter(_not_silenced)


def log_graph(kind: str, gm: fx.GraphModule, **fields: Any) -> None:
    """Log ``gm`` on ``aot.graphs``: the graph about to be handed to the ``kind`` compiler.

    The code (with shapes and strides) is only rendered when the channel is on.
    """
    log = logger("graphs")
    if not log.isEnabledFor(logging.DEBUG):
        return
    num_ops = sum(1 for node in gm.graph.nodes if node.op == "call_function")
    code = gm.print_readable(print_output=False, include_stride=True, include_device=False)
    record = {"kind": kind, "num_ops": num_ops, **fields}
    log.debug("%s graph, %d ops:\n%s", kind, num_ops, code, extra={"aot": record})


def _configure_from_env() -> None:
    try:
        configure()
    except ValueError as error:
        # A typo in an environment variable should not make ``import aot`` fail.
        warnings.warn(str(error), stacklevel=2)


_configure_from_env()
