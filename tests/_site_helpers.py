"""Worlds for the site tests: the tests/fixtures/formats project, and the same with hostile entries
(FAULTS.md E1) in every source: vault, session log, slop ledger, audit DB."""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import re
import shutil
import sqlite3
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.conftest import FORMATS, copy_tree_writable, make_audit_db
from toolkit.config import Config, resolve
from toolkit.store import Store

BUILD_TIME = dt.datetime(2026, 5, 10, 12, 0, tzinfo=dt.UTC)
TODAY = dt.date(2026, 5, 10)

HOSTILE_TITLE = "<img src=x onerror=alert(1)>\u202e evil"
HOSTILE_TITLE_SHOWN = "<img src=x onerror=alert(1)><U+202E> evil"
FENCE_BREAK = "```\n</div><script>alert(3)</script>\n```"
HOSTILE_TEXT = (
    "<script>alert(1)</script> <img src=x onerror=alert(1)> [x](javascript:alert(1)) "
    "[y](data:text/html,<script>alert(2)</script>) {: onclick=\"alert(1)\" } "
    "--8<-- \"/etc/hostname\" {{ 7*7 }} {% raw %}"
)
HOSTILE_LEDGER_ENTRY = f"""
---

**Title:** {HOSTILE_TITLE}
**Date:** 2026-05-03
**Category:** testing
**Confidence:** low
**Source reflections:** 1

**Context:** <script>alert(1)</script> and {{{{ 7*7 }}}} and {{% raw %}}

**Pattern:** [x](javascript:alert(1)) then [y](data:text/html,<script>alert(2)</script>)
{{: onclick="alert(1)" }}
{FENCE_BREAK}
--8<-- "/etc/hostname"

**Evidence:**
- 2026-05-03 -- session s: <img src=x onerror=alert(4)> hostile-evidence-marker

**Related:** See patterns.md: 'Run the migration dry-run before applying schema changes'
"""
HOSTILE_TASK = "<script>alert('task')</script> fix {{ 7*7 }}"
# agent Markdown asking the browser to fetch from another host (rendered as links, never <img>)
MARKDOWN_IMAGES = ("\n\n![pixel](https://tracker.example/p.gif) ![beacon][b]\n\n"
                   "[b]: http://tracker.example/b.png")


@dataclass
class World:
    root: Path
    home: Path
    cfg: Config

    def env(self) -> dict[str, str]:
        """The environment the world's sources are found by, for a command of its own."""
        return world_env(self.home)


def world_env(home: Path) -> dict[str, str]:
    """HOME, the audit DB and CodeSmith's home of a world whose HOME is ``home``."""
    return {"HOME": str(home), "NAGI_LEDGER_DB": str(home / ".nagi" / "ledger.db"),
            "CODESMITH_HOME": str(home / ".codesmith")}


def make_world(base: Path, *, hostile: bool = False, analyses: bool = False) -> World:
    """A project from tests/fixtures/formats under ``base`` (HOME is ``base/home``); its site
    builds run the analysis notebooks only with ``analyses`` (tests/test_analyses.py)."""
    home = base / "home"
    root = base / "acme-api"
    vault = root / ".smith" / "vault"
    copy_tree_writable(FORMATS / "smith" / "ledger", vault / "ledger")
    copy_tree_writable(FORMATS / "smith" / "sessions", vault / "sessions")
    shutil.copy(FORMATS / "smith" / "config.json", root / ".smith" / "config.json")
    slop = home / ".codesmith" / "slop_ledger" / "slop_ledger.json"
    slop.parent.mkdir(parents=True)
    shutil.copy(FORMATS / "codesmith" / "slop_ledger.json", slop)
    slop.chmod(0o644)
    audit = make_audit_db(home / ".nagi" / "ledger.db")
    if hostile:
        add_hostile(vault, slop, audit)
    cfg = resolve(project=root, env=world_env(home), cwd=root, today=TODAY.isoformat())
    if hostile:  # its hostile action names a hostile project: show every project's actions
        cfg = cfg.with_overrides(site_scope="all")
    return World(root=root, home=home, cfg=cfg.with_overrides(analyses=analyses))


def add_hostile(vault: Path, slop: Path, audit: Path) -> None:
    patterns = vault / "ledger" / "patterns.md"
    patterns.write_text(patterns.read_text(encoding="utf-8") + HOSTILE_LEDGER_ENTRY,
                        encoding="utf-8")
    session = next((vault / "sessions").glob("*.md"))
    session.write_text(session.read_text(encoding="utf-8") + (
        "\n### [15:00:00] User prompt\n\n> <script>alert('prompt')</script>\n> {{ 7*7 }}\n"),
        encoding="utf-8")
    data = json.loads(slop.read_text(encoding="utf-8"))
    data["entries"].append({
        "id": "deadbeef-0000-4000-8000-000000000001", "bucket": "stale_docs",
        "severity": "high", "confidence": "high", "owner": "<b onmouseover=alert(1)>x</b>",
        "source_links": ["javascript:alert(1)", "data:text/html,<script>alert(1)</script>",
                         "https://example.com/ok?a=1&b=<2>", "src/x.py:1"],
        "title": HOSTILE_TITLE, "description": HOSTILE_TEXT + "\n" + FENCE_BREAK + MARKDOWN_IMAGES,
        "status": "open", "cleanup_recommendation": "<iframe src=javascript:alert(1)>",
        "created_at": "2026-05-01T00:00:00+00:00", "updated_at": "2026-05-01T00:00:00+00:00",
        "task_id": HOSTILE_TASK})
    slop.write_text(json.dumps(data, indent=2), encoding="utf-8")
    conn = sqlite3.connect(audit)
    conn.execute("INSERT INTO actions (ts, tier, category, description, project) VALUES "
                 "('2026-05-09 10:00:00', 2, '<script>alert(1)</script> $\\frac$', ?, ?)",
                 [HOSTILE_TEXT, "<img src=x onerror=alert(5)>"])
    conn.execute("INSERT INTO dispatches (ts, task, agent_type, model, brief_summary, verdict) "
                 "VALUES ('2026-05-09 10:01:00', ?, 'general-purpose', 'inherit', ?, NULL)",
                 [HOSTILE_TASK, HOSTILE_TEXT])
    conn.execute("INSERT INTO approaches (ts, task, approach, outcome, reason) VALUES "
                 "('2026-05-09 10:02:00', ?, ?, 'DEAD_END', ?)",
                 [HOSTILE_TASK, "[click](javascript:alert(1))", HOSTILE_TEXT])
    conn.commit()
    conn.close()


@contextlib.contextmanager
def open_store(world: World) -> Iterator[Store]:
    """The world's store, opened under a lock file beside it: the session-wide worlds
    (conftest's formats_site and hostile_site) are shared by the xdist workers, and DuckDB lets
    one process at a time open a store (another gets BusyError)."""
    from toolkit.loaders import SOURCES
    from toolkit.store import Store

    world.cfg.db_path.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{world.cfg.db_path}.test-lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with Store.open(world.cfg.db_path, sources=SOURCES) as store:
            yield store


def build(world: World, out: Path | None = None, **kwargs):  # type: ignore[no-untyped-def]
    from toolkit.site import build_site

    with open_store(world) as store:
        store.refresh(world.cfg)
        return build_site(world.cfg, store, out=out, build_time=BUILD_TIME, **kwargs)


def keep_as_built(live: Path) -> Path:
    """A copy of ``live`` (a world with its site built) beside it, file times included
    (MkDocs' dirty build compares them): what :func:`put_back` restores."""
    as_built = live.with_name(live.name + "-as-built")
    shutil.copytree(live, as_built, symlinks=True)
    return as_built


def put_back(as_built: Path) -> Path:
    """The world :func:`keep_as_built` copied, at its own paths again (the store and the
    build folder name them), exactly as it was built: for a test that may change anything
    in it, without building it again. Each file the test left in its place gets its bytes,
    mode and times back in that same file, so the store finds every source as its first
    build recorded it (size, time and inode: :func:`toolkit.source.fingerprint_paths`) and
    a build with nothing changed loads nothing; what the test added goes, and what it
    removed or replaced comes back (as a new file, which the store reads again). A world
    that cannot be put back in place (a folder the test left unwritable) is copied whole."""
    live = as_built.with_name(as_built.name.removesuffix("-as-built"))
    try:
        if live.is_symlink() or live.is_file():  # (never written through)
            live.unlink()
        _restore(as_built, live)
    except OSError:
        shutil.rmtree(live)
        shutil.copytree(as_built, live, symlinks=True)
    return live


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def _restore(src: Path, dst: Path) -> None:
    """Make the folder ``dst`` hold what ``src`` holds, in place (see :func:`put_back`);
    ``dst`` is a real folder or nothing (a file or link in its place was removed)."""
    dst.mkdir(exist_ok=True)
    wanted = set(os.listdir(src))
    for name in sorted(set(os.listdir(dst)) - wanted):
        _remove(dst / name)
    for name in sorted(wanted):
        s, d = src / name, dst / name
        want = os.lstat(s)
        try:
            have: os.stat_result | None = os.lstat(d)
        except FileNotFoundError:
            have = None
        kind = stat.S_IFMT(want.st_mode)
        # another kind of file, or a file with another name elsewhere (a hard link: writing
        # in place would change that one too): replaced
        if have is not None and (stat.S_IFMT(have.st_mode) != kind or
                                 (kind == stat.S_IFREG and have.st_nlink > 1)):
            _remove(d)
            have = None
        if kind == stat.S_IFDIR:
            _restore(s, d)
            continue
        if kind == stat.S_IFLNK:
            if have is None or os.readlink(d) != os.readlink(s):
                if have is not None:
                    d.unlink()
                os.symlink(os.readlink(s), d)
            os.utime(d, ns=(want.st_atime_ns, want.st_mtime_ns), follow_symlinks=False)
            continue
        data = s.read_bytes()
        if have is None or have.st_size != want.st_size or d.read_bytes() != data:
            with open(d, "wb") as f:  # (the same file, when it is there)
                f.write(data)
        os.chmod(d, stat.S_IMODE(want.st_mode))
        os.utime(d, ns=(want.st_atime_ns, want.st_mtime_ns))
    own = os.stat(src)  # the folder's own, after its files changed it
    os.chmod(dst, stat.S_IMODE(own.st_mode))
    os.utime(dst, ns=(own.st_atime_ns, own.st_mtime_ns))


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


def differing_files(got: Path, want: Path) -> list[str]:
    """The files of two folders (two builds' sites) that are not the same bytes, or are in
    only one of them: [] when the folders hold the same files."""
    a, b = tree_bytes(got), tree_bytes(want)
    return sorted(p for p in a.keys() | b.keys() if a.get(p) != b.get(p))


class PageScan(HTMLParser):
    """Every start tag with its attributes, the <title> text and the page's visible text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.title = ""
        self.text: list[str] = []
        self._in: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))
        if tag not in ("br", "img", "meta", "link", "input", "hr"):
            self._in.append(tag)

    def handle_endtag(self, tag: str) -> None:
        while self._in:
            if self._in.pop() == tag:
                break

    def handle_data(self, data: str) -> None:
        if self._in and self._in[-1] == "title":
            self.title += data
        elif not self._in or self._in[-1] not in ("script", "style"):
            self.text.append(data)

    @property
    def body_text(self) -> str:
        return re.sub(r"\s+", " ", "".join(self.text))


def scan(path: Path) -> PageScan:
    s = PageScan()
    s.feed(path.read_text(encoding="utf-8"))
    s.close()
    return s



def search_terms(text: str, separator: str) -> set[str]:
    """What Material's search (lunr, in the browser) indexes of a search entry's text or of a
    phrase: its pieces between tags, whitespace and ``separator`` (the index config's, applied
    as JavaScript does: an ASCII ``\\b``), lower-cased."""
    plain = re.sub(r"<[^>]*>", " ", text)
    return {t.lower() for chunk in plain.split()
            for t in re.split(separator, chunk, flags=re.ASCII) if t}


@contextlib.contextmanager
def rows_read_whole() -> Iterator[list[object]]:
    """The keys of the ledger and slop entries whose rows the site reads whole while the block
    runs (toolkit.queries.site_ledger_rows / site_slop_rows: only for the pages it renders).
    Matched on the query's text: the fetch functions themselves are part of the pages'
    pickled digests, so they cannot be wrapped."""
    keys: list[object] = []
    real = Store.fetch_dicts

    def recording(self: Store, sql: str, params: object = None) -> list[dict[str, object]]:
        if "IN (SELECT unnest(" in sql and ("FROM ledger_entries" in sql
                                             or "FROM slop_entries" in sql):
            keys.extend(params[0])  # type: ignore[index]
        return real(self, sql, params)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Store, "fetch_dicts", recording)
        yield keys
