"""Builders for the history and snapshot tests: a project whose vault is committed to git over
several commits, and a CodeSmith side repo made with the same plumbing CodeSmith uses."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from toolkit.sources.snapshots import side_repo_for

HEADERS = {
    "patterns": "# Ledger: Patterns\n\nWhat worked.\n",
    "antipatterns": "# Ledger: Antipatterns\n\nWhat did not.\n",
    "tool-preferences": "# Ledger: Tool Preferences\n\nTools.\n",
    "edge-cases": "# Ledger: Edge Cases\n\nEdges.\n",
    "project-quirks": "# Ledger: Project Quirks\n\nQuirks.\n",
}


def git_env(when: int | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update({"GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "Dev",
                "GIT_AUTHOR_EMAIL": "dev@example.com", "GIT_COMMITTER_NAME": "Dev",
                "GIT_COMMITTER_EMAIL": "dev@example.com"})
    if when is not None:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = f"@{when} +0000"
    return env


def run(args: list[str], cwd: Path | None = None, when: int | None = None,
        input: bytes | None = None) -> str:
    proc = subprocess.run(args, cwd=cwd, env=git_env(when), capture_output=True, input=input,
                          check=False)
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stdout.decode().strip()


def entry_b(title: str, confidence: str = "low", reflections: int = 1,
            date: str = "2026-04-01", context: str = "Some context.",
            pattern: str = "Do the thing.", category: str = "implementation") -> str:
    """A Form B entry as /smith-reflect writes it."""
    return (f"---\n\n**Title:** {title}\n**Date:** {date}\n**Category:** {category}\n"
            f"**Confidence:** {confidence}\n**Source reflections:** {reflections}\n\n"
            f"**Context:** {context}\n\n**Pattern:** {pattern}\n\n"
            f"**Evidence:**\n- {date} -- session s.md: seen\n\n**Related:** None\n\n")


def entry_a(title: str, confidence: str = "low", observations: int = 1,
            date: str = "2026-04-01", pattern: str = "Do it.") -> str:
    """A Form A entry as the smith-ledger doc shows it."""
    return (f"## {title}\n\n- **Date:** {date}\n- **Category:** testing\n"
            f"- **Confidence:** {confidence}\n- **Observations:** {observations}\n"
            f"- **Source reflections:** {date}\n\n### Context\nCtx.\n\n### Pattern\n{pattern}\n\n"
            "---\n\n")


@dataclass
class Project:
    """A project repository with a Smith vault; ``commit`` writes the ledger and commits it."""

    root: Path
    clock: int = 1_775_000_000  # 2026-03-31 23:33:20 UTC; each commit one hour later
    commits: list[str] = field(default_factory=list)

    @property
    def ledger(self) -> Path:
        return self.root / ".smith" / "vault" / "ledger"

    @classmethod
    def create(cls, root: Path, git: bool = True) -> Project:
        p = cls(root)
        p.ledger.mkdir(parents=True)
        if git:
            run(["git", "init", "-q", "-b", "main", str(root)])
        return p

    def write(self, files: dict[str, list[str]]) -> None:
        for kind, header in HEADERS.items():
            body = "".join(files.get(kind, []))
            (self.ledger / f"{kind}.md").write_text(header + ("\n" + body if body else ""),
                                                    encoding="utf-8")

    def commit(self, message: str, files: dict[str, list[str]] | None = None) -> str:
        if files is not None:
            self.write(files)
        self.clock += 3600
        run(["git", "add", "-A"], cwd=self.root)
        run(["git", "commit", "-q", "--allow-empty", "-m", message], cwd=self.root,
            when=self.clock)
        sha = run(["git", "rev-parse", "HEAD"], cwd=self.root)
        self.commits.append(sha)
        return sha


@dataclass
class SideRepo:
    """A CodeSmith snapshot side repo for ``workspace``, built with CodeSmith's plumbing:
    ``git init`` with --git-dir/--work-tree, the deepseek-snapshots identity, gc.auto=0,
    core.autocrlf=false, then per snapshot ``add -A``, ``write-tree``, ``commit-tree -p HEAD
    -m <label>``, ``update-ref HEAD``."""

    workspace: Path
    git_dir: Path
    clock: int = 1_777_900_000  # 2026-05-04 13:06:40 UTC

    @classmethod
    def create(cls, workspace: Path, snapshots_home: Path) -> SideRepo:
        git_dir = side_repo_for(workspace, snapshots_home)
        git_dir.parent.mkdir(parents=True, exist_ok=True)
        side = cls(workspace, git_dir)
        side.git("init", "-q")
        for key, value in (("user.name", "deepseek-snapshots"),
                           ("user.email", "snapshots@codesmith.local"), ("gc.auto", "0"),
                           ("core.autocrlf", "false")):
            side.git("config", key, value)
        (git_dir / "info").mkdir(exist_ok=True)
        (git_dir / "info" / "exclude").write_text("node_modules/\ntarget/\n.toolkit/\n")
        return side

    def git(self, *args: str, when: int | None = None) -> str:
        return run(["git", f"--git-dir={self.git_dir}", f"--work-tree={self.workspace}", *args],
                   when=when)

    def head(self) -> str | None:
        proc = subprocess.run(["git", f"--git-dir={self.git_dir}", "rev-parse", "-q",
                               "--verify", "HEAD"], capture_output=True, env=git_env())
        return proc.stdout.decode().strip() or None

    def snapshot(self, label: str) -> str:
        self.clock += 60
        self.git("add", "-A")
        tree = self.git("write-tree")
        parent = ["-p", "HEAD"] if self.head() else []
        sha = self.git("commit-tree", tree, *parent, "-m", label, when=self.clock)
        self.git("update-ref", "HEAD", sha)
        return sha

    def prune_keep_last(self, n: int, when: int) -> None:
        """What CodeSmith's prune_keep_last_n does: rebuild the newest n snapshots as a new
        chain (new commit-tree calls, so new SHAs and times), then move HEAD to it."""
        lines = self.git("log", "--reverse", "--format=%T%x09%s").splitlines()
        parent = None
        for line in lines[-n:]:
            tree, label = line.split("\t", 1)
            args = ["commit-tree", tree, "-m", label] + (["-p", parent] if parent else [])
            when += 1
            parent = self.git(*args, when=when)
        assert parent is not None
        self.git("update-ref", "HEAD", parent)
