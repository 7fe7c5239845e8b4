"""The Smith Ledger operations behind ``toolkit ledger``, with the seed's meaning
(``/smith-ledger``, seeds/000_147cd30aebd140ec.txt).

Read operations (:func:`dashboard`, :func:`list_entries`, :func:`show`, :func:`search`,
:func:`export`) read the vault files directly with :func:`toolkit.sources.smith.read_vault`:
exact and fast, no store needed. Mutations (:func:`prune`, :func:`promote`, :func:`demote`,
:func:`reset`) go through :class:`toolkit.ledger.vault.EditorSession`, the one writer of ledger
files.

Every operation takes ``request`` (the command line as the user typed it). When the vault has
a current session log (``.smith/vault/.current-session`` naming a file in ``sessions/``), each
invocation, and each mutation after it is written, is appended to it in the seed's format; a
dry run writes nothing at all, the log included.

Matching by title (show, promote, demote) is the seed's: case-insensitive substring, here
on NFC-normalised, case-folded titles (so ``café`` typed either way finds both forms). One entry
whose whole title equals the query wins over longer titles that contain it; otherwise several
matches are listed and nothing is done until ``index`` (1-based, in the listing's order) or
``file`` narrows them to one.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

from toolkit.display import shown, visible
from toolkit.errors import (
    DataError,
    NotFoundError,
    RefusedError,
    ToolkitError,
    UsageError,
)
from toolkit.records import (
    CONFIDENCES,
    LEDGER_FILES,
    TOP_ENTRIES,
    LedgerEntry,
    Problem,
    ledger_kind,
    top_high_confidence,
)

NO_LEDGER_HINT = ("Run `/smith-reflect` after a workflow to start building the Ledger, "
                  "or run `/smith` to initialize the vault structure")
LIST_HINT = "Run `toolkit ledger list` to see available entries"
UP = {"low": "medium", "medium": "high"}
DOWN = {"high": "medium", "medium": "low"}


def choose_hint(index: str = "--index N", narrow: str = "--file") -> str:
    """How to say which of several matches to take ({n}: how many match), in the words of
    the caller's options (the CLI's, by default) or arguments (the API's)."""
    return f"Choose one with {index} (1-{{n}}) or narrow with {narrow}"


CHOOSE = choose_hint()  # the CLI's commands'


class AmbiguousMatchError(ToolkitError):
    """Several entries match a title; nothing was done. ``choose``: the hint, in the words
    of the caller's options (:data:`CHOOSE`) or arguments (the API's)."""

    def __init__(self, query: str, matches: list[LedgerEntry], choose: str = CHOOSE) -> None:
        n = len(matches)
        super().__init__(f'{n} entries match "{visible(query, single_line=True)}"; nothing was '
                         f"done", hint=choose.format(n=n))
        self.query = query
        self.matches = matches


# --------------------------------------------------------------------------- records


def entry_dict(e: LedgerEntry) -> dict[str, Any]:
    return {
        "title": e.title, "file": e.file_name, "line": e.line, "form": e.form,
        "date": e.date, "category": e.category, "confidence": e.confidence,
        "observations": e.reflections, "source_reflections": e.source_reflections,
        "context": e.context, "pattern": e.pattern, "evidence": e.evidence,
        "related": e.related, "problems": list(e.problems),
    }


def entry_line(e: LedgerEntry) -> str:
    """``[confidence] Title — Category (N observations, last: YYYY-MM-DD)``, escaped."""
    return (f"{_conf(e)} {shown(e.title)} — {shown(e.category)} "
            f"({e.reflections} observation{'s' if e.reflections != 1 else ''}, "
            f"last: {shown(e.date)})")


def short_line(e: LedgerEntry) -> str:
    """``[confidence] Title — file.md`` (the seed's listing of several matches)."""
    return f"{_conf(e)} {shown(e.title)} — {e.file_name}"


def _conf(e: LedgerEntry) -> str:
    """``[high]``, or ``[???]`` when the entry has no Confidence."""
    return f"[{shown(e.confidence)}]" if e.confidence else "[???]"


def _vault_or_fail(vault: Path, *, max_bytes: int | None = None, sessions: bool = False,
                   cache: Path | None = None) -> Any:
    from toolkit.ledger.vault import open_vault

    v = open_vault(Path(vault), max_bytes=max_bytes, sessions=sessions, cache=cache)
    if not v.exists:
        raise NotFoundError("No Ledger found.", path=Path(vault) / "ledger", hint=NO_LEDGER_HINT)
    return v


# --------------------------------------------------------------------------- session log


class _Log:
    """Logs one invocation and its mutations, in the order Smith's skill logs them: the
    invocation first, then each mutation after it is made. The invocation's entry holds the
    command's outcome, so it is written when that is known: just before the first mutation's
    entry (whose outcome it is), or when the command ends without one."""

    def __init__(self, vault: Path, subcommand: str, request: str | None, synthesized: str,
                 *, enabled: bool = True) -> None:
        self.vault = Path(vault)
        self.subcommand = subcommand
        self.request = request or f"toolkit ledger {subcommand}"
        self.synthesized = synthesized
        self.enabled = enabled
        self.outcome = "done"
        self._invoked = False

    def mutation(self, outcome: str, artifacts: str) -> None:
        if self.enabled:
            self._invocation(self.outcome)
            self._entry(f"{self.subcommand} applied", outcome, artifacts)

    def _invocation(self, outcome: str) -> None:
        if not self._invoked:
            self._invoked = True
            self._entry("invoked", outcome, ".smith/vault/ledger/")

    def _entry(self, event: str, outcome: str, artifacts: str) -> None:
        from toolkit.ledger.vault import append_session_log

        append_session_log(self.vault, event=event, subcommand=self.subcommand,
                           request=self.request, synthesized=self.synthesized,
                           outcome=outcome, artifacts=artifacts)

    def __enter__(self) -> _Log:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if not self.enabled:
            return
        outcome = self.outcome
        if exc is not None:
            outcome = f"error: {exc}" if isinstance(exc, ToolkitError) else "interrupted"
        self._invocation(outcome)


# --------------------------------------------------------------------------- dashboard


@dataclass
class FileSummary:
    kind: str
    exists: bool
    error: str | None
    entries: int
    high: int
    medium: int
    low: int
    unknown: int
    # why the file could not be read, as ``toolkit status`` words it (path, offset, what to
    # do); None when it was read
    problem: Problem | None = None

    @property
    def name(self) -> str:
        return f"{self.kind}.md"

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.name, "exists": self.exists, "error": self.error,
                "entries": self.entries, "high": self.high, "medium": self.medium,
                "low": self.low, "unknown": self.unknown}


def _read_problem(lf: Any) -> Problem | None:
    """Why a ledger file could not be read, as ``toolkit status`` words it; None when it
    was read."""
    if not lf.error:
        return None
    return lf.problems[0] if lf.problems else Problem("smith", str(lf.path), None, lf.error)


def _refuse_unread(session: Any, title: str, kind: str | None) -> None:
    """When no entry matched: a ledger file searched that could not be read (junk bytes,
    no permission, a folder or a link to nothing in its place) may hold the entry, so the
    change is refused, naming that file, rather than "No entries found" as if the ledger had
    no such entry: as bad data (exit 65) for junk bytes, as refused (exit 1) for a file the
    user may not read or that is not there to read."""
    for k in [kind] if kind else LEDGER_FILES:
        d = session.doc(k)
        if d.exists and d.error:
            why = d.why()  # (its hint, if any, comes last)
            message = (f'no entry matching "{visible(title, single_line=True)}" in the ledger '
                       "files that could be read; this one could not be read and may hold it: "
                       f"{why}")
            if d.snapshot is None:  # (no permission, or no file in its place: never read)
                from toolkit.ledger.vault.session import unreadable_fix

                raise RefusedError(message, path=d.path,
                                   hint=f"{unreadable_fix(d.path)} and run the command again")
            raise DataError(message, path=d.path)


def _report_unreadable(v: Any, unreadable: Callable[[Problem], None] | None,
                       kind: str | None = None) -> None:
    """``unreadable(problem)`` for each ledger file (``kind``: that one) that could not be
    read: its entries are in no answer, and an empty answer must not look like a ledger
    without them (FAULTS A6). Costs nothing per entry."""
    if unreadable is None:
        return
    for k in LEDGER_FILES:
        problem = _read_problem(v.files[k]) if not kind or k == kind else None
        if problem is not None:
            unreadable(problem)


def _summaries(files: dict[str, Any]) -> list[FileSummary]:
    out = []
    for kind in LEDGER_FILES:
        lf = files[kind]
        counts = {c: 0 for c in CONFIDENCES}
        unknown = 0
        for e in lf.entries:
            if e.confidence in counts:
                counts[e.confidence] += 1
            else:
                unknown += 1
        out.append(FileSummary(kind, lf.exists, lf.error, len(lf.entries), counts["high"],
                               counts["medium"], counts["low"], unknown, _read_problem(lf)))
    return out


@dataclass
class Dashboard:
    found: bool
    ledger_dir: Path
    last_reflection: str | None = None
    never_reflected: bool = False  # meta.yaml says last_reflection: null
    total_reflections: int | None = None
    total_entries: int = 0
    meta_total_entries: int | None = None
    files: list[FileSummary] = field(default_factory=list)
    top: list[LedgerEntry] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    limits: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "found": self.found, "ledger_dir": str(self.ledger_dir),
            "last_reflection": self.last_reflection, "never_reflected": self.never_reflected,
            "total_reflections": self.total_reflections,
            "total_entries": self.total_entries, "meta_total_entries": self.meta_total_entries,
            "files": [f.to_dict() for f in self.files],
            "top_high_confidence": [entry_dict(e) for e in self.top],
            "prune_limits_days": self.limits,
            "warnings": [str(w) for w in self.warnings],
        }


def dashboard(vault: Path, *, max_bytes: int | None = None, request: str | None = None,
              top: int = TOP_ENTRIES, log: bool = True, cache: Path | None = None) -> Dashboard:
    """The seed's dashboard: last reflection, totals, entries per file by confidence, and up
    to ``top`` high-confidence entries by observation count (all files). ``log=False``: not
    recorded in the session log (a read by the Python API, not an invocation)."""
    from toolkit.ledger.vault import open_vault
    from toolkit.sources.smith import prune_limits

    vault = Path(vault)
    v = open_vault(vault, max_bytes=max_bytes, sessions=False, cache=cache)
    if not v.exists:
        return Dashboard(False, vault / "ledger")
    with _Log(vault, "dashboard", request, "no arguments", enabled=log) as logged:
        files = _summaries(v.files)
        highs = [e for e in v.entries if e.confidence == "high"]
        d = Dashboard(
            True, v.ledger_dir, last_reflection=v.meta.last_reflection,
            never_reflected=v.meta.never_reflected,
            total_reflections=v.meta.total_reflections,
            total_entries=sum(f.entries for f in files),
            meta_total_entries=v.meta.total_entries,
            files=files, top=top_high_confidence(v.entries, top, _rank_fields),
            warnings=list(v.problems),
            limits=prune_limits(v.meta, v.smith_config))
        logged.outcome = f"{d.total_entries} entries, {len(highs)} high confidence"
    return d


def _rank_fields(e: LedgerEntry) -> tuple[str | None, int, str, int]:
    return e.confidence, e.reflections, e.file, e.line


# --------------------------------------------------------------------------- list


@dataclass
class ListResult:
    groups: list[tuple[FileSummary, list[LedgerEntry]]]
    filters: dict[str, str]

    @property
    def count(self) -> int:
        return sum(len(es) for _, es in self.groups)

    def to_dict(self) -> dict[str, Any]:
        return {"filters": self.filters, "count": self.count,
                "files": [{**s.to_dict(), "matching": [entry_dict(e) for e in es]}
                          for s, es in self.groups]}


def _file_kind(file: str | None) -> str | None:
    return None if file is None else ledger_kind(file)


def list_entries(vault: Path, *, category: str | None = None, confidence: str | None = None,
                 file: str | None = None, max_bytes: int | None = None,
                 request: str | None = None, log: bool = True, cache: Path | None = None
                 ) -> ListResult:
    """Entries grouped by file, filtered (AND) by category, confidence and file (``log``: as
    :func:`dashboard`'s)."""
    vault = Path(vault)
    kind = _file_kind(file)
    if confidence is not None and confidence.lower() not in CONFIDENCES:
        # (the CLI's choice refused it; the API answered "no entries". Its type: the API's
        # argument checks)
        raise UsageError(f"confidence must be one of {', '.join(CONFIDENCES)}, "
                         f"not {confidence!r}")
    v = _vault_or_fail(vault, max_bytes=max_bytes, cache=cache)
    filters = {k: val for k, val in (("category", category), ("confidence", confidence),
                                     ("file", kind)) if val}
    with _Log(vault, "list", request, ", ".join(f"--{k} {v}" for k, v in filters.items())
              or "no filters", enabled=log) as logged:
        groups = []
        summaries = {s.kind: s for s in _summaries(v.files)}
        for k in LEDGER_FILES:
            if kind and k != kind:
                continue
            entries = [e for e in v.files[k].entries
                       if (not category or e.category == category.lower())
                       and (not confidence or e.confidence == confidence.lower())]
            groups.append((summaries[k], entries))
        result = ListResult(groups, filters)
        logged.outcome = f"{result.count} entries listed"
    return result


# --------------------------------------------------------------------------- matching


def match_entries(entries: list[LedgerEntry], query: str) -> list[LedgerEntry]:
    """The seed's title match, NFC + case-folded; a unique whole-title match wins."""
    from toolkit.ledger.codec import title_key

    q = title_key(query)
    hits = [e for e in entries if q in title_key(e.title)]
    exact = [e for e in hits if title_key(e.title) == q]
    return exact if len(exact) == 1 else hits


def _title_candidates(v: Any, query: str, kind: str | None) -> list[LedgerEntry]:
    """The entries of the vault (of file ``kind`` only, when given) whose title holds the
    query, in file order: :func:`match_entries`'s candidates, found from the titles alone
    (a big ledger's other entries are never built)."""
    from toolkit.ledger.codec import title_key

    q = title_key(query)
    out = []
    for k in LEDGER_FILES:
        if kind and k != kind:
            continue
        lf = v.files[k]
        out += [lf.entry(i) for i, t in enumerate(lf.column("title")) if q in title_key(t)]
    return out


def pick(matches: list[LedgerEntry], query: str, index: int | None, *,
         index_name: str = "--index", choose: str = CHOOSE) -> LedgerEntry:
    """One entry out of the matches, or a not-found / ambiguous error (an ``index`` past
    them is named ``index_name``: the option, or the API's method and argument; several
    matches without one are hinted with ``choose``)."""
    if not matches:
        raise NotFoundError(f'No entries found matching "{visible(query, single_line=True)}".',
                            hint=LIST_HINT)
    if index is not None:
        if not 1 <= index <= len(matches):
            raise UsageError(f"{index_name} {index} is out of range; "
                             f"{len(matches)} entr{'y' if len(matches) == 1 else 'ies'} match")
        return matches[index - 1]
    if len(matches) > 1:
        raise AmbiguousMatchError(query, matches, choose)
    return matches[0]


@dataclass
class ShowResult:
    entry: LedgerEntry
    text: str  # the entry's block as written in the file

    def to_dict(self) -> dict[str, Any]:
        return {**entry_dict(self.entry), "text": self.text}


def show(vault: Path, title: str, *, index: int | None = None, file: str | None = None,
         max_bytes: int | None = None, request: str | None = None, log: bool = True,
         cache: Path | None = None, unreadable: Callable[[Problem], None] | None = None,
         index_name: str = "--index", choose: str = CHOOSE) -> ShowResult:
    """The one entry whose title holds ``title`` (``index``: the N-th of several, named
    ``index_name`` when out of range; ``choose``: the hint when several match), with its
    block as written (``log``: as :func:`dashboard`'s). When none is found, ``unreadable``
    is told of each file searched that could not be read (the entry may be there)."""
    vault = Path(vault)
    kind = _file_kind(file)
    v = _vault_or_fail(vault, max_bytes=max_bytes, cache=cache)
    with _Log(vault, "show", request, f'title "{title}"', enabled=log) as logged:
        try:
            e = pick(match_entries(_title_candidates(v, title, kind), title), title, index,
                     index_name=index_name, choose=choose)
        except AmbiguousMatchError as exc:
            logged.outcome = f"{len(exc.matches)} entries match; none shown"
            raise
        except NotFoundError:
            logged.outcome = "no entry found"
            _report_unreadable(v, unreadable, kind)
            raise
        data = v.files[e.file].data
        logged.outcome = f'showed "{e.title}" from {e.file_name}'
    return ShowResult(e, data[e.start:e.end].decode("utf-8", "replace"))


# --------------------------------------------------------------------------- search


@dataclass
class SearchHit:
    file: str
    title: str | None
    confidence: str | None
    entry_line: int | None
    lines: list[tuple[int, str, bool]]  # (line number, text, is a match) with context
    entry: LedgerEntry | None = None  # the entry the lines belong to (None: above the first)
    entry_id: str | None = None  # the entry's id in the store (``ledger_entries.entry_id``)

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "title": self.title, "confidence": self.confidence,
                "entry_line": self.entry_line,
                "lines": [{"line": n, "text": t, "match": m} for n, t, m in self.lines]}


def entry_hits(vault: Path, query: str, *, limit: int = 20, max_bytes: int | None = None,
               cache: Path | None = None) -> list[dict[str, Any]]:
    """:func:`search` as rows, one per entry with its matching lines, at most ``limit``: the
    MCP tool ``smith_ledger_search`` and ``Project.ledger_search`` (no session log)."""
    if not (query or "").strip():
        raise UsageError("'query' must be a non-empty string.")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise UsageError("'limit' must be a positive integer.")
    hits = search(vault, query, context=0, max_bytes=max_bytes, log=False, cache=cache)[:limit]
    return [{"entry_id": h.entry_id, "file": h.file.removesuffix(".md"), "title": h.title,
             "date": h.entry.date if h.entry else None,
             "category": h.entry.category if h.entry else None,
             "confidence": h.confidence, "path": h.entry.path if h.entry else None,
             "line": h.entry_line,
             "lines": [{"line": n, "text": t} for n, t, _ in h.lines]} for h in hits]


def search(vault: Path, query: str, *, context: int = 2, max_bytes: int | None = None,
           request: str | None = None, log: bool = True, cache: Path | None = None,
           unreadable: Callable[[Problem], None] | None = None) -> list[SearchHit]:
    """Case-insensitive search of every ledger line; each hit names its entry (the nearest
    entry above it), file and confidence, with ``context`` lines before and after. The one
    ledger search: ``toolkit ledger search`` and the MCP tool ``smith_ledger_search`` (which
    passes ``log=False``: a read-only tool writes no session log). ``unreadable`` is told of
    each file that could not be read, and so was not searched."""
    import bisect
    import unicodedata

    from toolkit.slugs import file_entry_ids

    vault = Path(vault)
    if not query.strip():
        raise UsageError("the search query is empty")
    v = _vault_or_fail(vault, max_bytes=max_bytes, cache=cache)
    _report_unreadable(v, unreadable)
    q = unicodedata.normalize("NFC", query).casefold()
    hits: list[SearchHit] = []
    hit_at: dict[int, tuple[str, int]] = {}  # id(hit) -> (file, index of its entry)
    with _Log(vault, "search", request, f'query "{query}"', enabled=log) as logger:
        for kind in LEDGER_FILES:
            lf = v.files[kind]
            if not lf.data:
                continue
            data = lf.data[3:] if lf.bom else lf.data
            lines = _SearchText(data)
            matching = lines.matching(q)
            if not matching:
                continue
            # the entries' title lines (the entries themselves are built only for a hit)
            title_lines = lf.column("line")
            order = sorted(range(len(title_lines)), key=title_lines.__getitem__)
            start_lines = [title_lines[j] for j in order]
            groups: dict[int, list[int]] = {}
            owner: dict[int, int | None] = {}  # the entry's index in the file
            for i in matching:
                at = bisect.bisect_right(start_lines, i) - 1  # the nearest entry above
                key = start_lines[at] if at >= 0 else 0
                groups.setdefault(key, []).append(i)
                owner[key] = order[at] if at >= 0 else None
            for key, matched in groups.items():
                at_entry = owner[key]
                e = lf.entry(at_entry) if at_entry is not None else None
                shown_lines: list[tuple[int, str, bool]] = []
                wanted: set[int] = set()
                for i in matched:
                    wanted.update(range(max(1, i - context), min(lines.count, i + context) + 1))
                is_match = set(matched)  # a set: an entry may hold 50,000 matching lines
                for n in sorted(wanted):
                    shown_lines.append((n, lines.line(n), n in is_match))
                hit = SearchHit(f"{kind}.md", e.title if e else None,
                                e.confidence if e else None, e.line if e else None,
                                shown_lines, e)
                hits.append(hit)
                if at_entry is not None:
                    hit_at[id(hit)] = (kind, at_entry)
        ids: dict[str, list[str]] = {}  # the hits' ids in the store (from every title of
        for h in hits:  # a file, so only for a file with hits)
            if id(h) in hit_at:
                k, at_entry = hit_at[id(h)]
                if k not in ids:
                    ids[k] = file_entry_ids(k, v.files[k].column("title"), cache=cache)
                h.entry_id = ids[k][at_entry]
        logger.outcome = f"{len(hits)} result(s)"
    return hits


# Every line break of str.splitlines but "\n", as UTF-8, each with its last byte: a one-byte
# search (memchr, fast) for that byte first, the whole sequence only where the byte occurs
# (a multi-byte search over a big file is far slower, and "—" shares U+2028's first bytes).
_OTHER_BREAKS = tuple((ch.encode("utf-8"), ch.encode("utf-8")[-1:])
                      for ch in "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")


class _SearchText:
    """A file's text as ``str.splitlines`` cuts it, for :func:`search`: the 1-based numbers of
    the lines whose NFC-normalised, case-folded text holds the query, and any line's text.

    A file whose only line break is ``\\n`` (a ledger file nearly always) is searched whole,
    without a string per line: for an ASCII query, when the file holds none of the characters
    whose fold contains ASCII, its ASCII-lowered bytes give every line that can match (each
    then checked exactly); else the file is folded at once (NFC never composes across a line
    break and case-folding never makes or removes one, so its lines are the folded lines).
    Any other file goes line by line."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        other = any(last in data and brk in data for brk, last in _OTHER_BREAKS)
        self.lines: list[str] | None = \
            data.decode("utf-8", "replace").splitlines() if other else None
        self.count = len(self.lines) if self.lines is not None else \
            data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
        self._cursor = (0, 1)  # (offset, line number) of a line start: line() goes forward

    def matching(self, q: str) -> list[int]:
        import unicodedata

        from toolkit.ledger.vault.locate import (
            _FOLD_TO_ASCII_BYTES,
            MAX_QUICK_OCCURRENCES,
            _anchor,
        )

        def folds(line: str) -> bool:
            return q in unicodedata.normalize("NFC", line).casefold()

        if self.lines is not None:
            return [i for i, line in enumerate(self.lines, 1) if folds(line)]
        if "\n" in q:
            return []  # no line holds a line break
        data = self.data
        anchor = _anchor(q.encode("ascii")) if q.isascii() else None
        if anchor is not None:
            # a line whose folded text holds the query holds its anchor (its run of digits
            # and punctuation) in its own bytes: only those lines are folded, and the file is
            # not lowered whole (unless the anchor is on too many lines)
            candidates = _line_numbers_holding(data, anchor, b"\n", limit=MAX_QUICK_OCCURRENCES)
            if candidates is not None:
                return [n for n in candidates if folds(self.line(n))]
        if q.isascii() and not any(b in data for b in _FOLD_TO_ASCII_BYTES):
            return [n for n in _line_numbers_holding(data.lower(), q.encode("ascii"), b"\n")
                    if folds(self.line(n))]
        text = data.decode("utf-8", "replace")
        folded = text.lower() if text.isascii() else unicodedata.normalize("NFC", text).casefold()
        return _line_numbers_holding(folded, q, "\n")

    def line(self, n: int) -> str:
        """Line ``n`` (1-based) without its line break."""
        if self.lines is not None:
            return self.lines[n - 1]
        data = self.data
        pos, at = self._cursor
        if n < at <= n + 64:
            for _ in range(at - n):  # a few lines back: the breaks before this one
                pos = data.rfind(b"\n", 0, pos - 1) + 1
            at = n
        elif n < at:
            pos, at = 0, 1
        need = n - at
        # whole chunks with fewer breaks than needed, then break by break (a near line is
        # found break by break: counting a chunk for it costs 64 KB per line shown)
        while need > 64:
            cnt = data.count(b"\n", pos, pos + _CHUNK)
            if cnt >= need or pos + _CHUNK >= len(data):
                break
            pos += _CHUNK
            need -= cnt
        for _ in range(need):
            pos = data.find(b"\n", pos) + 1
        self._cursor = (pos, n)
        eol = data.find(b"\n", pos)
        return data[pos: eol if eol >= 0 else len(data)].decode("utf-8", "replace")


@overload
def _line_numbers_holding(hay: Any, needle: Any, nl: Any) -> list[int]: ...


@overload
def _line_numbers_holding(hay: Any, needle: Any, nl: Any, *, limit: int) -> list[int] | None: ...


def _line_numbers_holding(hay: Any, needle: Any, nl: Any, *, limit: int | None = None
                          ) -> list[int] | None:
    """1-based numbers of the ``nl``-separated lines of ``hay`` (str or bytes) that hold
    ``needle`` (which holds no ``nl``); None when more than ``limit`` lines do."""
    out: list[int] = []
    pos = hay.find(needle)
    at, line = 0, 1
    while pos >= 0:
        line += hay.count(nl, at, pos)
        out.append(line)
        if limit is not None and len(out) > limit:
            return None
        eol = hay.find(nl, pos)
        if eol < 0:
            break
        at = eol + 1
        line += 1
        pos = hay.find(needle, at)
    return out


_CHUNK = 1 << 16


# --------------------------------------------------------------------------- export


def export_text(vault: Path, *, max_bytes: int | None = None) -> str:
    """The seed's export: meta.yaml in a YAML code block, then ``# <file>`` and each of the
    five files in the seed's order (``(missing: <file>)`` for a missing one)."""
    from toolkit.textio import decode_utf8, read_bytes

    vault = Path(vault)
    v = _vault_or_fail(vault, max_bytes=max_bytes)
    parts = []
    meta = v.ledger_dir / "meta.yaml"
    if meta.is_file():
        text = decode_utf8(read_bytes(meta, max_bytes), meta)
        parts.append("```yaml\n" + text.replace("\r\n", "\n").rstrip("\n") + "\n```\n")
    else:
        parts.append("(missing: meta.yaml)\n")
    for kind in LEDGER_FILES:
        lf = v.files[kind]
        parts.append(f"# {kind}.md\n")
        if not lf.exists:
            parts.append(f"(missing: {kind}.md)\n")
        elif lf.error:
            parts.append(f"(unreadable: {kind}.md: {lf.error})\n")
        else:
            data = lf.data[3:] if lf.bom else lf.data
            parts.append(data.decode("utf-8").replace("\r\n", "\n").rstrip("\n") + "\n")
    return "\n".join(parts)


def export(vault: Path, *, output: Path | None = None, redact: bool = True,
           max_bytes: int | None = None, request: str | None = None,
           keep: Sequence[Path] = ()) -> str:
    """The export text (redacted unless ``redact=False``); written atomically to ``output``
    when given, never over the vault's ledger and session files nor one of ``keep`` (the
    other sources, ``Config.source_paths``). Returns the text."""
    vault = Path(vault)
    text = export_text(vault, max_bytes=max_bytes)
    if redact:
        from toolkit.redact import redact as redact_text

        text = redact_text(text)
    with _Log(vault, "export", request, f"--output {output}" if output else "to stdout") as log:
        if output is not None:
            from toolkit.ledger.vault import write_export

            out = Path(output)
            if out.is_dir():
                raise UsageError(f"{out} is a folder; give a file name for --output")
            write_export(out, text, keep=(vault / "ledger", vault / "sessions", *keep))
            log.outcome = f"exported to {out}"
        else:
            log.outcome = "exported to stdout"
    return text


# --------------------------------------------------------------------------- prune


@dataclass(frozen=True)
class Candidate:
    entry: LedgerEntry
    age_days: int

    def to_dict(self) -> dict[str, Any]:
        return {"title": self.entry.title, "file": self.entry.file_name,
                "date": self.entry.date, "confidence": self.entry.confidence,
                "age_days": self.age_days}


@dataclass
class PrunePlan:
    removals: list[Candidate]
    demotions: list[Candidate]
    limits: dict[str, int]

    @property
    def empty(self) -> bool:
        return not self.removals and not self.demotions

    def question(self) -> str:
        """``Remove 2 entries and demote 1 entry? (yes/no)``"""
        def n(count: int) -> str:
            return f"{count} entr{'y' if count == 1 else 'ies'}"
        parts = []
        if self.removals:
            parts.append(f"Remove {n(len(self.removals))}")
        if self.demotions:
            parts.append(("demote " if parts else "Demote ") + n(len(self.demotions)))
        return " and ".join(parts) + "?"


@dataclass
class PruneResult:
    plan: PrunePlan
    status: str  # "clean", "cancelled", "done", "dry-run"
    total_entries: int | None = None
    diff: str = ""
    backup_dir: Path | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "removed": [c.to_dict() for c in self.plan.removals],
                "demoted": [c.to_dict() for c in self.plan.demotions],
                "limits_days": self.plan.limits, "total_entries": self.total_entries,
                "backup_dir": str(self.backup_dir) if self.backup_dir else None,
                "diff": self.diff, "notes": self.notes}


def _age(entry: LedgerEntry, today: dt.date) -> int | None:
    try:
        return (today - dt.date.fromisoformat(entry.date or "")).days
    except ValueError:
        return None


def prune_candidates(entries: list[LedgerEntry], today: dt.date,
                     limits: dict[str, int]) -> PrunePlan:
    """The seed's candidates: low and older than the low limit -> remove; medium and older
    than the medium limit -> demote. High is never touched; an entry with a problem (missing or
    unknown Date, Category or Confidence) is never pruned."""
    removals, demotions = [], []
    for e in entries:
        if e.problems:
            continue
        age = _age(e, today)
        if age is None:
            continue
        if e.confidence == "low" and age > limits["low"]:
            removals.append(Candidate(e, age))
        elif e.confidence == "medium" and age > limits["medium"]:
            demotions.append(Candidate(e, age))
    return PrunePlan(removals, demotions, dict(limits))


def _limits(vault: Path) -> dict[str, int]:
    from toolkit.sources.smith import prune_limits, read_json_file, read_meta

    config, _ = read_json_file(Path(vault).parent / "config.json")
    return prune_limits(read_meta(Path(vault) / "ledger"), config)


def prune(vault: Path, *, today: dt.date, dry_run: bool = False, force: bool = False,
          confirm: Callable[[PrunePlan], bool] | None = None, max_bytes: int | None = None,
          request: str | None = None, subcommand: str = "prune") -> PruneResult:
    """Remove stale low entries, demote stale medium ones (Date kept, as the seed's prune
    does). ``confirm`` sees the plan under the lock; returning False cancels."""
    from toolkit.ledger.vault import EditorSession

    vault = Path(vault)
    _vault_or_fail(vault, max_bytes=max_bytes)
    limits = _limits(vault)
    synthesized = (f"{'dry run, ' if dry_run else ''}remove low older than {limits['low']} "
                   f"days, demote medium older than {limits['medium']} days")
    with _Log(vault, subcommand, request, synthesized, enabled=not dry_run) as log, \
            EditorSession(vault, today=today, dry_run=dry_run, force=force,
                          max_bytes=max_bytes, operation=subcommand) as s:
        # a file that cannot be read: its entries would be counted as none (before the plan,
        # and before the question)
        s.refuse_unreadable()
        plan = prune_candidates(s.entries(), today, limits)
        if plan.empty:
            log.outcome = "no prune candidates; nothing to do"
            return PruneResult(plan, "clean", total_entries=len(s.entries()),
                               notes=list(s.notes))
        for c in plan.removals:
            s.remove(c.entry)
        for c in plan.demotions:
            s.set_confidence(c.entry, "low")
        if dry_run:
            r = s.commit()
            return PruneResult(plan, "dry-run", total_entries=r.entries_total, diff=r.diff(),
                               notes=r.notes)
        if confirm is not None and not confirm(plan):
            log.outcome = "prune cancelled; no changes made"
            return PruneResult(plan, "cancelled", notes=list(s.notes))
        r = s.commit()
        if plan.demotions:
            r.notes.append(f"the {len(plan.demotions)} demoted entr"
                           f"{'y keeps its' if len(plan.demotions) == 1 else 'ies keep their'} "
                           "Date (as /smith-ledger prune does), so the next prune removes "
                           f"{'it' if len(plan.demotions) == 1 else 'them'}")
        outcome = (f"Pruned: {len(plan.removals)} removed, {len(plan.demotions)} demoted. "
                   f"Total entries: {r.entries_total}")
        log.outcome = outcome
        log.mutation(outcome, _artifacts(r))
        return PruneResult(plan, "done", total_entries=r.entries_total, diff=r.diff(),
                           backup_dir=r.backup_dir, notes=r.notes)


def _artifacts(result: Any) -> str:
    names = [f".smith/vault/ledger/{c.name}" for c in result.changes]
    if getattr(result, "backup_dir", None):
        names.append(f"backup .smith/vault/ledger/.backups/{result.backup_dir.name}/")
    return ", ".join(names) or "none"


# --------------------------------------------------------------------------- promote/demote


@dataclass
class ConfidenceResult:
    entry: LedgerEntry
    old: str
    new: str
    changed: bool
    message: str
    diff: str = ""
    backup_dir: Path | None = None
    dry_run: bool = False
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"title": self.entry.title, "file": self.entry.file_name, "from": self.old,
                "to": self.new, "changed": self.changed, "message": self.message,
                "dry_run": self.dry_run, "diff": self.diff,
                "backup_dir": str(self.backup_dir) if self.backup_dir else None,
                "notes": self.notes}


def _change_confidence(vault: Path, title: str, direction: str, *, today: dt.date | None,
                       index: int | None, file: str | None, dry_run: bool, force: bool,
                       max_bytes: int | None, request: str | None) -> ConfidenceResult:
    from toolkit.ledger.vault import EditorSession

    vault = Path(vault)
    kind = _file_kind(file)
    if not (vault / "ledger").is_dir():
        raise NotFoundError("No Ledger found.", path=vault / "ledger", hint=NO_LEDGER_HINT)
    verb = "Promoted" if direction == "promote" else "Demoted"
    step = UP if direction == "promote" else DOWN
    with _Log(vault, direction, request, f'title "{title}"'
              + (f", --index {index}" if index else "") + (f", --file {kind}" if kind else "")
              + (", dry run" if dry_run else ""), enabled=not dry_run) as log, \
            EditorSession(vault, today=today, dry_run=dry_run, force=force,
                          max_bytes=max_bytes, operation=direction) as s:
        matches = s.find(title, kinds=[kind] if kind else None)
        if not matches:
            _refuse_unread(s, title, kind)
        exact = [e for e in matches if _whole(e, title)]
        entry = pick(exact if len(exact) == 1 else matches, title, index)
        name = shown(entry.title)
        old = entry.confidence or ""
        if old not in CONFIDENCES:
            raise RefusedError(f'"{name}" has no valid Confidence ({shown(entry.confidence)})',
                               path=entry.path, line=entry.line,
                               hint="Fix its **Confidence:** line by hand")
        new = step.get(old)
        if new is None:
            msg = f'"{name}" is already at {old} confidence. No change.'
            log.outcome = msg
            return ConfidenceResult(entry, old, old, False, msg, dry_run=dry_run)
        s.set_confidence(entry, new)
        r = s.commit()
        msg = f'{verb} "{name}" from {old} to {new} confidence.'
        if not dry_run:
            log.outcome = msg
            log.mutation(msg, _artifacts(r))
        return ConfidenceResult(entry, old, new, True, msg, diff=r.diff(),
                                backup_dir=r.backup_dir, dry_run=dry_run, notes=r.notes)


def _whole(e: LedgerEntry, query: str) -> bool:
    from toolkit.ledger.codec import title_key

    return title_key(e.title) == title_key(query)


def promote(vault: Path, title: str, *, today: dt.date | None = None, index: int | None = None,
            file: str | None = None, dry_run: bool = False, force: bool = False,
            max_bytes: int | None = None, request: str | None = None) -> ConfidenceResult:
    """Raise one entry's confidence one level (low -> medium -> high), only its Confidence line
    changes."""
    return _change_confidence(vault, title, "promote", today=today, index=index, file=file,
                              dry_run=dry_run, force=force, max_bytes=max_bytes,
                              request=request)


def demote(vault: Path, title: str, *, today: dt.date | None = None, index: int | None = None,
           file: str | None = None, dry_run: bool = False, force: bool = False,
           max_bytes: int | None = None, request: str | None = None) -> ConfidenceResult:
    """Lower one entry's confidence one level (high -> medium -> low)."""
    return _change_confidence(vault, title, "demote", today=today, index=index, file=file,
                              dry_run=dry_run, force=force, max_bytes=max_bytes,
                              request=request)


# --------------------------------------------------------------------------- reset


@dataclass
class ResetResult:
    status: str  # "done", "cancelled", "dry-run"
    archive_dir: Path | None
    moved: list[str]
    diff: str = ""
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status,
                "archive_dir": str(self.archive_dir) if self.archive_dir else None,
                "moved": self.moved, "diff": self.diff, "notes": self.notes}


def reset(vault: Path, *, today: dt.date | None = None, dry_run: bool = False,
          force: bool = False, confirm: Callable[[Any], bool] | None = None,
          max_bytes: int | None = None, request: str | None = None) -> ResetResult:
    """Archive meta.yaml and the five files to ``ledger/archive/YYYY-MM-DD-HHMMSS/`` and write
    the seed's fresh templates."""
    from toolkit.ledger.vault import EditorSession, check_inside, make_ledger_dir

    vault = Path(vault)
    if not vault.is_dir():
        raise NotFoundError("No vault found.", path=vault,
                            hint="Run `/smith` to initialize the vault structure")
    check_inside(vault)  # before the ledger folder may be created
    ledger = vault / "ledger"
    if not ledger.is_dir():
        if dry_run:
            return ResetResult("dry-run", None, [], notes=[f"{ledger} would be created with "
                                                           "fresh templates"])
        make_ledger_dir(vault)
    with _Log(vault, "reset", request, "archive and start fresh", enabled=not dry_run) as log, \
            EditorSession(vault, today=today, dry_run=dry_run, force=force,
                          max_bytes=max_bytes, operation="reset") as s:
        plan = s.reset(confirm)
        if plan is None:
            log.outcome = "reset cancelled; Ledger unchanged"
            return ResetResult("cancelled", None, [])
        rel = os.path.relpath(plan.archive_dir, vault.parent.parent)
        if dry_run:
            return ResetResult("dry-run", plan.archive_dir, plan.moved, plan.diff(), plan.notes)
        outcome = f"Ledger archived to {rel}/; fresh Ledger initialized with empty templates"
        log.outcome = outcome
        log.mutation(outcome, f"{rel}/, .smith/vault/ledger/*.md, meta.yaml")
        return ResetResult("done", plan.archive_dir, plan.moved, plan.diff(), plan.notes)
