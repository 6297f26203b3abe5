"""Project rules checked on every run: functorch-free, lint-clean, type-clean."""

from __future__ import annotations

import ast
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("aot", "wrappers", "meta")
FORBIDDEN = ("torch._functorch", "functorch", "torch.func", "torch._subclasses.functional_tensor")


def _imports(path: pathlib.Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
            names += [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Attribute):
            # torch._functorch.x used without an import of its own
            parts = []
            value: ast.AST = node
            while isinstance(value, ast.Attribute):
                parts.append(value.attr)
                value = value.value
            if isinstance(value, ast.Name):
                names.append(".".join([value.id, *reversed(parts)]))
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "__import__" and node.args:
            if isinstance(node.args[0], ast.Constant):
                names.append(str(node.args[0].value))
    return names


def _is_forbidden(name: str) -> bool:
    return any(name == bad or name.startswith(bad + ".") for bad in FORBIDDEN)


def test_forbidden_import_detector_works():
    assert _is_forbidden("torch._functorch.aot_autograd")
    assert _is_forbidden("functorch.compile")
    assert _is_forbidden("torch.func")
    assert not _is_forbidden("torch.functional")
    assert not _is_forbidden("torch.fx")


def test_package_is_functorch_free():
    offenders = [
        f"{path.relative_to(ROOT)}: {name}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for name in _imports(path)
        if _is_forbidden(name)
    ]
    assert not offenders, "functorch-free rule broken:\n" + "\n".join(offenders)


def _tool(name: str) -> list[str]:
    if shutil.which(name) is None:
        pytest.fail(f"{name} is not installed: pip install -e '.[test]'")
    return [sys.executable, "-m", name]


def test_ruff():
    result = subprocess.run([*_tool("ruff"), "check", "."], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_on_the_whole_package():
    result = subprocess.run([*_tool("mypy"), "meta", "wrappers", "aot"], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_rejects_an_index_of_another_layer(tmp_path: pathlib.Path):
    """Each stage's meta is typed by its index spaces: a user-level index used below Dedupe does not type-check."""
    mixup = tmp_path / "mixup.py"
    mixup.write_text(
        "from meta.indices import DedupedArg, UserArg, UserOut\n"
        "from meta.view_and_mutation import OutputAliasInfo, ViewAndMutationMeta\n"
        "def below(meta: ViewAndMutationMeta[UserArg, UserOut]) -> ViewAndMutationMeta[DedupedArg, UserOut]:\n"
        "    return meta\n"
        "def aliased(info: OutputAliasInfo[DedupedArg, UserOut]) -> OutputAliasInfo[DedupedArg, UserOut]:\n"
        "    return OutputAliasInfo(info.output_type, True, info.spec, base_input=UserArg(0))\n"
    )
    result = subprocess.run([*_tool("mypy"), str(mixup)], capture_output=True, text=True, cwd=ROOT)
    assert result.stdout.count("error:") == 2, result.stdout


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _module_imports(path: pathlib.Path, modules: set[str]) -> set[str]:
    """The package's modules ``path`` imports anywhere (top level, inside functions, under TYPE_CHECKING).

    ``from P import N`` imports the module ``P.N`` when there is one, else names of ``P``.
    """
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in modules}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                found.add(submodule if submodule in modules else node.module)
    return found & modules


def _import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in sorted(graph[module]):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == module:
                    break
            if len(component) > 1 or module in graph[module]:
                circles.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return circles


def test_import_circle_detector_works():
    assert _import_circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _import_circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_in_the_package():
    paths = {_module_name(path): path for package in PACKAGES for path in (ROOT / package).rglob("*.py")}
    modules = set(paths)
    graph = {module: _module_imports(path, modules) - {module} for module, path in paths.items()}
    circles = _import_circles(graph)
    assert not circles, "modules importing each other in a circle: " + "; ".join(" <-> ".join(c) for c in circles)
