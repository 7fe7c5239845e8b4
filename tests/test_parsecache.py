"""The parse cache is not trusted as written: a cache file that is damaged (one byte changed),
cut short, left by an older toolkit or written by another interpreter is a miss -- the ledger
is parsed again, the answer is the parse's, and the file is rewritten so the next read is a
hit again. Nothing raises."""

from __future__ import annotations

import marshal
from pathlib import Path

import pytest

from toolkit import parsecache
from toolkit.sources import smith

ENTRY = ("\n---\n\n**Title:** Cap the webhook retries at {n}\n**Date:** 2026-05-{n:02d}\n"
         "**Category:** implementation\n**Confidence:** low\n**Source reflections:** 1\n\n"
         "**Pattern:** Retry `send_webhook()` at most {n} times — café, Straße.\n")


def _ledger(tmp_path: Path) -> Path:
    f = tmp_path / "patterns.md"
    f.write_text("# Patterns\n" + "".join(ENTRY.format(n=n) for n in range(1, 13)),
                 encoding="utf-8")
    return f


def _answer(lf: smith.LedgerFile) -> tuple[object, ...]:
    return lf.entries, lf.problems, lf.header_end, lf.newline, lf.bom


def _no_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_parse(*args: object, **kwargs: object) -> None:
        raise AssertionError("parsed again")

    monkeypatch.setattr(smith, "parse_ledger_bytes", no_parse)


def _damaged(raw: bytes) -> bytes:
    """One character of an entry's text changed inside the marshal data (it would still load:
    ``Cap`` becomes ``Cup``)."""
    at = raw.rindex(b"Cap the webhook retries at 7")
    return raw[:at + 1] + b"u" + raw[at + 2:]


def _older_format(raw: bytes) -> bytes:
    """What the previous toolkit wrote: bare marshal data of (key, payload), here with the
    right key and a wrong payload."""
    header_end, newline, bom, titles, lines, records, notes = _payload(raw)
    titles = ["a title no parse gives"] * len(titles)
    return marshal.dumps((_key(raw), (header_end, newline, bom, titles, lines, records, notes)))


def _previous_version(raw: bytes) -> bytes:
    """What toolkit-parsecache/3 wrote (the payload's lists a part each after a first part
    with their lengths, not chunks of entries), here with the right key and a wrong
    payload: a file of another version of the format is not read."""
    import struct
    import zlib

    header_end, newline, bom, titles, lines, records, notes = _payload(raw)
    titles = ["a title no parse gives"] * len(titles)
    items = (header_end, newline, bom, titles, lines, records, notes)
    shape = tuple(len(x) if isinstance(x, list) and x else -1 for x in items)
    parts = [(parsecache.RUNTIME, _key(raw), True, shape), *items]
    body = b"".join(struct.pack("<Q", len(m)) + m for m in (marshal.dumps(x, 4) for x in parts))
    return b"toolkit-parsecache/3\n" + struct.pack("<QI", len(body), zlib.crc32(body)) + body


def _key(raw: bytes) -> object:
    saved = parsecache._read(raw)
    assert saved is not None
    return saved[1]


def _payload(raw: bytes) -> tuple[object, ...]:
    """A ledger file's cached parse as one tuple (header end, newline, BOM, titles, lines,
    records, notes) from its file: chunks of entries, then the rest."""
    saved = parsecache._read(raw)
    assert saved is not None
    *chunks, (header_end, newline, bom, notes) = saved[2]
    return (header_end, newline, bom, [t for c in chunks for t in c[0]],
            [n for c in chunks for n in c[1]], [r for c in chunks for r in c[2]], notes)


@pytest.mark.parametrize("spoil", [
    _damaged,
    lambda raw: raw[: len(raw) // 2],  # cut short (a full disk, a killed copy)
    lambda raw: raw[:-1],
    lambda raw: b"",
    _older_format,
    _previous_version,
    lambda raw: raw[:10] + b"X" + raw[11:],  # the header itself
], ids=["one-byte", "half", "last-byte", "empty", "older-format", "previous-version", "header"])
def test_a_spoiled_cache_file_is_parsed_again_and_rewritten(
        spoil, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    f = _ledger(tmp_path)
    cache = tmp_path / "cache"
    parsed = smith.read_ledger_file(f, "patterns", cache=cache)
    slot = cache / "patterns.marshal"
    slot.write_bytes(spoil(slot.read_bytes()))

    again = smith.read_ledger_file(f, "patterns", cache=cache)
    assert _answer(again) == _answer(parsed)
    assert "Cup the webhook" not in repr(again.entries)
    _no_parse(monkeypatch)  # rewritten: the next read is a hit
    assert _answer(smith.read_ledger_file(f, "patterns", cache=cache)) == _answer(parsed)


def test_a_cache_written_by_another_interpreter_is_a_miss(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another Python version or Unicode database may strip and case-fold differently: its
    parses are not used."""
    f = _ledger(tmp_path)
    cache = tmp_path / "cache"
    monkeypatch.setattr(parsecache, "RUNTIME", "cpython-99/(99, 0, 0)/99.0.0")
    smith.read_ledger_file(f, "patterns", cache=cache)
    monkeypatch.undo()
    real = smith.parse_ledger_bytes
    calls: list[int] = []

    def counting(*args: object, **kwargs: object) -> smith.LedgerFile:
        calls.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(smith, "parse_ledger_bytes", counting)
    smith.read_ledger_file(f, "patterns", cache=cache)
    smith.read_ledger_file(f, "patterns", cache=cache)
    assert calls == [1]  # parsed once (the other interpreter's file), then a hit


def test_spoiled_slug_cache_gives_the_same_ids(tmp_path: Path) -> None:
    """The entry ids kept beside the parses: a damaged file is a miss, never another id."""
    from toolkit.slugs import file_entry_ids

    f = _ledger(tmp_path)
    cache = tmp_path / "cache"
    titles = [e.title for e in smith.read_ledger_file(f, "patterns", cache=cache).entries]
    plain = file_entry_ids("patterns", titles)
    assert file_entry_ids("patterns", titles, cache=cache) == plain
    slot = cache / "patterns.slugs.marshal"
    raw = slot.read_bytes()
    at = raw.rindex(b"cap-the-webhook-retries-at-7")
    slot.write_bytes(raw[:at] + b"z" + raw[at + 1:])
    assert file_entry_ids("patterns", titles, cache=cache) == plain
    assert slot.read_bytes() == raw  # rewritten


def test_load_parses_each_working_file_once_and_reads_answer_without_a_parse(
        project, cli_run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """``load`` fills the store and the history from one parse of each ledger file (the
    history's working version takes the ledger source's parse); then ``show`` and
    ``search`` answer from the cache, the same as without it."""
    from toolkit.records import LEDGER_FILES

    real = smith.parse_ledger_bytes
    parsed: list[str] = []

    def counting(data: bytes, path: object, kind: str, **kwargs: bool) -> smith.LedgerFile:
        parsed.append(kind)
        return real(data, path, kind, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(smith, "parse_ledger_bytes", counting)
    db = str(tmp_path / "store" / "s.duckdb")
    assert cli_run("--db", db, "load").exit_code == 0
    present = [k for k in LEDGER_FILES if (project.ledger / f"{k}.md").is_file()]
    assert sorted(parsed) == sorted(present)

    parsed.clear()
    cached = [cli_run("--db", db, "ledger", *args) for args in
              (("show", "Redis client"), ("search", "migration"), ("search", "--json", "REDIS"))]
    assert parsed == []
    fresh = [cli_run("ledger", *args) for args in
             (("show", "Redis client"), ("search", "migration"), ("search", "--json", "REDIS"))]
    assert [(r.exit_code, r.stdout) for r in cached] == [(r.exit_code, r.stdout) for r in fresh]


def test_load_in_batches_stores_what_one_batch_stores(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ledger and history loads build and insert a few entries at a time: with batches
    smaller than the ledger, the store holds the same rows (ids, positions, history keys)."""
    from toolkit import store as store_module
    from toolkit.api import Project

    ledger = tmp_path / ".smith" / "vault" / "ledger"
    ledger.mkdir(parents=True)
    twice = "".join(ENTRY.format(n=n) for n in (*range(1, 12), 3, 3))  # repeated titles
    (ledger / "patterns.md").write_text("# Patterns\n" + twice, encoding="utf-8")
    (ledger / "edge-cases.md").write_text("# Edge cases\n" + ENTRY.format(n=5), encoding="utf-8")

    def tables(batch: int, name: str) -> list[list[tuple[object, ...]]]:
        monkeypatch.setattr(store_module, "ROW_BATCH", batch)
        with Project.open(tmp_path, db=tmp_path / name / "s.duckdb") as project:
            return [project.sql(sql).fetchall() for sql in (
                "SELECT entry_id, file, title, position, line, path, context "
                "FROM ledger_entries ORDER BY file, position",
                "SELECT file, entry_key, title, position, text_hash FROM _history_entries "
                "ORDER BY file, position")]

    small, whole = tables(2, "small"), tables(10_000, "whole")
    assert small == whole
    assert [r[3] for r in small[0] if r[1] == "patterns"] == list(range(13))
    assert len(small[1]) == 14


def test_the_history_copies_the_stored_entries_as_a_parse_would_give_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The history's working version takes the ledger source's rows in the store (the same
    bytes, by their blob id) instead of parsing again: the same entry keys (repeated and
    missing titles), text hashes, fields and notes as the history's own parse of the files."""
    from toolkit.api import Project
    from toolkit.store import Store

    ledger = tmp_path / ".smith" / "vault" / "ledger"
    ledger.mkdir(parents=True)
    odd = ("\n---\n\n**Title:**\n**Date:** 2026-13-01\n**Category:** Debugging\n\n"
           "**Context:** Straße\n\n**Pattern:** x\u2028y\n")
    (ledger / "patterns.md").write_text(
        "# Patterns\n" + "".join(ENTRY.format(n=n) for n in (1, 2, 3, 3, 4)) + odd + odd,
        encoding="utf-8")
    (ledger / "edge-cases.md").write_text(
        "# Edge cases\n\n## Form A, café\n\n- **Observations:** 2\n\n### Context\n\nWhen.\n\n"
        "---\n", encoding="utf-8")
    (ledger / "antipatterns.md").write_text("# Antipatterns\n", encoding="utf-8")
    sql = ("SELECT * FROM _history_entries ORDER BY file, position",
           "SELECT * FROM _history_blobs ORDER BY file")

    def history(name: str) -> list[list[tuple[object, ...]]]:
        with Project.open(tmp_path, db=tmp_path / name / "s.duckdb") as project:
            return [project.sql(q).fetchall() for q in sql]

    copied = history("copied")
    real = Store.source_state
    monkeypatch.setattr(Store, "source_state",  # no record of what the ledger source stored
                        lambda self, source: None if source == "ledger" else real(self, source))
    parsed = history("parsed")
    assert copied == parsed
    assert len(copied[0]) == 8 and len(copied[1]) == 3
    assert {r[2] for r in copied[0]} >= {"patterns/[untitled]", "patterns/[untitled]#2",
                                         "edge-cases/form a, café"}


def test_a_load_limits_duckdbs_memory_only_while_the_ledger_loads(tmp_path: Path) -> None:
    """The ledger and history loads run under a small DuckDB memory limit; the store's
    connection has its own limit again afterwards, after a load that failed too."""
    from toolkit.config import resolve
    from toolkit.errors import DataError
    from toolkit.loaders import LEDGER
    from toolkit.source import Source
    from toolkit.store import Store

    ledger = tmp_path / ".smith" / "vault" / "ledger"
    ledger.mkdir(parents=True)
    _ledger(ledger)
    cfg = resolve(project=tmp_path, env={"HOME": str(tmp_path / "home")})
    seen: list[str] = []

    def failing(store: Store, *args: object) -> None:
        seen.append(store.scalar("SELECT current_setting('memory_limit')"))
        raise DataError("unreadable")

    broken = Source("ledger", LEDGER.fingerprint, failing, bounded_memory=True)  # type: ignore[arg-type]
    with Store.open(tmp_path / "s.duckdb", sources=[LEDGER]) as store:
        before = store.scalar("SELECT current_setting('memory_limit')")
        report = store.refresh(cfg)
        assert report.results[0].rows == 12
        assert store.scalar("SELECT current_setting('memory_limit')") == before
        store.declared = (broken,)
        store.refresh(cfg, full=True)
        assert store.scalar("SELECT current_setting('memory_limit')") == before
    assert seen and seen[0] != before and seen[0].endswith("MiB")


def test_the_history_parses_working_files_the_stored_rows_are_not_of(tmp_path: Path) -> None:
    """The stored rows are copied only for the very bytes the ledger source loaded (its git
    blob id): a file changed since (here the history loads alone after an edit) is parsed."""
    from toolkit.api import Project
    from toolkit.config import resolve
    from toolkit.loaders import SOURCES
    from toolkit.store import Store

    ledger = tmp_path / ".smith" / "vault" / "ledger"
    ledger.mkdir(parents=True)
    f = _ledger(ledger)
    db = tmp_path / "store" / "s.duckdb"
    Project.open(tmp_path, db=db).close()  # loads every source
    f.write_text(f.read_text(encoding="utf-8").replace("retries at 7", "retries at 70"),
                 encoding="utf-8")
    cfg = resolve(project=tmp_path, db=str(db), env={"HOME": str(tmp_path / "home")})
    with Store.open(db, sources=SOURCES) as store:
        store.refresh(cfg, only=["history"])
        titles = store.fetch("SELECT e.title FROM ledger_entry_versions e "
                             "WHERE e.version_id = 'working' ORDER BY e.position")[1]
        stored = store.fetch("SELECT title FROM ledger_entries ORDER BY position")[1]
    assert ("Cap the webhook retries at 70",) in titles
    assert ("Cap the webhook retries at 70",) not in stored  # the ledger source was not run


def test_a_ledgers_slugs_are_its_titles_slugs_and_none_is_kept_in_memory():
    from toolkit.slugs import slugify, unique_slugs

    titles = [f"Lesson {i}: keep the slugs of a big ledger out of memory" for i in range(2000)]
    slugify.cache_clear()
    slugs = unique_slugs(titles)
    assert slugify.cache_info().currsize == 0  # none of the titles kept by slugify's cache
    assert slugs[0] == "lesson-0-keep-the-slugs-of-a-big-ledger-out-of-memory"
    assert len(set(slugs)) == len(titles)
    assert slugs == [slugify(t) for t in titles]  # the same slugs the cached path gives


def test_prune_keeps_only_the_slots_still_used(tmp_path: Path) -> None:
    """A build's own caches (charts, turn diffs) are pruned to the entries it used: the others,
    and a temporary file a killed save left, go; a missing folder is no error."""
    cache = tmp_path / "cache"
    for slot in ("a", "b", "c"):
        parsecache.save(cache, slot, (slot,), slot * 3)
    (cache / ".b.4242.tmp").write_bytes(b"cut")
    parsecache.prune(cache, {"b"})
    assert sorted(p.name for p in cache.iterdir()) == ["b.marshal"]
    assert parsecache.load(cache, "b", ("b",)) == "bbb"
    parsecache.prune(tmp_path / "missing", {"b"})


def test_a_link_at_the_temp_files_name_is_replaced_not_written_through(tmp_path: Path) -> None:
    # the temp name (".<slot>.<pid>.tmp" in the cache folder, beside the store) is known in
    # advance: a link planted there had the cache's bytes written into the file it named
    import os

    folder = tmp_path / "cache"
    folder.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("theirs")
    (folder / f".slot.{os.getpid()}.tmp").symlink_to(victim)
    parsecache.save(folder, "slot", ("key",), [1, 2, 3])
    assert victim.read_text() == "theirs"
    assert parsecache.load(folder, "slot", ("key",)) == [1, 2, 3]
    assert sorted(p.name for p in folder.iterdir()) == ["slot.marshal"]


def test_ctrl_c_during_a_save_leaves_no_temp_file_and_the_old_entry(tmp_path: Path) -> None:
    # Ctrl-C while a big payload was being written left ".<slot>.<pid>.tmp" in the cache
    # folder (only an OSError removed it); nothing prunes that folder, so they piled up
    class Interrupted(list):  # type: ignore[type-arg]
        def __getitem__(self, item):  # type: ignore[no-untyped-def]
            raise KeyboardInterrupt

    folder = tmp_path / "cache"
    parsecache.save(folder, "slot", ("old",), [1, 2])
    with pytest.raises(KeyboardInterrupt):
        parsecache.save(folder, "slot", ("new",), Interrupted([3, 4]))
    assert sorted(p.name for p in folder.iterdir()) == ["slot.marshal"]
    assert parsecache.load(folder, "slot", ("old",)) == [1, 2]


STANDARD = ("---\n\n**Title:** Keep the retry budget at {n}\n**Date:** 2026-05-{n:02d}\n"
            "**Category:** implementation\n**Confidence:** high\n**Source reflections:** 1\n\n"
            "**Context:** When the webhook — café — times out.\n\n**Pattern:** Retry {n} times.\n\n"
            "**Evidence:**\n- 2026-05-{n:02d} -- session s{n}\n\n**Related:** none\n\n")


def _standard_ledger(folder: Path, odd_at: int | None) -> Path:
    entries = [STANDARD.format(n=n) for n in range(1, 13)]
    if odd_at is not None:  # an indented line: the fast path gives up at this entry
        entries[odd_at] = entries[odd_at].replace("**Related:** none\n", "**Related:** none\n"
                                                  "  (an indented line)\n")
    f = folder / "patterns.md"
    f.write_text("# Patterns\n\n" + "".join(entries), encoding="utf-8")
    return f


@pytest.mark.parametrize("odd_at", [None, 10], ids=["fast", "fast-gives-up-late"])
def test_a_loads_parse_kept_in_the_cache_as_it_comes_gives_the_same_entries(
        odd_at: int | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The loader's parse writes its entries to the parse cache a few at a time (here 3) and
    reads them back as it takes them: the same entries, notes and header as a parse held in
    memory, and the cache file the ledger commands then answer from holds the same parse --
    also when the fast path gives up late in the file, after some were written."""
    monkeypatch.setattr(smith, "_CHUNK", 3)
    f = _standard_ledger(tmp_path, odd_at)
    plain = smith.read_ledger_file(f, "patterns")
    assert len(plain.entries) == 12
    fast = smith._fast_parse(f.read_bytes(), f, "patterns", False)
    assert (fast is None) == (odd_at is not None)  # the case named
    cache = tmp_path / "cache"
    loaded = smith.read_ledger_file(f, "patterns", cache=cache, spill=True)
    rows = loaded._rows()
    assert rows is not None and set(rows.records) == {b""}  # none held: all in the file
    assert loaded.take_titles() == [e.title for e in plain.entries]  # (let go: read back)
    assert [e for at in range(0, 12, 5) for e in loaded.take(at, at + 5)] == plain.entries
    assert (loaded.problems, loaded.header_end) == (plain.problems, plain.header_end)
    assert sorted(p.name for p in cache.iterdir()) == ["patterns.marshal"]
    _no_parse(monkeypatch)
    assert _answer(smith.read_ledger_file(f, "patterns", cache=cache)) == _answer(plain)


@pytest.mark.parametrize("fails_at", [1, 3, 5], ids=["first-chunk", "late-chunk", "the-end"])
def test_a_full_disk_while_a_loads_parse_is_kept_leaves_the_same_entries_and_no_file(
        fails_at: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write of the parse cache that fails (a full disk) while the load's parse is written
    there: the entries are all still read, the same as a parse in memory, and neither a cache
    file nor a temporary file is left (the next read parses again)."""
    monkeypatch.setattr(smith, "_CHUNK", 3)
    f = _standard_ledger(tmp_path, None)
    plain = smith.read_ledger_file(f, "patterns")
    real = parsecache.Writer.write
    writes: list[int] = []

    def full_disk(self: parsecache.Writer, obj: object) -> tuple[int, int]:
        writes.append(1)
        if len(writes) > fails_at:  # the head, then chunks of 3 entries, then the tail
            raise OSError(28, "No space left on device")
        return real(self, obj)

    monkeypatch.setattr(parsecache.Writer, "write", full_disk)
    cache = tmp_path / "cache"
    loaded = smith.read_ledger_file(f, "patterns", cache=cache, spill=True)
    assert [e for at in range(0, 12, 5) for e in loaded.take(at, at + 5)] == plain.entries
    assert (loaded.problems, loaded.header_end) == (plain.problems, plain.header_end)
    assert list(cache.iterdir()) == []
