"""Every ```python block of README.md runs as written, in order (blocks of other languages are not run)."""

from __future__ import annotations

import pathlib
import re

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)


def python_blocks(text: str) -> list[tuple[int, str]]:
    """``(first line number, code)`` of each fenced python block in ``text``."""
    return [(text.count("\n", 0, match.start(1)) + 1, match.group(1)) for match in BLOCK.finditer(text)]


BLOCKS = python_blocks(README.read_text())


def test_extracts_python_blocks_only():
    text = "x\n```bash\nrm -rf /\n```\n```python\na = 1\n```\n```python\nb = 2\n```\n"
    assert python_blocks(text) == [(6, "a = 1\n"), (9, "b = 2\n")]


def test_readme_has_python_snippets():
    assert BLOCKS, "README.md has no ```python block to test"


def test_readme_snippets_run_in_order():
    """The blocks run top to bottom in one namespace, as a reader would paste them into one session."""
    namespace = {"__name__": "__readme__"}
    for line, code in BLOCKS:
        # Padding keeps the line numbers of a traceback those of README.md.
        exec(compile("\n" * (line - 1) + code, str(README), "exec"), namespace)
