"""The main job, ``python -m aot``, run in-process for two steps: it must succeed and print matching losses."""

from __future__ import annotations

import re

import pytest

from aot.__main__ import main


def test_main_job_two_steps(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--steps", "2"]) == 0
    out = capsys.readouterr().out
    rows = re.findall(r"^\s+(\d+)\s+([-\d.]+)\s+([-\d.]+)\s+\S+\s+(ok|MISMATCH)$", out, flags=re.MULTILINE)
    assert [int(step) for step, *_ in rows] == [1, 2], out
    for _, eager, compiled, verdict in rows:
        assert verdict == "ok"
        assert float(eager) == pytest.approx(float(compiled), rel=1e-5)
    assert "eval (model.eval(), no_grad)" in out and "MISMATCH" not in out
    assert "result: compiled matches eager" in out
    assert re.search(r"forward \d+ ops, backward \d+ ops, inference \d+ ops", out)


def test_main_job_rejects_zero_steps() -> None:
    with pytest.raises(SystemExit):
        main(["--steps", "0"])
