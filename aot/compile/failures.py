"""Turn what torch raises while tracing or compiling into errors that name the culprit.

A fake-tensor exception says which ATen op failed but not where in the user's
function it was called; a backend's exception says nothing of which graph it
was given. These wrappers add both, and chain the original.
"""

from __future__ import annotations

import contextlib
import linecache
import os
import re
import tempfile
import traceback
from collections.abc import Iterator
from types import TracebackType
from typing import Any

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    UnsupportedOperatorException,
)
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

from aot.errors import (
    BackendCompilerError,
    DataDependentError,
    FakeKernelError,
    UnsupportedInputError,
    UnsupportedOperatorError,
)

__all__ = ["backend_errors", "has_symbolic_sizes", "trace_errors", "user_line"]

_KEEP_OUTSIDE = (
    "keep data-dependent control flow and values (.item(), a Python branch on a tensor) outside the compiled "
    "function, or split the function there."
)
_PACKAGE_DIRS = tuple(
    os.path.dirname(os.path.abspath(module.__file__ or ""))
    for module in (__import__("torch"), __import__("aot"), __import__("meta"), __import__("wrappers"))
)
_TORCH_NN = os.path.join(_PACKAGE_DIRS[0], "nn") + os.sep
_NO_FAKE_KERNEL = re.compile(r"(\S+): attempted to run this operator with Meta tensors, but there was no fake impl")


def user_line(tb: TracebackType | None) -> str:
    """The innermost frame of ``tb`` outside torch and aotfx: ``file:line: source``.

    Where every frame is library code (a ``torch.nn`` module's forward called by ``aot_module``),
    the innermost ``torch.nn`` frame: the module code that asked for the value.
    """
    found = library = ""
    for frame, lineno in traceback.walk_tb(tb):
        filename = os.path.abspath(frame.f_code.co_filename)
        if filename.startswith(_TORCH_NN):
            library = _frame_line(filename, lineno)
        if filename.startswith(_PACKAGE_DIRS) or filename.startswith("<"):
            continue
        found = _frame_line(filename, lineno)
    return found or library or "an unknown line"


def _frame_line(filename: str, lineno: int) -> str:
    source = linecache.getline(filename, lineno).strip()
    return f"{filename}:{lineno}: {source}" if source else f"{filename}:{lineno}"


@contextlib.contextmanager
def trace_errors() -> Iterator[None]:
    """Around tracing: data-dependent and unsupported ops become aotfx errors naming the op and the line."""
    try:
        yield
    except (DataDependentOutputException, DynamicOutputShapeException) as error:
        op = getattr(error, "func", "an op")
        raise DataDependentError(
            f"{op} needs the values of a tensor, which ahead-of-time tracing does not have "
            f"(called at {user_line(error.__traceback__)}). aotfx traces sizes that depend on tensor data "
            "(nonzero(), masked_select(), a boolean mask) as unbacked symbols where torch's fake kernels do, "
            f"but {op} has none that does: {_KEEP_OUTSIDE}"
        ) from error
    except GuardOnDataDependentSymNode as error:
        op = _fake_kernel_op(error.__traceback__)
        raise DataDependentError(
            f"{op or 'the function'} branches on a size that depends on tensor data (on {error.cond}, where "
            f"u0, u1 ... are such sizes; at {user_line(error.__traceback__)}), "
            f"which ahead-of-time tracing does not have: {_KEEP_OUTSIDE}"
        ) from error
    except ValueError as error:
        if not str(error).startswith("Cannot view a tensor with shape"):
            raise
        # The fake kernel of ``view`` raises ValueError where eager's raises RuntimeError.
        raise RuntimeError(
            "view size is not compatible with input tensor's size and stride (at least one dimension spans "
            f"across two contiguous subspaces). Use .reshape(...) instead. ({error})"
        ) from error
    except AssertionError as error:
        op = _fake_kernel_op(error.__traceback__)
        if op is None:
            raise
        if "convert all Tensors to FakeTensors" not in str(error):
            # A meta kernel's own check (``t_`` of a 3-D tensor): eager's kernel checks it too, raising RuntimeError.
            raise FakeKernelError(
                f"{op} raised while aotfx traced it on fake tensors (called at {user_line(error.__traceback__)}): "
                f"{error}"
            ) from error
        raise UnsupportedInputError(
            f"{op} was given a real tensor while aotfx traced the function (called at "
            f"{user_line(error.__traceback__)}): the function reads a tensor that is not one of its arguments "
            "(a global, a closure variable, or a module attribute that is not a parameter or buffer). "
            "Pass it as an argument of the compiled function."
        ) from error
    except FakeKernelError:
        raise
    except RuntimeError as error:
        _raise_if_missing_fake_kernel(error)
        op = _fake_kernel_op(error.__traceback__)
        if "data is not allocated yet" in str(error):
            # A kernel reading a tensor's values in C++ (tensor_split's index tensor): a fake has none.
            raise DataDependentError(
                f"{op or 'an op'} reads the values of a tensor, which ahead-of-time tracing does not have "
                f"(called at {user_line(error.__traceback__)}). Pass them as Python numbers, or call the op "
                "outside the compiled function."
            ) from error
        if op is None:
            raise
        raise FakeKernelError(
            f"{op} raised while aotfx traced it on fake tensors (called at {user_line(error.__traceback__)}): "
            f"{error}\nIf eager runs this call, the op's fake kernel refuses what its real kernel accepts: "
            "register one that accepts it (torch.library.register_fake) or call the op outside the compiled "
            "function."
        ) from error
    except UnsupportedOperatorException as error:
        op = getattr(error, "func", "an op")
        raise UnsupportedOperatorError(
            f"{op} cannot run on fake tensors (no fake/meta kernel; called at {user_line(error.__traceback__)}). "
            "Register a fake kernel for it (torch.library.register_fake) or call it outside the compiled function."
        ) from error
    except Exception as error:
        _raise_if_missing_fake_kernel(error)
        raise


def _raise_if_missing_fake_kernel(error: BaseException) -> None:
    op = _missing_fake_kernel(error)
    if op is None:
        return
    # FakeTensorMode ran the op's real kernel on zeros, and its output (a nested tensor, say) had no fake.
    raise UnsupportedOperatorError(
        f"{op} cannot run on fake tensors (no fake/meta kernel; called at {user_line(error.__traceback__)}), "
        f"and running its real kernel instead failed: {type(error).__name__}: {str(error).rstrip('.')}. "
        "Register a fake kernel for it (torch.library.register_fake) or call it outside the compiled function."
    ) from error


def _missing_fake_kernel(error: BaseException) -> str | None:
    """The op named by a "no fake impl or Meta kernel registered" error in ``error``'s context chain."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, NotImplementedError):
            found = _NO_FAKE_KERNEL.match(str(current))
            if found:
                return found.group(1)
        current = current.__cause__ or current.__context__
    return None


_FAKE_TENSOR_FILE = os.path.join("_subclasses", "fake_tensor.py")


def _fake_kernel_op(tb: TracebackType | None) -> Any:
    """The ATen op whose fake-tensor dispatch raised, if the error came from one."""
    found = None
    for frame, _ in traceback.walk_tb(tb):
        if frame.f_code.co_filename.endswith(_FAKE_TENSOR_FILE):
            func = frame.f_locals.get("func")
            if isinstance(func, torch._ops.OpOverload):
                found = func
    return found


def _written_for_reproduction(kind: str, gm: fx.GraphModule) -> str:
    """Write the graph's code to a file the user can read and rerun; return its path."""
    handle, path = tempfile.mkstemp(prefix=f"aotfx_{kind}_graph_", suffix=".py")
    with os.fdopen(handle, "w") as file:
        file.write(f"# the {kind} graph aotfx handed to the backend compiler that raised\n")
        file.write(gm.code)
    return path


def backend_errors(kind: str, compiler: Any, gm: fx.GraphModule) -> contextlib.AbstractContextManager[None]:
    """Around a backend compile: its exception becomes a ``BackendCompilerError`` naming backend and graph."""

    name = getattr(compiler, "__qualname__", None) or type(compiler).__qualname__
    symbolic = has_symbolic_sizes(gm)
    if symbolic and getattr(compiler, "supports_dynamic_shapes", True) is False:
        raise BackendCompilerError(
            f"backend compiler {name!r} cannot compile graphs with symbolic sizes (it declares "
            f"supports_dynamic_shapes = False), and the {kind} graph has them: compile with static shapes "
            "(dynamic=False, no dynamic_dims or mark_dynamic; under torch.compile, dynamic=False)"
        )

    @contextlib.contextmanager
    def guard() -> Iterator[None]:
        try:
            yield
        except Exception as error:
            path = _written_for_reproduction(kind, gm)
            hint = (
                "\nThe graph has symbolic sizes (dynamic shapes), which this backend may not support: "
                "compile with static shapes to tell."
                if symbolic
                else ""
            )
            raise BackendCompilerError(
                f"backend compiler {name!r} raised {type(error).__name__} on the {kind} graph: {error}\n"
                f"The graph's code is in {path}.{hint}"
            ) from error

    return guard()


def has_symbolic_sizes(gm: fx.GraphModule) -> bool:
    """Whether a graph takes a symbolic size, or a tensor of symbolic geometry."""
    for node in gm.graph.find_nodes(op="placeholder"):
        val = node.meta.get("val")
        if isinstance(val, torch.SymInt):
            return True
        if isinstance(val, torch.Tensor) and any(
            isinstance(v, torch.SymInt) for v in (*val.shape, *val.stride(), val.storage_offset())
        ):
            return True
    return False
