"""Random straight-line programs of views, writes and metadata mutations, for differential fuzzing.

A program is Python source: ``make_args()`` builds the inputs, ``f(*args)`` runs the
drawn steps and returns some of the values plus the sum of all of them.
``Program.source()`` renders it as a script a developer can paste (it ends in a call of
``tests.oracle.check``). Drawing runs every step eagerly as it is drawn (the simulation),
so the emitted program is exactly what eager runs: a step that does not apply to a
value's shape or dtype is skipped while drawing, and a step eager rejects either ends the
program (then the compiled program must raise the same exception type) or is redrawn.

Drawing is done by ``draw_program(rng, features)`` from a ``random.Random``: the long run
(``benchmarks/fuzz_mutation.py``) seeds one per program; CI hands it hypothesis'
``st.randoms()`` (``programs()``), so both share the same drawing logic.

What it draws, by feature (``FEATURES``; ``BASELINE`` is what the first fuzzer drew):

Inputs (1-4 arguments, from 1-3 storages):
  - ``alias_inputs``: all inputs from one storage: the same tensor passed two or three
    times, or same-shape overlapping or disjoint views at offsets 0, k, 2k;
  - ``alias_mixed``: two or three views of one storage, of varied geometry, beside
    independent inputs; a duplicate of any input;
  - ``alias_groups``: two or three storages with several views each, in one call;
  - ``offset``: inputs at nonzero storage offsets (no view of the group at offset 0);
  - ``strided``: non-contiguous (``[:, ::2]``, ``[o::2]``, columns ``[:, j]``) and
    transposed (``.t()``) inputs;
  - ``expanded``: expanded, self-overlapping inputs (``torch.randn(()).expand(2)``,
    ``s[o:o+c].expand(2, c)``);
  - ``dtypes``: int64 and complex64 inputs beside float32;
  - ``grad_kinds``: inputs that are leaves requiring grad of any geometry
    (``.detach().requires_grad_()``), views of a leaf, views of a non-leaf; without
    it an input is a plain leaf, a non-leaf ``l * 1``, or requires no grad;
  - ``inference_inputs``: inputs made under ``torch.inference_mode()`` (inference
    tensors: eager refuses to save them for backward or write them outside it).

Steps:
  - ``views``: t, transpose, slices, narrow, select, unsqueeze, view(-1), diagonal,
    ``[..., ::2]``, detach, flip/clone/mul/sin as fresh values;
  - ``inplace``: add_, mul_, neg_, zero_, clamp_, sigmoid_;
  - ``no_grad_write``: a data write under ``torch.no_grad()``;
  - ``metadata_inputs``: t_, transpose_, unsqueeze_, squeeze_ of an input before any
    view of it is taken;
  - ``write_kinds``: fill_, copy_ from another value, mul_ by another value,
    index_put_ (also with the written tensor as the values), index_fill_;
  - ``out``: ``out=`` variants (``torch.neg(x, out=v)``, ``torch.add``, ``torch.mul``),
    also into ``.data`` aliases;
  - ``data_detach``: ``.data`` and ``.detach()`` aliases as values, data writes through them;
  - ``more_views``: expand, unfold, ``as_strided`` with absolute storage offsets;
  - ``complex_views``: view_as_real, ``.real``, ``.imag`` of complex values,
    view_as_complex of float values;
  - ``metadata_views``: metadata mutations of views of inputs and of intermediates;
  - ``metadata_after_view``: metadata mutations of a value some view of which was taken
    before and is used after;
  - ``metadata_data``: metadata mutations of ``.data``/``detach()`` aliases;
  - ``as_strided_``: ``as_strided_`` with absolute storage offsets;
  - ``resize_``: ``resize_``, shrinking or growing within the storage (eager allows it
    only on tensors that do not require grad; growing past the storage is not drawn:
    the new elements would be uninitialized memory, not comparable);
  - ``set_``: ``x.set_(y)`` (x an input or a value, y any same-dtype value, its ``detach()`` or
    ``clone()``, or the storage form ``x.set_(y.untyped_storage(), offset, size, stride)``), mostly
    under ``no_grad``, sometimes under grad mode;
  - ``requires_grad_``: ``requires_grad_()`` (or ``x.requires_grad = True``) inside the function;
  - ``grad_mode``: steps inside ``torch.no_grad()``, ``torch.enable_grad()`` and
    ``torch.set_grad_enabled(False)`` blocks;
  - ``autograd_function``: custom ``torch.autograd.Function``s: identity returning its
    input, returning a view of its input, an in-place ``mark_dirty`` one, one
    with a non-differentiable second output, and two whose backward writes in place:
    a saved second argument, and ``grad_output``;
  - ``autocast``: steps inside ``torch.autocast("cpu", dtype=torch.bfloat16)`` regions
    (matmuls there run in bfloat16), some with a nested ``autocast(enabled=False)``;
  - ``more_writes``: ``masked_fill_``, ``index_add_``, ``scatter_`` (into any value, views
    included), and more ``out=`` ops (``torch.sin``, ``torch.mul`` of two values,
    ``torch.clamp``);
  - ``nested_grad_mode``: grad-mode regions nested in grad-mode regions.

Calls:
  - ``reuse``: the compiled function, after its calls on ``make_args()``, is called again on
    ``make_args_again()``: the same shapes and dtypes, one or two arguments changed in
    ``requires_grad`` (a leaf, a view of a leaf, or none), inference-ness, storage offset,
    strides, or aliasing (two arguments made the same tensor or views of one storage, or
    arguments sharing a storage given their own): a compiled entry reused where the change
    matters shows as a difference from eager on that call. Drawn after everything else, so a
    program's other draws do not depend on it.

The oracle (``tests/oracle.py`` ``check``) runs each program eagerly and compiled, in
training and under ``no_grad``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from hypothesis import reject
from hypothesis import strategies as st

from aot.errors import UnsupportedMutationError
from tests.oracle import AUTOCAST_ATOL, AUTOCAST_RTOL

__all__ = [
    "BASELINE",
    "FEATURES",
    "Program",
    "draw_program",
    "programs",
    "refused_clearly",
]

FEATURES: tuple[str, ...] = (
    # inputs
    "alias_inputs",
    "alias_mixed",
    "alias_groups",
    "offset",
    "strided",
    "expanded",
    "dtypes",
    "grad_kinds",
    "inference_inputs",
    # steps
    "views",
    "inplace",
    "no_grad_write",
    "metadata_inputs",
    "write_kinds",
    "out",
    "data_detach",
    "more_views",
    "complex_views",
    "metadata_views",
    "metadata_after_view",
    "metadata_data",
    "as_strided_",
    "resize_",
    "set_",
    "requires_grad_",
    "grad_mode",
    "autograd_function",
    "autocast",
    "more_writes",
    "nested_grad_mode",
    # calls
    "reuse",
)
# What the first fuzzer drew.
BASELINE = frozenset({"alias_inputs", "views", "inplace", "no_grad_write", "metadata_inputs"})
ALL = frozenset(FEATURES)

# Custom autograd.Functions a program may use; their source goes into the rendered program.
FUNCTIONS: dict[str, str] = {
    "Identity": '''
class Identity(torch.autograd.Function):
    """Returns its input as is."""

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad * 0.5
''',
    "ViewOf": '''
class ViewOf(torch.autograd.Function):
    """Returns a view of its input."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad * 2
''',
    "Doubled": '''
class Doubled(torch.autograd.Function):
    """Doubles its input in place (mark_dirty)."""

    @staticmethod
    def forward(ctx, x):
        x.mul_(2)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad * 2
''',
    "ScaledBySaved": '''
class ScaledBySaved(torch.autograd.Function):
    """Scales by the sum of a saved second argument, which its backward doubles in place."""

    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(scale)
        return x * scale.sum()

    @staticmethod
    def backward(ctx, grad):
        (scale,) = ctx.saved_tensors
        scale.mul_(2)
        return grad * scale.sum(), None
''',
    "TripledGrad": '''
class TripledGrad(torch.autograd.Function):
    """Returns 3 * x; its backward triples grad_output in place and returns it."""

    @staticmethod
    def forward(ctx, x):
        return x * 3

    @staticmethod
    def backward(ctx, grad):
        grad.mul_(3)
        return grad
''',
    "WithSign": '''
class WithSign(torch.autograd.Function):
    """Returns 3 * x and the non-differentiable sign of x."""

    @staticmethod
    def forward(ctx, x):
        sign = x.sign()
        ctx.mark_non_differentiable(sign)
        return x * 3, sign

    @staticmethod
    def backward(ctx, grad, grad_sign):
        return grad * 3
''',
}


@dataclass(frozen=True)
class Step:
    """Source lines of ``f``'s body; ``defines`` the value names they bind."""

    lines: tuple[str, ...]
    defines: tuple[str, ...] = ()
    feature: str = "views"
    uses: tuple[str, ...] = ()  # custom autograd.Functions used


@dataclass(frozen=True)
class Program:
    """``make_args`` runs ``setup`` then returns ``args`` (names bound by setup, repeated for duplicates)."""

    setup: tuple[str, ...]
    args: tuple[str, ...]
    steps: tuple[Step, ...]
    returns: tuple[str, ...]
    total: bool = True
    input_features: frozenset[str] = field(default_factory=frozenset)
    # ``reuse``: the body of ``make_args_again`` between ``a = list(make_args())`` and ``return tuple(a)``.
    again: tuple[str, ...] = ()

    @property
    def params(self) -> tuple[str, ...]:
        return tuple(f"a{i}" for i in range(len(self.args)))

    @property
    def features(self) -> frozenset[str]:
        return self.input_features | {step.feature for step in self.steps} | ({"reuse"} if self.again else set())

    def defined(self) -> tuple[str, ...]:
        names = list(self.params)
        for step in self.steps:
            names += [n for n in step.defines if n not in names]
        return tuple(names)

    def functions_used(self) -> list[str]:
        return sorted({name for step in self.steps for name in step.uses})

    def body(self) -> list[str]:
        lines = [line for step in self.steps for line in step.lines]
        values = list(self.returns)
        if self.total:
            values.append(f"sum(t.real.sum() for t in ({', '.join(self.defined())},))")
        lines.append(f"return ({', '.join(values)}{',' if len(values) == 1 else ''})")
        return lines

    def program_source(self) -> str:
        """``make_args`` and ``f`` (and the autograd.Functions used), no imports."""
        parts = [FUNCTIONS[name].strip() + "\n\n\n" for name in self.functions_used()]
        make_args = ["def make_args():", "    g = torch.Generator().manual_seed(0)"]
        make_args += [f"    {line}" for line in self.setup]
        make_args.append(f"    return ({', '.join(self.args)},)")
        if self.again:
            make_args += ["", "", "def make_args_again():", "    a = list(make_args())"]
            make_args += ["    g = torch.Generator().manual_seed(1)", *(f"    {line}" for line in self.again)]
            make_args.append("    return tuple(a)")
        f = [f"def f({', '.join(self.params)}):"] + [f"    {line}" for line in self.body()]
        return "".join(parts) + "\n".join(make_args) + "\n\n\n" + "\n".join(f) + "\n"

    def source(self, mode: str = "training") -> str:
        """A runnable script (from the repository root) that checks this program against eager."""
        extra = "".join(f", {name}={value}" for name, value in self.tolerances().items())
        if mode != "training":
            extra = f", backward=False{extra}"
        calls = [f"check(f, make_args{extra})"]
        if self.again:  # the same compiled function, called again on other kinds of arguments
            calls = [f"compiled = {calls[0]}", f"check(f, make_args_again, compiled_fn=compiled{extra})"]
        if mode == "training":
            call = "\n".join(calls)
        else:
            context = "torch.inference_mode()" if mode == "inference_mode" else "torch.no_grad()"
            call = f"with {context}:\n" + "\n".join(f"    {line}" for line in calls)
        return f"import torch\n\nfrom tests.oracle import check\n\n\n{self.program_source()}\n\n{call}\n"

    def tolerances(self) -> dict[str, float]:
        """``check``'s tolerances: bfloat16 sums under autocast round differently in another order."""
        return {"rtol": AUTOCAST_RTOL, "atol": AUTOCAST_ATOL} if "autocast" in self.features else {}

    def compile(self) -> tuple[Callable[..., Any], Callable[[], tuple[torch.Tensor, ...]]]:
        """``(f, make_args)`` of this program."""
        namespace = self._namespace()
        return namespace["f"], namespace["make_args"]

    def compile_again(self) -> Callable[[], tuple[torch.Tensor, ...]] | None:
        """``make_args_again`` of this program (``reuse``), or None."""
        return self._namespace()["make_args_again"] if self.again else None

    def _namespace(self) -> dict[str, Any]:
        namespace: dict[str, Any] = {"torch": torch}
        exec(compile(self.program_source(), "<fuzz program>", "exec"), namespace)
        return namespace

    def size(self) -> tuple[int, int]:
        lines = sum(len(step.lines) for step in self.steps) + len(self.args) + len(self.returns) + len(self.again)
        return (lines, len(self.source()))

    def __repr__(self) -> str:
        return self.program_source()


# ---------------------------------------------------------------------------------------------
# Inputs


DTYPES = {"float": "torch.float32", "int": "torch.int64", "complex": "torch.complex64"}
SHAPES = [(3, 4), (2, 3, 4), (5,), (4, 1), (2, 2)]


def _dims(shape: tuple[int, ...]) -> str:
    return ", ".join(map(str, shape))


def _new(dtype: str, shape: tuple[int, ...]) -> str:
    """A fresh deterministic tensor of ``shape``."""
    if dtype == "int":
        return f"torch.randint(-4, 5, {tuple(shape)}, generator=g)"
    extra = ", dtype=torch.complex64" if dtype == "complex" else ""
    return f"torch.randn({_dims(shape) or '()'}, generator=g{extra})"


class _Inputs:
    def __init__(self, rng: random.Random, features: frozenset[str]) -> None:
        self.rng, self.features = rng, features
        self.setup: list[str] = []
        self.args: list[str] = []
        self.used: set[str] = set()
        self.count = 0

    def has(self, feature: str) -> bool:
        return feature in self.features

    def _use(self, feature: str) -> bool:
        self.used.add(feature)
        return True

    def dtype(self) -> str:
        if self.has("dtypes") and self.rng.random() < 0.35 and self._use("dtypes"):
            return self.rng.choice(["int", "complex"])
        return "float"

    def grad(self, dtype: str, kinds: list[str]) -> str:
        if dtype == "int":
            return "none"
        return self.rng.choice(kinds)

    def bind(self, expr: str) -> str:
        name = f"i{self.count}"
        self.count += 1
        self.setup.append(f"{name} = {expr}")
        return name

    def storage(self, dtype: str, shape: tuple[int, ...], grad: str) -> str:
        """A tensor to take inputs from; ``grad``: 'none', 'leaf' or 'non_leaf' (``leaf * 1``)."""
        name = f"s{len([line for line in self.setup if line.startswith('s')])}"
        if grad == "leaf":
            self.setup.append(f"{name} = {_new(dtype, shape)}.requires_grad_()")
        elif grad == "non_leaf":
            leaf = "l" + name[1:]
            self.setup.append(f"{leaf} = {_new(dtype, shape)}.requires_grad_()")
            self.setup.append(f"{name} = {leaf} * 1")
        else:
            self.setup.append(f"{name} = {_new(dtype, shape)}")
        return name

    def single(self) -> None:
        """One input with its own storage: plain, at an offset, strided, transposed or expanded."""
        rng, dtype = self.rng, self.dtype()
        layouts = ["plain", "plain"]
        layouts += ["offset"] * self.has("offset") + ["strided", "transposed"] * self.has("strided")
        layouts += ["expanded"] * self.has("expanded")
        layout = rng.choice(layouts)
        if layout != "plain":
            self._use(layout if layout in ("offset", "expanded") else "strided")
        kinds = ["none", "leaf", "non_leaf"] + ["leaf_geometry", "view_of_leaf"] * self.has("grad_kinds")
        grad = self.grad(dtype, kinds)
        if grad in ("leaf_geometry", "view_of_leaf"):
            self._use("grad_kinds")
        if layout == "plain":
            shape = rng.choice(SHAPES)
            view, storage_shape = "", shape
        elif layout == "offset":
            shape = rng.choice([(3, 4), (5,), (2, 2)])
            numel, offset = (shape[0] * (shape[1] if len(shape) > 1 else 1)), rng.randint(1, 6)
            storage_shape = (numel + offset + rng.randint(0, 3),)
            view = f"[{offset}:{offset + numel}]" + (f".view({_dims(shape)})" if len(shape) > 1 else "")
        elif layout == "strided":
            rows = rng.randint(2, 3)
            storage_shape, view = (rows, 8), rng.choice(["[:, ::2]", "[:, 1::3]", "[:, 2]"])
        elif layout == "transposed":
            storage_shape, view = (rng.randint(2, 4), 3), ".t()"
        else:
            storage_shape, view = rng.choice([((), ".expand(2)"), ((3, 1), ".expand(3, 4)"), ((1, 4), ".expand(2, 4)")])
        if self.has("inference_inputs") and rng.random() < 0.15 and self._use("inference_inputs"):
            # made under inference_mode: an inference tensor (requiring no grad)
            name = f"i{self.count}"
            self.count += 1
            self.setup.append(f"with torch.inference_mode(): {name} = {_new(dtype, storage_shape)}{view}")
            self.args.append(name)
            return
        if view == "":
            if grad in ("leaf_geometry", "view_of_leaf"):
                grad = "leaf"
            expr = _new(dtype, storage_shape)
            if grad == "leaf":
                expr += ".requires_grad_()"
            elif grad == "non_leaf":
                leaf = self.storage(dtype, storage_shape, "leaf")
                expr = f"{leaf} * 1"
            self.args.append(self.bind(expr))
            return
        if grad == "leaf_geometry":  # a leaf requiring grad of this geometry
            self.args.append(self.bind(f"{_new(dtype, storage_shape)}{view}.detach().requires_grad_()"))
            return
        storage = self.storage(dtype, storage_shape, {"view_of_leaf": "leaf", "leaf": "none"}.get(grad, grad))
        expr = f"{storage}{view}"
        if grad == "leaf":
            expr += ".detach().requires_grad_()" if self.has("grad_kinds") else ""
        self.args.append(self.bind(expr))

    def view_of(self, storage: str, first: bool) -> str:
        """A view of 1-D ``storage`` (24 elements) at a drawn offset."""
        rng = self.rng
        offset = rng.randint(1, 7) if (not first or self.has("offset")) else 0
        if offset and first:
            self._use("offset")
        kinds = ["slice", "slice2d"] + ["step", "column", "every_other", "t"] * self.has("strided")
        kinds += ["expand"] * self.has("expanded")
        kind = rng.choice(kinds)
        if kind in ("step", "column", "every_other", "t"):
            self._use("strided")
        n = rng.randint(3, 6)
        if kind == "slice":
            return f"{storage}[{offset}:{offset + n}]"
        if kind == "slice2d":
            return f"{storage}[{offset}:{offset + 6}].view(2, 3)"
        if kind == "step":
            return f"{storage}[{offset}:{offset + 2 * n}:2]"
        if kind == "column":
            return f"{storage}[{offset}:{offset + 12}].view(3, 4)[:, {rng.randint(0, 3)}]"
        if kind == "every_other":
            return f"{storage}[{offset}:{offset + 12}].view(3, 4)[:, ::2]"
        if kind == "t":
            return f"{storage}[{offset}:{offset + 12}].view(4, 3).t()"
        self._use("expanded")
        return f"{storage}[{offset}:{offset + 3}].expand(2, 3)"

    def group(self) -> None:
        """Two or three views of one storage."""
        dtype = self.dtype()
        grad = self.grad(dtype, ["none", "non_leaf", "leaf"])
        if grad == "leaf":
            self._use("grad_kinds")  # the inputs are views of a leaf
        storage = self.storage(dtype, (24,), grad)
        for i in range(self.rng.choice([2, 2, 3])):
            self.args.append(self.bind(self.view_of(storage, i == 0)))

    def one_storage(self) -> None:
        """All inputs from one storage: the same tensor twice, or same-shape views at offsets 0, k, 2k."""
        rng = self.rng
        shape = rng.choice([(4, 6), (3, 4), (2, 3, 4), (5,)])
        count, layout = rng.randint(2, 3), rng.choice(["duplicates", "overlapping", "disjoint"])
        grad = rng.choice(["none", "leaf", "non_leaf"])
        numel = 1
        for size in shape:
            numel *= size
        if layout == "duplicates":
            if grad == "non_leaf":
                expr = f"{self.storage('float', shape, 'leaf')} * 1"
            else:
                expr = _new("float", shape) + (".requires_grad_()" if grad == "leaf" else "")
            name = self.bind(expr)
            self.args += [name] * count
            return
        step = numel // 2 + 1 if layout == "overlapping" else numel
        storage = self.storage("float", (step * (count - 1) + numel,), grad)
        view = f".view({_dims(shape)})" if len(shape) > 1 else ""
        for i in range(count):
            self.args.append(self.bind(f"{storage}[{i * step}:{i * step + numel}]{view}"))

    def draw(self) -> tuple[list[str], list[str], frozenset[str]]:
        rng = self.rng
        if self.has("alias_groups") and rng.random() < 0.4:
            self._use("alias_groups")
            for _ in range(rng.randint(2, 3)):
                self.group() if rng.random() < 0.8 else self.single()
        elif self.has("alias_inputs") and rng.random() < 0.3:
            self._use("alias_inputs")
            self.one_storage()
        else:
            for _ in range(rng.randint(1, 3)):
                if self.has("alias_mixed") and rng.random() < 0.3 and not self.args:
                    self._use("alias_mixed")
                    self.group()
                else:
                    self.single()
        if self.has("alias_mixed") and rng.random() < 0.2 and len(self.args) < 4:
            self._use("alias_mixed")
            self.args.insert(rng.randint(0, len(self.args)), rng.choice(self.args))  # a duplicate
        return self.setup, self.args, frozenset(self.used)


# ---------------------------------------------------------------------------------------------
# Steps

Pred = Callable[[torch.Tensor], bool]


def _float(v: torch.Tensor) -> bool:
    return v.is_floating_point()


def _inexact(v: torch.Tensor) -> bool:
    return v.is_floating_point() or v.is_complex()


def _storage_numel(v: torch.Tensor) -> int:
    return v.untyped_storage().nbytes() // v.element_size()


def _literal(v: torch.Tensor) -> str:
    return {torch.float32: "2.0", torch.int64: "2", torch.complex64: "2j"}.get(v.dtype, "2")


def _dtype(v: torch.Tensor) -> str:
    return str(v.dtype)


class _Drawer:
    """Draws one step at a time over the live values of the simulation."""

    def __init__(self, rng: random.Random, features: frozenset[str], params: tuple[str, ...]) -> None:
        self.rng, self.features, self.params = rng, features, params
        self.fresh = 0

    def name(self) -> str:
        self.fresh += 1
        return f"v{self.fresh - 1}"

    def pick(self, values: dict[str, torch.Tensor], pred: Pred = lambda v: True) -> str | None:
        names = [n for n, v in values.items() if pred(v)]
        if not names:
            return None
        inputs = [n for n in names if n in self.params]
        if inputs and self.rng.random() < 0.4:
            return self.rng.choice(inputs)
        recent = names[-3:]
        return self.rng.choice(recent if self.rng.random() < 0.5 else names)

    def as_strided_args(self, v: torch.Tensor) -> str:
        """``size, stride, offset`` within ``v``'s storage (offset absolute)."""
        rng, numel = self.rng, _storage_numel(v)
        if numel == 0:
            return "(0,), (1,), 0"
        if rng.random() < 0.3 and numel >= 4:
            rows, stride = 2, rng.choice([1, 2])
            cols = rng.randint(1, max(1, min(3, (numel - 1) // (2 * stride) + 1)))
            span = (rows - 1) * cols * stride + (cols - 1) * stride
            offset = rng.randint(0, max(0, numel - 1 - span))
            return f"({rows}, {cols}), ({cols * stride}, {stride}), {offset}"
        stride = rng.choice([1, 1, 2, 0])
        size = rng.randint(1, max(1, min(4, numel if stride == 0 else (numel - 1) // max(stride, 1) + 1)))
        offset = rng.randint(0, max(0, numel - 1 - (size - 1) * stride))
        return f"({size},), ({stride},), {offset}"

    @staticmethod
    def resize_sizes(v: torch.Tensor) -> list[int]:
        """Sizes to ``resize_`` to: shrinking, or growing within the storage (a reallocation's
        new elements are uninitialized, so eager's own result would not be deterministic)."""
        room = _storage_numel(v) - v.storage_offset()
        return [size for size in (1, max(v.numel() - 1, 0), v.numel(), v.numel() + 2) if size <= room] or [0]

    # Each returns a Step or None (does not apply).

    def view(self, values: dict[str, torch.Tensor]) -> Step | None:
        rng = self.rng
        ops: list[tuple[str, Pred, Callable[[torch.Tensor], str]]] = [
            ("views", lambda v: v.dim() == 2, lambda v: "{x}.t()"),
            ("views", lambda v: v.dim() >= 2, lambda v: "{x}.transpose(0, -1)"),
            ("views", lambda v: v.dim() >= 1 and v.shape[0] > 1, lambda v: "{x}[1:]"),
            ("views", lambda v: v.dim() >= 1 and v.shape[-1] > 1, lambda v: f"{{x}}.narrow(-1, 1, {v.shape[-1] - 1})"),
            ("views", lambda v: v.dim() >= 1 and v.shape[0] > 0, lambda v: "{x}.select(0, 0)"),
            ("views", lambda v: v.dim() < 4, lambda v: "{x}.unsqueeze(0)"),
            ("views", lambda v: v.is_contiguous() or rng.random() < 0.1, lambda v: "{x}.view(-1)"),
            ("views", lambda v: v.dim() >= 2, lambda v: "{x}.diagonal()"),
            ("views", lambda v: v.dim() >= 1 and v.shape[-1] > 1, lambda v: "{x}[..., ::2]"),
            ("views", lambda v: True, lambda v: "{x}.detach()"),
            ("views", lambda v: True, lambda v: "{x} * 2"),
            ("views", _inexact, lambda v: "{x}.sin()"),
            ("views", lambda v: True, lambda v: "{x}.clone()"),
            ("views", lambda v: v.dim() >= 1, lambda v: "{x}.flip(0)"),
            ("data_detach", lambda v: True, lambda v: "{x}.data"),
            (
                "more_views",
                lambda v: v.dim() < 3,
                lambda v: f"{{x}}.expand(2, {_dims(tuple(v.shape))})".replace(", )", ")"),
            ),
            (
                "more_views",
                lambda v: v.dim() >= 1 and v.shape[0] >= 2,
                lambda v: "{x}.unfold(0, 2, " + str(rng.randint(1, 2)) + ")",
            ),
            ("more_views", lambda v: True, lambda v: f"{{x}}.as_strided({self.as_strided_args(v)})"),
            ("complex_views", lambda v: v.is_complex(), lambda v: "torch.view_as_real({x})"),
            ("complex_views", lambda v: v.is_complex(), lambda v: "{x}.real"),
            ("complex_views", lambda v: v.is_complex(), lambda v: "{x}.imag"),
            (
                "complex_views",
                lambda v: _float(v) and v.dim() >= 1 and v.shape[-1] == 2,
                lambda v: "torch.view_as_complex({x})",
            ),
            (
                "complex_views",
                lambda v: _float(v) and v.dim() >= 1 and v.shape[-1] % 2 == 0,
                lambda v: f"torch.view_as_complex({{x}}.unflatten(-1, ({v.shape[-1] // 2}, 2)))",
            ),
        ]
        ops = [op for op in ops if op[0] in self.features]
        for _ in range(6):
            feature, applies, make = rng.choice(ops)
            x = self.pick(values, applies)
            if x is None:
                continue
            out = self.name()
            return Step((f"{out} = {make(values[x]).format(x=x)}",), (out,), feature)
        return None

    def write(self, values: dict[str, torch.Tensor]) -> Step | None:
        """A data write, maybe under no_grad or through ``.data``/``detach()``."""
        rng = self.rng
        ops: list[tuple[str, Pred, Callable[[torch.Tensor, str], str]]] = [
            ("inplace", lambda v: True, lambda v, y: "{x}.add_(1)"),
            ("inplace", lambda v: True, lambda v, y: "{x}.mul_(2)"),
            ("inplace", lambda v: True, lambda v, y: "{x}.neg_()"),
            ("inplace", lambda v: True, lambda v, y: "{x}.zero_()"),
            ("inplace", lambda v: not v.is_complex(), lambda v, y: "{x}.clamp_(min=-0.5)"),
            ("inplace", _inexact, lambda v, y: "{x}.sigmoid_()"),
            ("write_kinds", lambda v: True, lambda v, y: f"{{x}}.fill_({_literal(v)})"),
            ("write_kinds", lambda v: True, lambda v, y: f"{{x}}.copy_({y})"),
            ("write_kinds", lambda v: True, lambda v, y: f"{{x}}.mul_({y})"),
            (
                "write_kinds",
                lambda v: v.dim() >= 1 and v.shape[0] > 0,
                lambda v, y: f"{{x}}.index_put_((torch.tensor([0]),), torch.tensor({_literal(v)}, dtype={_dtype(v)}))",
            ),
            ("write_kinds", lambda v: v.dim() >= 1, lambda v, y: "{x}.index_put_((torch.tensor([0]),), {x})"),
            (
                "write_kinds",
                lambda v: v.dim() >= 1 and v.shape[-1] > 0,
                lambda v, y: f"{{x}}.index_fill_(-1, torch.tensor([0]), {_literal(v)})",
            ),
            ("out", lambda v: True, lambda v, y: f"torch.neg({y}, out={{x}})"),
            ("out", lambda v: True, lambda v, y: f"torch.add({y}, 1, out={{x}})"),
            ("out", lambda v: True, lambda v, y: "torch.mul({x}, 2, out={x})"),
            (
                "more_writes",
                lambda v: True,
                lambda v, y: (
                    f"{{x}}.masked_fill_(torch.arange({v.numel()}).view({tuple(v.shape)}) % 2 == 0, {_literal(v)})"
                ),
            ),
            (
                "more_writes",
                lambda v: v.dim() >= 1 and v.shape[0] > 0,
                lambda v, y: "{x}.index_add_(0, torch.tensor([0]), torch.ones_like({x}[:1]))",
            ),
            (
                "more_writes",
                lambda v: v.dim() >= 1 and v.shape[0] > 0,
                lambda v, y: f"{{x}}.scatter_(0, torch.zeros({(1, *v.shape[1:])}, dtype=torch.long), {_literal(v)})",
            ),
            ("more_writes", _inexact, lambda v, y: f"torch.sin({y}, out={{x}})"),
            ("more_writes", lambda v: True, lambda v, y: f"torch.mul({y}, {y}, out={{x}})"),
            ("more_writes", lambda v: not v.is_complex(), lambda v, y: f"torch.clamp({y}, min=0, out={{x}})"),
        ]
        ops = [op for op in ops if op[0] in self.features]
        feature, applies, make = rng.choice(ops)
        x = self.pick(values, applies)
        if x is None:
            return None
        same = [n for n, v in values.items() if v.dtype == values[x].dtype and n != x]
        y = rng.choice(same) if same else x
        target, step_feature = x, feature
        wraps = ["plain", "plain"] + ["no_grad"] * ("no_grad_write" in self.features)
        wraps += [".data", ".detach()"] * ("data_detach" in self.features)
        wrap = rng.choice(wraps)
        if wrap in (".data", ".detach()"):
            target, step_feature = f"{x}{wrap}", "data_detach"
        line = make(values[x], y).replace("{x}", target)
        if wrap == "no_grad":
            return Step(
                ("with torch.no_grad():", f"    {line}"), (), "no_grad_write" if feature == "inplace" else feature
            )
        return Step((line,), (), step_feature if feature == "inplace" else feature)

    def has_other_views(self, values: dict[str, torch.Tensor], x: str) -> bool:
        """Whether a non-input value other than ``x`` shares ``x``'s storage."""
        ptr = values[x].untyped_storage().data_ptr()
        return any(
            n != x and n not in self.params and v.untyped_storage().data_ptr() == ptr and ptr != 0
            for n, v in values.items()
        )

    def metadata(self, values: dict[str, torch.Tensor]) -> Step | None:
        rng = self.rng
        ops: list[tuple[str, Pred, Callable[[torch.Tensor], str]]] = [
            ("metadata_inputs", lambda v: v.dim() <= 2, lambda v: "{x}.t_()"),
            ("metadata_inputs", lambda v: v.dim() >= 2, lambda v: "{x}.transpose_(0, -1)"),
            ("metadata_inputs", lambda v: v.dim() < 4, lambda v: "{x}.unsqueeze_(0)"),
            ("metadata_inputs", lambda v: True, lambda v: "{x}.squeeze_()"),
            ("as_strided_", lambda v: True, lambda v: f"{{x}}.as_strided_({self.as_strided_args(v)})"),
            (
                "resize_",
                lambda v: True,
                lambda v: f"{{x}}.resize_({rng.choice(self.resize_sizes(v))})",
            ),
        ]
        ops = [op for op in ops if op[0] in self.features]
        if not ops:
            return None
        feature, applies, make = rng.choice(ops)
        anywhere = "metadata_views" in self.features
        after_view = "metadata_after_view" in self.features
        x = self.pick(values, applies)
        if x is None:
            return None
        if x not in self.params and not anywhere:
            return None
        viewed = self.has_other_views(values, x)
        if viewed and not after_view:
            return None
        wraps = ["plain"] * 4 + [".data", ".detach()"] * ("metadata_data" in self.features)
        wrap = rng.choice(wraps)
        target = f"{x}{wrap}" if wrap != "plain" else x
        line = make(values[x]).format(x=target)
        if wrap != "plain":
            feature = "metadata_data"
        elif viewed:
            feature = "metadata_after_view"
        elif x not in self.params and feature == "metadata_inputs":
            feature = "metadata_views"
        return Step((line,), (), feature)

    def set_(self, values: dict[str, torch.Tensor]) -> Step | None:
        x = self.pick(values)
        if x is None:
            return None
        same = [n for n, v in values.items() if v.dtype == values[x].dtype and n != x]
        if not same:
            return None
        y = self.rng.choice(same)
        source = self.rng.choice([y, f"{y}.detach()", f"{y}.clone()"])
        if self.rng.random() < 0.1:  # the storage form (refused: a graph has no storage values)
            source = f"{y}.untyped_storage(), {y}.storage_offset(), {y}.shape, {y}.stride()"
        if self.rng.random() < 0.3:  # under grad mode: eager's history of it has no derivative
            return Step((f"{x}.set_({source})",), (), "set_")
        return Step(("with torch.no_grad():", f"    {x}.set_({source})"), (), "set_")

    def requires_grad_(self, values: dict[str, torch.Tensor]) -> Step | None:
        x = self.pick(values, _inexact)
        if x is None:
            return None
        line = f"{x}.requires_grad_()" if self.rng.random() < 0.75 else f"{x}.requires_grad = True"
        return Step((line,), (), "requires_grad_")

    def function(self, values: dict[str, torch.Tensor]) -> Step | None:
        name = self.rng.choice(sorted(FUNCTIONS))
        x = self.pick(values, _inexact)
        if x is None:
            return None
        if name == "WithSign":
            out, sign = self.name(), self.name()
            return Step((f"{out}, {sign} = WithSign.apply({x})",), (out, sign), "autograd_function", (name,))
        if name == "ScaledBySaved":
            dtype = values[x].dtype
            scale = self.pick(values, lambda v: v.dtype == dtype)
            out = self.name()
            return Step((f"{out} = ScaledBySaved.apply({x}, {scale})",), (out,), "autograd_function", (name,))
        out = self.name()
        return Step((f"{out} = {name}.apply({x})",), (out,), "autograd_function", (name,))

    def autocast_region(self, values: dict[str, torch.Tensor]) -> Step | None:
        """A matmul (bfloat16 under autocast) and maybe another step, in an autocast region."""
        x = self.pick(values, lambda v: v.dtype == torch.float32 and v.dim() == 2)
        if x is None:
            return None
        out = self.name()
        lines = [f"{out} = {x} @ {x}.mT"]
        defines = [out]
        if self.rng.random() < 0.3:  # a nested region where autocast is off again
            inner = self.name()
            lines += ['with torch.autocast("cpu", enabled=False):', f"    {inner} = {x} @ {x}.mT"]
            defines.append(inner)
        extra = self.simple(values) if self.rng.random() < 0.5 else None
        uses: tuple[str, ...] = ()
        if extra is not None:
            lines += extra.lines
            defines += extra.defines
            uses = extra.uses
        header = 'with torch.autocast("cpu", dtype=torch.bfloat16):'
        return Step((header, *(f"    {line}" for line in lines)), tuple(defines), "autocast", uses)

    def simple(self, values: dict[str, torch.Tensor]) -> Step | None:
        """One step of any enabled kind except a grad-mode region."""
        kinds: list[tuple[Callable[[dict[str, torch.Tensor]], Step | None], float]] = [
            (self.view, 4.0),
            (self.write, 4.0),
        ]
        if self.features & {"metadata_inputs", "as_strided_", "resize_"}:
            kinds.append((self.metadata, 3.0))
        if "set_" in self.features:
            kinds.append((self.set_, 0.4))
        if "requires_grad_" in self.features:
            kinds.append((self.requires_grad_, 0.4))
        if "autograd_function" in self.features:
            kinds.append((self.function, 0.8))
        total = sum(weight for _, weight in kinds)
        pick = self.rng.random() * total
        for kind, weight in kinds:
            pick -= weight
            if pick < 0:
                return kind(values)
        return kinds[-1][0](values)


class _Simulation:
    """Runs a program's steps eagerly while it is drawn (grad mode on, as in training)."""

    def __init__(self, setup: list[str], args: list[str]) -> None:
        self.setup, self.args = setup, args
        self.reset([])

    def reset(self, steps: list[Step]) -> None:
        namespace: dict[str, Any] = {"torch": torch}
        exec("g = torch.Generator().manual_seed(0)\n" + "\n".join(self.setup), namespace)
        self.namespace = {"torch": torch}
        self.values: dict[str, torch.Tensor] = {}
        for i, arg in enumerate(self.args):
            self.namespace[f"a{i}"] = namespace[arg]
            self.values[f"a{i}"] = namespace[arg]
        for source in FUNCTIONS.values():
            exec(source, self.namespace)
        for step in steps:
            assert self.run(step) is None

    def run(self, step: Step) -> BaseException | None:
        try:
            with warnings.catch_warnings(), torch.enable_grad():
                warnings.simplefilter("ignore")
                exec("\n".join(step.lines), self.namespace)
        except Exception as error:
            return error
        for name in step.defines:
            self.values[name] = self.namespace[name]
        return None


def _grad_mode_region(
    rng: random.Random, drawer: _Drawer, values: dict[str, torch.Tensor], nested: bool, depth: int = 0
) -> Step | None:
    """One step (or, ``nested``, a region) inside a ``no_grad``/``enable_grad``/``set_grad_enabled`` block."""
    feature = "grad_mode"
    inner: list[Step | None] = []
    if nested and depth < 2 and rng.random() < 0.5:
        feature = "nested_grad_mode"
        inner.append(drawer.simple(values) if rng.random() < 0.5 else None)
        inner.append(_grad_mode_region(rng, drawer, values, nested, depth + 1))
    else:
        inner.append(drawer.simple(values))
    # Drawn after the step, as programs without nested regions always drew it.
    header = rng.choice(["with torch.no_grad():", "with torch.enable_grad():", "with torch.set_grad_enabled(False):"])
    steps = [step for step in inner if step is not None]
    if not steps:
        return None
    lines = tuple(f"    {line}" for step in steps for line in step.lines)
    defines = tuple(name for step in steps for name in step.defines)
    uses = tuple(name for step in steps for name in step.uses)
    return Step((header, *lines), defines, feature, uses)


def draw_program(rng: random.Random, features: frozenset[str] = ALL, max_steps: int = 7) -> Program:
    """A program drawing only the given features (see the module docstring)."""
    setup, args, input_features = _Inputs(rng, features).draw()
    params = tuple(f"a{i}" for i in range(len(args)))
    simulation = _Simulation(setup, args)
    drawer = _Drawer(rng, features, params)
    steps: list[Step] = []
    wanted = rng.randint(1, max_steps)
    for _ in range(4 * wanted):
        if len(steps) >= wanted:
            break
        if "autocast" in features and rng.random() < 0.1:
            step = drawer.autocast_region(simulation.values)
        elif "grad_mode" in features and rng.random() < 0.12:
            step = _grad_mode_region(rng, drawer, simulation.values, "nested_grad_mode" in features)
        else:
            step = drawer.simple(simulation.values)
        if step is None:
            continue
        error = simulation.run(step)
        if error is None:
            steps.append(step)
            continue
        if rng.random() < 0.15:  # eager rejects this step: the program ends with it
            steps.append(step)
            break
        simulation.reset(steps)
    names = list(params) + [n for step in steps for n in step.defines]
    returns = tuple(rng.sample(names, k=min(len(names), rng.randint(0, 3))))
    program = Program(tuple(setup), tuple(args), tuple(steps), returns, True, input_features)
    if "reuse" in features and rng.random() < 0.5:
        program = _with_second_call(rng, program)
    return program


# ---------------------------------------------------------------------------------------------
# A second call (``reuse``)


def _original_args(program: Program) -> list[torch.Tensor]:
    namespace: dict[str, Any] = {"torch": torch}
    exec("g = torch.Generator().manual_seed(0)\n" + "\n".join(program.setup), namespace)
    return [namespace[arg] for arg in program.args]


def _grad_line(rng: random.Random, i: int, requires_grad: bool) -> str:
    """Make ``a[i]`` (a tensor of its own memory) require grad: as a leaf, or as a view of one."""
    if not requires_grad:
        return ""
    return rng.choice([f"a[{i}] = a[{i}].detach().requires_grad_()", f"a[{i}] = a[{i}].detach().requires_grad_()[...]"])


class _Again:
    """Draws the lines of ``make_args_again``: the arguments of ``make_args`` with one or two changed."""

    def __init__(self, rng: random.Random, program: Program) -> None:
        self.rng, self.program = rng, program
        self.values = _original_args(program)
        self.lines: list[str] = []
        self.storages = 0
        # Whether ``a[i]`` is an inference tensor after the lines so far: a change can follow another.
        self.inference_now = [v.is_inference() for v in self.values]

    def storage(self, i: int, numel: int, inference: bool = False) -> str:
        """A new storage for ``a[i]``, of ``numel`` elements and as many again as ``a[i]``'s has: a program's
        ``resize_`` growing within the old one grows within this one (past it, memory is uninitialized)."""
        v = self.values[i]
        name = f"r{self.storages}"
        self.storages += 1
        kind = {torch.int64: "int", torch.complex64: "complex"}.get(v.dtype, "float")
        line = f"{name} = {_new(kind, (numel + _storage_numel(v),))}"
        self.lines.append(f"with torch.inference_mode(): {line}" if inference else line)
        return name

    def exact(self, i: int) -> bool:
        return self.values[i].dtype != torch.int64

    def grad(self, i: int) -> bool:
        """Flip ``requires_grad``: a tensor requiring grad gets none, one requiring none becomes a leaf or a
        view of one (same memory and geometry)."""
        v = self.values[i]
        if not self.exact(i):
            return False
        if v.requires_grad:
            self.lines.append(f"a[{i}] = a[{i}].detach()")
            return True
        if self.inference_now[i]:
            # A normal tensor: an inference one cannot be saved, nor made to require grad outside inference_mode.
            self.lines.append(f"a[{i}] = a[{i}].clone()")
            self.inference_now[i] = False
        self.lines.append(_grad_line(self.rng, i, True))
        return True

    def inference(self, i: int) -> bool:
        """An inference tensor (requiring no grad) with ``a[i]``'s values."""
        v = self.values[i]
        if v.is_inference():
            return False
        r = self.storage(i, v.numel(), inference=True)
        self.lines.append(f"a[{i}] = {r}[:{v.numel()}].view({tuple(v.shape)})")
        self.inference_now[i] = True
        return True

    def relaid(self, i: int, kind: str) -> bool:
        """``a[i]`` in memory of its own at a storage offset, or strided (transposed or every other element)."""
        v = self.values[i]
        shape, numel = tuple(v.shape), v.numel()
        if v.is_inference() or numel == 0:
            return False
        if kind == "offset":
            offset = self.rng.randint(1, 3)
            r = self.storage(i, numel + offset)
            self.lines.append(f"a[{i}] = {r}[{offset}:{offset + numel}].view({shape})")
        elif v.dim() >= 2:
            r = self.storage(i, numel)
            dims = tuple(reversed(range(v.dim())))
            self.lines.append(f"a[{i}] = {r}[:{numel}].view({tuple(reversed(shape))}).permute{dims}")
        elif v.dim() == 1:
            r = self.storage(i, 2 * numel)
            self.lines.append(f"a[{i}] = {r}[: {2 * numel}:2]")
        else:
            return False
        self.inference_now[i] = False
        grad = v.requires_grad if self.rng.random() < 0.8 else not v.requires_grad
        if grad and self.exact(i):
            self.lines.append(_grad_line(self.rng, i, True))
        return True

    def alias(self, i: int) -> bool:
        """``a[i]`` and a later argument of its shape and dtype: the same tensor, or views of one storage; or,
        if ``a[i]`` shares its storage with another argument, memory of its own."""
        values, rng = self.values, self.rng
        v = values[i]
        key = v.untyped_storage()._cdata
        if any(j != i and w.untyped_storage()._cdata == key for j, w in enumerate(values)):
            r = self.storage(i, v.numel(), inference=v.is_inference())
            self.lines.append(f"a[{i}] = {r}[:{v.numel()}].view({tuple(v.shape)})")
            self.inference_now[i] = v.is_inference()
            if v.requires_grad:
                self.lines.append(_grad_line(rng, i, True))
            return True
        later = [j for j in range(i + 1, len(values)) if values[j].shape == v.shape and values[j].dtype == v.dtype]
        if not later:
            return False
        j = rng.choice(later)
        if rng.random() < 0.4 or v.is_inference() or v.numel() == 0:
            self.lines.append(f"a[{j}] = a[{i}]")
            self.inference_now[j] = self.inference_now[i]
            return True
        numel, shape = v.numel(), tuple(v.shape)
        shift = rng.randint(1, numel)  # numel: adjacent, not overlapping
        r = self.storage(i, numel + shift + _storage_numel(values[j]))
        if v.requires_grad or values[j].requires_grad:
            self.lines.append(f"{r}.requires_grad_()")
        self.lines.append(f"a[{i}], a[{j}] = {r}[:{numel}].view({shape}), {r}[{shift}:{shift + numel}].view({shape})")
        self.inference_now[i] = self.inference_now[j] = False
        return True

    def draw(self) -> tuple[str, ...]:
        rng = self.rng
        changes = [self.grad, self.inference, lambda i: self.relaid(i, "offset"), lambda i: self.relaid(i, "strides")]
        changes += [self.alias] * 2
        for _ in range(rng.choice([1, 1, 2])):
            for _ in range(4):
                if rng.choice(changes)(rng.randrange(len(self.values))):
                    break
        return tuple(line for line in self.lines if line)


def _with_second_call(rng: random.Random, program: Program) -> Program:
    """``program`` calling its compiled function again on changed arguments (if eager runs it there, in at
    most three tries: a program eager rejects on them tests less)."""
    drawn = program
    for _ in range(3):
        drawn = dataclasses.replace(program, again=_Again(rng, program).draw())
        if not drawn.again:
            continue
        try:
            with warnings.catch_warnings(), torch.enable_grad():
                warnings.simplefilter("ignore")
                f, again = drawn.compile()[0], drawn.compile_again()
                assert again is not None
                f(*again())
        except Exception:
            continue
        return drawn
    return drawn


@contextlib.contextmanager
def refused_clearly(counts: dict[str, int] | None = None) -> Iterator[None]:
    """A program aotfx refuses with its documented ``UnsupportedMutationError`` is not a finding."""
    try:
        yield
    except UnsupportedMutationError:
        if counts is not None:
            counts["refused"] += 1
        reject()


def programs(features: frozenset[str] = ALL) -> st.SearchStrategy[Program]:
    """Hypothesis strategy: ``draw_program`` fed by hypothesis' (shrinkable) random choices."""
    return st.randoms(use_true_random=False).map(lambda rng: draw_program(rng, features))
