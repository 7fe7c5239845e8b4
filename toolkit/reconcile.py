"""Ledger self-maintenance: ``toolkit ledger reconcile`` (seed "Ledger Self-Maintenance").

Reconcile keeps a growing Smith Ledger useful. It runs the seed's phases in order:

0. **Guard and lock** - ``ledger.reconcile.enabled`` in ``.smith/config.json``; the ``lock``
   field of ``.meta.json`` (10-minute expiry), taken under the editor's OS lock so two runs
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
once through the editor (byte preservation, atomic replace, lock, change detection). Then
``.meta.json``, ``meta.yaml`` and a ``reconcile-log.md`` entry. A failed write restores the
files from the backup and is logged as FAILED; nothing is ever retried automatically.

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

import datetime as dt
import hashlib
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from toolkit.errors import DataError, NotFoundError, UsageError
from toolkit.records import LEDGER_FILES, LedgerEntry, resolve_ledger_file

# --------------------------------------------------------------------------- settings

LOCK_EXPIRY = dt.timedelta(minutes=10)
MERGE_MAX_ENTRIES = 100  # the seed's complexity bound: more entries in a file -> no merge phase
DEFAULT_MAX_JUDGE_CALLS = 20
DEFAULT_JUDGE_TIMEOUT = 60.0
TOKENS_PER_WORD_TENTHS = 13  # word count x 1.3
CONF_RANK = {"high": 0, "medium": 1, "low": 2}
NOW_ENV = "TOOLKIT_NOW"  # fixed clock for reproducible runs and tests (ISO-8601)
FAULT_ENV = "TOOLKIT_RECONCILE_FAULT"  # test hook: fail at a named point
PAUSE_ENV = "TOOLKIT_RECONCILE_PAUSE"  # test hook: "<point>:<go-file>" wait at a named point


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
    from toolkit.sources.smith import read_json_file

    data, err = read_json_file(smith_config)
    if err:
        raise DataError(err.split(": ", 1)[-1] if err.startswith(str(smith_config)) else err,
                        path=smith_config)
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


# --------------------------------------------------------------------------- clock

def parse_instant(value: Any) -> dt.datetime | None:
    """An ISO-8601 time as an aware UTC datetime (naive = UTC; ``Z`` accepted); None if bad."""
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return when.astimezone(dt.timezone.utc)


def iso_z(when: dt.datetime) -> str:
    """``2026-05-04T09:02:41Z``: the precision and form of the seed's example files."""
    return when.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_for(today: dt.date | None = None, env: dict[str, str] | None = None) -> dt.datetime:
    """The run's clock: ``$TOOLKIT_NOW`` if set, else now (UTC), on the injected day if any."""
    env = os.environ if env is None else env
    fixed = env.get(NOW_ENV)
    if fixed:
        when = parse_instant(fixed)
        if when is None:
            raise UsageError(f"{NOW_ENV}={fixed!r} is not an ISO-8601 time",
                             hint="Use e.g. 2026-05-10T12:00:00Z or unset it")
        return when
    real = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    if today is not None and today != real.date():
        return dt.datetime.combine(today, real.time(), dt.timezone.utc)
    return real


# --------------------------------------------------------------------------- signals

def count_words(data: bytes | str) -> int:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return len(text.split())


def tokens_for_words(words: int) -> int:
    """The seed's estimate: word count x 1.3, rounded down."""
    return words * TOKENS_PER_WORD_TENTHS // 10


@dataclass(frozen=True)
class LockInfo:
    pid: str
    acquired: dt.datetime | None
    acquired_raw: str | None

    def age(self, now: dt.datetime) -> dt.timedelta | None:
        return None if self.acquired is None else now - self.acquired

    def is_fresh(self, now: dt.datetime) -> bool:
        """Held less than 10 minutes ago (a time up to 10 minutes ahead counts as fresh too:
        clocks differ). An unreadable time is stale: it could otherwise block forever."""
        age = self.age(now)
        return age is not None and abs(age) < LOCK_EXPIRY

    def describe(self, now: dt.datetime) -> str:
        age = self.age(now)
        since = self.acquired_raw or "an unreadable time"
        if age is None:
            return f"{self.pid} (acquired {since})"
        return f"{self.pid} (acquired {since}, {_ago(age)})"


def _ago(delta: dt.timedelta) -> str:
    secs = int(delta.total_seconds())
    if secs < 0:
        return f"{_span(-secs)} in the future"
    return f"{_span(secs)} ago"


def _span(secs: int) -> str:
    if secs < 120:
        return f"{secs} s"
    if secs < 7200:
        return f"{secs // 60} min"
    if secs < 172800:
        return f"{secs / 3600:.1f} h"
    return f"{secs // 86400} days"


def read_lock(meta_json: dict[str, Any] | None) -> LockInfo | None:
    lock = (meta_json or {}).get("lock")
    if not lock:
        return None
    if not isinstance(lock, dict):
        return LockInfo(pid=str(lock), acquired=None, acquired_raw=None)
    raw = lock.get("acquired")
    return LockInfo(pid=str(lock.get("pid") or "unknown"), acquired=parse_instant(raw),
                    acquired_raw=str(raw) if raw is not None else None)


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
    lock: LockInfo | None


def _int_field(data: dict[str, Any], key: str) -> int | None:
    value = data.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def compute_signals(files: dict[str, Any], meta_json: dict[str, Any] | None,
                    meta_json_error: str | None) -> Signals:
    """Signals from parsed ledger files (``{kind: LedgerFile}``) and ``.meta.json``."""
    fs: list[FileSignal] = []
    for kind in LEDGER_FILES:
        lf = files.get(kind)
        if lf is None or not lf.exists:
            fs.append(FileSignal(kind, False, 0, 0, 0))
            continue
        fs.append(FileSignal(kind, True, tokens_for_words(count_words(lf.data)), len(lf.entries),
                             sum(1 for e in lf.entries if e.form == "B"), lf.error))
    data = meta_json or {}
    state = "ok" if meta_json is not None else ("missing" if meta_json_error is None
                                                else f"unreadable: {meta_json_error}")
    last_raw = data.get("last_reconcile")
    return Signals(
        files=tuple(fs),
        estimated_tokens=sum(f.tokens for f in fs),
        total_patterns=sum(f.entries for f in fs),
        title_lines=sum(f.title_lines for f in fs),
        context_budget_violations=_int_field(data, "context_budget_violations") or 0,
        reinforcements_since_reconcile=_int_field(data, "reinforcements_since_reconcile") or 0,
        last_reconcile=parse_instant(last_raw),
        last_reconcile_raw=str(last_raw) if last_raw else None,
        meta_json_state=state,
        recorded_tokens=_int_field(data, "estimated_tokens"),
        recorded_patterns=_int_field(data, "total_patterns"),
        lock=read_lock(meta_json),
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
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.communicate(timeout=5)
    except (subprocess.TimeoutExpired, OSError):
        pass


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

    def render(self) -> bytes:
        """The file's new bytes: header, then the live entries (re-sorted when asked).

        Untouched entries keep their bytes. When sorting puts two entries next to each other
        that were not neighbours before, a line break (and a blank line before a ``---``) is
        added where one is missing, so no entry runs into the next.
        """
        if not self.changed:
            return self.data
        live = self.live
        order = sorted(live, key=_sort_key) if self.resort else live
        after = {id(x): live[k + 1] if k + 1 < len(live) else None for k, x in enumerate(live)}
        parts = [self.header]
        nl = self.newline
        for i, it in enumerate(order):
            chunk = it.block + it.tail
            nxt = order[i + 1] if i + 1 < len(order) else None
            if nxt is not None and after[id(it)] is not nxt:
                if not chunk.endswith(b"\n"):
                    chunk += nl
                if nxt.block.lstrip().startswith(b"---") and not re.search(rb"\n[ \t]*\r?\n$",
                                                                           chunk):
                    chunk += nl
            parts.append(chunk)
        return b"".join(parts)


def _sort_key(it: Item) -> tuple[int, str, int]:
    """High, medium, low (unknown last); newest Date first; then file order."""
    rank = CONF_RANK.get(it.confidence or "", 3)
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

_FIELD_LINE = re.compile(
    rb"^(?P<pre>[ \t]*(?:[-*+][ \t]+)?\*\*(?P<name>[A-Za-z][A-Za-z _-]{0,40}?)(?::\*\*|\*\*:)"
    rb"[ \t]*)(?P<val>.*?)(?P<end>[ \t]*\r?\n?)$")
_DATE_IN = re.compile(r"(\d{4}-\d{2}-\d{2})")


def _split_lines(block: bytes) -> list[bytes]:
    return re.findall(rb"[^\n]*\n|[^\n]+$", block)


def _ending(line: bytes, newline: bytes) -> bytes:
    if line.endswith(b"\r\n"):
        return b"\r\n"
    return b"\n" if line.endswith(b"\n") else newline


def _field_index(lines: list[bytes], name: str) -> int | None:
    want = name.lower()
    for i, line in enumerate(lines):
        m = _FIELD_LINE.match(line)
        if m and m.group("name").decode("utf-8", "replace").strip().lower() == want:
            return i
    return None


def _set_field(lines: list[bytes], name: str, value: str, form: str, newline: bytes) -> None:
    """Set a field's value in place; add the line after Confidence when it is missing."""
    if name == "title" and form == "A":
        for i, line in enumerate(lines):
            if line.startswith(b"## "):
                lines[i] = b"## " + value.encode() + _ending(line, newline)
                return
    i = _field_index(lines, name)
    if i is not None:
        m = _FIELD_LINE.match(lines[i])
        assert m is not None
        lines[i] = m.group("pre") + value.encode() + m.group("end")
        return
    anchor = _field_index(lines, "confidence")
    if anchor is None:
        return
    m = _FIELD_LINE.match(lines[anchor])
    assert m is not None
    pre = m.group("pre").replace(m.group("name"), name.title().encode(), 1)
    lines.insert(anchor + 1, pre + value.encode() + _ending(lines[anchor], newline))


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
        if form == "B" and (_FIELD_LINE.match(ln) and ln.startswith(b"**")
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
            block = [newline, *block[:-1]] if at == len(lines) else [newline, *block[:-1]]
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
    lines = _split_lines(base.block)
    total = base.reflections + other.reflections
    conf = confidence_for(total)
    dates = [d for d in (base.date, other.date) if d]
    date = max(dates) if dates else base.date
    _set_field(lines, "title", title, e.form, newline)
    if date and date != base.date:
        _set_field(lines, "date", date, e.form, newline)
    _set_field(lines, "confidence", conf, e.form, newline)
    if e.form == "A":
        _set_field(lines, "observations", str(total), e.form, newline)
        mine = e.source_reflections or ""
        theirs = other.entry.source_reflections or ""
        if other.entry.form == "A" and mine and theirs and not mine.strip().isdigit():
            joined = [s.strip() for s in mine.split(",") if s.strip()]
            for s in theirs.split(","):
                if s.strip() and s.strip() not in joined:
                    joined.append(s.strip())
            _set_field(lines, "source reflections", ", ".join(joined), e.form, newline)
    else:
        _set_field(lines, "source reflections", str(total), e.form, newline)
    items = combine_evidence(e.evidence, other.entry.evidence)
    items.append(f'- {today.isoformat()} \u2014 reconcile merge: absorbed "{other.title}"')
    _add_evidence(lines, e.form, items, newline)
    return b"".join(lines), {"title": title, "date": date, "confidence": conf,
                             "reflections": total}


def set_values(item: Item, newline: bytes, **values: str) -> None:
    """Change field values of an entry (confidence, date) in its bytes."""
    lines = _split_lines(item.block)
    for name, value in values.items():
        _set_field(lines, name, value, item.entry.form, newline)
        setattr(item, name, value)
    item.block = b"".join(lines)
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
    outside_tokens: int  # estimated tokens of ledger files outside the scope (--category)
    merges: list[MergeAction] = field(default_factory=list)
    prunes: list[PruneAction] = field(default_factory=list)
    drops: list[DropAction] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    judge_calls: int = 0

    @property
    def tokens(self) -> int:
        return self.outside_tokens + sum(wf.tokens for wf in self.files.values())

    @property
    def changed_files(self) -> list[WorkFile]:
        return [wf for wf in self.files.values() if wf.changed]


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
                + (" in the files reconciled" if plan.outside_tokens else ""))
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

    @property
    def ran(self) -> bool:
        return self.result is not None

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
    out = ["---", "", f"## Reconcile: {r.ran_at.astimezone(dt.timezone.utc):%Y-%m-%d %H:%M:%S}",
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
    notes = [*r.notes, *r.warnings] + ([f"FAILED: {r.error}"] if r.error else [])
    if notes:
        out += ["", "**Warnings**:"] + [f"- {_one_line(n)}" for n in notes]
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
    crlf = existing.count(b"\r\n")
    nl = b"\r\n" if crlf and crlf * 2 >= existing.count(b"\n") else b"\n"
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
    if head and not head.endswith(nl + nl) and not head == b"\xef\xbb\xbf":
        head += nl if head.endswith(b"\n") else nl + nl
    return head + body + nl + existing[at:]


# --------------------------------------------------------------------------- test hooks

class InjectedFault(Exception):
    """Raised at a named point when ``TOOLKIT_RECONCILE_FAULT`` names it (tests only)."""


FAULT_POINTS = ("after_lock", "after_backup", "after_ledger_write", "after_meta_write")


def _checkpoint(point: str) -> None:
    """Test-only hooks: ``TOOLKIT_RECONCILE_FAULT=<point>`` fails there (as a crash of that
    phase would); ``TOOLKIT_RECONCILE_PAUSE=<point>:<file>`` waits there until ``<file>``
    exists (at most 60 s), after printing ``TOOLKIT_RECONCILE_PAUSE <point> pid=<pid>`` on
    stderr, so a test can start a second run or SIGKILL this one."""
    if os.environ.get(FAULT_ENV) == point:
        raise InjectedFault(f"injected fault at {point} ({FAULT_ENV})")
    spec = os.environ.get(PAUSE_ENV, "")
    name, _, release = spec.partition(":")
    if name != point:
        return
    import sys
    import time

    sys.stderr.write(f"{PAUSE_ENV} {point} pid={os.getpid()}\n")
    sys.stderr.flush()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (release and Path(release).exists()):
        time.sleep(0.01)


# --------------------------------------------------------------------------- lock

def holder_id() -> str:
    """Who holds the ``.meta.json`` lock: ``toolkit-reconcile@<host>:<pid>``."""
    return f"toolkit-reconcile@{socket.gethostname()}:{os.getpid()}"


def os_lock_path(ledger_dir: Path) -> Path:
    """The OS lock file shared by every writer of this ledger (the editor uses it too)."""
    try:
        from toolkit import editor

        return Path(editor.lock_path(ledger_dir))
    except (ImportError, AttributeError):
        return ledger_dir / ".toolkit.lock"


def _dump_json(data: dict[str, Any]) -> bytes:
    return (json_dumps(data) + "\n").encode("utf-8")


def json_dumps(data: Any) -> str:
    import json

    return json.dumps(data, indent=2, ensure_ascii=False)


def _read_meta_json(path: Path) -> tuple[Any, dict[str, Any] | None]:
    """(snapshot or None, parsed object). Invalid JSON is a DataError: reconcile must rewrite
    this file and will not drop what it cannot read."""
    from toolkit.safewrite import FileSnapshot
    from toolkit.textio import decode_utf8, load_json

    if not path.exists():
        return None, None
    snap = FileSnapshot.read(path)
    data = load_json(decode_utf8(snap.data, path), path) if snap.data.strip() else {}
    if not isinstance(data, dict):
        raise DataError("expected a JSON object", path=path,
                        hint="Fix the file or delete it (reconcile then computes its values)")
    return snap, data


@dataclass
class LockTicket:
    """The ``.meta.json`` lock this run holds, and how to give it back untouched."""

    path: Path
    holder: str
    original: bytes | None  # .meta.json before we took the lock (None: it did not exist)
    original_snapshot: Any  # FileSnapshot of that version, for the backup
    written: bytes  # what we wrote (to know it is still ours)
    notes: list[str]


def check_lock(meta_json: dict[str, Any] | None, path: Path, now: dt.datetime, *,
               force: bool) -> list[str]:
    """Raise BusyError (exit 75) for a fresh lock unless ``force``; notes for the log."""
    from toolkit.errors import BusyError

    lock = read_lock(meta_json)
    if lock is None:
        return []
    if lock.is_fresh(now):
        if not force:
            raise BusyError(f"Reconciliation already in progress: locked by "
                            f"{lock.describe(now)}", path=path,
                            hint="Wait for it to finish (the lock expires after 10 minutes), "
                                 "or use --force if that run is dead")
        return [f"--force: overrode the lock held by {lock.describe(now)}"]
    return [f"stale lock taken over: held by {lock.describe(now)}"]


def take_lock(ledger_dir: Path, now: dt.datetime, *, force: bool,
              timeout: float = 10.0) -> LockTicket:
    """Phase 0: write ``{"pid", "acquired"}`` into ``.meta.json`` under the OS lock, so two
    runs cannot both find it free."""
    from toolkit.safewrite import FileLock, atomic_replace

    path = ledger_dir / ".meta.json"
    with FileLock(os_lock_path(ledger_dir), timeout=timeout, what="the ledger"):
        snap, data = _read_meta_json(path)
        notes = check_lock(data, path, now, force=force)
        holder = holder_id()
        new = dict(data) if data is not None else _new_meta_json()
        new["lock"] = {"pid": holder, "acquired": iso_z(now)}
        written = _dump_json(new)
        atomic_replace(snap if snap is not None else path, written, expected=snap)
    return LockTicket(path=path, holder=holder, original=snap.data if snap else None,
                      original_snapshot=snap, written=written, notes=notes)


def _new_meta_json() -> dict[str, Any]:
    return {"schema_version": 1, "last_reconcile": None, "estimated_tokens": 0,
            "total_patterns": 0, "total_reinforcements": 0, "context_budget_violations": 0,
            "reinforcements_since_reconcile": 0, "lock": None}


def give_back_lock(ticket: LockTicket, ledger_dir: Path, timeout: float = 10.0) -> str | None:
    """Undo :func:`take_lock` byte for byte (the run wrote nothing else to .meta.json).
    Returns a warning when the file is no longer ours (someone forced over us)."""
    from toolkit.safewrite import FileLock, FileSnapshot, atomic_replace

    with FileLock(os_lock_path(ledger_dir), timeout=timeout, what="the ledger"):
        try:
            snap = FileSnapshot.read(ticket.path)
        except FileNotFoundError:
            return None
        if snap.data != ticket.written:
            return f"{ticket.path.name} changed during the run; its lock field was left as is"
        if ticket.original is None:
            ticket.path.unlink()
        else:
            atomic_replace(snap, ticket.original)
    return None


def finish_meta_json(ticket: LockTicket, now: dt.datetime, tokens: int, patterns: int,
                     ledger_dir: Path, timeout: float = 10.0) -> None:
    """Post-reconciliation ``.meta.json``: last_reconcile, fresh counts, counters reset, lock
    released; every other field kept."""
    from toolkit.safewrite import FileLock, atomic_replace

    with FileLock(os_lock_path(ledger_dir), timeout=timeout, what="the ledger"):
        snap, data = _read_meta_json(ticket.path)
        new = dict(data) if data is not None else _new_meta_json()
        new.setdefault("schema_version", 1)
        new["last_reconcile"] = iso_z(now)
        new["estimated_tokens"] = tokens
        new["total_patterns"] = patterns
        new.setdefault("total_reinforcements", 0)
        new["context_budget_violations"] = 0
        new["reinforcements_since_reconcile"] = 0
        lock = read_lock(data)
        if lock is None or lock.pid == ticket.holder:
            new["lock"] = None
        atomic_replace(snap if snap is not None else ticket.path, _dump_json(new), expected=snap)


# --------------------------------------------------------------------------- backups

_BACKUP_NAME = re.compile(r"^reconcile-(\d{4}-\d{2}-\d{2}-\d{6})(?:-\d+)?$")
BACKUP_FILES = (*(f"{k}.md" for k in LEDGER_FILES), "meta.yaml", ".meta.json")


def make_backup(ledger_dir: Path, now: dt.datetime, meta_json_original: Any) -> Path:
    """Phase 2: copy every ledger .md file, meta.yaml and .meta.json (as it was before this run
    took the lock) into ``.backups/reconcile-YYYY-MM-DD-HHMMSS/``; verified by count and
    SHA-256 (``safewrite.backup_files``). Raises (nothing written) when it fails."""
    from toolkit.safewrite import FileSnapshot, backup_files, unique_dir

    sources: list[Any] = []
    for name in BACKUP_FILES:
        p = ledger_dir / name
        if name == ".meta.json":
            if meta_json_original is not None:
                sources.append(meta_json_original)
        elif p.is_file():
            sources.append(FileSnapshot.read(p))
    parent = ledger_dir / ".backups"
    if not parent.is_dir():
        try:
            parent.mkdir()
        except OSError as exc:
            raise DataError(f"cannot create the backup folder: {exc.strerror}", path=parent,
                            hint="Make the ledger folder writable") from None
    dest = unique_dir(parent, f"reconcile-{now.astimezone(dt.timezone.utc):%Y-%m-%d-%H%M%S}")
    backup_files(sources, dest)
    return dest


def prune_backups(ledger_dir: Path, keep: Path, now: dt.datetime, settings: Settings) -> list[str]:
    """Remove ``reconcile-*`` backups beyond ``backup.max_count`` (newest kept) or older than
    ``backup.max_age_days``; never ``keep`` (this run's). Returns the names removed."""
    parent = ledger_dir / ".backups"
    found: list[tuple[dt.datetime, str, Path]] = []
    for p in parent.iterdir() if parent.is_dir() else []:
        m = _BACKUP_NAME.match(p.name)
        if not m or p.is_symlink() or not p.is_dir():
            continue
        when = dt.datetime.strptime(m.group(1), "%Y-%m-%d-%H%M%S").replace(tzinfo=dt.timezone.utc)
        found.append((when, p.name, p))
    found.sort(key=lambda f: (f[0], f[1]), reverse=True)
    removed: list[str] = []
    max_age = dt.timedelta(days=settings.backup_max_age_days)
    others = [f for f in found if f[2] != keep]
    for rank, (when, name, p) in enumerate(others, start=2):  # this run's backup is number 1
        if rank > settings.backup_max_count or now - when > max_age:
            shutil.rmtree(p, ignore_errors=True)
            removed.append(name)
    return removed
