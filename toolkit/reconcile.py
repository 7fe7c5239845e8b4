"""Ledger self-maintenance: ``toolkit ledger reconcile`` (seed "Ledger Self-Maintenance").

Reconcile keeps a growing Smith Ledger useful. It runs the seed's phases in order:

0. **Guard and lock** - ``ledger.reconcile.enabled`` in ``.smith/config.json``; the ``lock``
   field of ``.meta.json`` (10-minute expiry; a lock left by a killed toolkit run on this host
   is taken over at once, the editor's rule), taken under the editor's OS lock so two runs
   cannot both take it.
1. **Threshold check** - every threshold of the config (seed defaults), and the minimum
   interval between runs. ``--force`` skips this phase and the lock check.
2. **Backup** - every ledger file, ``meta.yaml`` and ``.meta.json`` copied to
   ``.backups/reconcile-YYYY-MM-DD-HHMMSS/`` and verified (count and SHA-256) before anything
   is written; old backups pruned by count and age.
3. **Merge duplicates** - candidate pairs pre-filtered cheaply with rapidfuzz, then asked of a
   pluggable :class:`Judge` (a conservative built-in one, or an external command).
4. **Prune stale entries** - low and old: removed; medium and old: demoted to low, Date reset.
5. **Budget enforcement** - per file, total, and per file entry count.

Phases 3-5 are planned in memory on a model of the files (each entry's bytes), then written
once through the vault's edit session (byte preservation, atomic replace, lock, change
detection), ``.meta.json`` and ``meta.yaml`` in the same journaled set; then a
``reconcile-log.md`` entry. Every write under ``.smith/`` (the lock field, the backup, the
restore, the log) goes through :mod:`toolkit.ledger.vault`. A failed write restores the files
from the backup and is logged as FAILED; nothing is ever retried automatically.

Decisions where the seed is silent or ambiguous (also in docs/readme/reconcile.md):

* "Category" in the thresholds and in ``--category`` means a ledger *file* (patterns,
  antipatterns, tools, edge-cases, quirks), as the seed's ``--category`` flag does.
* Pattern counts are the parser's entry count (both entry forms). Counting ``**Title:**`` lines,
  as the seed does, misses every Form A (``## Title``) entry; the number of ``**Title:**`` lines
  is still shown by ``--status`` when it differs.
* Tokens and pattern counts are always computed from the files (word count x 1.3, rounded
  down): that is cheap and never stale. Violations, reinforcements and the last run time can
  only come from ``.meta.json``; when it is missing they are 0 / never (the seed's fallback).
* Entries with a problem (missing or unknown Date, Category or Confidence) are never merged,
  pruned or dropped; high-confidence entries are never pruned or dropped for budget.
* An entry takes part in at most one merge per run.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import shlex
import shutil
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from toolkit.errors import (
    BusyError,
    DataError,
    NotFoundError,
    PermissionDeniedError,
    ToolkitError,
    UsageError,
    from_exception,
)
from toolkit.ledger.codec import CONF_RANK, FIELD, confidence_rank, dominant_newline, set_field
from toolkit.ledger.vault import (
    LockHolder,
    LockTicket,
    Written,
    count_words,
    give_back_json_lock,
    iso_z,
    judge_lock,
    lock_path,
    lock_timeout,
    now_for,
    parse_instant,
    read_lock_field,
    restore_written,
    tokens_for_words,
)
from toolkit.records import LEDGER_FILES, LedgerEntry, ledger_kind

# --------------------------------------------------------------------------- settings

MERGE_MAX_ENTRIES = 100  # the seed's complexity bound: more entries in a file -> no merge phase
DEFAULT_MAX_JUDGE_CALLS = 15  # x 30 s judge timeout: under the 10-minute lock expiry
DEFAULT_JUDGE_TIMEOUT = 30.0
FAULT_ENV = "TOOLKIT_RECONCILE_FAULT"  # test hook: fail at a named point


@dataclass(frozen=True)
class Thresholds:
    total_tokens_max: int = 30000
    single_file_tokens_max: int = 8000
    patterns_per_category_max: int = 50
    reinforcements_threshold: int = 50
    context_violations_threshold: int = 3


@dataclass(frozen=True)
class Settings:
    """``ledger.reconcile`` and ``ledger.pruning`` of ``.smith/config.json``, with defaults."""

    enabled: bool = True
    reconcile_model: str = "haiku"
    minimum_hours_between_reconciles: float = 6.0
    thresholds: Thresholds = Thresholds()
    backup_max_count: int = 5
    backup_max_age_days: int = 30
    low_max_age_days: int = 30
    medium_max_age_days: int = 90
    config_path: Path | None = None  # the config.json read, if it exists


def _number(node: dict[str, Any], key: str, where: str, path: Path, default: Any,
            *, integer: bool = True) -> Any:
    if key not in node or node[key] is None:
        return default
    value = node[key]
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok or value < 0:
        kind = "a whole number" if integer else "a number"
        raise DataError(f"{where}.{key} must be {kind} >= 0, not {value!r}", path=path,
                        hint="Fix the value or remove it to use the default")
    return value


def _mapping(node: Any, where: str, path: Path) -> dict[str, Any]:
    if node is None:
        return {}
    if not isinstance(node, dict):
        raise DataError(f"{where} must be an object", path=path,
                        hint="Fix the value or remove it to use the defaults")
    return node


def load_settings(smith_config: Path, meta_config: dict[str, Any] | None = None) -> Settings:
    """Read ``.smith/config.json`` (missing = all defaults; invalid = DataError, exit 65).

    Prune ages come from ``ledger.pruning``; ``meta.yaml``'s ``config:`` (the
    ``/smith-ledger prune`` key set, passed as ``meta_config``) is used when config.json does
    not set them.
    """
    from toolkit.textio import decode_utf8, load_json, read_bytes

    data: Any = None
    if smith_config.is_file():
        data = load_json(decode_utf8(read_bytes(smith_config), smith_config), smith_config)
        if not isinstance(data, dict):
            raise DataError("expected a JSON object", path=smith_config,
                            hint="Fix the file or remove it to use the defaults")
    p = smith_config
    ledger = _mapping((data or {}).get("ledger"), "ledger", p)
    rec = _mapping(ledger.get("reconcile"), "ledger.reconcile", p)
    th = _mapping(rec.get("thresholds"), "ledger.reconcile.thresholds", p)
    bk = _mapping(rec.get("backup"), "ledger.reconcile.backup", p)
    pr = _mapping(ledger.get("pruning"), "ledger.pruning", p)
    d = Thresholds()
    thresholds = Thresholds(**{
        name: _number(th, name, "ledger.reconcile.thresholds", p, getattr(d, name))
        for name in Thresholds.__dataclass_fields__})
    enabled = rec.get("enabled", True)
    if not isinstance(enabled, bool):
        raise DataError(f"ledger.reconcile.enabled must be true or false, not {enabled!r}",
                        path=p)
    meta_cfg = meta_config if isinstance(meta_config, dict) else {}
    low_default = meta_cfg.get("low_confidence_prune_days", 30)
    med_default = meta_cfg.get("medium_confidence_demote_days", 90)
    if not isinstance(low_default, int) or isinstance(low_default, bool):
        low_default = 30
    if not isinstance(med_default, int) or isinstance(med_default, bool):
        med_default = 90
    model = rec.get("reconcile_model", "haiku")
    return Settings(
        enabled=enabled,
        reconcile_model=str(model) if model else "haiku",
        minimum_hours_between_reconciles=_number(
            rec, "minimum_hours_between_reconciles", "ledger.reconcile", p, 6.0, integer=False),
        thresholds=thresholds,
        backup_max_count=_number(bk, "max_count", "ledger.reconcile.backup", p, 5),
        backup_max_age_days=_number(bk, "max_age_days", "ledger.reconcile.backup", p, 30),
        low_max_age_days=_number(pr, "low_max_age_days", "ledger.pruning", p, low_default),
        medium_max_age_days=_number(pr, "medium_max_age_days", "ledger.pruning", p, med_default),
        config_path=smith_config if data is not None else None,
    )


# --------------------------------------------------------------------------- signals

def lock_blocks(holder: LockHolder | None, now: dt.datetime) -> bool:
    """A ``.meta.json`` lock stops a run when it is fresh (under 10 minutes old) and its holder
    is not a toolkit run on this host whose process is gone (the vault's rule, judge_lock)."""
    return judge_lock(holder, now, force=False)[0]


@dataclass(frozen=True)
class FileSignal:
    kind: str
    exists: bool
    tokens: int
    entries: int
    title_lines: int
    error: str | None = None

    @property
    def name(self) -> str:
        return f"{self.kind}.md"


@dataclass(frozen=True)
class FileCounts:
    """What the signals take of one ledger file, as the store holds it (the ledger's load
    records each file's words; its entries are ``ledger_entries``'), for a caller that reads
    the store rather than parse the files again (the ledger-budget check)."""

    exists: bool
    words: int
    entries: int
    title_lines: int  # Form B entries (their **Title:** lines)
    error: str | None = None

    @classmethod
    def of(cls, lf: Any) -> FileCounts:
        """The counts of a parsed ledger file (a ``LedgerFile``); counts are returned as given."""
        if isinstance(lf, FileCounts):
            return lf
        return cls(lf.exists, count_words(lf.data) if lf.exists else 0, len(lf.entries),
                   sum(1 for e in lf.entries if e.form == "B"), lf.error)


@dataclass(frozen=True)
class Signals:
    """What the threshold check looks at (``.meta.json`` fields, FORMATS.md §1.4)."""

    files: tuple[FileSignal, ...]
    estimated_tokens: int
    total_patterns: int
    title_lines: int
    context_budget_violations: int
    reinforcements_since_reconcile: int
    last_reconcile: dt.datetime | None
    last_reconcile_raw: str | None
    meta_json_state: str  # "ok", "missing" or the reason it could not be used
    recorded_tokens: int | None  # what .meta.json says, shown when it differs
    recorded_patterns: int | None
    lock: LockHolder | None


def _int_field(data: dict[str, Any], key: str) -> int | None:
    value = data.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def compute_signals(files: dict[str, Any], meta_json: dict[str, Any] | None,
                    meta_json_error: str | None) -> Signals:
    """Signals from parsed ledger files (``{kind: LedgerFile}``, or :class:`FileCounts` as the
    store holds them) and ``.meta.json``."""
    fs: list[FileSignal] = []
    words = 0
    for kind in LEDGER_FILES:
        lf = files.get(kind)
        if lf is None or not lf.exists:
            fs.append(FileSignal(kind, False, 0, 0, 0))
            continue
        c = FileCounts.of(lf)
        words += c.words
        fs.append(FileSignal(kind, True, tokens_for_words(c.words), c.entries, c.title_lines,
                             c.error))
    data = meta_json or {}
    state = "ok" if meta_json is not None else ("missing" if meta_json_error is None
                                                else f"unreadable: {meta_json_error}")
    last_raw = data.get("last_reconcile")
    return Signals(
        files=tuple(fs),
        estimated_tokens=tokens_for_words(words),
        total_patterns=sum(f.entries for f in fs),
        title_lines=sum(f.title_lines for f in fs),
        context_budget_violations=_int_field(data, "context_budget_violations") or 0,
        reinforcements_since_reconcile=_int_field(data, "reinforcements_since_reconcile") or 0,
        last_reconcile=parse_instant(last_raw),
        last_reconcile_raw=str(last_raw) if last_raw else None,
        meta_json_state=state,
        recorded_tokens=_int_field(data, "estimated_tokens"),
        recorded_patterns=_int_field(data, "total_patterns"),
        lock=read_lock_field(meta_json),
    )


@dataclass(frozen=True)
class Check:
    """One threshold: ``label`` is the log's trigger text, e.g. ``estimated_tokens > 30000``."""

    key: str
    label: str
    value: int
    limit: int

    @property
    def exceeded(self) -> bool:
        return self.value > self.limit


def evaluate(signals: Signals, settings: Settings) -> list[Check]:
    t = settings.thresholds
    checks = [Check("total_tokens_max", f"estimated_tokens > {t.total_tokens_max}",
                    signals.estimated_tokens, t.total_tokens_max)]
    for f in signals.files:
        if f.exists:
            checks.append(Check("single_file_tokens_max",
                                f"{f.name} tokens > {t.single_file_tokens_max}",
                                f.tokens, t.single_file_tokens_max))
    for f in signals.files:
        if f.exists:
            checks.append(Check("patterns_per_category_max",
                                f"{f.name} entries > {t.patterns_per_category_max}",
                                f.entries, t.patterns_per_category_max))
    checks.append(Check("reinforcements_threshold",
                        f"reinforcements_since_reconcile > {t.reinforcements_threshold}",
                        signals.reinforcements_since_reconcile, t.reinforcements_threshold))
    checks.append(Check("context_violations_threshold",
                        f"context_budget_violations > {t.context_violations_threshold}",
                        signals.context_budget_violations, t.context_violations_threshold))
    return checks


@dataclass(frozen=True)
class Decision:
    run: bool
    triggers: tuple[str, ...]
    reason: str  # why not, or what fired
    hours_since_last: float | None


def decide(signals: Signals, settings: Settings, now: dt.datetime, *, force: bool) -> Decision:
    """Phase 1: run when a threshold is exceeded and the minimum interval has passed."""
    exceeded = tuple(c.label for c in evaluate(signals, settings) if c.exceeded)
    hours = None
    if signals.last_reconcile is not None:
        hours = (now - signals.last_reconcile).total_seconds() / 3600
    if force:
        return Decision(True, ("manual --force", *exceeded), "forced", hours)
    minimum = settings.minimum_hours_between_reconciles
    if hours is not None and 0 <= hours < minimum:
        return Decision(False, exceeded,
                        f"No reconciliation needed: the last one ran {hours:.1f} hours ago "
                        f"(minimum {minimum:g} hours between runs)", hours)
    if not exceeded:
        return Decision(False, (), "No reconciliation needed: no threshold exceeded", hours)
    return Decision(True, exceeded, ", ".join(exceeded), hours)


# --------------------------------------------------------------------------- judges

@dataclass(frozen=True)
class Verdict:
    """A judge's answer: ``yes`` only for a clear YES with a usable merged title.

    ``warning`` is set when the answer could not be used (garbage, timeout, failure): the pair
    is then left alone and the warning goes to the reconcile log.
    """

    yes: bool
    merged_title: str | None = None
    warning: str | None = None


class Judge(Protocol):
    """Decides whether two entries of one file cover the same core lesson."""

    name: str
    external: bool  # True: each call costs (network, money, time) and is capped per run

    def same_lesson(self, a: LedgerEntry, b: LedgerEntry) -> Verdict: ...


_NEGATIONS = frozenset({"not", "never", "no", "don't", "dont", "avoid", "without", "cannot",
                        "can't", "won't", "shouldn't", "mustn't", "isn't", "doesn't"})


def _norm(text: str | None) -> str:
    return " ".join((text or "").lower().split())


def _negations(text: str) -> frozenset[str]:
    words = re.findall(r"[a-z']+", text.replace("\u2019", "'"))
    return frozenset(w for w in words if w in _NEGATIONS)


class FuzzyJudge:
    """The built-in conservative judge: no network, no model.

    YES only for two well-formed entries of the same file and the same Category whose titles
    AND patterns are near-identical (rapidfuzz ``ratio`` of the normalised text at least
    ``title_min`` / ``pattern_min``) and which use the same negations ("never", "don't"...):
    "Always X" and "Never X" are different lessons. Every other pair is NO. The merged title is
    the first entry's (the caller passes the merge base first).
    """

    name = "fuzzy"
    external = False

    def __init__(self, title_min: float = 90.0, pattern_min: float = 90.0) -> None:
        self.title_min = title_min
        self.pattern_min = pattern_min

    def same_lesson(self, a: LedgerEntry, b: LedgerEntry) -> Verdict:
        from rapidfuzz import fuzz

        if a.file != b.file or a.problems or b.problems:
            return Verdict(False)
        if (a.category or "") != (b.category or ""):
            return Verdict(False)
        ta, tb = _norm(a.title), _norm(b.title)
        pa, pb = _norm(a.pattern), _norm(b.pattern)
        if not (ta and tb and pa and pb):
            return Verdict(False)
        if _negations(ta + " " + pa) != _negations(tb + " " + pb):
            return Verdict(False)
        if fuzz.ratio(ta, tb) < self.title_min or fuzz.ratio(pa, pb) < self.pattern_min:
            return Verdict(False)
        return Verdict(True, a.title)


PROMPT_LIMIT = 2000  # characters of each of title / context / pattern sent to a judge


def _entry_text(e: LedgerEntry) -> str:
    def cut(text: str | None) -> str:
        text = (text or "").strip() or "(none)"
        return text if len(text) <= PROMPT_LIMIT else text[:PROMPT_LIMIT] + " [...]"

    return f"Title: {cut(e.title)}\nContext: {cut(e.context)}\nPattern: {cut(e.pattern)}"


def judge_prompt(a: LedgerEntry, b: LedgerEntry) -> str:
    """The seed's question, with each entry's title + context + pattern."""
    return ("Do these two Ledger entries cover the same core lesson?\n\n"
            f"Entry A:\n{_entry_text(a)}\n\n"
            f"Entry B:\n{_entry_text(b)}\n\n"
            "Answer YES with a merged title, or NO.\n"
            "Reply on the first line with exactly `YES: <merged title>` or `NO`.\n")


MAX_TITLE_CHARS = 200
_YES_LINE = re.compile(r"^yes(?:\s*$|\s*[:\-\u2013\u2014]\s*(.*)$)", re.IGNORECASE)
_NO_LINE = re.compile(r"^no\b(?![-'])", re.IGNORECASE)
_TITLE_LABEL = re.compile(r"^(?:merged\s+title|title)\s*:\s*", re.IGNORECASE)


_WRAPPERS = (("`", "`"), ('"', '"'), ("'", "'"), ("\u201c", "\u201d"), ("*", "*"), ("_", "_"))


def _unwrap(text: str) -> str:
    """Drop Markdown bold markers and enclosing quotes/backticks/emphasis."""
    text = text.replace("**", "").strip()
    changed = True
    while changed:
        changed = False
        for open_, close in _WRAPPERS:
            if len(text) > 2 and text.startswith(open_) and text.endswith(close):
                text = text[1:-1].strip()
                changed = True
    return text


def parse_judge_answer(output: str) -> Verdict:
    """Read a judge command's answer. The contract (docs/readme/reconcile.md):

    * The first non-empty line decides. Surrounding spaces and Markdown emphasis (``**``) are
      ignored, and case does not matter.
    * ``YES: <merged title>`` (or ``YES - title`` / ``YES — title``) is a YES with that title.
      A bare ``YES`` takes the next non-empty line as the title. A leading ``Merged title:``
      label and enclosing quotes or backticks are removed.
    * The title must be one line of 1-200 characters without control characters; otherwise
      the answer is unusable (NO, with a warning).
    * ``NO`` (optionally followed by an explanation) is a NO. Anything else is unusable.
    """
    lines = [ln.strip() for ln in output.replace("\r\n", "\n").lstrip("\ufeff").split("\n")]
    lines = [ln for ln in lines if ln]
    if not lines:
        return Verdict(False, warning="empty answer")
    first = _unwrap(lines[0])
    if _NO_LINE.match(first):
        return Verdict(False)
    m = _YES_LINE.match(first)
    if not m:
        return Verdict(False, warning=f"unclear answer {_clip(lines[0])!r}")
    title = m.group(1)
    if title is None or not title.strip():
        title = lines[1] if len(lines) > 1 else ""
    title = _unwrap(_TITLE_LABEL.sub("", _unwrap(title)))
    if not title:
        return Verdict(False, warning="YES without a merged title")
    if len(title) > MAX_TITLE_CHARS or any(
            ord(ch) < 32 or 0x7F <= ord(ch) < 0xA0 or 0x202A <= ord(ch) <= 0x202E
            or 0x2066 <= ord(ch) <= 0x2069 for ch in title):
        return Verdict(False, warning=f"unusable merged title {_clip(title)!r}")
    if _NO_LINE.match(title) or title.lower() == "yes":
        return Verdict(False, warning=f"unclear answer {_clip(lines[0])!r}")
    return Verdict(True, title)


def _clip(text: str, n: int = 60) -> str:
    from toolkit.display import visible

    text = visible(text, single_line=True)
    return text if len(text) <= n else text[: n - 1] + "…"


class CommandJudge:
    """Asks an external command (e.g. an LLM command-line client) the seed's question.

    The command line is split with :func:`shlex.split` and run without a shell, with the
    question on standard input. Only a clear YES with a merged title (see
    :func:`parse_judge_answer`) merges; NO, garbage, an empty answer, a non-zero exit and a
    timeout are all NO - the last four with a warning for the log. The command runs in its
    own process group, which is killed whole on timeout (a script that started children
    cannot keep the run waiting).
    """

    external = True

    def __init__(self, command: str, timeout: float = DEFAULT_JUDGE_TIMEOUT) -> None:
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            raise UsageError(f"--judge-command: {exc}", hint="Check the quoting") from None
        if not argv:
            raise UsageError("--judge-command is empty")
        exe = shutil.which(argv[0])
        if exe is None:
            raise UsageError(f"--judge-command: {argv[0]!r} was not found or is not executable",
                             hint="Give a command on PATH or a path to an executable file")
        if timeout <= 0:
            raise UsageError("--judge-timeout must be more than 0 seconds")
        self.argv = [exe, *argv[1:]]
        self.command = command
        self.timeout = timeout
        self.name = f"command `{command}`"

    def same_lesson(self, a: LedgerEntry, b: LedgerEntry) -> Verdict:
        try:
            proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=True)
        except OSError as exc:
            return Verdict(False, warning=f"judge command could not start: {exc.strerror}")
        try:
            out, err = proc.communicate(judge_prompt(a, b).encode("utf-8"), timeout=self.timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return Verdict(False, warning=f"judge command timed out after {self.timeout:g} s")
        except OSError as exc:  # e.g. the command closed stdin early and exited
            _kill_group(proc)
            return Verdict(False, warning=f"judge command failed: {exc}")
        if proc.returncode != 0:
            detail = err.decode("utf-8", "replace").strip().splitlines()
            why = f": {_clip(detail[0])}" if detail else ""
            return Verdict(False, warning=f"judge command exited {proc.returncode}{why}")
        return parse_judge_answer(out.decode("utf-8", "replace"))


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired, OSError):
        proc.communicate(timeout=5)


# --------------------------------------------------------------------------- candidates

PREFILTER_MIN = 60.0  # rapidfuzz token_set_ratio below which a pair is not worth asking about


def candidate_pairs(entries: Sequence[LedgerEntry],
                    prefilter_min: float = PREFILTER_MIN) -> list[tuple[float, int, int]]:
    """Plausible duplicate pairs of one file, most similar first: ``(score, i, j)``, i < j.

    All pairs are scored at once in C (rapidfuzz ``cdist``, token_set_ratio of titles and of
    title + pattern), so even the 4,950 pairs of a 100-entry file cost milliseconds and no
    judge call; only pairs scoring at least ``prefilter_min`` are returned. Malformed entries
    take no part.
    """
    from rapidfuzz import fuzz, process

    idx = [i for i, e in enumerate(entries) if not e.problems and e.title]
    if len(idx) < 2:
        return []
    titles = [_norm(entries[i].title) for i in idx]
    bodies = [_norm(f"{entries[i].title} {entries[i].pattern or ''}") for i in idx]
    t = process.cdist(titles, titles, scorer=fuzz.token_set_ratio)
    p = process.cdist(bodies, bodies, scorer=fuzz.token_set_ratio)
    out: list[tuple[float, int, int]] = []
    n = len(idx)
    for x in range(n):
        for y in range(x + 1, n):
            score = max(float(t[x][y]), float(p[x][y]))
            if score >= prefilter_min:
                out.append((round(score, 2), idx[x], idx[y]))
    out.sort(key=lambda s: (-s[0], s[1], s[2]))
    return out


# --------------------------------------------------------------------------- the model

def confidence_for(reflections: int) -> str:
    """The seed's recalculation: 1 = low, 2-5 = medium, 6+ = high."""
    if reflections >= 6:
        return "high"
    return "medium" if reflections >= 2 else "low"


@dataclass
class Item:
    """One entry as reconcile plans it: the parsed original and its current bytes/values."""

    entry: LedgerEntry
    block: bytes  # current bytes of the entry (the parser's [start, end) range)
    tail: bytes  # bytes between this entry's end and the next entry (normally empty)
    position: int
    title: str | None
    date: str | None
    confidence: str | None
    reflections: int
    words: int
    changed: bool = False
    removed: bool = False
    merged: bool = False  # took part in a merge this run (at most one per entry)

    @property
    def well_formed(self) -> bool:
        return not self.entry.problems

    @property
    def current(self) -> LedgerEntry:
        """The entry with this run's changes (for judges and sorting)."""
        return replace(self.entry, title=self.title, date=self.date, confidence=self.confidence)


@dataclass
class WorkFile:
    kind: str
    path: Path
    data: bytes
    header: bytes
    newline: bytes
    items: list[Item]
    other_words: int  # words outside any entry (header, stray lines)
    readable: bool = True
    resort: bool = False

    @property
    def name(self) -> str:
        return f"{self.kind}.md"

    @property
    def live(self) -> list[Item]:
        return [it for it in self.items if not it.removed]

    @property
    def words(self) -> int:
        return self.other_words + sum(it.words for it in self.items if not it.removed)

    @property
    def tokens(self) -> int:
        return tokens_for_words(self.words)

    @property
    def changed(self) -> bool:
        return self.resort or any(it.changed or it.removed for it in self.items)


def _sort_key(it: Item) -> tuple[int, str, int]:
    """High, medium, low (unknown last); newest Date first; then file order."""
    rank = confidence_rank(it.confidence)
    date = it.date if it.date and re.match(r"^\d{4}-\d{2}-\d{2}$", it.date) else "0000-00-00"
    inverted = "".join(chr(ord("9") - ord(c) + ord("0")) if c.isdigit() else c for c in date)
    return rank, inverted, it.position


def work_file(lf: Any) -> WorkFile:
    """Model a parsed LedgerFile (toolkit.sources.smith) for planning."""
    data: bytes = lf.data
    entries: list[LedgerEntry] = list(lf.entries)
    items: list[Item] = []
    inside = 0
    for i, e in enumerate(entries):
        nxt = entries[i + 1].start if i + 1 < len(entries) else len(data)
        block = data[e.start:e.end]
        tail = data[e.end:nxt]
        words = count_words(block + tail)
        inside += words
        items.append(Item(entry=e, block=block, tail=tail, position=i, title=e.title,
                          date=e.date, confidence=e.confidence, reflections=e.reflections,
                          words=words))
    header = data[: entries[0].start] if entries else data
    return WorkFile(kind=lf.kind, path=Path(lf.path), data=data, header=header,
                    newline=lf.newline, items=items, other_words=count_words(data) - inside,
                    readable=lf.exists and not lf.error)


# ---- editing one entry's bytes (only the lines that change)

_DATE_IN = re.compile(r"(\d{4}-\d{2}-\d{2})")


def _split_lines(block: bytes) -> list[bytes]:
    return re.findall(rb"[^\n]*\n|[^\n]+$", block)


def _field_index(lines: list[bytes], name: str) -> int | None:
    """The first line labelled ``**name:**`` (a Form B section label), or None."""
    want = name.lower()
    for i, line in enumerate(lines):
        m = FIELD.match(line)
        if m and m.group(1).decode("utf-8", "replace").strip().lower() == want:
            return i
    return None


def _evidence_items(text: str | None) -> list[str]:
    """An evidence section as list items (paragraph text becomes one item)."""
    items: list[str] = []
    para: list[str] = []

    def flush() -> None:
        if para:
            items.append("- " + " ".join(para))
            para.clear()

    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line:
            flush()
            continue
        if re.match(r"^[-*+]\s+", line):
            flush()
            items.append("- " + re.sub(r"^[-*+]\s+", "", line))
        elif raw[:1] in (" ", "\t") and items and not para:
            items[-1] += " " + line
        else:
            para.append(line)
    flush()
    return items


def _item_date(item: str) -> str | None:
    m = re.match(r"^-\s*\**(\d{4}-\d{2}-\d{2})", item)
    return m.group(1) if m else None


def combine_evidence(base: str | None, other: str | None) -> list[str]:
    """Items of ``other`` to add to ``base``: the seed's "deduplicate by date" (an item whose
    date the base already has is dropped; undated items are compared by text)."""
    have = _evidence_items(base)
    dates = {d for d in (_item_date(i) for i in have) if d}
    texts = {_norm(i) for i in have}
    out: list[str] = []
    for item in _evidence_items(other):
        d = _item_date(item)
        if (d and d in dates) or (not d and _norm(item) in texts):
            continue
        if d:
            dates.add(d)
        texts.add(_norm(item))
        out.append(item)
    return out


def _evidence_span(lines: list[bytes], form: str) -> tuple[int, int] | None:
    """(header line, last content line) of the Evidence section, or None."""
    if form == "A":
        head = next((i for i, ln in enumerate(lines)
                     if ln.startswith(b"### ") and ln[4:].strip().lower().rstrip(b":")
                     == b"evidence"), None)
    else:
        head = _field_index(lines, "evidence")
    if head is None:
        return None
    last = head
    for k in range(head + 1, len(lines)):
        ln = lines[k]
        if form == "A" and (ln.startswith(b"#") or re.match(rb"^[ \t]*-{3,}[ \t]*\r?\n?$", ln)):
            break
        if form == "B" and ((FIELD.match(ln) and ln.startswith(b"**"))
                            or re.match(rb"^[ \t]*-{3,}[ \t]*\r?\n?$", ln)):
            break
        if ln.strip():
            last = k
    return head, last


def _add_evidence(lines: list[bytes], form: str, items: list[str], newline: bytes) -> None:
    add = [i.encode() + newline for i in items]
    span = _evidence_span(lines, form)
    if span is None:
        # No Evidence section: add one before Related (or at the end of the body).
        if form == "A":
            at = next((i for i, ln in enumerate(lines)
                       if ln.startswith(b"### ") and b"related" in ln.lower()), None)
            block = [b"### Evidence" + newline, newline, *add, newline]
        else:
            at = _field_index(lines, "related")
            block = [b"**Evidence:**" + newline, *add, newline]
        if at is None:
            at = len(lines)
            while at > 0 and (not lines[at - 1].strip()
                              or re.match(rb"^[ \t]*-{3,}[ \t]*\r?\n?$", lines[at - 1])):
                at -= 1
            if at and not lines[at - 1].endswith(b"\n"):
                lines[at - 1] += newline
            block = [newline, *block[:-1]]
        lines[at:at] = block
        return
    head, last = span
    if not lines[last].endswith(b"\n"):
        lines[last] += newline
    prefix: list[bytes] = []
    if last > head and not re.match(rb"^[ \t]*[-*+][ \t]", lines[last]):
        prefix = [newline]  # prose above: start the list after a blank line
    elif last == head and form == "A":
        prefix = [newline]
    lines[last + 1:last + 1] = prefix + add


def merge_entries(base: Item, other: Item, title: str, today: dt.date,
                  newline: bytes) -> tuple[bytes, dict[str, Any]]:
    """The merged entry's bytes (the seed's Phase 3 rules) and its new values.

    Base: the higher-confidence entry, edited in place - title from the judge, Date the newer
    of the two, reflection counts summed (Form A: ``Observations``, and the reflection lists
    joined), confidence recalculated (1 / 2-5 / 6+), the absorbed entry's evidence added
    without repeating a date, and the merge note ``- YYYY-MM-DD — reconcile merge: absorbed
    "<other title>"`` last.
    """
    e = base.entry
    block = base.block
    total = base.reflections + other.reflections
    conf = confidence_for(total)
    dates = [d for d in (base.date, other.date) if d]
    date = max(dates) if dates else base.date
    block = set_field(block, e.form, "Title", title, newline)
    if date and date != base.date:
        block = set_field(block, e.form, "Date", date, newline)
    block = set_field(block, e.form, "Confidence", conf, newline)
    if e.form == "A":
        block = set_field(block, e.form, "Observations", str(total), newline)
        mine = e.source_reflections or ""
        theirs = other.entry.source_reflections or ""
        if other.entry.form == "A" and mine and theirs and not mine.strip().isdigit():
            joined = [s.strip() for s in mine.split(",") if s.strip()]
            for s in theirs.split(","):
                if s.strip() and s.strip() not in joined:
                    joined.append(s.strip())
            block = set_field(block, e.form, "Source reflections", ", ".join(joined), newline)
    else:
        block = set_field(block, e.form, "Source reflections", str(total), newline)
    lines = _split_lines(block)
    items = combine_evidence(e.evidence, other.entry.evidence)
    items.append(f'- {today.isoformat()} \u2014 reconcile merge: absorbed "{other.title}"')
    _add_evidence(lines, e.form, items, newline)
    return b"".join(lines), {"title": title, "date": date, "confidence": conf,
                             "reflections": total}


def set_values(item: Item, newline: bytes, **values: str) -> None:
    """Change field values of an entry (confidence, date) in its bytes (the codec's rule)."""
    block = item.block
    for name, value in values.items():
        block = set_field(block, item.entry.form, name.capitalize(), value, newline)
        setattr(item, name, value)
    item.block = block
    item.words = count_words(item.block + item.tail)
    item.changed = True


# --------------------------------------------------------------------------- planning

@dataclass(frozen=True)
class MergeAction:
    file: str  # "patterns.md"
    title_a: str  # the base (kept) entry's title before the merge
    title_b: str  # the absorbed entry's title
    merged_title: str


@dataclass(frozen=True)
class PruneAction:
    file: str
    title: str
    confidence: str  # before the action
    age_days: int
    action: str  # "removed" or "demoted"


@dataclass(frozen=True)
class DropAction:
    file: str
    title: str
    confidence: str
    reflections: int
    reason: str  # "file budget", "total budget", "entry count"


@dataclass
class Plan:
    files: dict[str, WorkFile]  # the files in scope, by kind
    outside_words: int  # words of the ledger files outside the scope (--category)
    merges: list[MergeAction] = field(default_factory=list)
    prunes: list[PruneAction] = field(default_factory=list)
    drops: list[DropAction] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    judge_calls: int = 0

    @property
    def tokens(self) -> int:
        return tokens_for_words(self.outside_words + sum(wf.words for wf in self.files.values()))


def _title(it: Item) -> str:
    return it.title or "[???]"


def _base_first(a: Item, b: Item) -> tuple[Item, Item]:
    """The merge base: higher confidence, then more reflections, then newer, then earlier."""
    def key(it: Item) -> tuple[int, int, str, int]:
        inverted = _sort_key(it)[1]
        return CONF_RANK.get(it.confidence or "", 3), -it.reflections, inverted, it.position

    return (a, b) if key(a) <= key(b) else (b, a)


def plan_merges(plan: Plan, judge: Judge, today: dt.date, *,
                max_judge_calls: int = DEFAULT_MAX_JUDGE_CALLS) -> None:
    """Phase 3 on the model. Files with more than 100 entries are skipped with a warning; an
    external judge is asked at most ``max_judge_calls`` times per run."""
    unjudged = 0
    for wf in plan.files.values():
        if not wf.readable:
            continue
        live = wf.live
        if len(live) > MERGE_MAX_ENTRIES:
            plan.warnings.append(
                f"{wf.name}: {len(live)} entries, more than {MERGE_MAX_ENTRIES}: merge phase "
                "skipped for this file")
            continue
        for _score, i, j in candidate_pairs([it.current for it in live]):
            a, b = live[i], live[j]
            if a.merged or b.merged:
                continue
            if judge.external and plan.judge_calls >= max_judge_calls:
                unjudged += 1
                continue
            base, other = _base_first(a, b)
            plan.judge_calls += 1
            verdict = judge.same_lesson(base.current, other.current)
            if verdict.warning:
                plan.warnings.append(f'{wf.name}: "{_title(base)}" + "{_title(other)}": '
                                     f"{verdict.warning}; left as they are")
            if not verdict.yes or not verdict.merged_title:
                continue
            before = _title(base)
            block, values = merge_entries(base, other, verdict.merged_title, today, wf.newline)
            base.block = block
            base.words = count_words(block + base.tail)
            for key, value in values.items():
                setattr(base, key, value)
            base.changed = base.merged = other.merged = True
            other.removed = True
            wf.resort = True
            plan.merges.append(MergeAction(wf.name, before, _title(other), verdict.merged_title))
    if unjudged:
        plan.warnings.append(f"{unjudged} candidate pair(s) not judged: the limit of "
                             f"{max_judge_calls} judge calls per run was reached "
                             "(raise it with --max-judge-calls)")


def _age(it: Item, today: dt.date) -> int | None:
    try:
        return (today - dt.date.fromisoformat(it.date or "")).days
    except ValueError:
        return None


def plan_prunes(plan: Plan, settings: Settings, today: dt.date) -> None:
    """Phase 4 (reflect Phase 6 rules): low and older than ``low_max_age_days`` -> removed;
    medium and older than ``medium_max_age_days`` -> demoted to low with Date = today; high
    never touched. Age is counted from the Date field."""
    for wf in plan.files.values():
        for it in wf.live:
            if not it.well_formed or it.confidence not in ("low", "medium"):
                continue
            age = _age(it, today)
            if age is None:
                continue
            if it.confidence == "low" and age > settings.low_max_age_days:
                it.removed = True
                plan.prunes.append(PruneAction(wf.name, _title(it), "low", age, "removed"))
            elif it.confidence == "medium" and age > settings.medium_max_age_days:
                set_values(it, wf.newline, confidence="low", date=today.isoformat())
                wf.resort = True
                plan.prunes.append(PruneAction(wf.name, _title(it), "medium", age, "demoted"))


def _droppable(it: Item) -> bool:
    return it.well_formed and it.confidence in ("low", "medium")


def _drop_key(it: Item) -> tuple[int, str, int, int]:
    """Lowest confidence first, then the oldest Date, fewest reflections, last in the file."""
    return -CONF_RANK[it.confidence or "low"], it.date or "", it.reflections, -it.position


def _drop(plan: Plan, wf: WorkFile, it: Item, reason: str) -> None:
    it.removed = True
    plan.drops.append(DropAction(wf.name, _title(it), it.confidence or "low", it.reflections,
                                 reason))


def plan_budget(plan: Plan, settings: Settings) -> None:
    """Phase 5: drop the lowest-confidence entries until each file is under
    ``single_file_tokens_max``, the whole ledger under ``total_tokens_max`` (from the largest
    files first) and each file under ``patterns_per_category_max`` entries. High-confidence
    and malformed entries are never dropped; a budget that cannot be met is a warning."""
    t = settings.thresholds
    for wf in plan.files.values():
        while wf.tokens > t.single_file_tokens_max:
            cands = sorted((it for it in wf.live if _droppable(it)), key=_drop_key)
            if not cands:
                plan.warnings.append(
                    f"{wf.name}: still {wf.tokens} estimated tokens (limit "
                    f"{t.single_file_tokens_max}); only high-confidence or malformed entries left")
                break
            _drop(plan, wf, cands[0], "file budget")
    while plan.tokens > t.total_tokens_max:
        pool = [(wf, it) for wf in plan.files.values() for it in wf.live if _droppable(it)]
        if not pool:
            plan.warnings.append(
                f"ledger: still {plan.tokens} estimated tokens (limit {t.total_tokens_max}); "
                "only high-confidence or malformed entries left"
                + (" in the files reconciled" if plan.outside_words else ""))
            break
        worst = max(CONF_RANK[it.confidence or "low"] for _, it in pool)  # low before medium
        pool = [(wf, it) for wf, it in pool if CONF_RANK[it.confidence or "low"] == worst]
        wf, it = min(pool, key=lambda p: (-p[0].tokens, _drop_key(p[1])))
        _drop(plan, wf, it, "total budget")
    for wf in plan.files.values():
        while len(wf.live) > t.patterns_per_category_max:
            cands = sorted((it for it in wf.live if _droppable(it)), key=_drop_key)
            if not cands:
                plan.warnings.append(
                    f"{wf.name}: still {len(wf.live)} entries (limit "
                    f"{t.patterns_per_category_max}); only high-confidence or malformed "
                    "entries left")
                break
            _drop(plan, wf, cands[0], "entry count")


# --------------------------------------------------------------------------- the log

LOG_HEADER = "# Reconcile Log\n"


@dataclass
class Report:
    """What one reconcile did (or would do, or why it did not run)."""

    ran_at: dt.datetime
    dry_run: bool
    forced: bool
    scope: tuple[str, ...]  # the ledger files reconciled
    signals: Signals
    decision: Decision
    settings: Settings
    backup: str | None = None  # ".backups/reconcile-YYYY-MM-DD-HHMMSS/"
    merges: list[MergeAction] = field(default_factory=list)
    prunes: list[PruneAction] = field(default_factory=list)
    drops: list[DropAction] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # e.g. a stale lock taken over
    tokens_before: int = 0
    tokens_after: int = 0
    judge: str = "fuzzy"
    judge_calls: int = 0
    result: str | None = None  # OK | PARTIAL | FAILED; None when it did not run
    error: str | None = None
    diffs: dict[str, str] = field(default_factory=dict)  # dry run: file name -> unified diff
    disabled: bool = False
    log_path: Path | None = None
    logged: bool = False
    log_error: str | None = None
    exit_code: int = 0  # of the error that made the run FAILED
    written: list[str] = field(default_factory=list)  # files this run changed and kept

    @property
    def trigger(self) -> str:
        return ", ".join(self.decision.triggers) or "none"

    @property
    def pruned_removed(self) -> int:
        return sum(1 for p in self.prunes if p.action == "removed")

    @property
    def pruned_demoted(self) -> int:
        return sum(1 for p in self.prunes if p.action == "demoted")


def render_log_entry(r: Report) -> str:
    """One ``reconcile-log.md`` entry in the seed's format (FORMATS.md §1.6)."""
    s = r.signals
    out = ["---", "", f"## Reconcile: {r.ran_at.astimezone(dt.UTC):%Y-%m-%d %H:%M:%S}",
           "", f"**Trigger**: {r.trigger}",
           f"**Signal values**: tokens={s.estimated_tokens}, patterns={s.total_patterns}, "
           f"violations={s.context_budget_violations}, "
           f"reinforcements_since={s.reinforcements_since_reconcile}", ""]
    out.append(f"**Backup**: `{r.backup}`" if r.backup else "**Backup**: none")
    pruned = f"- Pruned {len(r.prunes)} stale entries"
    if r.pruned_demoted:
        pruned += f" ({r.pruned_removed} removed, {r.pruned_demoted} demoted to low)"
    out += ["", "**Actions**:", f"- Merged {len(r.merges)} entries", pruned,
            f"- Dropped {len(r.drops)} lowest-confidence entries for budget",
            f"- Budget result: {r.tokens_before} \u2192 {r.tokens_after} estimated tokens"]
    if r.scope != LEDGER_FILES:
        out.append(f"- Scope: {', '.join(k + '.md' for k in r.scope)} (--category)")
    if r.merges:
        out += ["", "**Merges**:"] + [
            f'- {m.file}: "{m.title_a}" + "{m.title_b}" \u2192 "{m.merged_title}"'
            for m in r.merges]
    if r.prunes:
        out += ["", "**Prunes**:"] + [
            f'- {p.file}: "{p.title}" ({p.confidence} confidence, age: {p.age_days} days)'
            + (" \u2192 demoted to low" if p.action == "demoted" else "")
            for p in r.prunes]
    if r.drops:
        out += ["", "**Budget drops**:"] + [
            f'- {d.file}: "{d.title}" ({d.confidence} confidence, {d.reflections} reflections)'
            for d in r.drops]
    if r.notes:
        out += ["", "**Notes**:"] + [f"- {_one_line(n)}" for n in r.notes]
    warnings = [*r.warnings] + ([f"FAILED: {r.error}"] if r.error else [])
    if warnings:
        out += ["", "**Warnings**:"] + [f"- {_one_line(w)}" for w in warnings]
    out += ["", f"**Result**: {r.result or 'FAILED'}", ""]
    return "\n".join(out)


def _one_line(text: str) -> str:
    return " ".join(text.split())


_LOG_ENTRY_HEAD = re.compile(rb"^## Reconcile: ", re.MULTILINE)
_LOG_SEP = re.compile(rb"^[ \t]*-{3,}[ \t]*\r?\n(?:[ \t]*\r?\n)*\Z")


def insert_log_entry(existing: bytes | None, entry: str) -> bytes:
    """The log with ``entry`` added newest first, below the header. A missing or empty log
    gets the ``# Reconcile Log`` header. Existing bytes (BOM, CRLF) are kept."""
    if not existing or not existing.strip(b"\xef\xbb\xbf \t\r\n"):
        bom = b"\xef\xbb\xbf" if existing and existing.startswith(b"\xef\xbb\xbf") else b""
        return bom + (LOG_HEADER + "\n" + entry).encode("utf-8")
    nl = dominant_newline(existing)
    body = entry.encode("utf-8").replace(b"\n", nl)
    m = _LOG_ENTRY_HEAD.search(existing)
    if m is None:
        sep = b"" if existing.endswith(nl + nl) else (nl if existing.endswith(b"\n") else nl + nl)
        return existing + sep + body
    # Start at the entry's own `---` (the last separator line above its heading), if any.
    at = m.start()
    above = existing[:at]
    lines = re.findall(rb"[^\n]*\n", above)
    k = len(lines)
    while k > 0 and not lines[k - 1].strip():
        k -= 1
    if k > 0 and re.match(rb"^[ \t]*-{3,}[ \t]*\r?\n$", lines[k - 1]):
        at = sum(len(x) for x in lines[: k - 1])
    head = existing[:at]
    if head and not head.endswith(nl + nl) and head != b"\xef\xbb\xbf":
        head += nl if head.endswith(b"\n") else nl + nl
    return head + body + nl + existing[at:]


# --------------------------------------------------------------------------- test hooks

class InjectedFault(ToolkitError):
    """Raised at a named point when ``TOOLKIT_RECONCILE_FAULT`` names it (tests only)."""


def _checkpoint(point: str) -> None:
    """Test-only hooks: ``TOOLKIT_RECONCILE_FAULT=<point>`` fails there (as a crash of that
    phase would); the one pause mechanism, ``TOOLKIT_EDITOR_PAUSE=<point>:<release>``
    (:func:`toolkit.safewrite.pause`), waits there so a test can start a second run or
    SIGKILL this one."""
    from toolkit.safewrite import pause

    if os.environ.get(FAULT_ENV) == point:
        raise InjectedFault(f"injected fault at {point} ({FAULT_ENV})")
    pause(point)


# --------------------------------------------------------------------------- the .meta.json lock

def check_lock(meta_json: dict[str, Any] | None, path: Path, now: dt.datetime, *,
               force: bool) -> list[str]:
    """Phase 0's check: BusyError (exit 75, naming the holder) for a lock that blocks (see
    :func:`lock_blocks`) unless ``force``; otherwise the notes for the log."""
    holder = read_lock_field(meta_json)
    blocks, note = judge_lock(holder, now, force=force)
    if blocks:
        assert holder is not None
        raise BusyError(f"Reconciliation already in progress: locked by {holder.describe(now)}",
                        path=path,
                        hint="Wait for it to finish (the lock expires after 10 minutes), or "
                             "use --force if that run is dead")
    return [note] if note else []


def _new_meta_json() -> dict[str, Any]:
    return {"schema_version": 1, "last_reconcile": None, "estimated_tokens": 0,
            "total_patterns": 0, "total_reinforcements": 0, "context_budget_violations": 0,
            "reinforcements_since_reconcile": 0, "lock": None}


def take_lock(ledger_dir: Path, now: dt.datetime, *, force: bool,
              timeout: float | None = None) -> LockTicket:
    """Phase 0: take the ``.meta.json`` lock (:func:`toolkit.ledger.vault.take_json_lock`),
    after :func:`check_lock` under the OS lock, so two runs cannot both find it free."""
    from toolkit.ledger.vault import take_json_lock

    return take_json_lock(ledger_dir, now,
                          lambda data, path, when: check_lock(data, path, when, force=force),
                          new_file=_new_meta_json, timeout=timeout)


def finish_updates(data: dict[str, Any] | None, holder_pid: str, now: dt.datetime, tokens: int,
                   patterns: int) -> dict[str, Any]:
    """The post-reconciliation values of ``.meta.json`` (``data``: the file as it stands):
    last_reconcile, fresh counts, counters reset, the lock released when it is ours."""
    updates: dict[str, Any] = {"last_reconcile": iso_z(now), "estimated_tokens": tokens,
                               "total_patterns": patterns, "context_budget_violations": 0,
                               "reinforcements_since_reconcile": 0}
    if data is not None and "schema_version" not in data:
        updates["schema_version"] = 1
    if data is not None and "total_reinforcements" not in data:
        updates["total_reinforcements"] = 0
    holder = read_lock_field(data)
    if holder is None or holder.pid == holder_pid:
        updates["lock"] = None
    return updates


def finish_meta_json(ticket: LockTicket, now: dt.datetime, tokens: int, patterns: int) -> bytes:
    """Post-reconciliation ``.meta.json`` (the caller holds the OS lock): last_reconcile, fresh
    counts, counters reset, lock released; every other field and the layout kept. Written
    only when it differs: a commit that changed the ledger already wrote these values in the
    same journaled set as the ledger files (FAULTS G4)."""
    from toolkit.ledger.vault import write_meta_json
    from toolkit.ledger.vault.lock import META_JSON_HINT

    return write_meta_json(
        ticket.path, lambda data: finish_updates(data, ticket.holder, now, tokens, patterns),
        _new_meta_json, hint=META_JSON_HINT)


# --------------------------------------------------------------------------- status

@dataclass(frozen=True)
class Status:
    """``--status``: the signals, every threshold, the lock, and whether a run would start."""

    now: dt.datetime
    settings: Settings
    signals: Signals
    checks: tuple[Check, ...]
    decision: Decision
    lock_fresh: bool
    meta_json_path: Path
    # the instant the lock is judged by (the run's time, not moved to ``today``; see
    # EditorSession.lock_now); None: ``now``
    lock_now: dt.datetime | None = None


def _scope(category: str | None) -> tuple[str, ...]:
    if category is None:
        return LEDGER_FILES
    return (ledger_kind(category, option="--category"),)


def _require_ledger(ledger_dir: Path) -> None:
    if not ledger_dir.is_dir():
        raise NotFoundError("No Ledger found", path=ledger_dir,
                            hint="Run /smith-reflect after a workflow to start building the "
                                 "Ledger, or /smith to initialize the vault structure")


def _settings(cfg: Any) -> Settings:
    from toolkit.sources.smith import read_meta

    meta = read_meta(cfg.ledger_dir)
    return load_settings(cfg.smith_config, (meta.data or {}).get("config"))


def _signals(cfg: Any, files: dict[str, Any]) -> Signals:
    from toolkit.sources.smith import read_json_file

    meta_json, err = read_json_file(cfg.ledger_dir / ".meta.json")
    return compute_signals(files, meta_json, err)


BUDGET_KEYS = ("total_tokens_max", "single_file_tokens_max", "patterns_per_category_max")


def budget_overruns(cfg: Any, files: dict[str, FileCounts] | None = None) -> list[Check]:
    """The ledger's word (estimated tokens) and entry budgets it is over now, as reconcile's
    threshold check sees them (``.smith/config.json``'s limits). Reads only; no ledger: [].
    ``files``: the five files' counts as the store holds them (else the files are read)."""
    from toolkit.sources.smith import read_ledger

    if not cfg.ledger_dir.is_dir():
        return []
    signals = _signals(cfg, files if files is not None
                       else read_ledger(cfg.ledger_dir, cfg.max_file_bytes))
    return [c for c in evaluate(signals, _settings(cfg)) if c.key in BUDGET_KEYS and c.exceeded]


def reconcile_status(cfg: Any, *, now: dt.datetime | None = None) -> Status:
    """Read-only: what the threshold check sees right now. Creates and changes nothing (but,
    like every command, first finishes or undoes an edit a killed run left half-done)."""
    from toolkit.ledger.vault import recover_interrupted
    from toolkit.sources.smith import read_ledger

    _require_ledger(cfg.ledger_dir)
    recover_interrupted(cfg.vault)  # a killed edit is finished or undone first (G4)
    lock_now = now or now_for()  # another session's lock is judged by the clock, not `today`
    now = now or now_for(cfg.today)
    settings = _settings(cfg)
    signals = _signals(cfg, read_ledger(cfg.ledger_dir, cfg.max_file_bytes))
    return Status(now=now, settings=settings, signals=signals,
                  checks=tuple(evaluate(signals, settings)),
                  decision=decide(signals, settings, now, force=False),
                  lock_fresh=lock_blocks(signals.lock, lock_now),
                  meta_json_path=cfg.ledger_dir / ".meta.json", lock_now=lock_now)


# --------------------------------------------------------------------------- the run

def session_files(session: Any) -> dict[str, Any]:
    """The five files as an open EditorSession read them (missing/unreadable ones marked)."""
    from toolkit.sources.smith import LedgerFile

    out: dict[str, Any] = {}
    for kind in LEDGER_FILES:
        d = session.doc(kind)
        if not d.exists:
            out[kind] = LedgerFile(d.path, kind, b"", [], 0, b"\n", False, exists=False)
        elif not d.usable:
            out[kind] = LedgerFile(d.path, kind, b"", [], 0, b"\n", False, error=d.error)
        else:
            out[kind] = session.file(kind)
    return out


def build_plan(files: dict[str, Any], scope: Sequence[str], settings: Settings, judge: Judge,
               today: dt.date, *, max_judge_calls: int = DEFAULT_MAX_JUDGE_CALLS,
               notes: list[str] | None = None) -> Plan:
    """Phases 3-5 on an in-memory model of the files in ``scope``."""
    wfs: dict[str, WorkFile] = {}
    outside = 0
    warnings: list[str] = []
    for kind in LEDGER_FILES:
        lf = files[kind]
        if kind not in scope:
            outside += count_words(lf.data)
        elif not lf.exists:
            if notes is not None:
                notes.append(f"(missing: {kind}.md)")
        elif lf.error:
            warnings.append(f"{kind}.md: {lf.error}; skipped")
        else:
            wfs[kind] = work_file(lf)
    plan = Plan(files=wfs, outside_words=outside, warnings=warnings)
    plan_merges(plan, judge, today, max_judge_calls=max_judge_calls)
    plan_prunes(plan, settings, today)
    plan_budget(plan, settings)
    return plan


def apply_plan(session: Any, plan: Plan) -> None:
    """Hand the plan to the editor: replaced and removed entries, then a re-sort of each file
    whose entries moved (merged, demoted)."""
    for wf in plan.files.values():
        for it in wf.items:
            if it.removed:
                session.remove(it.entry)
            elif it.changed:
                session.replace_entry(it.entry, it.block)
        if wf.resort:
            session.resort(wf.kind)


def run_reconcile(cfg: Any, *, dry_run: bool = False, force: bool = False,
                  category: str | None = None, judge: Judge | None = None,
                  max_judge_calls: int = DEFAULT_MAX_JUDGE_CALLS,
                  now: dt.datetime | None = None, lock_wait: float | None = None,
                  request: str | None = None) -> Report:
    """Run (or, with ``dry_run``, preview) one reconciliation. See the module doc.

    Raises BusyError (exit 75) when another run holds a fresh lock, NotFoundError when there
    is no ledger, UsageError/DataError for bad options or config. A failure once the lock is
    taken does not raise: the files are restored, the failure is logged, and the report says
    FAILED with ``error`` (and the error's ``exit_code``).

    Like the other ledger commands, a real run (not a dry run) is recorded in the vault's
    current session log when there is one: the invocation, and the mutation when files
    changed (``request`` is the command line as typed).
    """
    lock_now = now or now_for()  # another session's lock is judged by the clock, not `today`
    now = now or now_for(cfg.today)
    judge = judge or FuzzyJudge()
    try:
        report = _run(cfg, dry_run=dry_run, force=force, category=category, judge=judge,
                      max_judge_calls=max_judge_calls, now=now, lock_wait=lock_wait,
                      lock_now=lock_now)
    except ToolkitError as exc:
        if not dry_run:
            _session_log(cfg, request, now, force, category, judge, None, f"error: {exc}")
        raise
    if not dry_run:
        _session_log(cfg, request, now, force, category, judge, report, None)
    return report


def _session_log(cfg: Any, request: str | None, now: dt.datetime, force: bool,
                 category: str | None, judge: Judge, report: Report | None,
                 error: str | None) -> None:
    from toolkit.ledger.vault import append_session_log

    flags = [f"force={'yes' if force else 'no'}", f"category={category or 'all'}",
             f"judge={judge.name}"]
    common: dict[str, Any] = dict(subcommand="reconcile",
                                  request=request or "toolkit ledger reconcile",
                                  synthesized="reconcile: " + ", ".join(flags), now=now)
    if error is None and report is not None:
        if report.disabled:
            outcome = "disabled (ledger.reconcile.enabled is false)"
        elif report.result is None:
            outcome = report.decision.reason
        else:
            outcome = f"{report.result}: {_counts(report)}" + (
                f"; {report.error}" if report.error else "")
    else:
        outcome = error or "error"
    # the invocation, then its mutation: the order Smith's skills log them in
    append_session_log(cfg.vault, event="invoked", outcome=outcome,
                       artifacts=".smith/vault/ledger/", **common)
    if report is not None and report.written:
        append_session_log(cfg.vault, event="reconcile applied",
                           outcome=f"{report.result}: {_counts(report)}",
                           artifacts=", ".join(report.written + (
                               ["reconcile-log.md"] if report.logged else [])),
                           systems="smith-ledger",
                           **common)


def _counts(r: Report) -> str:
    return (f"merged {len(r.merges)}, pruned {len(r.prunes)} ({r.pruned_removed} removed, "
            f"{r.pruned_demoted} demoted), dropped {len(r.drops)}; tokens {r.tokens_before} "
            f"\u2192 {r.tokens_after}; backup {r.backup or 'none'}")


def _run(cfg: Any, *, dry_run: bool, force: bool, category: str | None, judge: Judge,
         max_judge_calls: int, now: dt.datetime, lock_wait: float | None,
         lock_now: dt.datetime) -> Report:
    from toolkit.ledger.vault import (
        EditorSession,
        check_inside,
        make_backup,
        prune_backups,
        recover_interrupted,
        refuse_unreadable,
    )
    from toolkit.sources.smith import read_json_file, read_ledger

    ledger_dir = cfg.ledger_dir
    _require_ledger(ledger_dir)
    check_inside(cfg.vault)  # before the .meta.json lock is written (FAULTS G3)
    recover_interrupted(cfg.vault)  # a killed edit is finished or undone first (G4)
    scope = _scope(category)
    today = cfg.today or now.date()
    wait = lock_timeout() if lock_wait is None else lock_wait
    settings = _settings(cfg)
    signals = _signals(cfg, read_ledger(ledger_dir, cfg.max_file_bytes))
    decision = decide(signals, settings, now, force=force)
    report = Report(ran_at=now, dry_run=dry_run, forced=force, scope=scope, signals=signals,
                    decision=decision, settings=settings, judge=judge.name,
                    tokens_before=signals.estimated_tokens,
                    tokens_after=signals.estimated_tokens,
                    log_path=ledger_dir / "reconcile-log.md")
    if not settings.enabled:
        report.disabled = True
        return report
    meta_path = ledger_dir / ".meta.json"
    meta_json, _err = read_json_file(meta_path)
    report.notes = check_lock(meta_json, meta_path, lock_now, force=force)  # blocked: exit 75
    if not decision.run:
        return report
    # A ledger file that cannot be read would be counted as empty in the totals reconcile
    # writes (and in what it judges): refused here, before the lock field or the backup (a
    # reconcile that is not due writes nothing, and says so as before).
    refuse_unreadable(ledger_dir, "reconcile")
    # An editor command that grabbed the OS lock just after take_lock() waits for our
    # .meta.json lock while holding it, then gives up; waiting twice as long outlasts it.
    session_args = dict(today=today, now=now, timeout=2 * wait + 1, max_bytes=cfg.max_file_bytes)

    if dry_run:  # phases 3-5 as analysis; the editor plans the diff and writes nothing
        with EditorSession(cfg.vault, dry_run=True, **{**session_args, "timeout": wait}) as s:
            plan = build_plan(session_files(s), scope, settings, judge, today,
                              max_judge_calls=max_judge_calls, notes=report.notes)
            apply_plan(s, plan)
            changes = s.plan()
        _fill(report, plan)
        report.diffs = {c.name: c.diff() for c in changes}
        return report

    ticket = take_lock(ledger_dir, lock_now, force=force, timeout=wait)  # Phase 0
    report.notes = list(ticket.notes)
    written: list[Written] = []
    failure: BaseException | None = None
    try:
        with EditorSession(cfg.vault, backup_prefix="pending", operation="reconcile",
                           **session_args) as s:
            try:
                _checkpoint("after_lock")
                # Phase 1 again, on what the session read under the lock.
                settings = _settings(cfg)
                s.refuse_unreadable()  # (made unreadable since the check above)
                files = session_files(s)
                signals = _signals(cfg, files)
                report.signals, report.settings = signals, settings
                report.tokens_before = report.tokens_after = signals.estimated_tokens
                report.decision = decision = decide(signals, settings, now, force=force)
                if not decision.run:  # another run reconciled in between
                    report.notes.append("nothing needed any more once the lock was taken")
                    warn = give_back_json_lock(ticket)
                    if warn:
                        report.warnings.append(warn)
                    return report
                # Phase 2: the verified backup, before anything else is written.
                try:
                    backup = make_backup(ledger_dir, now, ticket.original_snapshot,
                                         max_bytes=cfg.max_file_bytes)
                except (ToolkitError, OSError) as exc:
                    raise _BackupFailed(_reason(exc), getattr(exc, "exit_code", 1)) from None
                report.backup = f".backups/{backup.name}/"
                s.backup_prefix = f"{backup.name}/editor"  # the editor's copies go inside it
                removed = prune_backups(ledger_dir, backup, now,
                                        max_count=settings.backup_max_count,
                                        max_age_days=settings.backup_max_age_days)
                if removed:
                    report.notes.append(f"old backups removed: {', '.join(removed)}")
                _checkpoint("after_backup")
                # Phases 3-5: planned in memory, written by the editor in one commit.
                plan = build_plan(files, scope, settings, judge, today,
                                  max_judge_calls=max_judge_calls, notes=report.notes)
                _fill(report, plan)
                apply_plan(s, plan)
                # .meta.json's post-reconciliation values go into the commit, so the ledger
                # files, meta.yaml and .meta.json are replaced as one journaled set (G4).
                s.meta_json_updates = lambda data: finish_updates(
                    data, ticket.holder, now, plan.tokens, _pattern_total(files, plan))
                written += [Written(c.path, c.old, c.new) for c in s.plan()]
                result = s.commit()
                report.notes += [n for n in result.notes if n not in report.notes]
                _checkpoint("after_ledger_write")
                before = ticket.path.read_bytes() if ticket.path.exists() else None
                after = finish_meta_json(ticket, now, plan.tokens, _pattern_total(files, plan))
                written.append(Written(ticket.path, before, after))
                _checkpoint("after_meta_write")
                report.result = "PARTIAL" if report.warnings else "OK"
                report.written = list(dict.fromkeys(
                    w.path.name for w in written if w.before != w.after))
            except BaseException as exc:  # restore under the session's lock
                failure = exc
                _fail(report, exc, written, ticket)
    except BaseException as exc:  # the session could not open (lock, unreadable file)
        if failure is None:
            failure = exc
            from toolkit.safewrite import FileLock

            try:
                with FileLock(lock_path(ledger_dir), timeout=wait, what="the ledger"):
                    _fail(report, exc, written, ticket)
            except BusyError as lexc:
                report.warnings.append(f"could not release the lock: {_reason(lexc)}")
                report.result, report.error = "FAILED", _reason(exc)
    _log(report, wait)
    if failure is not None and not isinstance(failure, Exception):
        raise failure  # KeyboardInterrupt and the like, after restoring and logging
    return report


class _BackupFailed(ToolkitError):
    def __init__(self, reason: str, exit_code: int) -> None:
        super().__init__(f"backup failed: {reason}")
        self.exit_code = exit_code


def _fail(report: Report, exc: BaseException, written: list[Written],
          ticket: LockTicket) -> None:
    """A failed run (the caller holds the OS lock): restore what was written, give the lock
    back, and mark the report FAILED. Nothing is retried."""
    report.result, report.error = "FAILED", _reason(exc)
    report.exit_code = getattr(exc, "exit_code", 1) if isinstance(exc, ToolkitError) else 1
    if isinstance(exc, _BackupFailed):
        report.backup = None
    try:
        warns, restored = restore_written(written)
        report.warnings += warns
        if restored:
            report.notes.append(f"files restored from {report.backup}")
    except Exception as rexc:  # say it, keep going
        report.warnings.append(f"restore failed: {_reason(rexc)}; copy the files back from "
                               f"{report.backup} by hand")
    try:
        warn = give_back_json_lock(ticket)
        if warn and not any(w.path == ticket.path for w in written):
            report.warnings.append(warn)
    except Exception as lexc:
        report.warnings.append(f"could not release the lock: {_reason(lexc)}")


def _reason(exc: BaseException) -> str:
    """One line for the report, the log and the error: an OSError as the CLI's boundary says
    it (:func:`toolkit.errors.from_exception`: its file and reason, never Python's
    ``[Errno 13] ...: '<path>'``), with what to do when it is a permission."""
    if isinstance(exc, OSError) and exc.strerror:
        said = from_exception(exc)
        if said is not None:
            if isinstance(said, PermissionDeniedError):  # the one wording (I18)
                return f"{said}, then run the reconcile again"
            return str(said)
    return str(exc) or type(exc).__name__


def _fill(report: Report, plan: Plan) -> None:
    report.merges, report.prunes, report.drops = plan.merges, plan.prunes, plan.drops
    report.warnings = [*report.warnings, *plan.warnings]
    report.tokens_after = plan.tokens
    report.judge_calls = plan.judge_calls


def _pattern_total(files: dict[str, Any], plan: Plan) -> int:
    return sum(len(plan.files[k].live) if k in plan.files else len(files[k].entries)
               for k in LEDGER_FILES)


def _log(report: Report, timeout: float) -> None:
    """Add the run's entry to reconcile-log.md (newest first). A failure to do so is kept in
    ``report.log_error`` for the CLI to report."""
    from toolkit.ledger.vault import write_reconcile_log

    path = report.log_path
    assert path is not None
    try:
        write_reconcile_log(path, lambda old: insert_log_entry(old, render_log_entry(report)),
                            timeout=timeout)
        report.logged = True
    except Exception as exc:
        report.log_error = f"could not write {path.name}: {_reason(exc)}"
