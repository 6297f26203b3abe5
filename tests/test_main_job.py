"""The main job, ``python -m aot``, run in-process for two steps: it must succeed and print matching losses."""

from __future__ import annotations

import re

import pytest

from aot.__main__ import main
from tests.oracle import MODEL_RTOL


def test_main_job_two_steps(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--steps", "2"]) == 0
    out = capsys.readouterr().out
    rows = re.findall(r"^\s+(\d+)\s+([-\d.]+)\s+([-\d.]+)\s+\S+\s+(ok|MISMATCH)$", out, flags=re.MULTILINE)
    assert [int(step) for step, *_ in rows] == [1, 2], out
    for _, eager, compiled, verdict in rows:
        assert verdict == "ok"
        assert float(eager) == pytest.approx(float(compiled), rel=MODEL_RTOL)
    assert "eval (model.eval(), no_grad)" in out and "MISMATCH" not in out
    assert "result: compiled matches eager" in out
    assert re.search(r"forward \d+ ops, backward \d+ ops, inference \d+ ops", out)


def test_main_job_rejects_zero_steps() -> None:
    with pytest.raises(SystemExit):
        main(["--steps", "0"])


def test_inspect_command_prints_graphs_of_a_user_function(tmp_path, monkeypatch, capsys) -> None:
    (tmp_path / "user_module_for_inspect.py").write_text(
        "import torch\n\ndef layer(x, w):\n    return torch.tanh(x @ w)\n"
    )
    monkeypatch.chdir(tmp_path)
    assert main(["inspect", "user_module_for_inspect:layer", "--shapes", "4x8", "8x3"]) == 0
    out = capsys.readouterr().out
    assert "forward graph" in out and "backward graph" in out and "aten.tanh.default" in out
    assert "user_module_for_inspect.py:4" in out  # saved values carry the user's source line
