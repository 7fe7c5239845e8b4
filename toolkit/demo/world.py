"""The demo world's builder: the acme-api repository with its Smith vault history, the
CodeSmith turn snapshots, and the files beside them (slop ledger, audit DB, goal gate)."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from textwrap import dedent

from toolkit.demo.content import (
    BASE_FILES,
    CONFIDENCE_COMMITS,
    ENTRIES,
    MOMENTS,
    PEOPLE,
    SESSION_BY_KEY,
    SESSIONS,
    SMITH_CONFIG,
    TURNS,
    UNRELEASED,
    Edit,
    moment,
    random_stream,
)
from toolkit.demo.records import (
    audit_rows,
    goals,
    slop_entries,
    write_audit_db,
    write_slop_ledger,
)
from toolkit.demo.smith import Ledger, session_name, session_start, session_text
from toolkit.errors import ToolkitError
from toolkit.records import LEDGER_FILES
from toolkit.sources.snapshots import side_repo_for


@dataclass(frozen=True)
class DemoWorld:
    """Where ``write_demo`` put everything, and how much of each it wrote."""

    root: Path  # DIR
    project: Path  # DIR/acme-api (has .smith/ and toolkit.yaml)
    codesmith_home: Path  # DIR/codesmith
    slop_path: Path  # DIR/codesmith/slop_ledger/slop_ledger.json
    audit_db: Path  # DIR/nagi/ledger.db
    goal_file: Path  # DIR/nagi/goal.json
    goal_history: Path  # DIR/nagi/goal_history.jsonl
    snapshots_home: Path  # DIR/codesmith/snapshots
    side_repo: Path  # the side repo's .git dir for the project workspace
    today: dt.date  # the demo's pinned "today" (anchor + 1 day)
    counts: dict[str, int]


# CodeSmith's snapshot identity (its side repo's user.name and user.email)
SNAPSHOT_IDENT = ("deepseek-snapshots", "snapshots@codesmith.local")


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode("utf-8"))


def _d(text: str) -> str:
    """Dedent a triple-quoted block and drop its first newline."""
    return dedent(text).lstrip("\n")


class _Git:
    """git through the toolkit's one runner (``sources.snapshots.run_git``: no inherited GIT_*
    variables, no system config), here also without the user's global config, ignore rules
    and attributes (git reads ``~/.config/git/ignore`` and ``attributes`` with no config file
    naming them: a user's ``*.md`` left the ledger out of every commit), in UTC, with
    explicit identity and dates."""

    def __init__(self, exe: str) -> None:
        self.exe = exe
        self.env = {"TZ": "UTC", "LANG": "C", "GIT_CONFIG_GLOBAL": os.devnull,
                    "GIT_OPTIONAL_LOCKS": "0"}

    def run(self, *args: str, cwd: Path | None = None, when: dt.datetime | None = None,
            who: tuple[str, str] | None = None, input: bytes | None = None,
            ok: tuple[int, ...] = (0,), strip: bool = True) -> str:
        from toolkit.sources.snapshots import run_git

        env = dict(self.env)
        if when is not None:
            stamp = f"{int(when.timestamp())} +0000"
            env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = stamp
        if who is not None:
            env["GIT_AUTHOR_NAME"] = env["GIT_COMMITTER_NAME"] = who[0]
            env["GIT_AUTHOR_EMAIL"] = env["GIT_COMMITTER_EMAIL"] = who[1]
        proc = run_git(["-c", "gc.auto=0", "-c", "maintenance.auto=false",
                        "-c", "commit.gpgsign=false", "-c", "core.fsmonitor=false",
                        "-c", "init.defaultBranch=main", "-c", f"core.excludesFile={os.devnull}",
                        "-c", f"core.attributesFile={os.devnull}", *args], cwd=cwd, check=False,
                       input=input, extra_env=env, exe=self.exe)
        if proc.returncode not in ok:
            name = next((a for a in args if not a.startswith("-")), "")
            raise ToolkitError(f"git {name} failed while writing the demo: "
                               f"{proc.stderr.decode('utf-8', 'replace').strip()}")
        out = proc.stdout.decode("utf-8", "replace")
        return out.strip() if strip else out


def _worktree(root: Path) -> dict[str, tuple[str, bytes]]:
    """Every file of the work tree at ``root`` as ``git add -A`` reads it: relative path ->
    (git file mode, bytes); git never looks into a ``.git``. Ignore rules are applied later,
    by git itself (:meth:`_History.write`)."""
    files: dict[str, tuple[str, bytes]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        base = Path(dirpath)
        rel = base.relative_to(root).as_posix()
        for name in dirnames:
            if (base / name).is_symlink():
                raise AssertionError(f"the demo work tree has a symlink: {base / name}")
        dirnames[:] = sorted(d for d in dirnames if d != ".git")
        for name in filenames:
            if name == ".git":
                continue
            path = base / name
            st = path.lstat()
            if not stat.S_ISREG(st.st_mode):
                raise AssertionError(f"the demo work tree has a non-file: {path}")
            mode = "100755" if st.st_mode & stat.S_IXUSR else "100644"
            files[name if rel == "." else f"{rel}/{name}"] = (mode, path.read_bytes())
    return files


def _commit_message(message: str) -> str:
    """The message as ``git commit -m`` stores it (its "whitespace" clean-up): trailing
    spaces cut, runs of blank lines made one, no blank lines around, one final newline."""
    lines: list[str] = []
    for line in message.split("\n"):
        line = line.rstrip()
        if line or (lines and lines[-1]):
            lines.append(line)
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class _Commit:
    files: dict[str, tuple[str, bytes]]  # the work tree then (see _worktree)
    who: tuple[str, str]  # author and committer
    when: dt.datetime  # author and committer date
    message: str  # as it goes into the commit object
    reflog: str | None  # the reflog entry's message (None: an entry without one)


@dataclass
class _History:
    """The commits of one repository's main branch, recorded while the work tree is edited
    and written at the end by one ``git fast-import``, with the reflog and index that
    committing one by one (``git add -A`` and ``git commit``, or ``write-tree``,
    ``commit-tree`` and ``update-ref``) leaves: the same commits, byte for byte, from 3
    git processes (``check-ignore``, ``fast-import``, ``add -A``) instead of 4 or 5 per
    commit."""

    git: _Git
    repo: tuple[str, ...]  # git's arguments naming the repository (and its work tree)
    git_dir: Path
    worktree: Path
    commits: list[_Commit] = field(default_factory=list)

    def record(self, who: tuple[str, str], when: dt.datetime, message: str,
               reflog: str | None) -> None:
        self.commits.append(_Commit(_worktree(self.worktree), who, when, message, reflog))

    def write(self) -> list[str]:
        """Write the recorded commits; their SHAs, oldest first."""
        if not self.commits:
            return []
        rules = {p: c for p, c in _worktree(self.worktree).items()
                 if p.rsplit("/", 1)[-1] == ".gitignore"}
        if any({p: c for p, c in commit.files.items() if p.rsplit("/", 1)[-1] == ".gitignore"}
               != rules for commit in self.commits):
            raise AssertionError("a .gitignore changed between demo commits; the one check "
                                 "of the ignore rules below would not hold for every commit")
        paths = sorted(set().union(*(commit.files for commit in self.commits)))
        listed = self.git.run(*self.repo, "check-ignore", "--no-index", "--stdin", "-z",
                              cwd=self.worktree, input="".join(p + "\0" for p in paths)
                              .encode("utf-8"), ok=(0, 1), strip=False)
        ignored = set(listed.split("\0"))
        stream: list[bytes] = []
        blobs: dict[bytes, int] = {}
        for commit in self.commits:
            for path, (_mode, data) in commit.files.items():
                if path not in ignored and data not in blobs:
                    blobs[data] = len(blobs) + 1
                    stream += [b"blob\nmark :%d\ndata %d\n" % (blobs[data], len(data)), data,
                               b"\n"]
        marks: list[int] = []
        for commit in self.commits:
            marks.append(len(blobs) + len(marks) + 1)
            ident = f"{commit.who[0]} <{commit.who[1]}> {int(commit.when.timestamp())} +0000"
            message = commit.message.encode("utf-8")
            stream += [f"commit refs/heads/main\nmark :{marks[-1]}\nauthor {ident}\n"
                       f"committer {ident}\n".encode(),
                       b"data %d\n" % len(message), message, b"\ndeleteall\n"]
            for path, (mode, data) in sorted(commit.files.items()):
                if path not in ignored:
                    if path.startswith('"') or "\n" in path:
                        raise AssertionError(f"a demo path fast-import needs quoted: {path!r}")
                    stream.append(f"M {mode} :{blobs[data]} {path}\n".encode())
            stream.append(b"\n")
        stream += [b"get-mark :%d\n" % mark for mark in marks]
        stream.append(b"done\n")
        last = self.commits[-1]
        shas = self.git.run(*self.repo, "fast-import", "--quiet", "--done",
                            input=b"".join(stream), when=last.when, who=last.who).split()
        if len(shas) != len(marks):
            raise ToolkitError("git fast-import did not write every demo commit")
        old = "0" * 40
        log = []
        for commit, sha in zip(self.commits, shas, strict=True):
            entry = f"{old} {sha} {commit.who[0]} <{commit.who[1]}> " \
                    f"{int(commit.when.timestamp())} +0000"
            # git writes a reflog message with its whitespace runs made one space
            reflog = None if commit.reflog is None else \
                re.sub(r"[ \t\n\r]+", " ", commit.reflog).strip(" ")
            log.append(entry + (f"\t{reflog}" if reflog is not None else "")
                       + "\n")
            old = sha
        for name in ("HEAD", "refs/heads/main"):
            _write(self.git_dir / "logs" / name, "".join(log))
        self.git.run(*self.repo, "add", "-A", cwd=self.worktree)  # the index, as committed
        return shas


# =========================================================================== the builder


class _World:
    def __init__(self, root: Path, seed: int, anchor: dt.date, audit_rows: int, git_exe: str,
                 say: Callable[[str], None]) -> None:
        self.root = root
        self.seed = seed
        self.anchor = anchor
        self.audit_rows = audit_rows
        self.git = _Git(git_exe)
        self.say = say
        self.project = root / "acme-api"
        self.vault = self.project / ".smith" / "vault"
        self.codesmith = root / "codesmith"
        self.snapshots_home = self.codesmith / "snapshots"
        self.ledger = Ledger(anchor)
        self.session_rng = random_stream(seed, "sessions")
        self.session_texts = {s.key: session_text(s, anchor, self.session_rng)
                              for s in SESSIONS}
        self.vault_commits = 0
        self.snapshot_count = 0
        self.turn_actions: list[tuple[dt.datetime, int, str, str]] = []
        self.side_repo = side_repo_for(self.project, self.snapshots_home)
        self.history = _History(self.git, ("-C", str(self.project)), self.project / ".git",
                                self.project)
        self.snapshots = _History(self.git, (f"--git-dir={self.side_repo}",
                                             f"--work-tree={self.project}"),
                                  self.side_repo, self.project)

    def at(self, name: str) -> dt.datetime:
        return moment(self.anchor, *MOMENTS[name])

    def build(self) -> DemoWorld:
        self.say("Writing the project repository and its Smith vault history")
        self.build_project()
        self.say("Writing the CodeSmith slop ledger")
        slop_path = self.codesmith / "slop_ledger" / "slop_ledger.json"
        entries = slop_entries(self.seed, self.anchor)
        write_slop_ledger(slop_path, entries)
        self.say(f"Writing the nagi-ledger audit DB ({self.audit_rows} rows)")
        audit_db = self.root / "nagi" / "ledger.db"
        rows = audit_rows(self.seed, self.anchor, self.audit_rows, self.turn_actions)
        write_audit_db(audit_db, rows)
        self.say("Writing the nagi-ledger goal gate (goal.json, goal_history.jsonl)")
        goal_file, goal_history = self.root / "nagi" / "goal.json", \
            self.root / "nagi" / "goal_history.jsonl"
        state, closed = goals(self.anchor)
        _write(goal_file, json.dumps(state))  # as goal_gate.py writes: no newline, ASCII
        _write(goal_history, "".join(json.dumps(e) + "\n" for e in closed))
        today = self.anchor + dt.timedelta(days=1)
        _write(self.project / "toolkit.yaml", _d(f"""
            # Agent Ledger Toolkit settings for this demo checkout (written by `toolkit demo`).
            slop: ../codesmith/slop_ledger/slop_ledger.json
            audit_db: ../nagi/ledger.db
            goal_file: ../nagi/goal.json
            goal_history: ../nagi/goal_history.jsonl
            snapshots_home: ../codesmith/snapshots
            today: "{today:%Y-%m-%d}"
            """))
        final = self.ledger.state(self.at("final"))
        counts = {
            "ledger_entries": sum(len(v) for v in final.values()),
            "sessions": len(SESSIONS),
            "slop_entries": len(entries),
            "actions": len(rows.actions),
            "dispatches": len(rows.dispatches),
            "approaches": len(rows.approaches),
            "goal_events": len(closed),
            "snapshots": self.snapshot_count,
            "vault_commits": self.vault_commits,
        }
        return DemoWorld(root=self.root, project=self.project, codesmith_home=self.codesmith,
                         slop_path=slop_path, audit_db=audit_db, goal_file=goal_file,
                         goal_history=goal_history, snapshots_home=self.snapshots_home,
                         side_repo=side_repo_for(self.project, self.snapshots_home),
                         today=today, counts=counts)

    # ------------------------------------------------------------------ project repository

    def commit(self, when: dt.datetime, who: str, message: str) -> None:
        """``git add -A && git commit -m message``, recorded now, written by
        :meth:`_History.write`."""
        kind = "commit" if self.history.commits else "commit (initial)"
        message = _commit_message(message)
        self.history.record(PEOPLE[who].ident, when, message,
                            f"{kind}: {message.split(chr(10), 1)[0]}")

    def write_session(self, key: str) -> None:
        spec = SESSION_BY_KEY[key]
        _write(self.vault / "sessions" / f"{session_name(spec, self.anchor)}.md",
               self.session_texts[key])

    def write_ledger(self, t: dt.datetime, parts: str = "all") -> None:
        files = self.ledger.render(t)
        ledger = self.vault / "ledger"
        for name, text in files.items():
            is_meta = name in ("meta.yaml", ".meta.json")
            if parts == "all" or (parts == "meta") == is_meta:
                _write(ledger / name, text)
        if parts in ("all", "meta"):
            _write(ledger / "reconcile-log.md", self.ledger.reconcile_log(t))

    def changelog(self, line: str) -> None:
        """Add a line at the top of the Unreleased section."""
        path = self.project / "CHANGELOG.md"
        text = path.read_text(encoding="utf-8")
        _write(path, text.replace(UNRELEASED, f"{UNRELEASED}- {line}\n", 1))

    def build_project(self) -> None:
        p = self.project
        p.mkdir(parents=True)
        self.git.run("init", "-q", str(p))
        self.git.run("remote", "add", "origin", "git@github.com:acme-corp/acme-api.git", cwd=p)
        for rel, text in BASE_FILES.items():
            _write(p / rel, text)
        self.commit(self.at("import"), "jane", "Initial import of acme-api\n\nHistory before "
                    "this point lives in the old monorepo.")

        # The vault, as it stood when the team started committing it.
        vault_at = self.at("vault")
        _write(p / ".smith" / "config.json", json.dumps(SMITH_CONFIG, indent=2) + "\n")
        for key in ("L1", "L2", "A", "B", "C", "D"):
            self.write_session(key)
        stamp = self.at("reset").strftime("%Y-%m-%d-%H%M%S")
        for name, text in self.ledger.archive().items():
            _write(self.vault / "ledger" / "archive" / stamp / name, text)
        self.write_ledger(vault_at)
        self.commit(vault_at, "jane", "Commit the Smith vault: ledger, sessions and config\n\n"
                    "Following docs/manifest-system.md: ledger/, sessions/ and agents/ are "
                    "shared; pointers and workflow markers stay local.")
        self.vault_commits += 1

        events: list[tuple[dt.datetime, str, str]] = []
        for spec in SESSIONS:
            if spec.key in ("E", "F", "G", "H", "I", "J", "K"):
                when = session_start(spec, self.anchor) + dt.timedelta(
                    hours=2, minutes=17 + len(spec.branch))
                events.append((when, "session", spec.key))
        for name in ("promote", "reconcile2", "demote", "release"):
            events.append((self.at(name), name, name))
        events.sort()
        for when, kind, key in events:
            if kind == "session":
                spec = SESSION_BY_KEY[key]
                self.write_session(key)
                self.write_ledger(when)
                self.changelog(spec.commit)
                self.commit(when, spec.author or "jane", f"{spec.commit}\n\nSmith: reflected on "
                            f"session {session_name(spec, self.anchor)}.")
                self.vault_commits += 1
            elif kind in CONFIDENCE_COMMITS:
                author, note = CONFIDENCE_COMMITS[kind]
                [(entry, level)] = [(e, conf) for e in ENTRIES for moment_name, conf
                                    in e.overrides if moment_name == kind]
                self.write_ledger(when)
                self.commit(when, author, f"smith-ledger: {kind} '{entry.title}' to {level}"
                            f"\n\n{note}")
                self.vault_commits += 1
            elif kind == "reconcile2":
                before = self.ledger.render(when - dt.timedelta(seconds=1))
                backup = self.vault / "ledger" / ".backups" / \
                    f"reconcile-{when:%Y-%m-%d-%H%M%S}"
                for name, text in before.items():
                    _write(backup / name, text)
                self.write_ledger(when)
                self.commit(when + dt.timedelta(seconds=29), "jane",
                            "smith-ledger: reconcile (1 merge, 1 prune)")
                self.vault_commits += 1
            elif kind == "release":
                text = (p / "CHANGELOG.md").read_text(encoding="utf-8")
                text = text.replace(UNRELEASED, f"{UNRELEASED}## 1.14.0 ({when:%Y-%m-%d})\n\n",
                                    1)
                _write(p / "CHANGELOG.md", text)
                for rel in ("pyproject.toml", "acme_api/__init__.py"):
                    path = p / rel
                    _write(path, path.read_text(encoding="utf-8").replace("1.13.2", "1.14.0"))
                self.commit(when, "omar", "Release 1.14.0")

        self.say("Making CodeSmith turn snapshots while editing the work tree")
        self.run_turns()

        self.write_session("N")
        final = self.at("final")
        self.changelog("Webhook retry budget (5 attempts), rounding fix, httpx 0.28")
        self.commit(final, "jane", "Webhook retry budget, drop legacy X-Api-Token auth, "
                    "rounding fix\n\nIncludes the CodeSmith turn edits of the last three days "
                    "and the Smith reflection on session "
                    f"{session_name(SESSION_BY_KEY['M'], self.anchor)}.")
        self.vault_commits += 1
        self.history.write()
        _write(self.project / ".git" / "COMMIT_EDITMSG", self.history.commits[-1].message)

        # Local, git-ignored state: the session pointers and the active workflow marker.
        newest = SESSION_BY_KEY["N"]
        log = self.vault / "sessions" / f"{session_name(newest, self.anchor)}.md"
        person = PEOPLE[newest.author or "jane"]
        for pointer in (".current-session", f".current-session-{person.slug}"):
            _write(self.vault / pointer, f"{log}\n")
        feature = newest.branch.split("-", 1)[1]
        _write(self.vault / "active-workflows" / f"{newest.branch}.yaml", _d(f"""
            workflow: smith-{newest.skill}
            feature: {feature}
            branch: {newest.branch}
            worktree: /tmp/smith-{feature}
            session_log: {log}
            started: "{session_start(newest, self.anchor):%Y-%m-%dT%H:%M:%SZ}"
            """))

    # ------------------------------------------------------------------ turn snapshots

    def side(self, *args: str, when: dt.datetime | None = None) -> str:
        return self.git.run(f"--git-dir={self.side_repo}", f"--work-tree={self.project}", *args,
                            when=when)

    def snapshot(self, label: str, when: dt.datetime) -> None:
        """CodeSmith's ``add -A``, ``write-tree``, ``commit-tree -p HEAD -m label`` and
        ``update-ref HEAD``, recorded now, written by :meth:`_History.write`."""
        self.snapshots.record(SNAPSHOT_IDENT, when, label + "\n", None)
        self.snapshot_count += 1

    def apply(self, edit: Edit, when: dt.datetime) -> None:
        op, rel = edit[0], edit[1]
        path = self.project / rel
        if op == "ledger":
            self.write_ledger(when, "md" if rel == "md" else "meta")
            for kind in LEDGER_FILES if rel == "md" else ():
                self.turn_actions.append((when, 0, "file_write",
                                          f"Edited .smith/vault/ledger/{kind}.md"))
            return
        if op == "write":
            _write(path, edit[2])
            self.turn_actions.append((when, 0, "file_write", f"Wrote {rel}"))
        elif op == "delete":
            path.unlink()
            self.turn_actions.append((when, 1, "file_write", f"Deleted {rel}"))
        elif op in ("replace", "append"):
            text = path.read_text(encoding="utf-8")
            if op == "append":
                new = text + edit[2]
            else:
                if edit[2] not in text:
                    raise AssertionError(f"demo turn edit does not apply to {rel}: {edit[2]!r}")
                new = text.replace(edit[2], edit[3], 1)
            _write(path, new)
            lines = abs(new.count("\n") - text.count("\n")) or 1
            self.turn_actions.append((when, 0, "file_write", f"Edited {rel} ({lines} lines)"))
        else:
            raise AssertionError(f"unknown demo edit {op}")

    def run_turns(self) -> None:
        rng = random_stream(self.seed, "turns")
        self.side_repo.parent.mkdir(parents=True)
        self.side("init", "-q")
        for key, value in (("user.name", SNAPSHOT_IDENT[0]),
                           ("user.email", SNAPSHOT_IDENT[1]), ("gc.auto", "0"),
                           ("core.autocrlf", "false")):
            self.side("config", key, value)
        _write(self.side_repo / "info" / "exclude",
               "# CodeSmith built-in snapshot excludes\n.git\n.toolkit/\n.venv/\nnode_modules/\n"
               "target/\n__pycache__/\n*.pyc\n")
        alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
        m_start = session_start(SESSION_BY_KEY["M"], self.anchor)
        wrote_m = False
        for seq, turn in enumerate(TURNS, 1):
            when, prompt = moment(self.anchor, turn.day, turn.time), turn.prompt
            if not wrote_m and when > m_start:
                self.write_session("M")  # the Smith session log of that afternoon
                wrote_m = True
            snippet = prompt.split("\n", 1)[0]
            if len(snippet) > 100:
                snippet = snippet[:100] + "…"
            self.snapshot(f"pre-turn:{seq}: {snippet}", when)
            for step in turn.steps:
                when += dt.timedelta(seconds=rng.randint(25, 140))
                if isinstance(step, str):  # "tool"
                    call = "call_" + "".join(rng.choice(alphabet) for _ in range(9))
                    self.snapshot(f"tool:{call}", when)
                else:
                    for edit in step:
                        self.apply(edit, when)
            when += dt.timedelta(seconds=rng.randint(20, 90))
            self.snapshot(f"post-turn:{seq}: {snippet}", when)
            self.turn_actions.append((when, 1, "git", f"CodeSmith turn {seq} finished: "
                                                      f"{snippet[:60]}"))
        self.snapshots.write()
