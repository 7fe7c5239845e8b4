"""`toolkit build-site --redact` (FAULTS.md H1): a site built from a world with secrets in
titles, task names, slop, sessions and audit rows holds none of them in any file (HTML, search
index, CSV/JSON downloads, file names), in any case; the handoff's links still resolve; and
handoff/publish warn when the site they link to was not redacted. CSV downloads cannot run a
formula in a spreadsheet (FAULTS.md I6)."""

from __future__ import annotations

import csv
import hashlib
import html
import json
import re
import shutil
import sqlite3
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

import pytest
from click.testing import CliRunner, Result

from tests._site_helpers import BUILD_TIME, World, build, make_world
from tests.conftest import isolate
from tests.test_secrets_in_links import STANDARD, _flat, _secret_part
from toolkit.config import Config, resolve
from toolkit.site import BuildResult

# One secret per place a value can come from; all twenty families appear somewhere.
SESSION_SECRET = "mysql -u root -pS3cure!pw9x app"
PROSE_SECRET = "the password is hunter2hunter2"


# GitHub tokens spelled as a viewer decodes them (FAULTS.md H3): an HTML character reference
# and a Markdown backslash escape. Any spelling of the token holds its 36-character body.
ENTITY_BODY = "Hq3Wz8Kp2Lm5Nb7Vc1Xd4Fg6Jt9Ry0Ua2Se8"
ESCAPE_BODY = "Tm4Pq9Zx2Cv7Bn1Kl5Hj8Gf3Ds6Aw0Er2Yu7"
PERCENT_BODY = "Vb6Nm1Qw8Er3Ty5Ui7Op9As2Df4Gh0Jk3Lz6"
SPELLED = f"ghp&#95;{ENTITY_BODY} and ghp\\_{ESCAPE_BODY} and ghp%5F{PERCENT_BODY}"


# Tokens glued to a word, hard-wrapped across a line break, and written in fullwidth letters:
# in a ledger entry's Context and a slop description. Each half of the wrapped ones must go.
GLUED_GHP = "ghp_" + "Gl8uEd2Tk5Wq9Zr3Xv6Nb1Mc4Hs7Jd0Fa2Ky"
GLUED_SK = "sk-proj-" + "Qz7Rt2Yu5Io8Pa1Sd4Fg6Hj9Kl3Zx0Cv"
WRAP_GHP = ("ghp_" + "Wr4pPd9Lm2Nx6B", "q8Vt1Zc5Hy3Kj7Gf0Ds2Ea")  # the two lines' parts
WRAP_AKIA = ("AKIA" + "Q7WRAPZ3XK", "5TN2VB")
FULLWIDTH_BODY = "Fw6Lt3Hr9Mz1Qp5Xk8Cv2Bn4Jd7Sg0Ya3Uw6"
FULLWIDTH_GHP = "".join(chr(ord(c) + 0xFEE0) for c in "ghp_" + FULLWIDTH_BODY)
MESSY = (f"the agent wrote TOKEN_{GLUED_GHP} and call_{GLUED_SK}, then pasted {WRAP_GHP[0]}\n"
         f"  {WRAP_GHP[1]} and {WRAP_AKIA[0]}\n> {WRAP_AKIA[1]} and {FULLWIDTH_GHP} for CI; "
         "words that start like a key id stay: Akiachak… and the akiapolaau...")
MESSY_PARTS = [GLUED_GHP, GLUED_SK, WRAP_GHP[0][4:], WRAP_GHP[1], WRAP_AKIA[0][4:],
               WRAP_AKIA[1] + " and", FULLWIDTH_BODY]


def _secrets() -> list[str]:
    return [_secret_part(s) for s in STANDARD] + ["S3cure!pw9x", "hunter2hunter2",
                                                  ENTITY_BODY, ESCAPE_BODY, PERCENT_BODY,
                                                  *MESSY_PARTS[:5]]


def _plant(world: World) -> None:
    vault = world.cfg.vault
    patterns = vault / "ledger" / "patterns.md"
    text = patterns.read_text(encoding="utf-8")
    for i, secret in enumerate(STANDARD[:7]):
        text += (f"\n---\n\n**Title:** Never log {secret}\n**Date:** 2026-05-03\n"
                 f"**Category:** sec {STANDARD[7 + i]}\n**Confidence:** high\n"
                 "**Source reflections:** 1\n\n"
                 f"**Context:** {PROSE_SECRET}\n\n**Pattern:** use {STANDARD[14 + i % 6]}\n")
    text += ("\n---\n\n**Title:** Spelled tokens\n**Date:** 2026-05-03\n**Category:** sec\n"
             "**Confidence:** high\n**Source reflections:** 1\n\n"
             f"**Context:** the agent wrote {SPELLED}\n\n**Pattern:** rotate them\n")
    text += ("\n---\n\n**Title:** Glued, wrapped and fullwidth tokens\n**Date:** 2026-05-03\n"
             "**Category:** sec\n**Confidence:** high\n**Source reflections:** 1\n\n"
             f"**Context:** {MESSY}\n\n**Pattern:** rotate them\n")
    patterns.write_text(text, encoding="utf-8")
    session = next((vault / "sessions").glob("*.md"))
    session.write_text(session.read_text(encoding="utf-8") + (
        f"\n### [15:00:00] User prompt\n\n> run {SESSION_SECRET}\n> and {STANDARD[8]}\n"),
        encoding="utf-8")
    slop = world.home / ".codesmith" / "slop_ledger" / "slop_ledger.json"
    data = json.loads(slop.read_text(encoding="utf-8"))
    for i, secret in enumerate(STANDARD):
        data["entries"].append({
            "id": f"5ec{i:05d}-0000-4000-8000-000000000000", "bucket": "stale_docs",
            "severity": "high", "confidence": "high", "owner": f"bot {STANDARD[-1 - i]}",
            "source_links": [f"https://ci.example.com/?token={secret}", "src/x.py:1"],
            "title": f"Leaked {secret}",
            "description": f"found {secret}\n{PROSE_SECRET}\n{SPELLED}\n{MESSY}",
            "status": "open", "cleanup_recommendation": f"rotate {secret}",
            "created_at": "2026-05-01T00:00:00+00:00", "updated_at": "2026-05-01T00:00:00+00:00",
            "task_id": f"Rotate {secret}"})
    slop.write_text(json.dumps(data, indent=2), encoding="utf-8")
    conn = sqlite3.connect(world.cfg.audit_db)
    for secret in STANDARD:
        task = f"Rotate {secret} now"
        conn.execute("INSERT INTO actions (ts, tier, category, description, project) VALUES "
                     "('2026-05-09 10:00:00', 2, ?, ?, ?)", [f"cat {secret}", f"used {secret}",
                                                            f"proj {secret}"])
        conn.execute("INSERT INTO dispatches (ts, task, agent_type, model, brief_summary, "
                     "verdict, verdict_ts, verdict_notes) VALUES ('2026-05-09 10:01:00', ?, "
                     "'general-purpose', 'inherit', ?, 'REFUTED', '2026-05-09 10:05:00', ?)",
                     [task, f"brief {secret}", f"notes {secret}"])
        conn.execute("INSERT INTO approaches (ts, task, approach, outcome, reason) VALUES "
                     "('2026-05-09 10:02:00', ?, ?, 'DEAD_END', ?)",
                     [task, f"try {secret}", f"because {secret}"])
    conn.commit()
    conn.close()


def _leaks(out: Path) -> list[tuple[str, str]]:
    """(file, secret) for every secret found in any file's name or content, in any case,
    also URL- and entity-decoded and spelled as a slug."""
    found = []
    for path in sorted(out.rglob("*")):
        rel = path.relative_to(out).as_posix()
        hits = set(_secrets_in(rel))
        if path.is_file():
            data = path.read_bytes()
            digest = hashlib.sha256(data).digest()
            if digest not in _SCANNED:
                _SCANNED[digest] = _secrets_in_bytes(data)
            hits.update(_SCANNED[digest])
        found += [(rel, secret) for secret in _secrets() if secret in hits]
    return found


def _secrets_in(text: str) -> list[str]:
    """The secrets ``text`` holds, in any case, or spelled as a slug."""
    folded, flat = text.casefold(), _flat(text)
    return [s for s in _secrets() if s.casefold() in folded or _flat(s).strip("-") in flat]


# the secrets found in each file content scanned so far, by its sha256: the sites of this
# module share their theme's files, scanned once
_SCANNED: dict[bytes, frozenset[str]] = {}


def _secrets_in_bytes(data: bytes) -> frozenset[str]:
    """The secrets a file's bytes hold, as written, entity- or URL-decoded."""
    raw = data.decode("utf-8", "replace")
    return frozenset(s for text in (raw, html.unescape(raw), unquote(raw))
                     for s in _secrets_in(text))


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> World:
    """The formats world with the secrets planted, and formula-like audit rows (I6)."""
    world = make_world(tmp_path_factory.mktemp("secrets"))
    _plant(world)
    _plant_formulas(world)
    return world


@dataclass
class Built:
    """A site the tests only read, and whether its build said it redacted."""

    out: Path
    redacted: bool


@pytest.fixture(scope="module")
def plain(published: Published) -> Built:
    """The planted world's site built without redaction (the first build of ``published``,
    as it was then; the tests only read it)."""
    return Built(published.plain_site, "secrets redacted" in published.steps["build plain"].stdout)


@pytest.fixture(scope="module")
def redacted(planted: World, tmp_path_factory: pytest.TempPathFactory
             ) -> tuple[Config, BuildResult]:
    """The planted world's site built with ``redact: true`` in its toolkit.yaml (no redact
    argument): (the resolved Config, the BuildResult). The tests only read it."""
    (planted.root / "toolkit.yaml").write_text("redact: true\n", encoding="utf-8")
    try:
        env = {"HOME": str(planted.home), "NAGI_LEDGER_DB": str(planted.cfg.audit_db),
               "CODESMITH_HOME": str(planted.home / ".codesmith"),
               "TOOLKIT_ANALYSES": "0"}  # as the other builds of the planted world
        cfg = resolve(project=planted.root, env=env,
                      cwd=planted.root, today=planted.cfg.today.isoformat())  # type: ignore[union-attr]
        result = build(World(planted.root, planted.home, cfg),
                       out=tmp_path_factory.mktemp("redacted") / "site")
    finally:
        (planted.root / "toolkit.yaml").unlink()
    return cfg, result


def _csv_rows(path: Path) -> list[dict[str, str]]:
    """The rows of a CSV download, as a spreadsheet reads them."""
    with path.open(encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_plain_site_shows_the_secrets(plain: Built) -> None:
    """The test world really puts the secrets on pages (so the redacted check means something)."""
    assert not plain.redacted
    leaked = {secret for _, secret in _leaks(plain.out)}
    assert len(leaked) >= 20
    assert (plain.out / ".toolkit-site").read_text(encoding="utf-8").endswith("Redacted: no\n")


def test_redacted_site_holds_no_secret_in_any_file(redacted: tuple[Config, BuildResult]
                                                   ) -> None:
    _cfg, result = redacted

    assert result.redacted and result.warnings == []
    assert _leaks(result.out) == []
    assert (result.build_dir / "redacted.duckdb").exists() is False
    # everything is still there, redacted: pages, downloads, search entries
    index = json.loads((result.out / "search" / "search_index.json").read_text("utf-8"))
    assert any("[REDACTED]" in d["text"] or "[REDACTED]" in d["title"] for d in index["docs"])
    rows = _csv_rows(result.out / "data" / "dispatches.csv")
    assert len(rows) >= len(STANDARD)
    assert "Rotate [REDACTED] now" in {r["task"] for r in rows}
    assert (result.out / "audit" / "tasks" / "rotate-redacted-now" / "index.html").is_file()
    assert (result.out / ".toolkit-site").read_text(encoding="utf-8").endswith("Redacted: yes\n")


def test_spelled_tokens_leave_no_file_of_the_redacted_site(
        plain: Built, redacted: tuple[Config, BuildResult]) -> None:
    """FAULTS.md H3: a slop description and a ledger entry hold ``ghp&#95;…``, ``ghp\\_…``
    and ``ghp%5F…``, which a viewer or a browser shows as the tokens. The plain site's
    downloads keep those spellings; the redacted site has none of them, nor the plain token,
    in any file (pages, search index, data downloads)."""
    spelled = [f"ghp&#95;{ENTITY_BODY}", f"ghp\\_{ESCAPE_BODY}", f"ghp%5F{PERCENT_BODY}"]
    plain_json = (plain.out / "data" / "slop_entries.json").read_text(encoding="utf-8")
    descriptions = [e["description"] for e in json.loads(plain_json)]
    assert all(any(s in d for d in descriptions) for s in spelled)
    plain_csv = (plain.out / "data" / "slop_entries.csv").read_text("utf-8")
    assert f"ghp&#95;{ENTITY_BODY}" in plain_csv and f"ghp%5F{PERCENT_BODY}" in plain_csv

    _cfg, result = redacted
    assert _leaks(result.out) == []  # any spelling holds the body: none is left anywhere
    for path in sorted(p for p in result.out.rglob("*") if p.is_file()):
        raw = path.read_bytes().decode("utf-8", "replace")
        for token in ("ghp_" + ENTITY_BODY, "ghp_" + ESCAPE_BODY, "ghp_" + PERCENT_BODY,
                      *spelled):
            assert token not in raw, (path.name, token)
    entries = json.loads((result.out / "data" / "slop_entries.json").read_text("utf-8"))
    assert any("[REDACTED] and [REDACTED] and [REDACTED]" in e["description"] for e in entries)
    rows = _csv_rows(result.out / "data" / "ledger_entries.csv")
    assert any("the agent wrote [REDACTED] and [REDACTED] and [REDACTED]" in r["context"]
               for r in rows)


def test_glued_wrapped_and_fullwidth_tokens_leave_no_file_of_the_redacted_site(
        plain: Built, redacted: tuple[Config, BuildResult]) -> None:
    """A ledger entry and the slop descriptions hold a token glued to a word (``TOKEN_ghp_…``,
    ``call_sk-proj-…``), two hard-wrapped across a line break (indented, quoted) and one in
    fullwidth letters. The plain site's downloads show them; the redacted site has no part of
    any in any file, also read NFKC-normalised (as a search engine or a copy reads the
    fullwidth one), and the text around them stays, with words that start "akia" before an
    ellipsis (the redacted build reads values case-folded too)."""
    plain_csv = (plain.out / "data" / "ledger_entries.csv").read_text("utf-8")
    descriptions = "\n".join(e["description"] for e in json.loads(
        (plain.out / "data" / "slop_entries.json").read_text("utf-8")))
    for part in [*MESSY_PARTS[:-1], FULLWIDTH_GHP]:
        assert part in plain_csv and part in descriptions, part

    _cfg, result = redacted
    assert _leaks(result.out) == []
    for path in sorted(p for p in result.out.rglob("*") if p.is_file()):
        raw = path.read_bytes().decode("utf-8", "replace")
        for text in (raw, unicodedata.normalize("NFKC", raw)):
            for part in MESSY_PARTS:
                assert part not in text, (path.name, part)
    rows = _csv_rows(result.out / "data" / "ledger_entries.csv")
    assert any("the agent wrote TOKEN_[REDACTED] and call_[REDACTED], then pasted [REDACTED]\n"
               "  [REDACTED] and [REDACTED]\n> [REDACTED] and [REDACTED] for CI; words that "
               "start like a key id stay: Akiachak… and the akiapolaau..." in r["context"]
               for r in rows)


def test_redact_setting_in_toolkit_yaml(redacted: tuple[Config, BuildResult]) -> None:
    """``redact: true`` in toolkit.yaml redacts a build that passes no redact argument (the
    site ``redacted`` is built so; test_redacted_site_holds_no_secret_in_any_file reads it
    whole)."""
    cfg, result = redacted
    assert cfg.redact is True
    assert result.redacted
    assert (result.out / ".toolkit-site").read_text(encoding="utf-8").endswith("Redacted: yes\n")
    assert not any(secret in (result.out / "data" / "dispatches.csv").read_text("utf-8")
                   for secret in _secrets())


@pytest.mark.parametrize("value", ["maybe", "1", "{a: 1}", "[true]", "'true'"])
def test_redact_setting_must_be_a_boolean(tmp_path: Path, value: str) -> None:
    from toolkit.errors import UsageError

    (tmp_path / "toolkit.yaml").write_text(f"redact: {value}\n", encoding="utf-8")
    with pytest.raises(UsageError, match="setting redact must be true or false, not "):
        resolve(project=tmp_path, env={"HOME": str(tmp_path)}, cwd=tmp_path)


# --------------------------------------------------------------------------- I6: downloads

FORMULAS = ["=HYPERLINK(\"http://evil.example\",\"x\")", "+1+cmd|' /C calc'!A0", "-2+3",
            "@SUM(1+1)*cmd|' /C calc'!A0", "\tTAB=1+1", "\rCR=1+1"]


def _plant_formulas(world: World) -> None:
    conn = sqlite3.connect(world.cfg.audit_db)
    for f in FORMULAS:
        conn.execute("INSERT INTO actions (ts, tier, category, description, project) VALUES "
                     "('2026-05-09 10:00:00', 2, ?, ?, NULL)", [f, f])  # in every site_scope
        conn.execute("INSERT INTO dispatches (ts, task, agent_type, model, brief_summary) "
                     "VALUES ('2026-05-09 10:01:00', ?, 'general-purpose', 'inherit', 'b')", [f])
    conn.commit()
    conn.close()


def test_csv_downloads_cannot_run_a_formula(plain: Built) -> None:
    result = plain  # the planted world has the FORMULAS in its audit DB

    checked = 0
    for path in sorted((result.out / "data").glob("*.csv")):
        with path.open(encoding="utf-8", newline="") as fh:
            for row in csv.reader(fh):
                for cell in row:
                    assert cell[:1] not in ("=", "+", "-", "@", "\t", "\r"), (path.name, cell)
                    checked += 1
    assert checked > 100
    with (result.out / "data" / "actions.csv").open(encoding="utf-8", newline="") as fh:
        descriptions = {r["description"] for r in csv.DictReader(fh)}
    assert {"'" + f for f in FORMULAS} <= descriptions  # shown as text, nothing lost
    with (result.out / "data" / "task_status.csv").open(encoding="utf-8", newline="") as fh:
        tasks = {r["task"]: r for r in csv.DictReader(fh)}
    assert "'-2+3" in tasks and tasks["'-2+3"]["dispatch_count"] == "1"  # numbers stay numbers
    # the JSON downloads are data for programs: values exactly as stored
    actions = json.loads((result.out / "data" / "actions.json").read_text(encoding="utf-8"))
    assert set(FORMULAS) <= {a["description"] for a in actions}


# --------------------------------------------------------------------------- links and warnings

def _env(world: World) -> dict[str, str]:
    return {**world.env(), "TOOLKIT_TODAY": "2026-05-10",
            "SOURCE_DATE_EPOCH": str(int(BUILD_TIME.timestamp()))}


@dataclass
class Published:
    """A copy of the planted project with site_url and site_dir set, taken through handoff,
    build-site and publish --dry-run as a user would: each step's result, and copies of the
    site as its first (plain) and its redacted build left it."""

    steps: dict[str, Result]
    plain_site: Path
    redacted_site: Path


@pytest.fixture(scope="module")
def published(planted: World, tmp_path_factory: pytest.TempPathFactory) -> Published:
    """Made once per module: the tests only read it."""
    from toolkit.cli import cli

    base = tmp_path_factory.mktemp("published")
    root = base / "proj"
    shutil.copytree(planted.root, root, ignore=shutil.ignore_patterns(".toolkit"))
    site = base / "public"
    (root / "toolkit.yaml").write_text(
        f"site_url: https://site.example/acme\nsite_dir: {site}\n", encoding="utf-8")
    runner = CliRunner()
    steps: dict[str, Result] = {}

    def run(step: str, *args: str) -> None:
        steps[step] = runner.invoke(cli, ["--project", str(root), *args], env=_env(planted),
                                    catch_exceptions=False)

    with pytest.MonkeyPatch.context() as mp:
        isolate(mp, base / "home")
        run("no build", "handoff")
        run("build plain", "build-site", "--no-redact")
        plain_site = shutil.copytree(site, base / "plain-site")
        run("handoff after plain", "handoff")
        run("publish after plain", "publish", "--repo", "acme/api", "--dry-run")
        run("build redacted", "build-site", "--redact")
        redacted_site = shutil.copytree(site, base / "redacted-site")
        run("handoff after redacted", "handoff", "--full")  # the listing links every task
        run("publish after redacted", "publish", "--repo", "acme/api", "--dry-run")
        run("build plain again", "build-site", "--no-redact")
        run("publish after plain again", "publish", "--repo", "acme/api", "--dry-run")
    return Published(steps, plain_site, redacted_site)


def test_handoff_links_resolve_on_the_redacted_site_and_warnings(published: Published
                                                                 ) -> None:
    steps = published.steps
    first = steps["no build"]
    assert first.exit_code == 0
    assert "Warning: the report links to the site at site_url, and no site build is recorded" \
        in first.stderr

    assert steps["build plain"].exit_code == 0
    plain = steps["handoff after plain"]
    assert "which was last built without redaction" in plain.stderr
    assert "toolkit build-site --redact" in plain.stderr
    dry = steps["publish after plain"]
    assert dry.exit_code == 0 and "which was last built without redaction" in dry.stderr

    built = steps["build redacted"]
    assert built.exit_code == 0 and "secrets redacted" in built.stdout
    report = steps["handoff after redacted"]
    assert report.exit_code == 0
    assert "Warning" not in report.stderr
    site = published.redacted_site  # as the redacted build left it
    links = re.findall(r"\(https://site\.example/acme/([^)]*)\)", report.stdout)
    assert any(link.startswith("audit/tasks/rotate-redacted-now") for link in links)
    for link in links:  # every link from the report is a page of the site
        if link == "handoff/":  # the report itself, where the user publishes it
            continue
        assert (site / link / "index.html").is_file() or (site / link).is_file(), link
    assert _leaks(site) == []

    dry = steps["publish after redacted"]
    assert dry.exit_code == 0 and "Warning" not in dry.stderr
    # a plain build after the redacted one brings the warning back
    assert steps["build plain again"].exit_code == 0
    dry = steps["publish after plain again"]
    assert "which was last built without redaction" in dry.stderr


def test_query_csv_stays_faithful_for_programs(tmp_path: Path) -> None:
    """`toolkit query --format csv` is data for other programs: a formula-like value is
    printed exactly (the spreadsheet-safe CSVs are the site's downloads)."""
    from click.testing import CliRunner

    from toolkit.cli import cli

    world = make_world(tmp_path)
    result = CliRunner().invoke(
        cli, ["--project", str(world.root), "query", "SELECT '=1+1' AS f, -2 AS n",
              "--format", "csv"], env=_env(world), catch_exceptions=False)
    assert result.exit_code == 0
    assert list(csv.reader(result.stdout.splitlines())) == [["f", "n"], ["=1+1", "-2"]]


def test_a_secret_in_the_project_name_leaves_no_file_of_the_redacted_site(
        tmp_path: Path) -> None:
    """Every page's title is "Agent Ledger: <project name>" with the characters outside
    [A-Za-z0-9 ._-] made "-". That was done before the redaction, so `password=X` became
    `password-X`, which the redactor no longer reads: every page showed the password. The
    audit pages named the project unredacted too, and scoped the redacted copy's actions by
    the plain name, which none of them has after redaction. The name is redacted first now,
    and the project's own actions are still shown."""
    name = "acme-api db_password=Hunter2Zx9qAbc"
    world = make_world(tmp_path)
    conn = sqlite3.connect(world.cfg.audit_db)
    conn.execute("INSERT INTO actions (ts, tier, category, description, project) VALUES "
                 "('2026-05-09 10:00:00', 1, 'deploy', 'own-action-marker', ?)", [name])
    conn.commit()
    conn.close()
    world = World(world.root, world.home, world.cfg.with_overrides(project_name=name))
    out = build(world, out=tmp_path / "site", redact=True).out
    assert [p for p in out.rglob("*") if p.is_file()
            and b"Hunter2Zx9qAbc" in p.read_bytes()] == []
    index = (out / "index.html").read_text(encoding="utf-8")
    assert "<title>Dashboard - Agent Ledger: acme-api db_password-REDACTED</title>" in index
    actions = (out / "audit" / "actions" / "index.html").read_text(encoding="utf-8")
    assert "own-action-marker" in actions  # the project's own action, scoped in
