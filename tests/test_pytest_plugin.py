"""The pytest plugin, through real `pytest` runs on a project in tmp_path: the fixtures in a
team's own tests, `--agent-checks` items, and nothing at all when its options are unused."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

TEAM_TESTS = '''
def test_no_refuted_dispatch_left(agent_sql):
    assert agent_sql("SELECT count(*) FROM dispatches WHERE verdict = ?", ["REFUTED"]) == [(0,)]


def test_the_project_is_refreshed_once(agent_project, agent_sql):
    assert agent_project.root.name == "acme-api"
    assert agent_sql("SELECT count(*) FROM slop_entries")[0][0] > 0


def test_no_stale_pending(agent_project):
    pending = [t for t in agent_project.tasks() if t["pending"]]
    assert pending == [], pending
'''


def pytest_run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)  # compiled bytecode goes to the run's cache (conftest), not the project
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "toolkit.pytest_plugin",
                           "-p", "no:cacheprovider", "-q", "-rA", "--rootdir", str(cwd), *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def team_project(project) -> Path:
    (project.root / "toolkit.yaml").write_text(textwrap.dedent('''\
        today: "2026-06-01"
        checks:
          - name: no-critical-slop
            sql: SELECT short_id FROM slop_entries WHERE severity = 'critical'
    '''))
    (project.root / "tests").mkdir()
    (project.root / "tests" / "test_agent.py").write_text(TEAM_TESTS)
    return project.root


def test_fixtures_in_a_teams_own_tests(project):
    root = team_project(project)
    result = pytest_run(root, "tests")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "PASSED tests/test_agent.py::test_no_refuted_dispatch_left" in result.stdout
    assert "PASSED tests/test_agent.py::test_the_project_is_refreshed_once" in result.stdout
    assert "FAILED tests/test_agent.py::test_no_stale_pending" in result.stdout
    assert "Audit logging for admin endpoints" in result.stdout
    assert "1 failed, 2 passed" in result.stdout
    assert (root / ".toolkit" / "ledger.duckdb").is_file()


def test_a_project_elsewhere_is_named_with_equals_and_a_run_pytest_rooted_in_it_is_refused(
        project, tmp_path):
    """pytest chooses its rootdir before it knows the plugin's options: a separate PATH after
    --agent-project counted as a test path, and with the project's own pyproject.toml the
    team's run was rooted in the project (its settings, test ids relative to it). Such a run
    is refused, saying to write --agent-project=PATH; that form roots the run in the team's
    folder and reads the project."""
    (project.root / "pyproject.toml").write_text("[project]\nname = 'acme-api'\n")
    team = tmp_path / "team"
    (team / "tests").mkdir(parents=True)
    (team / "tests" / "test_agent.py").write_text(
        "def test_reads(agent_project):\n    assert agent_project.root.name == 'acme-api'\n")

    def run(*args: str, tests: str = "tests", **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args,
                               tests], cwd=team, capture_output=True, text=True, timeout=300,
                              env={**os.environ, **env})

    message = (f"ERROR: pytest took {project.root} (after --agent-project) for a test path "
               f"when it chose its rootdir ({project.root}); write "
               f"--agent-project={project.root} (with '=')")
    refused = run("--agent-project", str(project.root))
    assert (refused.returncode, refused.stderr.strip()) == (4, message), refused.stdout
    # the same from PYTEST_ADDOPTS, which pytest reads before its rootdir too
    refused = run(PYTEST_ADDOPTS=f"--agent-project {project.root}")
    assert (refused.returncode, refused.stderr.strip()) == (4, message), refused.stdout
    # tests that live in the project root the run there rightly: not refused
    (project.root / "tests").mkdir()
    (project.root / "tests" / "test_own.py").write_text("def test_own(agent_project):\n"
                                                         "    assert agent_project.root\n")
    own = run("--agent-project", str(project.root), tests=str(project.root / "tests"))
    assert own.returncode == 0, own.stdout + own.stderr
    ok = run(f"--agent-project={project.root}", "-rA")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert f"rootdir: {team}" in ok.stdout
    assert "PASSED tests/test_agent.py::test_reads" in ok.stdout


def test_agent_checks_are_collected_one_item_per_check(project):
    root = team_project(project)
    result = pytest_run(root, "tests", "--agent-checks", "-k", "not stale_pending")
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    for name in ("stale-retries", "secrets", "meta-counts", "no-critical-slop"):
        assert f"PASSED agent-checks::{name}" in out
    assert "12 passed, 1 deselected" in out
    assert "12 passed, 1 deselected, 2 warnings" in out  # stale-pending, old-high-slop warn
    assert "AgentCheckWarning: stale-pending: 1 failing row(s)" in out

    conn = sqlite3.connect(project.audit_db)
    for hour in (10, 11, 12):
        conn.execute("INSERT INTO dispatches (ts, task, agent_type, model, brief_summary) "
                     "VALUES (?, 'stuck task', 'fork', 'm', 'b')", (f"2026-05-01 {hour}:00:00",))
    conn.commit()
    conn.close()
    result = pytest_run(root, "--agent-checks", "--agent-select", "audit",
                        "--agent-project", str(root), "tests/test_agent.py::"
                        "test_no_refuted_dispatch_left")
    assert result.returncode == 1
    assert "FAILED agent-checks::stale-retries" in result.stdout
    assert "stuck task | 2 | 2026-05-01 12:00:00" in result.stdout
    assert "1 failed, 2 passed" in result.stdout  # the test, stale-pending (warn), the failure


def test_a_bad_checks_entry_stops_the_run_with_one_line(project):
    root = team_project(project)
    (root / "toolkit.yaml").write_text("checks:\n  - name: bad\n    sql: DROP TABLE actions\n")
    result = pytest_run(root, "--agent-checks")
    assert result.returncode == 4  # pytest's usage error
    assert "check 'bad': only one read-only SELECT is allowed" in result.stderr


def test_the_plugin_costs_nothing_unused(tmp_path):
    """Without its options the plugin imports no part of the toolkit's store or API, and
    collects nothing: a plain project's tests run as they did."""
    (tmp_path / "test_plain.py").write_text(textwrap.dedent('''\
        import sys

        def test_nothing_of_the_toolkit_loaded():
            loaded = [m for m in ("duckdb", "toolkit.api", "toolkit.checks", "toolkit.store")
                      if m in sys.modules]
            assert loaded == []
    '''))
    result = pytest_run(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout and "agent-checks" not in result.stdout
