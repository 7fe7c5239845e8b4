"""FAULTS.md A (reading side): bad ledger, meta and slop files are reported, never fatal, and
nothing is written to the user's files."""

from __future__ import annotations

import json

import pytest

from tests._store_helpers import project_with_store
from tests.conftest import tree_digest
from toolkit.sources.smith import parse_ledger_bytes

project = project_with_store()  # the store's schema made: not what these tests are about


def _entries(cli_run, where: str = "1=1") -> list[dict]:
    out = cli_run("query", f"SELECT file, title, category, confidence, problems, line FROM "
                  f"ledger_entries WHERE {where} ORDER BY file, position", "--format", "json")
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)  # (stderr may say a source could not be read)


def _warnings(cli_run) -> list[str]:
    data = json.loads(cli_run("status", "--json").stdout)
    return [f"{w['path']}:{w['line']}: {w['message']}" for w in data["warnings"]]


MALFORMED = """# Ledger: Patterns

---

**Title:** Good entry
**Date:** 2026-05-01
**Category:** testing
**Confidence:** high
**Source reflections:** 6

**Context:** c

**Pattern:** p

---

**Title:** Missing category and confidence
**Date:** 2026-05-02
**Source reflections:** 1

**Pattern:** still here

---

**Title:**
**Date:** 2026-05-03
**Category:** audit
**Confidence:** low

## Heading with no fields

---
"""


def test_a1_malformed_entries_are_kept_with_problems(project, cli_run):
    before = tree_digest(project.root / ".smith")
    (project.ledger / "patterns.md").write_text(MALFORMED)
    rows = _entries(cli_run, "file = 'patterns'")
    assert [r["title"] for r in rows] == ["Good entry", "Missing category and confidence", None,
                                          "Heading with no fields"]
    assert rows[0]["problems"] == []
    assert rows[1]["problems"] == ["missing Category", "missing Confidence"]
    assert rows[2]["problems"] == ["missing title"]
    assert rows[3]["problems"] == ["missing Date", "missing Category", "missing Confidence"]
    warnings = _warnings(cli_run)
    path = project.ledger / "patterns.md"
    assert f"{path}:17: missing Category" in warnings
    assert f"{path}:25: missing title" in warnings
    # other files unaffected
    assert len(_entries(cli_run, "file <> 'patterns'")) == 2
    after = tree_digest(project.root / ".smith")
    del before["vault/ledger/patterns.md"], after["vault/ledger/patterns.md"]
    assert before == after


def test_a2_mixed_forms_and_meta_disagreement_is_a_warning(project, cli_run):
    edge = project.ledger / "edge-cases.md"
    edge.write_text(edge.read_text() + "\n**Title:** A form B entry among form A\n"
                    "**Date:** 2026-05-04\n**Category:** testing\n**Confidence:** low\n")
    meta_before = (project.ledger / "meta.yaml").read_bytes()
    rows = _entries(cli_run, "file = 'edge-cases'")
    assert [r["title"] for r in rows] == ["Redis client drops pipelined commands after a failover",
                                          "A form B entry among form A"]
    assert any("meta.yaml says edge-cases has 1 entries; edge-cases.md has 2" in w
               for w in _warnings(cli_run))
    assert (project.ledger / "meta.yaml").read_bytes() == meta_before  # never "fixed" on read


@pytest.mark.parametrize("content,expected", [
    (None, "meta.yaml is missing"),
    ("", "meta.yaml is empty: its counts are unknown"),
    ("  \n\n", "meta.yaml is empty: its counts are unknown"),
    ("key:\n\t- tabbed\n", "meta.yaml:2: invalid YAML, column 1"),
    ('last_updated: "2026-05-01\n', "invalid YAML"),
    # values the safe loader cannot build (an impossible date, a bad tagged scalar), and
    # nesting deeper than the pre-scan's limit: a warning, never a traceback
    ("last_updated: 2026-13-45\n", "meta.yaml:1: invalid YAML, column 15: month must be in 1..12"),
    ("total_reflections: !!int twelve\n", "meta.yaml:1: invalid YAML, column 20"),
    ("x: " + "[" * 5000 + "]" * 5000 + "\n", "meta.yaml:1: YAML nested deeper than 200 levels"),
    # valid YAML of the wrong shape: a number or a list where every schema has a mapping
    ("last_updated: 2026-11-26\nentries: 5\n", "entries is a number, not a mapping (ignored)"),
    ("total_entries: 4\nentries_by_file: [1, 2]\n",
     "entries_by_file is a list, not a mapping (ignored)"),
    ("last_updated: 2026-11-26\nconfig: 30\n", "config is a number, not a mapping (ignored)"),
])
def test_a3_bad_meta_yaml_reads_proceed_with_a_warning(project, cli_run, content, expected):
    meta = project.ledger / "meta.yaml"
    if content is None:
        meta.unlink()
    else:
        meta.write_text(content)
    assert len(_entries(cli_run)) == 4
    assert any(expected in w for w in _warnings(cli_run)), _warnings(cli_run)


@pytest.mark.parametrize("ledger,expected", [
    ([1], "ledger is a list, not an object (ignored)"),
    ({"pruning": 7}, "ledger.pruning is a number, not an object (ignored: prune "
                     "uses the default limits)"),
])
def test_a3_a_smith_config_of_the_wrong_shape_is_a_warning_and_prune_keeps_the_defaults(
        project, cli_run, ledger, expected):
    """config.json's ``ledger`` (or ``ledger.pruning``) that is no object: every read goes on
    with a warning naming it, and prune uses the default limits (status, prune, the handoff
    and check ended in a traceback)."""
    (project.vault.parent / "config.json").write_text(json.dumps({"ledger": ledger}))
    assert len(_entries(cli_run)) == 4
    assert any(expected in w for w in _warnings(cli_run)), _warnings(cli_run)
    result = cli_run("ledger", "prune", "--dry-run", "--json")
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    assert json.loads(result.stdout)["limits_days"] == {"low": 30, "medium": 90}


def test_a26_a_count_too_large_for_the_store_is_a_warning_not_a_failed_load(project, cli_run):
    """One hand-edited count beyond the store's INTEGER column (an entry's Observations or
    Source reflections, meta.yaml's total_reflections) failed every command that loads the
    store with "a number is too large" (exit 2, no file named): each is now a warning naming
    the file, the field left empty, and everything else loads."""
    huge = "9" * 23
    edge = project.ledger / "edge-cases.md"
    edge.write_text(edge.read_text().replace("**Observations:** 2", f"**Observations:** {huge}"))
    patterns = project.ledger / "patterns.md"
    patterns.write_text(patterns.read_text().replace("**Source reflections:** 3",
                                                     f"**Source reflections:** {huge}", 1))
    meta = project.ledger / "meta.yaml"
    meta.write_text(meta.read_text() + f"total_reflections: {huge}\n")
    warnings = _warnings(cli_run)
    for expected in (f"edge-cases.md:5: Observations is too large a number: {huge}",
                     f"Source reflections is too large a number: {huge}",
                     f"meta.yaml:None: total_reflections is too large a number: {huge}"):
        assert any(expected in w for w in warnings), warnings
    assert len(_entries(cli_run)) == 4
    rows = cli_run("query", "SELECT title, observations, reflections FROM ledger_entries "
                   "WHERE file = 'edge-cases'", "--format", "json")
    assert [r["observations"] for r in json.loads(rows.stdout)] == [None]


GOOD_YAML = ("\ufefflast_updated: 2026-05-01\r\nsession_start: 2026-05-01T09:30:00+02:00\r\n"
             "base: &b {high: 3, low: 1}\r\nagain: *b\r\nname: Café ☕\r\n"
             "list: [1, 2.5, ~, yes, '007']\r\n")
# YAML no parser reads, and well-formed YAML whose values the safe loader cannot build
MALFORMED_YAML = ("key:\n\t- tabbed\n", 'last_updated: "2026-05-01\n', "counts: [1, 2\n",
                  "a: b: c\n", "- a\n b: c\n", "x: \x01\n")
UNBUILDABLE_YAML = ("last_updated: 2026-13-45\n", "x: !!python/object/apply:os.system ['true']\n")


def test_a3_yaml_reads_alike_with_or_without_libyaml(monkeypatch: pytest.MonkeyPatch) -> None:
    """PyYAML built with libyaml parses YAML about ten times faster, but says less about an
    error (not which character it could not read, nor what it expected): the same values, and
    for bad YAML the same message, whether the machine's PyYAML has libyaml or not; and a
    meta.yaml the editor refuses to update is described as a read describes it."""
    import yaml

    from toolkit.errors import DataError
    from toolkit.ledger.vault.meta import compose_yaml
    from toolkit.textio import load_yaml

    def outcomes() -> list[object]:
        out: list[object] = [load_yaml(GOOD_YAML, "meta.yaml")]
        for text in MALFORMED_YAML + UNBUILDABLE_YAML:
            with pytest.raises(DataError) as read:
                load_yaml(text, "meta.yaml")
            out.append(str(read.value))
            if text in UNBUILDABLE_YAML:
                continue  # the editor reads nodes, not values (its own test refuses the tag)
            with pytest.raises(DataError) as write:
                compose_yaml(text, "meta.yaml")
            assert (write.value.message, write.value.line) == (read.value.message, read.value.line)
        return out

    assert hasattr(yaml, "CSafeLoader")  # the venv's PyYAML (wheels are built with libyaml)
    fast = outcomes()
    assert fast[0]["again"] == {"high": 3, "low": 1} and fast[0]["name"] == "Café ☕"
    assert "found character '\\t' that cannot start any token" in fast[1]
    monkeypatch.delattr(yaml, "CSafeLoader")
    assert outcomes() == fast


def test_a4_python_object_tag_is_rejected_not_executed(project, cli_run, tmp_path):
    marker = tmp_path / "pwned"
    (project.ledger / "meta.yaml").write_text(
        f"x: !!python/object/apply:os.system ['touch {marker}']\n")
    assert len(_entries(cli_run)) == 4
    assert not marker.exists()
    assert any("could not determine a constructor" in w for w in _warnings(cli_run))


def test_a5_yaml_alias_bomb_rejected_fast(project, cli_run):
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 10):
        prev = chr(ord("a") + i - 1)
        cur = chr(ord("a") + i)
        lines.append(f"{cur}: &{cur} [" + ",".join([f"*{prev}"] * 9) + "]")
    (project.ledger / "meta.yaml").write_text("\n".join(lines) + "\n")
    warnings = _warnings(cli_run)
    assert any("refusing a possible alias bomb" in w for w in warnings)


@pytest.mark.parametrize("payload,message", [
    ('{"entries": [{"id": "x", "title": "t", "severity": NaN}]}', "NaN is not valid JSON"),
    ('{"entries": [], "entries": []}', "duplicate key 'entries'"),
    ("[" * 100_000 + "]" * 100_000, "JSON nested deeper than 200 levels"),
])
def test_a5_bad_slop_json_is_exit_65_with_a_clear_message(project, cli_run, payload, message):
    project.slop.write_text(payload)
    before = tree_digest(project.slop.parent)
    result = cli_run("load")
    assert result.exit_code == 65
    assert result.output.splitlines()[-1].startswith(f"Error: {project.slop}")
    assert message in result.output.splitlines()[-1]
    assert tree_digest(project.slop.parent) == before
    # the other sources still loaded
    assert len(_entries(cli_run)) == 4


@pytest.mark.parametrize("junk,offset", [
    (b"# Ledger\n\n**Title:** ok\n\xff\xfe broken\n", 24),
    (b"# Ledger\n\x00\x00binary", 9),
])
def test_a6_junk_bytes_reported_by_offset_rest_loads(project, cli_run, junk, offset):
    path = project.ledger / "patterns.md"
    path.write_bytes(junk)
    rows = _entries(cli_run)
    assert {r["file"] for r in rows} == {"antipatterns", "edge-cases"}
    assert any(w.startswith(f"{path}:None:") and f"byte offset {offset}" in w
               for w in _warnings(cli_run))
    assert path.read_bytes() == junk


def test_a6_a_folder_where_a_ledger_file_belongs_is_reported_rest_loads(project, cli_run):
    path = project.ledger / "patterns.md"
    path.unlink()
    path.mkdir()
    assert {r["file"] for r in _entries(cli_run)} == {"antipatterns", "edge-cases"}
    assert f"{path}:None: is a folder, not a file" in _warnings(cli_run)
    result = cli_run("ledger", "list")
    assert result.exit_code == 0, result.output


def test_a_ledger_file_made_unreadable_after_a_load_is_reported_by_the_next(project, cli_run):
    """A file made unreadable (``chmod 000``) keeps its bytes, size and time: the next
    `status` loads the ledger again and says so, where it answered "unchanged" with the rows
    of the read before (and said nothing); made readable again, its entries are back."""
    from tests.conftest import modes, run_unprivileged

    assert cli_run("load").exit_code == 0
    path = project.ledger / "patterns.md"
    with modes((path, 0)):
        result = run_unprivileged("status", "--json", cwd=project.root)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert [w["message"] for w in data["warnings"] if w["path"] == str(path)] == [
        f"Permission denied: the file is not readable. Make it readable: chmod u+r {path}"]
    assert {r["file"] for r in _entries(cli_run)} >= {"patterns", "antipatterns"}


def _moved_out_and_linked_back(cli_run, path, elsewhere) -> None:
    """Move the vault's file ``path`` to ``elsewhere`` (outside the vault) and link it back in
    its place: `status` names the link and where it leads."""
    path.rename(elsewhere)
    path.symlink_to(elsewhere)
    result = cli_run("status")
    assert result.exit_code == 0, result.output
    assert (f"  {path}: is a symlink to {elsewhere}, outside the vault; read through it"
            in result.output.splitlines())


def test_a_session_log_linked_outside_the_vault_is_read_with_a_warning(project, cli_run,
                                                                         tmp_path):
    # read through the link (as the ledger's read commands do, FAULTS G3), but never
    # silently: its prompts go into the store, the site and the handoff
    session = next((project.vault / "sessions").glob("*.md"))
    other = session.with_name("jane-doe_86e0b9_2026-05-05_090000.md")
    other.write_bytes(session.read_bytes())
    _moved_out_and_linked_back(cli_run, session, tmp_path / "elsewhere.md")
    inside = project.vault / "sessions" / "also-here.md"
    inside.symlink_to(other.name)  # a link that stays inside: no warning
    assert str(inside) not in cli_run("status").output


def test_a_ledger_file_or_folder_linked_outside_the_vault_is_read_with_a_warning(
        project, cli_run, tmp_path):
    """As a session log's (above): a ledger file that a symbolic link brings in from outside
    the vault is read, its entries shown, and said in `status` and the site's warnings; so is
    one whose ledger folder is the link. A link that stays inside says nothing."""
    patterns = project.ledger / "patterns.md"
    elsewhere = tmp_path / "elsewhere" / "patterns.md"
    elsewhere.parent.mkdir()
    _moved_out_and_linked_back(cli_run, patterns, elsewhere)
    shown = cli_run("query", "SELECT count(*) FROM ledger_entries WHERE file = 'patterns'")
    assert shown.exit_code == 0 and shown.stdout.split()[-1] != "0", shown.output
    # the ledger folder is the link
    patterns.unlink()
    elsewhere.rename(patterns)
    folder = tmp_path / "elsewhere" / "ledger"
    project.ledger.rename(folder)
    project.ledger.symlink_to(folder, target_is_directory=True)
    lines = cli_run("status").output.splitlines()
    assert (f"  {patterns}: is {folder / 'patterns.md'}, outside the vault (a folder on its "
            "way is a symlink); read through it") in lines
    # a link that stays inside the vault
    project.ledger.unlink()
    folder.rename(project.ledger)
    inside = project.vault / "patterns-copy.md"
    patterns.rename(inside)
    patterns.symlink_to(inside)
    assert "outside the vault" not in cli_run("status").output


def test_a6_a_folder_where_the_slop_ledger_belongs_is_bad_data(project, cli_run):
    project.slop.unlink()
    project.slop.mkdir()
    result = cli_run("slop")
    assert result.exit_code == 65
    assert result.output.splitlines()[-1] == f"Error: {project.slop}: is a folder, not a file"


def test_a7_bom_and_crlf_parse(project, cli_run):
    path = project.ledger / "patterns.md"
    data = b"\xef\xbb\xbf" + path.read_bytes().replace(b"\n", b"\r\n")
    path.write_bytes(data)
    rows = _entries(cli_run, "file = 'patterns'")
    assert [r["title"] for r in rows] == [
        "Run the migration dry-run before applying schema changes",
        "Grep the route table before adding a new endpoint"]
    assert all(r["problems"] == [] for r in rows)
    lf = parse_ledger_bytes(data, path, "patterns")
    assert lf.bom and lf.newline == b"\r\n"


def test_a8_oversized_file_refused_before_reading(project, cli_run, monkeypatch):
    path = project.ledger / "patterns.md"
    with open(path, "ab") as fh:
        fh.write(b"x" * (3 * 1024 * 1024) + b"\n")  # one 3 MB line
    monkeypatch.setenv("TOOLKIT_MAX_FILE_MB", "2")
    warnings = _warnings(cli_run)
    assert any("patterns.md" in w and "over the 2 MB limit" in w
               and "Raise the limit with TOOLKIT_MAX_FILE_MB=<MB>" in w for w in warnings)
    assert {r["file"] for r in _entries(cli_run)} == {"antipatterns", "edge-cases"}


def test_a9_empty_and_whitespace_files_are_empty_ledgers(project, cli_run):
    (project.ledger / "patterns.md").write_bytes(b"")
    (project.ledger / "antipatterns.md").write_bytes(b"  \n\n\t\n")
    rows = _entries(cli_run)
    assert [r["file"] for r in rows] == ["edge-cases"]


def test_a11_hostile_titles_stored_exact_and_escaped_in_terminal(project, cli_run):
    title = "Evil \u202etxt.exe\u200b emoji 🚀 " + "é" * 120
    (project.ledger / "patterns.md").write_text(
        f"# P\n\n---\n\n**Title:** {title}\n**Date:** 2026-05-01\n**Category:** testing\n"
        "**Confidence:** low\n")
    rows = _entries(cli_run, "file = 'patterns'")
    assert rows[0]["title"] == title
    out = cli_run("query", "SELECT title FROM ledger_entries WHERE file = 'patterns'").output
    assert "\u202e" not in out and "<U+202E>" in out and "<U+200B>" in out
    ids = json.loads(cli_run("query", "SELECT entry_id FROM ledger_entries", "--format",
                             "json").output)
    for row in ids:
        assert row["entry_id"].isascii() and ".." not in row["entry_id"]


def test_a11_entry_ids_of_hostile_titles_are_ascii_stable_and_unique(project, cli_run):
    titles = ["Evil \u202etxt.exe", "Evil txt.exe", "Evil \u200btxt.exe", "emoji 🚀 deploy",
              "emoji 🚀 deploy", "é" * 150, "e" * 150]
    (project.ledger / "patterns.md").write_text("# P\n" + "".join(
        f"\n---\n\n**Title:** {t}\n**Date:** 2026-05-01\n**Category:** testing\n"
        "**Confidence:** low\n" for t in titles), encoding="utf-8")
    sql = "SELECT title, entry_id FROM ledger_entries WHERE file = 'patterns' ORDER BY position"

    def ids() -> list[str]:
        rows = json.loads(cli_run("query", sql, "--format", "json").output)
        assert [r["title"] for r in rows] == titles  # stored exact
        return [r["entry_id"] for r in rows]

    first = ids()
    assert all(i.isascii() and i.startswith("patterns/") and "/" not in i[len("patterns/"):]
               for i in first), first
    assert len(set(first)) == len(titles), first
    assert cli_run("load", "--full").exit_code == 0
    assert ids() == first


@pytest.mark.parametrize("title", ["../../etc/passwd", "/abs", "a/b", "CON", ".."])
def test_a12_path_like_titles_become_safe_slugs(title):
    from toolkit.slugs import slugify, unique_slugs

    slug = slugify(title)
    assert "/" not in slug and not slug.startswith(".") and slug.lower() != "con"
    assert slug.isascii() and slug == slugify(title)  # deterministic
    assert len(set(unique_slugs([title, title, title]))) == 3


def test_a13_lenient_slop_read(project, cli_run):
    entries = json.loads(project.slop.read_text())["entries"]
    entries[0]["status"] = "InProgress"
    entries[1]["severity"] = "Catastrophic"
    entries[2]["reviewer"] = "sam"
    project.slop.write_text(json.dumps(entries, indent=2))  # bare array
    out = json.loads(cli_run("query", "SELECT short_id, status, severity, extra, problems FROM "
                             "slop_entries ORDER BY position", "--format", "json").output)
    assert out[0]["status"] == "in_progress"
    assert out[1]["severity"] == "Catastrophic"
    assert json.loads(out[2]["extra"]) == {"reviewer": "sam"}
    warnings = _warnings(cli_run)
    assert any("bare array" in w for w in warnings)
    assert any("CodeSmith will not load this file: entry 2 (" in w
               and "severity 'Catastrophic' is not one of" in w for w in warnings)
    assert any("unknown field(s) reviewer (kept)" in w for w in warnings)


@pytest.mark.parametrize("fields", [
    {"lock": {"pid": 12345, "acquired": "2026-05-04T09:02:41Z"}},
    {"lock": {"pid": "c3f1a9e2", "acquired": 1777885361}},
    {"lock": {"pid": {"host": "x"}, "acquired": ["2026-05-04"]}},
    {"last_reconcile": 5},
    {"last_reconcile": {"at": "2026-05-04"}},
], ids=["numeric-pid", "numeric-time", "objects", "numeric-last-reconcile",
        "object-last-reconcile"])
def test_a_meta_json_lock_or_last_reconcile_that_is_not_text_still_loads(
        project, cli_run, fields):
    """A ``.meta.json`` another tool (or a hand edit) wrote with a number or an object where
    Smith writes text (the lock's pid and time, last_reconcile): the store loads, holding
    what ``ledger reconcile --status`` reads from it; never a pyarrow traceback from every
    command that loads the store."""
    path = project.ledger / ".meta.json"
    data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    data.update(fields)
    path.write_text(json.dumps(data), encoding="utf-8")
    result = cli_run("load")
    assert result.exit_code == 0, result.output
    rows = json.loads(cli_run("query", "SELECT lock_holder, lock_acquired, last_reconcile "
                                       "FROM ledger_meta", "--format", "json").output)
    lock = fields.get("lock")
    want_lock = [str(lock["pid"]), str(lock["acquired"])] if lock else [None, None]
    want_last = None if "last_reconcile" in fields else data.get("last_reconcile")
    assert [rows[0]["lock_holder"], rows[0]["lock_acquired"]] == want_lock
    assert rows[0]["last_reconcile"] == want_last
