"""Every example in docs/guide/api.md runs against the demo world and prints what it shows."""

from __future__ import annotations

import doctest
from pathlib import Path

from toolkit.demo import write_demo

DOC = Path(__file__).resolve().parents[1] / "docs" / "guide" / "api.md"


def test_every_example_in_the_api_guide_runs_and_shows_its_output(tmp_path, monkeypatch):
    world = write_demo(tmp_path / "demo", audit_rows=3000)
    monkeypatch.chdir(world.project)
    text = DOC.read_text(encoding="utf-8")
    test = doctest.DocTestParser().get_doctest(text, {}, DOC.name, str(DOC), 0)
    assert len(test.examples) > 30
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    failures: list[str] = []
    runner.run(test, out=failures.append)
    assert runner.failures == 0, "\n".join(failures)
