"""A realistic, deterministic demo world for the toolkit: ``toolkit demo DIR``.

``write_demo(DIR)`` writes, for an invented billing / webhook API called "acme-api":

* ``DIR/acme-api/``: a real git repository with source files and a committed Smith vault whose
  ledger evolves over a dozen commits (entries added, reinforced, promoted, demoted, pruned,
  merged by a reconcile), session logs, an ``archive/`` copy from an old reset and a
  ``.backups/`` copy from a reconcile, and a ``toolkit.yaml`` pointing at everything below;
* ``DIR/codesmith/slop_ledger/slop_ledger.json``: a CodeSmith slop ledger;
* ``DIR/codesmith/snapshots/<project_hash>/<worktree_hash>/.git``: CodeSmith turn snapshots of
  ``DIR/acme-api``, made with CodeSmith's own git plumbing while really editing the work tree;
* ``DIR/nagi/ledger.db``: a nagi-ledger audit DB (actions, dispatches, approaches);
* ``DIR/nagi/goal.json`` and ``DIR/nagi/goal_history.jsonl``: nagi-ledger's goal gate, an
  active goal and the goals closed before it, as ``goal_gate.py`` writes them.

Everything follows ``FORMATS.md``. The same seed and anchor give the same bytes, rows and git
commit SHAs: all randomness comes from ``random.Random`` streams seeded from the seed, every
time is derived from the anchor date, and git runs with a pinned identity, dates, time zone
and no user or system configuration.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import random
import re
import shutil
import sqlite3
import uuid
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from textwrap import dedent
from typing import Any

from toolkit.errors import ToolkitError, UsageError
from toolkit.records import LEDGER_FILES, LEDGER_TITLES, SLOP_BUCKETS, SLOP_STATUSES
from toolkit.sources.snapshots import fnv1a64_hex, side_repo_for

__all__ = ["DemoWorld", "fnv1a64_hex", "side_repo_for", "write_demo"]

UTC = dt.UTC
PROJECT = "acme-api"
DEFAULT_ANCHOR = dt.date(2026, 11, 27)
MIN_AUDIT_ROWS = 100


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


def write_demo(dest: Path, *, seed: int = 7, anchor: dt.date = DEFAULT_ANCHOR,
               audit_rows: int = 3000,
               progress: Callable[[str], None] | None = None) -> DemoWorld:
    """Write the demo world into ``dest`` (absent or empty) and describe it.

    Raises UsageError when ``dest`` is a non-empty folder (or a file) or ``audit_rows`` is too
    small, and ToolkitError when git is missing or fails. On failure the partly written world
    is removed again.
    """
    dest = Path(dest).expanduser()
    if dest.exists() and not dest.is_dir():
        raise UsageError(f"{dest} is a file", hint="Name a new or empty folder for the demo")
    if dest.is_dir() and any(dest.iterdir()):
        raise UsageError(f"{dest} is not empty; the demo writes into a new or empty folder",
                         hint="Pick another folder or empty this one")
    if audit_rows < MIN_AUDIT_ROWS:
        raise UsageError(f"audit rows must be at least {MIN_AUDIT_ROWS} (got {audit_rows})")
    git_exe = shutil.which("git")
    if git_exe is None:
        raise ToolkitError("git is not installed; the demo needs it for the project history "
                           "and the turn snapshots")
    say = progress or (lambda _msg: None)
    created = not dest.exists()
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ToolkitError(f"cannot create the folder: {exc.strerror}", path=dest,
                           hint="Name a folder you can write to") from None
    root = dest.resolve()
    try:
        return _World(root, seed, anchor, audit_rows, git_exe, say).build()
    except OSError as exc:
        _remove_partial(root, created)
        raise ToolkitError(f"cannot write the demo world: {exc.strerror}; nothing kept",
                           path=exc.filename or root) from None
    except BaseException:
        _remove_partial(root, created)
        raise


def _remove_partial(root: Path, created: bool) -> None:
    """Remove a half-written world: the folder we created, or what we put in an empty one."""
    if created:
        shutil.rmtree(root, ignore_errors=True)
    else:
        for child in root.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)


# =========================================================================== small helpers

def _rng(seed: int, stream: str) -> random.Random:
    """An independent, reproducible random stream per part of the world."""
    return random.Random(f"acme-demo:{seed}:{stream}")


def _pick(items: Sequence[str], *keys: str) -> str:
    """A deterministic choice keyed by text (not by the RNG: stable under content edits)."""
    return items[zlib.crc32("|".join(keys).encode()) % len(items)]


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode("utf-8"))


def _d(text: str) -> str:
    """Dedent a triple-quoted block and drop its first newline."""
    return dedent(text).lstrip("\n")


def _ts(when: dt.datetime) -> str:
    return when.strftime("%Y-%m-%d %H:%M:%S")


@dataclass(frozen=True)
class _Person:
    name: str
    email: str
    home: str  # where this person's checkout lives on their machine (appears in logs)

    @property
    def slug(self) -> str:
        return re.sub(r"[^a-z0-9]+", "-", self.name.lower()).strip("-")

    @property
    def email_hash(self) -> str:
        return hashlib.sha256(self.email.encode()).hexdigest()[:6]

    @property
    def ident(self) -> tuple[str, str]:
        return self.name, self.email


_PEOPLE: dict[str, _Person] = {
    "jane": _Person("Jane Doe", "jane.doe@example.com", "/home/jane/src/acme-api"),
    "omar": _Person("Omar Khalil", "omar.khalil@example.com", "/home/omar/work/acme-api"),
    "priya": _Person("Priya Raman", "priya.raman@example.com", "/Users/priya/code/acme-api"),
}


# =========================================================================== git plumbing

class _Git:
    """git through the toolkit's one runner (``sources.snapshots.run_git``: no inherited GIT_*
    variables, no system config), here also without the user's global config, in UTC, with
    explicit identity and dates."""

    def __init__(self, exe: str) -> None:
        self.exe = exe
        self.env = {"TZ": "UTC", "LANG": "C", "GIT_CONFIG_GLOBAL": os.devnull,
                    "GIT_OPTIONAL_LOCKS": "0"}

    def run(self, *args: str, cwd: Path | None = None, when: dt.datetime | None = None,
            who: tuple[str, str] | None = None) -> str:
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
                        "-c", "init.defaultBranch=main", *args], cwd=cwd, check=False,
                       extra_env=env, exe=self.exe)
        if proc.returncode != 0:
            name = next((a for a in args if not a.startswith("-")), "")
            raise ToolkitError(f"git {name} failed while writing the demo: "
                               f"{proc.stderr.decode('utf-8', 'replace').strip()}")
        return proc.stdout.decode("utf-8", "replace").strip()


# =========================================================================== the timeline
#
# Every moment of the world is (day offset from the anchor, "HH:MM:SS") in UTC. The anchor is
# the last day with activity; the pinned "today" is the day after.

_MOMENTS: dict[str, tuple[int, str]] = {
    "reset": (-182, "17:42:10"),  # /smith-ledger reset -> ledger/archive/<stamp>/
    "reconcile1": (-66, "22:15:04"),  # before the vault was committed; backup since expired
    "import": (-44, "09:12:03"),  # first commit of the project repository
    "vault": (-42, "17:05:41"),  # the vault is committed (manifest system)
    "promote": (-24, "10:20:15"),
    "reconcile2": (-15, "21:40:33"),
    "demote": (-13, "16:05:30"),
    "release": (-3, "17:30:12"),
    "final": (0, "12:40:05"),
}


def _moment(anchor: dt.date, day: int, hms: str) -> dt.datetime:
    h, m, s = (int(x) for x in hms.split(":"))
    base = dt.datetime(anchor.year, anchor.month, anchor.day, h, m, s, tzinfo=UTC)
    return base + dt.timedelta(days=day)


# =========================================================================== sessions

@dataclass(frozen=True)
class _SessionSpec:
    key: str
    day: int
    time: str
    author: str | None  # None: a legacy session log (YYYY-MM-DD_HHMMSS.md, no author)
    skill: str  # "build" or "bugfix"
    branch: str
    prompt: tuple[str, ...]
    synthesized: str
    outcome: str
    artifacts: tuple[str, ...]
    system: str
    subagent: str
    reads: tuple[str, ...]
    edits: tuple[str, ...]
    tests: str
    feat: str  # short phrase used in evidence lines
    commit: str  # the commit message title for the work of this session
    followup: str | None = None
    flags: frozenset[str] = frozenset()  # failed, resumed, compacted, active
    violation: bool = False  # truncated a ledger file (counts in .meta.json)
    reflect: bool = True  # reflected into the current ledger


def _S(key: str, day: int, time: str, author: str | None, skill: str, branch: str,
       prompt: str, synthesized: str, outcome: str, artifacts: str, system: str, subagent: str,
       reads: str, edits: str, tests: str, feat: str, commit: str, *, followup: str | None = None,
       flags: str = "", violation: bool = False, reflect: bool = True) -> _SessionSpec:
    return _SessionSpec(
        key, day, time, author, skill, branch, tuple(prompt.split("\n")), synthesized, outcome,
        tuple(a for a in artifacts.split(", ") if a), system, subagent,
        tuple(reads.split()), tuple(edits.split()), tests, feat, commit, followup,
        frozenset(flags.split()), violation, reflect)


_SESSIONS: tuple[_SessionSpec, ...] = (
    _S("L1", -190, "09:30:12", None, "bugfix", "12-invoice-pdf-empty-lines",
       "the invoice PDF endpoint returns 500 for invoices without line items",
       "Render invoice PDFs with zero line items instead of failing",
       "PR #13 merged; empty invoices render a 'No charges' row",
       "acme_api/billing/invoices.py, tests/test_invoices.py", "system-02-billing",
       "Fix PDF rendering for empty invoices", "acme_api/billing/invoices.py",
       "acme_api/billing/invoices.py tests/test_invoices.py",
       "uv run pytest tests/test_invoices.py -q", "the empty-invoice PDF fix",
       "Render PDFs for invoices without line items", reflect=False),
    _S("L2", -184, "14:11:55", None, "build", "14-customer-invoices-list",
       "add a /v1/customers/{id}/invoices list endpoint with pagination",
       "List a customer's invoices, newest first, with limit/offset paging",
       "PR #15 merged; endpoint documented in docs/api.md",
       "acme_api/api/routes.py, acme_api/billing/invoices.py", "system-01-api",
       "Implement customer invoice listing", "acme_api/api/routes.py",
       "acme_api/api/routes.py acme_api/billing/invoices.py",
       "uv run pytest tests/test_invoices.py -q", "the customer invoice list",
       "Add customer invoice listing", reflect=False),
    _S("A", -120, "15:33:20", "omar", "bugfix", "31-webhook-delivery-timeout",
       "webhook deliveries pile up when a customer endpoint is slow, and the API request that "
       "triggers them times out\nsee the 504s on POST /v1/invoices/{id}/finalize in the staging "
       "logs",
       "Move webhook delivery out of the finalize request into the outbox worker",
       "PR #32 merged; finalize p99 down from 9.8s to 140ms on staging",
       "acme_api/billing/webhooks.py, acme_api/workers/outbox.py, tests/test_webhooks.py",
       "system-03-webhooks", "Move webhook delivery to the outbox worker",
       "acme_api/billing/webhooks.py acme_api/api/routes.py",
       "acme_api/billing/webhooks.py acme_api/workers/outbox.py tests/test_webhooks.py",
       "uv run pytest tests/test_webhooks.py -q", "the outbox delivery move",
       "Deliver webhooks from the outbox worker, not the request"),
    _S("B", -98, "09:15:44", "jane", "build", "38-zero-amount-invoices",
       "add zero-amount invoice support for the free plan; right now finalize fails with "
       "'amount must be positive'",
       "Allow finalizing zero-amount invoices without creating a payment intent",
       "PR #39 merged; free-plan invoices finalize and are marked paid at once",
       "acme_api/billing/invoices.py, migrations/versions/0005_zero_amount.py",
       "system-02-billing", "Support zero-amount invoices",
       "acme_api/billing/invoices.py acme_api/clients/provider.py",
       "acme_api/billing/invoices.py migrations/versions/0005_zero_amount.py",
       "uv run pytest tests/test_invoices.py -q", "the zero-amount invoice work",
       "Finalize zero-amount invoices without a payment intent"),
    _S("C", -66, "10:04:31", "priya", "build", "44-billing-period-rollover",
       "add month-end billing period rollover for annual plans billed monthly",
       "Roll billing periods over at month end, clamping to the last day of short months",
       "PR #45 merged; 31 new period tests",
       "acme_api/billing/periods.py, tests/test_periods.py", "system-02-billing",
       "Implement billing period rollover", "acme_api/billing/invoices.py",
       "acme_api/billing/periods.py tests/test_periods.py",
       "uv run pytest tests/test_periods.py -q", "the billing period rollover",
       "Roll billing periods over at month end"),
    _S("D", -56, "14:30:12", "omar", "bugfix", "47-webhook-signature-proxy",
       "signature verification fails for provider webhooks since the proxy change yesterday",
       "Fix provider webhook signature verification behind the new ingress proxy",
       "Stopped: the ingress strips the Provider-Signature header; fixed in the proxy config",
       "", "system-03-webhooks", "Find why provider webhook signatures stopped verifying",
       "acme_api/billing/provider_events.py acme_api/billing/webhooks.py",
       "acme_api/billing/provider_events.py", "uv run pytest tests/test_provider_events.py -q",
       "the signature-behind-proxy bugfix", "Verify provider signatures on the raw body",
       followup="stop, the ingress strips the header; I'll fix the nginx config myself",
       flags="failed", violation=True),
    _S("E", -39, "11:19:20", "omar", "bugfix", "52-duplicate-invoice-paid",
       "customers get two receipt emails when the provider sends invoice.paid twice",
       "Make invoice.paid handling idempotent per provider event id",
       "PR #53 merged; duplicate events are acknowledged and skipped",
       "acme_api/billing/provider_events.py, tests/test_provider_events.py",
       "system-03-webhooks", "Deduplicate provider events by event id",
       "acme_api/billing/provider_events.py acme_api/db/models.py",
       "acme_api/billing/provider_events.py acme_api/db/models.py tests/test_provider_events.py",
       "uv run pytest tests/test_provider_events.py -q", "the duplicate invoice.paid fix",
       "Send one receipt per invoice.paid event (#52)"),
    _S("F", -34, "16:02:45", "priya", "build", "54-currency-exponents",
       "support JPY and KWD invoices (zero- and three-decimal currencies)",
       "Store and render amounts per ISO 4217 exponent instead of assuming cents",
       "PR #55 merged; JPY and KWD covered by property tests",
       "acme_api/billing/money.py, tests/test_money.py", "system-02-billing",
       "Add currency exponents to money helpers",
       "acme_api/billing/money.py acme_api/billing/invoices.py",
       "acme_api/billing/money.py acme_api/billing/invoices.py tests/test_money.py",
       "uv run pytest tests/test_money.py -q", "the currency exponent work",
       "Support zero- and three-decimal currencies (#54)", violation=True),
    _S("G", -28, "09:44:10", "jane", "bugfix", "56-flaky-outbox-test",
       "test_outbox_delivers_in_order is flaky on CI (about 1 in 8 runs), fix it",
       "Make the outbox ordering test deterministic",
       "PR #57 merged; 300 consecutive green runs",
       "tests/test_outbox.py, acme_api/workers/outbox.py", "system-03-webhooks",
       "Stabilise the outbox ordering test", "tests/test_outbox.py acme_api/workers/outbox.py",
       "tests/test_outbox.py", "uv run pytest tests/test_outbox.py -q -p no:randomly",
       "the flaky outbox test fix", "Make the outbox ordering test deterministic (#56)"),
    _S("H", -22, "13:15:08", "omar", "build", "58-invoice-cursor-pagination",
       "add cursor pagination to GET /v1/invoices; offset paging times out for big accounts",
       "Keyset pagination on (created_at, id) with an opaque cursor",
       "PR #59 merged; p95 for large accounts from 4.1s to 35ms",
       "acme_api/api/routes.py, acme_api/billing/invoices.py, tests/test_pagination.py",
       "system-01-api", "Implement keyset pagination for invoices",
       "acme_api/api/routes.py acme_api/billing/invoices.py",
       "acme_api/api/routes.py acme_api/billing/invoices.py tests/test_pagination.py",
       "uv run pytest tests/test_pagination.py -q", "the cursor pagination work",
       "Cursor pagination for GET /v1/invoices (#58)", violation=True),
    _S("I", -17, "10:22:33", "jane", "build", "60-idempotency-keys",
       "add Idempotency-Key support to POST /v1/payments and POST /v1/refunds",
       "Store request fingerprints per Idempotency-Key and replay the first response",
       "PR #61 merged; keys expire after 24h",
       "acme_api/api/idempotency.py, acme_api/api/routes.py, tests/test_idempotency.py",
       "system-01-api", "Implement Idempotency-Key middleware",
       "acme_api/api/routes.py acme_api/db/models.py",
       "acme_api/api/idempotency.py acme_api/api/routes.py tests/test_idempotency.py",
       "uv run pytest tests/test_idempotency.py -q", "the Idempotency-Key work",
       "Idempotency-Key support for payments and refunds (#60)",
       followup="also return 409 when the same key comes with a different body",
       flags="resumed compacted", violation=True),
    _S("J", -10, "14:59:01", "priya", "bugfix", "63-partial-capture-refund",
       "refunds of partially captured payments are rejected with 422",
       "Allow refunds up to the captured amount, not the authorized amount",
       "PR #64 merged; refund validation uses captured_amount",
       "acme_api/billing/refunds.py, tests/test_refunds.py", "system-02-billing",
       "Fix refund validation for partial captures",
       "acme_api/billing/refunds.py acme_api/clients/provider.py",
       "acme_api/billing/refunds.py tests/test_refunds.py",
       "uv run pytest tests/test_refunds.py -q", "the partial-capture refund fix",
       "Refund up to the captured amount (#63)"),
    _S("K", -6, "08:38:17", "jane", "build", "65-webhook-replay-admin",
       "add an admin endpoint to replay failed webhook deliveries for one customer",
       "POST /admin/webhooks/replay re-queues failed deliveries in the outbox",
       "PR #66 merged; replay is rate limited to 100 deliveries per call",
       "acme_api/api/admin.py, acme_api/workers/outbox.py, tests/test_admin_replay.py",
       "system-03-webhooks", "Implement webhook replay admin endpoint",
       "acme_api/api/admin.py acme_api/workers/outbox.py",
       "acme_api/api/admin.py acme_api/workers/outbox.py tests/test_admin_replay.py",
       "uv run pytest tests/test_admin_replay.py -q", "the webhook replay endpoint",
       "Admin endpoint to replay failed webhook deliveries (#65)", violation=True),
    _S("M", -1, "15:44:02", "omar", "bugfix", "67-invoice-total-rounding",
       "invoice totals are off by one cent for some customers\nexample: inv_8KQ2ZTM4 shows "
       "1,000.01 on the PDF but 1,000.00 in the API",
       "Round tax per line with ROUND_HALF_EVEN in minor units",
       "PR #68 merged; totals now match the PDF for all 212 sampled invoices",
       "acme_api/billing/money.py, tests/test_invoices.py", "system-02-billing",
       "Find the one-cent difference between PDF and API totals",
       "acme_api/billing/money.py acme_api/billing/invoices.py",
       "acme_api/billing/money.py tests/test_invoices.py",
       "uv run pytest tests/test_invoices.py -q", "the invoice rounding fix",
       "Round tax per line half-even (#67)"),
    _S("N", 0, "12:10:40", "jane", "build", "68-webhook-retry-docs",
       "add a customer-facing page documenting webhook retries and the 5-attempt budget",
       "Document the webhook retry schedule and replay endpoint for customers",
       "Build workflow started on branch 68-webhook-retry-docs",
       "", "system-03-webhooks", "Draft the webhook retry docs page",
       "docs/webhooks.md acme_api/billing/retry.py", "docs/webhooks.md",
       "uv run mkdocs build --strict", "the webhook retry docs", "Document webhook retries",
       flags="active", reflect=False),
)
_SESSION_BY_KEY = {s.key: s for s in _SESSIONS}


def _session_start(spec: _SessionSpec, anchor: dt.date) -> dt.datetime:
    return _moment(anchor, spec.day, spec.time)


def _session_name(spec: _SessionSpec, anchor: dt.date) -> str:
    stamp = _session_start(spec, anchor).strftime("%Y-%m-%d_%H%M%S")
    if spec.author is None:
        return stamp
    person = _PEOPLE[spec.author]
    return f"{person.slug}_{person.email_hash}_{stamp}"


class _Clock:
    """Session log time that only moves forward."""

    def __init__(self, start: dt.datetime, rng: random.Random) -> None:
        self.now = start
        self.rng = rng

    def tick(self, low: int, high: int) -> str:
        self.now += dt.timedelta(seconds=self.rng.randint(low, high))
        return self.now.strftime("%H:%M:%S")


def _metric(rng: random.Random, t: str, tool: str, ident: str) -> str:
    if tool == "Read":
        tin, tout = rng.randint(60, 120), rng.randint(900, 9000)
    elif tool in ("Edit", "Write"):
        tin, tout = rng.randint(300, 2600), rng.randint(40, 160)
    elif tool == "Bash":
        tin, tout = rng.randint(50, 140), rng.randint(400, 6000)
    else:
        tin, tout = rng.randint(40, 90), rng.randint(100, 1800)
    if len(ident) > 60:
        ident = ident[:60] + "…"
    return f"- `[{t}]` **{tool}** in:{tin} out:{tout} total:{tin + tout} ({ident})"


def _session_text(spec: _SessionSpec, anchor: dt.date, rng: random.Random) -> str:
    start = _session_start(spec, anchor)
    person = _PEOPLE.get(spec.author or "")
    clock = _Clock(start, rng)
    skill = f"/smith-{spec.skill}"
    workflow = f"smith-{spec.skill}"
    feature = spec.branch.split("-", 1)[1]
    active = "active" in spec.flags
    out: list[str] = ["---", f'session_start: "{start:%Y-%m-%dT%H:%M:%S}"',
                      f'project: "{PROJECT}"', f'branch: "{spec.branch}"']
    if person is not None:
        out.append(f'author: "{person.name} <{person.email}>"')
    out += [f"status: {'active' if active else 'completed'}", "---", "", "# Session Log", "",
            f"## Started: {start:%Y-%m-%d %H:%M:%S}", "", "---", ""]

    def blockquote(lines: Iterable[str]) -> list[str]:
        return [f"> {line}" if line else ">" for line in lines]

    def skill_block(t: str, event: str, outcome: str, artifacts: str) -> list[str]:
        return [f"### [{t}] {skill} {event}", "", "**User Request:**", *blockquote(spec.prompt[:1]),
                "", f"**Synthesized Input:** {spec.synthesized}", f"**Outcome:** {outcome}",
                f"**Artifacts:** {artifacts}", f"**Systems affected:** {spec.system}", ""]

    prompt_lines = list(spec.prompt)
    if len(prompt_lines) > 1:
        prompt_lines.insert(1, "")
    out += [f"### [{clock.tick(20, 50)}] User prompt", "", *blockquote(prompt_lines), "",
            "## Metrics", ""]
    for path in spec.reads:
        out.append(_metric(rng, clock.tick(5, 25), "Read", path))
    out.append(_metric(rng, clock.tick(5, 20), "Grep", spec.branch.split("-")[1]))
    out.append("")
    kind = "Build" if spec.skill == "build" else "Bugfix"
    out += skill_block(clock.tick(10, 40), "invoked",
                       f"{kind} workflow started on branch {spec.branch}", "none yet")
    home = person.home if person else "/home/dev/acme-api"
    out += [f"### [{clock.tick(1, 4)}] workflow-start {spec.branch}", "",
            f"**Workflow:** {workflow}", f"**Feature:** {feature}",
            f"**Worktree:** /tmp/smith-{feature}",
            f"**Marker:** {home}/.smith/vault/active-workflows/{spec.branch}.yaml", ""]
    if "compacted" in spec.flags:
        out += [f"### [{clock.tick(60, 200)}] Context compacted", ""]
    out += [f"### [{clock.tick(5, 30)}] Subagent invoked: {spec.subagent}", "",
            "**Type:** general-purpose", "**Model:** inherited", ""]
    tool_uses = 0
    for path in spec.edits:
        t = clock.tick(20, 90)
        tool = "Write" if path.startswith(("tests/", "migrations/")) else "Edit"
        out.append(_metric(rng, t, tool, path))
        out.append(f"- `[{t}]` **{tool}** `{path}`")
        tool_uses += 1
    out.append(_metric(rng, clock.tick(15, 60), "Bash", spec.tests))
    tool_uses += 1
    if "failed" in spec.flags:
        out += ["", f"### [{clock.tick(60, 180)}] User prompt", "",
                *blockquote([spec.followup or ""]), ""]
        end = clock.tick(30, 90)
        out += [f"## Ended: {clock.now:%Y-%m-%d} {end}", ""]
        return "\n".join(out)
    out.append("")
    duration = int((clock.now - start).total_seconds() * 1000) + rng.randint(500, 9000)
    tin, tout = rng.randint(9000, 42000), rng.randint(1200, 6400)
    cache_new, cache_read = rng.choice((0, 2048, 4096, 8192)), rng.randint(8000, 64000)
    if active:
        return "\n".join(out)
    out += [f"### [{clock.tick(20, 90)}] Subagent completed", "", "**Metrics:**",
            "- model: claude-sonnet-4-5", f"- input_tokens: {tin}", f"- output_tokens: {tout}",
            f"- cache_creation_input_tokens: {cache_new}",
            f"- cache_read_input_tokens: {cache_read}", f"- tool_uses: {tool_uses + 3}",
            f"- duration_ms: {duration}",
            f"- total_tokens: {tin + tout + cache_new + cache_read}", ""]
    if "resumed" in spec.flags:
        clock.now += dt.timedelta(minutes=rng.randint(40, 90))
        out += [f"## Resumed: {clock.now:%Y-%m-%d %H:%M:%S}", ""]
    if spec.followup:
        out += [f"### [{clock.tick(30, 120)}] User prompt", "", *blockquote([spec.followup]), ""]
        t = clock.tick(20, 80)
        out += [_metric(rng, t, "Edit", spec.edits[0]), f"- `[{t}]` **Edit** `{spec.edits[0]}`",
                _metric(rng, clock.tick(15, 60), "Bash", spec.tests), ""]
    out += skill_block(clock.tick(30, 200), "complete", spec.outcome,
                       ", ".join(spec.artifacts) or "none")
    clock.tick(30, 120)
    out += [f"## Ended: {clock.now:%Y-%m-%d %H:%M:%S}", ""]
    return "\n".join(out)


# =========================================================================== ledger entries

@dataclass(frozen=True)
class _EntrySpec:
    key: str
    file: str
    form: str  # "A" or "B"
    title: str  # "" = a malformed entry with an empty **Title:**
    category: str | None  # None = a malformed entry with no Category line
    context: str
    pattern: str
    evidence: tuple[str | tuple[str, str], ...]  # session key, or (session key, outcome)
    related: tuple[str, ...] = ()  # entry keys
    overrides: tuple[tuple[str, str], ...] = ()  # (moment, confidence): promote / demote
    removed: str | None = None  # moment it was pruned
    absorbs: tuple[tuple[str, str], ...] = ()  # (moment, entry key) merged into this one
    merged: str | None = None  # moment this entry was merged into another


def _E(key: str, file: str, form: str, title: str, category: str | None, context: str,
       pattern: str, *evidence: str | tuple[str, str], **kw: Any) -> _EntrySpec:
    return _EntrySpec(key, file, form, title, category, context, pattern, tuple(evidence), **kw)


_ENTRIES: tuple[_EntrySpec, ...] = (
    # ------------------------------------------------------------------ patterns
    _E("P1", "patterns", "B", "Run the migration dry-run before applying schema changes",
       "implementation",
       "Any /smith-build task that adds or alters a Postgres table in the billing schema.",
       "Run `uv run alembic upgrade head --sql` first and read the generated DDL before "
       "applying it. It has caught index-name collisions and a missing server_default before "
       "they reached the shared staging database.",
       ("A", "dry-run showed the outbox table missing an index on next_attempt_at"),
       ("B", "dry-run exposed a NOT NULL column without server_default, fixed before apply"),
       "C", "E", "G", "I", "K", related=("N3",)),
    _E("P2", "patterns", "B", "Verify webhook signatures against the raw request body",
       "implementation",
       "Handlers for the payment provider's webhooks (invoice.paid, charge.refunded, ...).",
       "Read `await request.body()` once and verify the HMAC over those exact bytes before "
       "parsing JSON. Re-serialising the parsed payload changes key order and whitespace and "
       "breaks the signature.",
       ("B", "signature check moved before json.loads; provider test events verify"),
       "C", ("D", "ruled out our code first: raw-body check was right, proxy was not"),
       "F", "H", "J", "M", related=("C5", "N4")),
    _E("P3", "patterns", "B", "Seed the outbox table in webhook integration tests", "testing",
       "Integration tests for webhook delivery and the outbox worker.",
       "Insert outbox rows through the `outbox_row` factory and run one worker tick "
       "synchronously instead of starting Celery. Tests become deterministic and take "
       "milliseconds.",
       ("C", "period rollover tests needed invoices.finalized events in the outbox"),
       "D", "E", ("G", "the flaky ordering test became deterministic with seeded rows"),
       overrides=(("promote", "high"),), related=("N7",)),
    _E("P4", "patterns", "B", "Idempotency key on every payment write", "implementation",
       "Any endpoint or worker that creates payments, refunds or provider charges.",
       "Derive a stable idempotency key (request key or `<invoice_id>:<attempt>`) and send it "
       "to the provider and store it with the row. Retries then cannot double-charge.",
       ("D", "provider retried a charge after our timeout; key made it a no-op"),
       ("H", "pagination work touched payment listing; keys kept retries safe"),
       "K", absorbs=(("reconcile2", "P4b"),), related=("N1", "C1")),
    _E("P4b", "patterns", "B", "Reuse the Idempotency-Key header for POST retries",
       "implementation",
       "Clients that retry POST /v1/payments after a timeout.",
       "Accept the client's Idempotency-Key header and replay the stored response for the "
       "same key instead of running the handler again.",
       ("F", "JPY invoices retried by the mobile app created two payments without a key"),
       ("I", "Idempotency-Key middleware replays the first response"),
       merged="reconcile2"),
    _E("P5", "patterns", "B", "Freeze time with time-machine in billing period tests",
       "testing",
       "Tests of billing periods, trial ends and month-end rollovers.",
       "Use `time_machine.travel(..., tick=False)` with explicit UTC datetimes. Never patch "
       "`datetime.now` by hand; the period code calls it from three modules.",
       ("E", "event dedupe window test fixed at 2026 DST boundary"), "J", "K",
       related=("C2", "Q6")),
    _E("P6", "patterns", "B", "Reproduce flaky tests with pytest -p no:randomly first",
       "debugging",
       "A test that fails on CI but passes locally.",
       "Run it with `-p no:randomly` and then with the CI seed from the log "
       "(`-p randomly -p 'randomly_seed=<seed>'`). In two cases the order, not timing, was "
       "the cause.",
       ("G", "CI seed 3318814 reproduced the outbox ordering failure locally"), "I",
       related=("T2",)),
    _E("P7", "patterns", "B", "Write the API contract in the spec before the handler",
       "specification",
       "New or changed HTTP endpoints under /v1.",
       "Put request and response examples, status codes and error bodies in the feature spec "
       "first and generate the OpenAPI diff from it. Reviews then argue about the contract, "
       "not the code.",
       ("A", "finalize endpoint contract settled before moving delivery to the worker"), "B",
       related=("N6",)),
    _E("P8", "patterns", "B", "Audit new endpoints against the authz matrix", "audit",
       "Any endpoint added under /v1 or /admin.",
       "Check the route against `docs/authz-matrix.md` (role x resource x verb) and add the "
       "matrix row in the same PR. Two endpoints shipped without an account scope check "
       "before this.",
       ("H", "cursor endpoint missed the account scope; caught by the matrix check"), "J",
       ("K", "replay endpoint restricted to the billing-admin role"), related=("Q7",)),
    _E("P9", "patterns", "B", "Pin the provider API version in the client constructor",
       "implementation",
       "Code that talks to the payment provider's REST API.",
       "Set the `Provider-Version` header once in `clients/provider.py`; never per call. An "
       "unpinned call silently used the account default version and got a new response shape.",
       ("F", "currency exponent fields only exist in API version 2026-06-30"), "J"),
    _E("P10", "patterns", "A", "Page through list endpoints with keyset cursors",
       "implementation",
       "List endpoints over tables that grow without bound (invoices, events, deliveries).",
       "Order by `(created_at, id)` and encode the last pair as an opaque base64 cursor. "
       "Offset paging scanned 400k rows for the largest account.",
       ("H", "GET /v1/invoices p95 from 4.1s to 35ms"), related=("P8",)),
    _E("P11", "patterns", "B", "Snapshot the OpenAPI schema in tests", "testing",
       "Changes to request or response models.",
       "Keep `tests/snapshots/openapi.json` and fail the test on any diff; update it "
       "deliberately with `--snapshot-update`. Accidental breaking changes show up in review.",
       ("E", "event model change would have renamed a public field")),
    _E("P12", "patterns", "B", "Split long migrations into expand and contract steps",
       "implementation",
       "Migrations on tables with live traffic (invoices, payments, outbox).",
       "First add the new column or table and dual-write, deploy, backfill, then drop the old "
       "column in a later release. One big migration locked invoices for 40 seconds on staging.",
       ("K", "replay bookkeeping column added without locking the outbox")),
    _E("P13", "patterns", "B", "Ask for the failing invoice id before debugging totals",
       "debugging",
       "Reports that an amount is wrong by a small difference.",
       "Get one concrete invoice id and recompute it line by line with the money helpers "
       "before reading code. The one-cent bug was obvious on the first real invoice.",
       ("M", "inv_8KQ2ZTM4 showed per-line truncation of tax at once")),
    _E("P14", "patterns", "B", "Mark slow tests and keep them out of the pre-commit run",
       "testing",
       "Tests that need the compose Postgres or Redis.",
       "Mark them `@pytest.mark.slow` and run `-m 'not slow'` in pre-commit; CI runs "
       "everything. Pre-commit went from 70s to 9s.",
       ("F", "property tests for currencies made the hook unbearable")),
    # ------------------------------------------------------------------ antipatterns
    _E("N1", "antipatterns", "B", "Retrying webhook delivery inside the request handler",
       "implementation",
       "Endpoints that trigger customer webhooks (finalize, refund, payment updates).",
       "Sending and retrying deliveries synchronously made one slow customer endpoint time out "
       "our own API. Instead, write an outbox row in the same transaction and let the worker "
       "deliver with backoff.",
       ("A", "finalize p99 at 9.8s because of inline retries"), "B", "D", "E", "G", "H", "J",
       related=("P4", "P3")),
    _E("N2", "antipatterns", "B", "Mocking the ORM session in repository tests", "testing",
       "Tests of repository and query functions.",
       "Mocked `Session.execute` calls passed while the real SQL was wrong (a missing join). "
       "Instead, run repository tests against the compose Postgres in a rolled-back "
       "transaction.",
       ("B", "mocked test passed; real query returned other accounts' invoices"),
       "C", "D", "F", "G", "I", overrides=(("demote", "medium"),), related=("Q1",)),
    _E("N3", "antipatterns", "B", "Editing an applied migration in place", "implementation",
       "Fixing a column type after the migration already ran on staging.",
       "Changing the existing revision file left staging and CI with different schemas and "
       "broke the next autogenerate. Instead, add a new revision that alters the column.",
       ("A", "CI schema diverged, fixed with a follow-up revision"), "C", "E", "G", "I", "K",
       related=("P1",)),
    _E("N4", "antipatterns", "B", "Catching broad Exception around provider calls",
       "debugging",
       "Error handling around the payment provider client.",
       "`except Exception` swallowed a signature error and a programming error alike, so the "
       "real cause never reached the logs. Instead, catch `httpx.HTTPError` and the provider's "
       "error types and let the rest crash.",
       ("E", "a KeyError hid behind 'provider unavailable' for a day"), "H", "J",
       related=("P2",)),
    _E("N5", "antipatterns", "B", "Hand-writing SQL for invoice totals in handlers",
       "implementation",
       "Endpoints that show invoice totals or balances.",
       "Ad-hoc `SUM()` queries in handlers disagreed with `invoices.total()` on tax and "
       "discounts. Instead, call the billing service function and cache it if needed.",
       ("A", "finalize response showed a pre-discount total"), "B"),
    _E("N6", "antipatterns", "B", "Skipping the spec review for small endpoints",
       "specification",
       "Endpoints that look trivial (one field, one query).",
       "Two 'small' endpoints needed breaking changes within a week because nobody agreed on "
       "the contract. Instead, write the three-line contract in the spec anyway.",
       ("F", "currency field shape changed twice after release"), "K", related=("P7",)),
    _E("N7", "antipatterns", "B", "Sleeping in tests to wait for the worker", "testing",
       "Tests that check what the outbox worker did.",
       "`time.sleep(2)` made the test slow and still flaky under CI load. Instead, run one "
       "worker tick synchronously or poll the row with a deadline.",
       ("E", "dedupe test flaked twice with sleep(1)"), related=("P3",)),
    _E("N8", "antipatterns", "B", "Logging full webhook payloads at INFO", None,
       "Debugging delivery failures on staging.",
       "Full payloads included customer emails and billing addresses and ended up in the log "
       "archive. Instead, log the event id, type and a hash of the body.",
       ("I", "log review flagged customer emails in worker logs")),
    _E("N9", "antipatterns", "B", "Trusting the provider event order", "debugging",
       "Handling charge.refunded and charge.captured events.",
       "The handler assumed captured arrives before refunded; it does not. Instead, fetch the "
       "charge from the provider API and act on its current state.",
       ("J", "refund of a partial capture arrived before the capture event")),
    _E("N10", "antipatterns", "B", "Bumping dependencies in a feature branch", "audit",
       "Feature work that needs a newer library version.",
       "The httpx bump rode along with a rounding fix and made the diff hard to review and "
       "revert. Instead, bump in its own PR first.",
       ("M", "rounding PR also carried an unrelated lockfile churn")),
    _E("N11", "antipatterns", "B", "Auditing only the happy path of refunds", "audit",
       "Security and correctness reviews of refund code.",
       "The review covered full refunds only; partial refunds on partial captures were never "
       "checked. Instead, list the state combinations before the review.",
       ("K", "replay review found refund states nobody had checked")),
    _E("N12", "antipatterns", "B", "Running alembic autogenerate against a dirty local DB",
       "implementation",
       "Creating migrations locally.",
       "Autogenerate diffed against a local DB with leftover experimental tables and emitted "
       "drop statements. Instead, recreate the DB from migrations before autogenerating.",
       ("D", "autogenerate proposed dropping tmp_signature_debug"), removed="reconcile2"),
    # ------------------------------------------------------------------ tool preferences
    _E("T1", "tool-preferences", "B", "Use ripgrep over grep -r for codebase search",
       "implementation",
       "Finding call sites and string literals across the repository.",
       "`rg -n 'pattern' acme_api tests` respects .gitignore and is fast enough to run before "
       "every edit. `grep -r` wandered into .venv and took 40 seconds.",
       ("A", "found all three inline delivery call sites in one search"),
       "C", "D", "F", "H", "I", "J"),
    _E("T2", "tool-preferences", "B", "Run pytest with -x --lf while iterating on a failure",
       "debugging",
       "Fixing one failing test in a suite of 900.",
       "`uv run pytest -x --lf` reruns only the last failures and stops at the first one; run "
       "the full suite once at the end.",
       ("E", "iteration loop went from 70s to 4s"), "G", "K", related=("P6",)),
    _E("T3", "tool-preferences", "B", "Use uv run instead of activating the venv",
       "implementation",
       "Running tools and tests in subagents and hooks.",
       "`uv run <tool>` always uses the project's locked environment; subagents that called "
       "`pytest` directly picked up a global install twice.",
       ("B", "subagent ran a global pytest 7 and missed the asyncio plugin"), "D", "I"),
    _E("T4", "tool-preferences", "B", "Prefer respx over unittest.mock for httpx calls",
       "testing",
       "Tests of code that calls the provider or customer endpoints with httpx.",
       "`respx` routes assert the exact URL, headers and body and fail on unexpected calls; "
       "mock.patch on `httpx.post` let a wrong URL pass.",
       ("F", "respx caught the missing Provider-Version header"), "H"),
    _E("T5", "tool-preferences", "B", "Use psql \\d+ to read table definitions", "debugging",
       "Checking the real schema while debugging a query.",
       "`docker compose exec postgres psql -U acme -c '\\d+ invoices'` shows indexes, "
       "defaults and constraints at once; reading models.py misses what migrations did.",
       ("F", "found the amount column still numeric(12,2) on staging")),
    _E("T6", "tool-preferences", "B", "Use gh run view --log-failed for CI failures",
       "debugging",
       "A red CI run on a pull request.",
       "`gh run view <id> --log-failed` prints only the failing step's log; opening the web UI "
       "and scrolling cost minutes per run.",
       ("J", "found the refund test failure in the log in seconds")),
    _E("T7", "tool-preferences", "B", "", "audit",
       "Dependency review before a release.",
       "Run `uv export --frozen | uv run pip-audit -r /dev/stdin` on the lockfile; it covers "
       "transitive dependencies that the pyproject list hides.",
       ("K", "flagged an old h11 pulled in by httpx")),
    _E("T8", "tool-preferences", "B", "Use docker compose logs -f worker for Celery issues",
       "debugging",
       "Debugging the outbox worker locally.",
       "Follow the worker's own log with `docker compose logs -f worker`; the API log does not "
       "show task retries or their exceptions.",
       ("M", "saw the rounding mismatch logged by the receipt task")),
    # ------------------------------------------------------------------ edge cases
    _E("C1", "edge-cases", "A", "Provider sends duplicate invoice.paid events within seconds",
       "debugging",
       "Provider webhook handling for payment events.",
       "The provider may deliver the same event id two or three times within a few seconds, "
       "even after a 200. Store processed event ids with a unique index and acknowledge "
       "duplicates without side effects.",
       ("A", "two deliveries of evt_1Q8 six seconds apart in staging logs"), "B", "C",
       ("E", "duplicate receipt emails traced to repeated invoice.paid"), "G", "H", "J",
       related=("P4",)),
    _E("C2", "edge-cases", "A", "Month-end billing period crosses a DST change", "testing",
       "Billing periods computed in the customer's time zone.",
       "A period ending at local midnight on the DST weekend is 23 or 25 hours long; "
       "computing it in UTC shifted the invoice date by a day. Compute in the account time "
       "zone and convert at the edges.",
       ("C", "Pacific/Auckland periods were off by one day in April"), "F", "I",
       related=("P5", "Q6")),
    _E("C3", "edge-cases", "A", "Redis client drops pipelined commands after a failover",
       "debugging",
       "Integration tests that run while the local Redis sentinel container restarts.",
       "After a sentinel failover the pooled client silently discards the in-flight pipeline. "
       "Re-create the pool on `ConnectionError` instead of retrying the same pipeline object.",
       ("E", "dedupe cache lost writes during a compose restart"), "G"),
    _E("C4", "edge-cases", "A", "Zero-amount invoices skip the payment intent",
       "implementation",
       "Finalizing invoices on the free plan or after a 100% discount.",
       "The provider rejects payment intents of 0; finalize must mark the invoice paid "
       "directly and still emit invoice.paid to customers.",
       ("A", "finalize worker crashed on a 100% discount invoice"),
       ("B", "free plan invoices finalize without a provider call")),
    _E("C5", "edge-cases", "B", "Webhook endpoints that answer 200 with an HTML error page",
       "debugging",
       "Customer webhook endpoints behind login walls or misconfigured proxies.",
       "Some endpoints return 200 with an HTML login page. Treat a 2xx with a text/html body "
       "as a soft failure and surface it in the delivery log.",
       ("H", "customer acme-labs got 'delivered' events that never arrived"), "K",
       related=("P2",)),
    _E("C6", "edge-cases", "A", "Currency rounding differs for JPY and KWD", "implementation",
       "Amounts in zero- and three-decimal currencies.",
       "JPY has no minor unit and KWD has three decimals; `* 100` is wrong for both. Use the "
       "ISO 4217 exponent table in `billing/money.py`.",
       ("I", "refund amounts in KWD were 10x too small")),
    _E("C7", "edge-cases", "A", "Customer webhook URLs with IDN hostnames", "implementation",
       "Validating and calling customer-provided webhook URLs.",
       "A customer registered `https://bücher.example/hooks`; httpx needs the punycode form for "
       "the signature log. Normalise with `idna` when the URL is saved.",
       ("I", "validation rejected a valid IDN URL")),
    _E("C8", "edge-cases", "B", "Refund of a partially captured payment", "specification",
       "Refund requests on payments captured in several parts.",
       "The refundable amount is the captured sum minus earlier refunds, not the authorized "
       "amount. The spec now says so explicitly.",
       ("J", "422 on a valid refund of a partial capture")),
    _E("C9", "edge-cases", "A", "Postgres advisory lock held across a worker restart",
       "debugging",
       "The outbox worker's single-runner lock.",
       "A session-level advisory lock survived a worker crash because PgBouncer kept the "
       "server connection. Use transaction-level locks (`pg_try_advisory_xact_lock`).",
       ("E", "outbox stalled for 20 minutes after a deploy")),
    # ------------------------------------------------------------------ project quirks
    _E("Q1", "project-quirks", "B", "Tests need the compose Postgres on port 55432",
       "testing",
       "Running the test suite locally or in a subagent.",
       "The compose file maps Postgres to 55432 to avoid clashing with a local install; "
       "`ACME_BILLING_DATABASE_URL` must point there or tests fail with connection refused.",
       ("A", "subagent tried 5432 and reported the DB as down"), "B", "C", "D", "F", "G",
       "I", "K"),
    _E("Q2", "project-quirks", "B", "Billing settings load from the ACME_BILLING_ prefix only",
       "implementation",
       "Configuration and environment variables.",
       "All settings use `env_prefix='ACME_BILLING_'`, including the database URL; a bare "
       "`DATABASE_URL` is silently ignored.",
       ("B", "staging deploy used the default DB URL"), "C", "E", "G", "H", "J"),
    _E("Q3", "project-quirks", "B",
       "Alembic env.py imports models through acme_api.db.all_models", "implementation",
       "Adding new SQLAlchemy models.",
       "Autogenerate only sees models imported in `acme_api/db/all_models.py`; a new model not "
       "listed there produces an empty migration.",
       ("D", "event table migration came out empty"), "I"),
    _E("Q4", "project-quirks", "B", "Staging webhooks go through the request-bin proxy",
       "debugging",
       "Testing customer webhook deliveries on staging.",
       "Staging rewrites customer webhook URLs to the internal request-bin proxy; look there, "
       "not at the customer's endpoint, when a staging delivery seems lost.",
       ("F", "searched the customer side for an hour"), "H", "K"),
    _E("Q5", "project-quirks", "B", "Spec files live under .specify/systems/system-02-billing",
       "specification",
       "Writing or finding feature specs for billing work.",
       "Billing specs are grouped by system, not by feature number; "
       "`.specify/systems/system-02-billing/features/` holds them.",
       ("G", "spec search by feature number found nothing"), "J"),
    _E("Q6", "project-quirks", "B", "CI runs tests with TZ=Pacific/Auckland", "testing",
       "Date and time tests.",
       "CI sets `TZ=Pacific/Auckland` on purpose to catch naive datetimes; a test that passes "
       "locally in UTC may fail there.",
       ("E", "dedupe window test failed only on CI")),
    _E("Q7", "project-quirks", "B", "The admin API uses a separate auth middleware", "audit",
       "Endpoints under /admin.",
       "/admin routes are mounted on a second app with `AdminAuthMiddleware`; the /v1 "
       "`current_user` dependency does not run there.",
       ("J", "refund override endpoint skipped the account check")),
    _E("Q8", "project-quirks", "B", "make lint also runs the OpenAPI diff", "audit",
       "Running linters before pushing.",
       "`make lint` runs ruff, mypy and `scripts/openapi_diff.py` against main; a red lint can "
       "be an API change, not a style issue.",
       ("M", "lint failed on the totals field description change")),
)
_ENTRY_BY_KEY = {e.key: e for e in _ENTRIES}

_OUTCOMES: dict[str, tuple[str, ...]] = {
    "patterns": ("applied again in {feat}; worked first try",
                 "followed during {feat}, no rework needed",
                 "{feat}: same approach held up",
                 "reused in {feat}; review passed without comments"),
    "antipatterns": ("nearly repeated in {feat}; caught in review",
                     "{feat}: same mistake cost a CI run",
                     "seen again in {feat}, reverted before merge"),
    "tool-preferences": ("used in {feat}; quicker than the alternative",
                         "{feat}: saved a round of manual searching",
                         "again the quickest route in {feat}"),
    "edge-cases": ("hit again in {feat}", "{feat}: reproduced, same handling applied",
                   "showed up in the {feat} test run"),
    "project-quirks": ("tripped over it again in {feat}", "{feat}: needed the same workaround",
                       "confirmed still true in {feat}"),
}

# The old ledger that `/smith-ledger reset` moved into archive/ (smith-ledger doc form).
_ARCHIVE: tuple[tuple[str, str, str, str, str, tuple[str, ...], str], ...] = (
    # file, title, category, confidence, context, sessions, pattern
    ("patterns", "Dry-run alembic before applying", "implementation", "medium",
     "Schema changes in the billing service.", ("L1", "L2"),
     "Run `alembic upgrade head --sql` and read the DDL first."),
    ("patterns", "Return 404, not 403, for other accounts' invoices", "specification", "low",
     "Invoice endpoints scoped by account.", ("L2",),
     "Do not reveal that an invoice id exists in another account."),
    ("patterns", "Render money with the currency's own formatter", "implementation", "low",
     "PDF and email rendering of amounts.", ("L1",),
     "Use babel's format_currency with the invoice locale."),
    ("antipatterns", "Building PDFs in the request thread", "implementation", "low",
     "Invoice PDF endpoint.", ("L1",),
     "Rendering took seconds for long invoices; queue it and return a link instead."),
    ("antipatterns", "Offset pagination on customer invoices", "implementation", "low",
     "List endpoints.", ("L2",),
     "Offset paging is fine for now but will not scale; revisit with cursors."),
    ("tool-preferences", "Use httpie for manual endpoint checks", "debugging", "low",
     "Poking the local API.", ("L2",),
     "`http :8000/v1/invoices Authorization:'Bearer ...'` is quicker than curl flags."),
    ("edge-cases", "Invoices with no line items", "debugging", "medium",
     "PDF rendering and totals.", ("L1", "L2"),
     "An invoice can legitimately have zero lines (a credit note applied); render a row."),
    ("project-quirks", "Local API runs on port 8000 behind no proxy", "debugging", "low",
     "Running the API locally.", ("L1",),
     "There is no ingress locally, so signature headers arrive untouched."),
)


# =========================================================================== ledger state

_CONF_RANK = {"high": 0, "medium": 1, "low": 2}


@dataclass
class _Line:
    when: dt.datetime
    text: str
    counts: bool  # a reflection (True) or a reconcile note (False)


@dataclass
class _State:
    key: str
    spec: _EntrySpec
    lines: list[_Line]
    confidence: str

    @property
    def reflections(self) -> int:
        return sum(1 for ln in self.lines if ln.counts)

    @property
    def date(self) -> dt.date:
        return max(ln.when for ln in self.lines if ln.counts).date()


class _Ledger:
    """The ledger's entries as they stood at any moment, rendered to the files' bytes."""

    def __init__(self, anchor: dt.date) -> None:
        self.anchor = anchor

    def moment(self, name: str) -> dt.datetime:
        return _moment(self.anchor, *_MOMENTS[name])

    def _evidence(self, spec: _EntrySpec, t: dt.datetime) -> list[_Line]:
        out = []
        for item in spec.evidence:
            key, outcome = (item, None) if isinstance(item, str) else item
            session = _SESSION_BY_KEY[key]
            when = _session_start(session, self.anchor)
            if when > t:
                continue
            if outcome is None:
                outcome = _pick(_OUTCOMES[spec.file], spec.key, key).format(feat=session.feat)
            name = _session_name(session, self.anchor)
            out.append(_Line(when, f"- {when:%Y-%m-%d} -- session {name}: {outcome}", True))
        return out

    def state(self, t: dt.datetime) -> dict[str, list[_State]]:
        files: dict[str, list[_State]] = {kind: [] for kind in LEDGER_FILES}
        for spec in _ENTRIES:
            if spec.merged and self.moment(spec.merged) <= t:
                continue
            if spec.removed and self.moment(spec.removed) <= t:
                continue
            lines = self._evidence(spec, t)
            if not lines:
                continue
            for when_name, other_key in spec.absorbs:
                when = self.moment(when_name)
                if when <= t:
                    other = _ENTRY_BY_KEY[other_key]
                    lines += self._evidence(other, t)
                    lines.append(_Line(when, f'- {when:%Y-%m-%d} — reconcile merge: absorbed '
                                             f'"{other.title}"', False))
            lines.sort(key=lambda ln: ln.when)
            count = sum(1 for ln in lines if ln.counts)
            confidence = "low" if count <= 1 else "medium" if count <= 5 else "high"
            last = max(ln.when for ln in lines)
            for when_name, conf in spec.overrides:
                when = self.moment(when_name)
                if last < when <= t:
                    confidence = conf
            files[spec.file].append(_State(spec.key, spec, lines, confidence))
        for entries in files.values():
            entries.sort(key=lambda s: (_CONF_RANK[s.confidence], -s.date.toordinal(),
                                        s.spec.title))
        return files

    # ------------------------------------------------------------------ rendering

    @staticmethod
    def _related(spec: _EntrySpec) -> str:
        if not spec.related:
            return "None"
        parts = [f"See {_ENTRY_BY_KEY[k].file}.md: '{_ENTRY_BY_KEY[k].title}'"
                 for k in spec.related]
        return "; ".join(parts)

    def _form_b(self, st: _State) -> list[str]:
        spec = st.spec
        title = f"**Title:** {spec.title}" if spec.title else "**Title:**"
        out = [title, f"**Date:** {st.date:%Y-%m-%d}"]
        if spec.category:
            out.append(f"**Category:** {spec.category}")
        out += [f"**Confidence:** {st.confidence}", f"**Source reflections:** {st.reflections}",
                "", f"**Context:** {spec.context}", "", f"**Pattern:** {spec.pattern}", "",
                "**Evidence:**", *(ln.text for ln in st.lines), "",
                f"**Related:** {self._related(spec)}"]
        return out

    def _form_a(self, st: _State) -> list[str]:
        spec = st.spec
        dates = sorted({f"{ln.when:%Y-%m-%d}" for ln in st.lines if ln.counts})
        out = [f"## {spec.title}", "", f"- **Date:** {st.date:%Y-%m-%d}"]
        if spec.category:
            out.append(f"- **Category:** {spec.category}")
        out += [f"- **Confidence:** {st.confidence}", f"- **Observations:** {st.reflections}",
                f"- **Source reflections:** {', '.join(dates)}", "", "### Context", "",
                spec.context, "", "### Pattern", "", spec.pattern, "", "### Evidence", "",
                *(ln.text for ln in st.lines), "", "### Related", "", self._related(spec), "",
                "---"]
        return out

    @staticmethod
    def header(kind: str, style: str) -> str:
        title = LEDGER_TITLES[kind]
        if style == "reset":
            return (f"# {title}\n\n<!-- Entries are added by /smith-reflect. "
                    f"Each entry starts with ## heading. -->\n")
        return (f"# Ledger: {title}\n\n{_DESCRIPTIONS[kind]}\n\n<!-- Entries are sorted: high "
                f"confidence first, then medium, then low. Within same confidence, most recent "
                f"first. -->\n")

    def render_file(self, kind: str, entries: list[_State]) -> str:
        # edge-cases.md kept the header /smith-ledger reset wrote; reflect rewrote the others.
        text = self.header(kind, "reset" if kind == "edge-cases" else "reflect")
        prev = None
        for st in entries:
            if st.spec.form == "A":
                text += "\n" + "\n".join(self._form_a(st)) + "\n"
            else:
                lead = "\n" if prev == "A" else "\n---\n\n"
                text += lead + "\n".join(self._form_b(st)) + "\n"
            prev = st.spec.form
        return text

    def render(self, t: dt.datetime) -> dict[str, str]:
        """The five .md files, meta.yaml and .meta.json as they stood at ``t``."""
        state = self.state(t)
        out = {f"{kind}.md": self.render_file(kind, state[kind]) for kind in LEDGER_FILES}
        reflected = [s for s in _SESSIONS
                     if s.reflect and _session_start(s, self.anchor) <= t]
        dist = {"high": 0, "medium": 0, "low": 0}
        for entries in state.values():
            for st in entries:
                dist[st.confidence] += 1
        last = max(_session_start(s, self.anchor) for s in reflected).date()
        meta = [f"last_updated: {last:%Y-%m-%d}", f"total_reflections: {len(reflected)}",
                "entries:"]
        meta += [f"  {kind.replace('-', '_')}: {len(state[kind])}" for kind in LEDGER_FILES]
        meta += ["confidence_distribution:", *(f"  {k}: {v}" for k, v in dist.items())]
        out["meta.yaml"] = "\n".join(meta) + "\n"
        out[".meta.json"] = self.meta_json(t, state, out)
        return out

    def reinforcements(self, since: dt.datetime | None, t: dt.datetime) -> int:
        """Reflections that reinforced an existing entry, in (since, t]."""
        n = 0
        for spec in _ENTRIES:
            times = sorted(ln.when for ln in self._evidence(spec, t))
            n += sum(1 for when in times[1:] if since is None or when > since)
        return n

    def meta_json(self, t: dt.datetime, state: dict[str, list[_State]],
                  files: dict[str, str]) -> str:
        recon = [self.moment(n) for n in ("reconcile1", "reconcile2") if self.moment(n) <= t]
        last_recon = recon[-1] if recon else None
        violations = sum(1 for s in _SESSIONS if s.violation
                         and (last_recon is None or _session_start(s, self.anchor) > last_recon)
                         and _session_start(s, self.anchor) <= t)
        data = {
            "schema_version": 1,
            "last_reconcile": f"{last_recon:%Y-%m-%dT%H:%M:%SZ}" if last_recon else None,
            "estimated_tokens": _tokens(files),
            "total_patterns": sum(len(v) for v in state.values()),
            "total_reinforcements": self.reinforcements(None, t),
            "context_budget_violations": violations,
            "reinforcements_since_reconcile": self.reinforcements(last_recon, t),
            "lock": None,
        }
        return json.dumps(data, indent=2) + "\n"

    # ------------------------------------------------------------------ reconcile, archive

    def reconcile_log(self, t: dt.datetime) -> str:
        text = "# Reconcile Log\n"
        runs = []
        if self.moment("reconcile2") <= t:
            when = self.moment("reconcile2")
            before = self.render(when - dt.timedelta(seconds=1))
            after = self.render(when)
            state = self.state(when - dt.timedelta(seconds=1))
            violations = json.loads(before[".meta.json"])["context_budget_violations"]
            since = json.loads(before[".meta.json"])["reinforcements_since_reconcile"]
            merged, absorbed = _ENTRY_BY_KEY["P4"], _ENTRY_BY_KEY["P4b"]
            pruned = _ENTRY_BY_KEY["N12"]
            age = (when.date() - next(st.date for st in state[pruned.file]
                                      if st.key == pruned.key)).days
            runs.append([
                f"## Reconcile: {when:%Y-%m-%d %H:%M:%S}", "",
                f"**Trigger**: context_budget_violations > 3 ({violations})",
                f"**Signal values**: tokens={_tokens(before)}, "
                f"patterns={sum(len(v) for v in state.values())}, violations={violations}, "
                f"reinforcements_since={since}", "",
                f"**Backup**: `.backups/reconcile-{when:%Y-%m-%d-%H%M%S}/`", "",
                "**Actions**:", "- Merged 1 entries", "- Pruned 1 stale entries",
                "- Dropped 0 lowest-confidence entries for budget",
                f"- Budget result: {_tokens(before)} → {_tokens(after)} estimated tokens", "",
                "**Merges**:",
                f'- {merged.file}.md: "{merged.title}" + "{absorbed.title}" → "{merged.title}"',
                "", "**Prunes**:",
                f'- {pruned.file}.md: "{pruned.title}" (low confidence, age: {age} days)', "",
                "**Result**: OK"])
        when = self.moment("reconcile1")
        runs.append([
            f"## Reconcile: {when:%Y-%m-%d %H:%M:%S}", "",
            "**Trigger**: context_budget_violations > 3 (4)",
            "**Signal values**: tokens=2310, patterns=19, violations=4, reinforcements_since=12",
            "", f"**Backup**: `.backups/reconcile-{when:%Y-%m-%d-%H%M%S}/`", "",
            "**Actions**:", "- Merged 1 entries", "- Pruned 0 stale entries",
            "- Dropped 0 lowest-confidence entries for budget",
            "- Budget result: 2310 → 2166 estimated tokens", "", "**Merges**:",
            '- antipatterns.md: "Retrying webhooks synchronously" + "Blocking the handler on '
            'webhook delivery" → "Retrying webhook delivery inside the request handler"', "",
            "**Result**: OK"])
        for run in runs:
            text += "\n---\n\n" + "\n".join(run) + "\n"
        return text

    def archive(self) -> dict[str, str]:
        """The five files and meta.yaml (smith-ledger/reset schema) moved aside by the reset."""
        by_file: dict[str, list[str]] = {kind: [] for kind in LEDGER_FILES}
        for kind, title, category, conf, context, sessions, pattern in _ARCHIVE:
            specs = [_SESSION_BY_KEY[k] for k in sessions]
            dates = [f"{_session_start(s, self.anchor):%Y-%m-%d}" for s in specs]
            evidence = [f"- {d} -- session {_session_name(s, self.anchor)}: seen in {s.feat}"
                        for d, s in zip(dates, specs, strict=True)]
            by_file[kind] += [
                f"## {title}", "", f"- **Date:** {dates[-1]}", f"- **Category:** {category}",
                f"- **Confidence:** {conf}", f"- **Observations:** {len(specs)}",
                f"- **Source reflections:** {', '.join(dates)}", "", "### Context", "", context,
                "", "### Pattern", "", pattern, "", "### Evidence", "", *evidence, "",
                "### Related", "", "None", "", "---", ""]
        out = {}
        for kind in LEDGER_FILES:
            out[f"{kind}.md"] = self.header(kind, "reset") + (
                "\n" + "\n".join(by_file[kind]) if by_file[kind] else "")
        last = max(_session_start(_SESSION_BY_KEY[k], self.anchor) for k in ("L1", "L2"))
        counts = {kind: sum(1 for a in _ARCHIVE if a[0] == kind) for kind in LEDGER_FILES}
        meta = ["# Ledger overview (written by /smith-ledger)",
                f'last_reflection: "{last:%Y-%m-%d}"', "total_reflections: 2",
                f"total_entries: {len(_ARCHIVE)}", "config:", "  low_confidence_prune_days: 30",
                "  medium_confidence_demote_days: 90", "entries_by_file:",
                *(f"  {kind}: {counts[kind]}" for kind in LEDGER_FILES)]
        out["meta.yaml"] = "\n".join(meta) + "\n"
        return out


_DESCRIPTIONS = {
    "patterns": "Approaches that worked well, extracted from completed workflows.",
    "antipatterns": "Approaches that failed or caused problems, extracted from completed "
                    "workflows.",
    "tool-preferences": "Which tools were effective in which context, extracted from completed "
                        "workflows.",
    "edge-cases": "Unusual inputs and situations, and how they were handled.",
    "project-quirks": "Project-specific surprises and behaviors that affect workflow "
                      "execution.",
}


def _tokens(files: dict[str, str]) -> int:
    words = sum(len(files[f"{kind}.md"].split()) for kind in LEDGER_FILES)
    return int(words * 1.3)


_SMITH_CONFIG = {
    "ledger": {
        "enabled": True, "auto_reflect": True, "auto_retry": False, "max_retries": 2,
        "reflection_model": "haiku", "context_budget_tokens": 2000,
        "pruning": {"low_max_age_days": 30, "medium_max_age_days": 90},
        "reconcile": {
            "enabled": True, "auto_reconcile": True, "reconcile_model": "haiku",
            "minimum_hours_between_reconciles": 6,
            "thresholds": {"total_tokens_max": 30000, "single_file_tokens_max": 8000,
                           "patterns_per_category_max": 50, "reinforcements_threshold": 50,
                           "context_violations_threshold": 3},
            "backup": {"max_count": 5, "max_age_days": 30},
        },
    },
    "context_budget": {"max_file_kb": 48},
    "security": {"block_secrets_in_vault": True},
}


# =========================================================================== project files

_BASE_FILES: dict[str, str] = {
    "README.md": _d("""
        # acme-api

        Billing, invoicing and webhook delivery API for Acme's self-serve plans.

        ## Development

            uv sync
            docker compose up -d postgres redis
            uv run pytest

        Tests expect the compose Postgres on port 55432 (see `docker-compose.yml`).

        ## Layout

        - `acme_api/api/`: HTTP routes (FastAPI)
        - `acme_api/billing/`: invoices, money, outbound webhooks
        - `acme_api/auth/`: API tokens
        - `acme_api/clients/`: the payment provider client
        - `docs/`: customer-facing docs
        """),
    "CHANGELOG.md": _d("""
        # Changelog

        ## Unreleased

        """),
    ".gitignore": _d("""
        __pycache__/
        *.pyc
        .venv/
        .env
        # Smith: per-user pointers and local workflow state (docs/manifest-system.md)
        .smith/vault/.current-session*
        .smith/vault/active-workflows/
        .smith/vault/queue/
        .smith/vault/todo/
        # Agent Ledger Toolkit: the local store and site, and this checkout's settings
        .toolkit/
        toolkit.yaml
        """),
    "pyproject.toml": _d("""
        [project]
        name = "acme-api"
        version = "1.13.2"
        requires-python = ">=3.12"
        dependencies = [
            "fastapi>=0.115",
            "sqlalchemy>=2.0",
            "alembic>=1.13",
            "httpx>=0.27,<0.28",
            "redis>=5.0",
            "celery>=5.4",
            "pydantic-settings>=2.4",
        ]

        [dependency-groups]
        dev = ["pytest>=8", "pytest-asyncio>=0.24", "respx>=0.21", "time-machine>=2.15",
               "ruff>=0.7"]

        [tool.pytest.ini_options]
        markers = ["slow: needs the compose services"]
        """),
    "acme_api/__init__.py": '__version__ = "1.13.2"\n',
    "acme_api/settings.py": _d('''
        """Settings from the environment (prefix ACME_BILLING_)."""

        from pydantic_settings import BaseSettings, SettingsConfigDict


        class Settings(BaseSettings):
            model_config = SettingsConfigDict(env_prefix="ACME_BILLING_")

            database_url: str = "postgresql+psycopg://acme:acme@localhost:55432/acme"
            redis_url: str = "redis://localhost:6379/0"
            provider_base_url: str = "https://api.payments.example"
            provider_api_key: str = ""
            outbound_proxy: str | None = None
            webhook_max_attempts: int = 8


        settings = Settings()
        '''),
    "acme_api/api/__init__.py": "",
    "acme_api/api/routes.py": _d('''
        """HTTP routes for /v1."""

        from fastapi import APIRouter, Depends, Header

        from acme_api.auth.legacy_token import legacy_token_user
        from acme_api.auth.tokens import bearer_user
        from acme_api.billing import invoices

        router = APIRouter(prefix="/v1")


        def current_user(authorization: str | None = Header(default=None),
                         x_api_token: str | None = Header(default=None)):
            if authorization:
                return bearer_user(authorization)
            return legacy_token_user(x_api_token)


        @router.get("/invoices/{invoice_id}")
        def get_invoice(invoice_id: str, user=Depends(current_user)):
            return invoices.get(user.account_id, invoice_id)


        @router.get("/invoices")
        def list_invoices(cursor: str | None = None, limit: int = 50, user=Depends(current_user)):
            return invoices.page(user.account_id, cursor=cursor, limit=min(limit, 200))
        '''),
    "acme_api/auth/__init__.py": "",
    "acme_api/auth/tokens.py": _d('''
        """Bearer API tokens."""

        from fastapi import HTTPException

        from acme_api.db import tokens_table


        def lookup_token(token: str):
            row = tokens_table.find_active(token)
            if row is None:
                raise HTTPException(status_code=401, detail="invalid token")
            return row


        def bearer_user(authorization: str):
            scheme, _, token = authorization.partition(" ")
            if scheme.lower() != "bearer" or not token:
                raise HTTPException(status_code=401, detail="expected a bearer token")
            return lookup_token(token)
        '''),
    "acme_api/auth/legacy_token.py": _d('''
        """X-Api-Token header auth, kept for CLI builds before 2.0."""

        from fastapi import HTTPException

        from acme_api.auth.tokens import lookup_token


        def legacy_token_user(token: str | None):
            if not token:
                raise HTTPException(status_code=401, detail="missing credentials")
            return lookup_token(token)
        '''),
    "acme_api/billing/__init__.py": "",
    "acme_api/billing/money.py": _d('''
        """Money amounts in minor units, per ISO 4217 currency exponent."""

        from decimal import ROUND_HALF_EVEN, Decimal

        EXPONENTS = {"USD": 2, "EUR": 2, "GBP": 2, "JPY": 0, "KWD": 3}


        def to_minor(amount: Decimal, currency: str) -> int:
            exp = EXPONENTS.get(currency, 2)
            return int((amount * 10**exp).quantize(Decimal(1), rounding=ROUND_HALF_EVEN))


        def line_total(unit_minor: int, quantity: int, tax_rate: Decimal) -> int:
            net = unit_minor * quantity
            return net + int(Decimal(net) * tax_rate)
        '''),
    "acme_api/billing/invoices.py": _d('''
        """Invoices: totals, finalization and listing."""

        from decimal import Decimal

        from acme_api.billing.money import line_total
        from acme_api.db import invoices_table


        def total(invoice) -> int:
            return sum(line_total(l.unit_minor, l.quantity, Decimal(l.tax_rate))
                       for l in invoice.lines)


        def get(account_id: str, invoice_id: str):
            return invoices_table.get(account_id, invoice_id)


        def page(account_id: str, *, cursor: str | None, limit: int):
            return invoices_table.keyset_page(account_id, cursor=cursor, limit=limit)
        '''),
    "acme_api/billing/webhooks.py": _d('''
        """Outbound webhook delivery to customer endpoints (run by the outbox worker)."""

        import hashlib
        import hmac
        import json
        import time

        import httpx

        TIMEOUT = httpx.Timeout(5.0, connect=2.0)


        def sign(payload: bytes, secret: str, timestamp: int) -> str:
            mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + payload, hashlib.sha256)
            return f"t={timestamp},v1={mac.hexdigest()}"


        def deliver(endpoint: str, secret: str, event: dict) -> int:
            """POST one event; returns the HTTP status. Raises on network errors."""
            payload = json.dumps(event, separators=(",", ":")).encode()
            headers = {
                "Content-Type": "application/json",
                "Acme-Signature": sign(payload, secret, int(time.time())),
            }
            response = httpx.post(endpoint, content=payload, headers=headers, timeout=TIMEOUT)
            return response.status_code


        def should_retry(status: int) -> bool:
            return status >= 500 or status == 429
        '''),
    "acme_api/clients/__init__.py": "",
    "acme_api/clients/provider.py": _d('''
        """Client for the payment provider's REST API."""

        import httpx

        from acme_api.settings import settings

        API_VERSION = "2026-06-30"


        def client() -> httpx.Client:
            return httpx.Client(
                base_url=settings.provider_base_url,
                headers={"Provider-Version": API_VERSION},
                auth=(settings.provider_api_key, ""),
                proxies=settings.outbound_proxy or None,
                timeout=10.0,
            )
        '''),
    "tests/test_webhooks.py": _d('''
        from acme_api.billing.webhooks import should_retry, sign


        def test_signature_is_stable():
            assert sign(b"{}", "whsec_test", 1700000000).startswith("t=1700000000,v1=")


        def test_retry_on_server_errors_only():
            assert should_retry(503)
            assert should_retry(429)
            assert not should_retry(400)
        '''),
    "tests/test_invoices.py": _d('''
        from decimal import Decimal

        from acme_api.billing.money import line_total, to_minor


        def test_to_minor_uses_currency_exponent():
            assert to_minor(Decimal("12.34"), "USD") == 1234
            assert to_minor(Decimal("1234"), "JPY") == 1234
            assert to_minor(Decimal("1.234"), "KWD") == 1234


        def test_line_total_adds_tax():
            assert line_total(1000, 3, Decimal("0.20")) == 3600
        '''),
    "docs/webhooks.md": _d("""
        # Webhooks

        Acme sends a POST with a JSON body to your endpoint for every billing event
        (`invoice.finalized`, `invoice.paid`, `refund.created`).

        ## Verifying signatures

        Every request carries an `Acme-Signature: t=<unix time>,v1=<hex>` header: the HMAC-SHA256
        of `<t>.<raw body>` with your endpoint's signing secret. Verify it over the raw bytes of
        the body, before parsing the JSON.
        """),
    "docs/auth.md": _d("""
        # Authentication

        Send your API key as a bearer token:

            Authorization: Bearer <key>

        ## Legacy header

        CLI builds before 2.0 send `X-Api-Token: <key>` instead. This header is still accepted
        but deprecated.
        """),
}

_UNRELEASED = "## Unreleased\n\n"

_RETRY_PY = _d('''
    """Retry budget for webhook deliveries: give up after MAX_ATTEMPTS."""

    from dataclasses import dataclass

    MAX_ATTEMPTS = 5
    BACKOFF_SECONDS = (10, 60, 300, 1800, 7200)


    @dataclass(frozen=True)
    class Attempt:
        number: int  # 1-based
        status: int | None  # None: a network error


    def next_delay(attempt: Attempt) -> int | None:
        """Seconds until the next try, or None when the budget is spent."""
        if attempt.number >= MAX_ATTEMPTS:
            return None
        return BACKOFF_SECONDS[attempt.number - 1]
    ''')

_TEST_RETRY_PY = _d('''
    from acme_api.billing.retry import MAX_ATTEMPTS, Attempt, next_delay
    from acme_api.billing.webhooks import schedule_retry


    def test_backoff_grows():
        delays = [next_delay(Attempt(n, 503)) for n in range(1, MAX_ATTEMPTS)]
        assert delays == sorted(delays)


    def test_fifth_attempt_gives_up():
        assert next_delay(Attempt(MAX_ATTEMPTS, 503)) is None


    def test_client_errors_are_not_retried():
        assert schedule_retry(1, 404) is None
    ''')

# A turn: its prompt and its steps. A step is "tool" (a tool:call_<id> snapshot, taken before
# the tool writes) or a list of edits. Edits: ("write", path, text), ("delete", path),
# ("replace", path, old, new), ("append", path, text), ("ledger", part).
_Edit = tuple[str, ...]
_TURNS: tuple[tuple[int, str, str, tuple[Any, ...]], ...] = (
    (-2, "09:14:07", "add a retry budget to the invoice webhook sender, it should give up after "
     "5 attempts", (
        [("write", "acme_api/billing/retry.py", _RETRY_PY)], "tool",
        [("replace", "acme_api/billing/webhooks.py", "import httpx\n",
          "import httpx\n\nfrom acme_api.billing.retry import Attempt, next_delay\n"),
         ("append", "acme_api/billing/webhooks.py", _d('''


            def schedule_retry(attempt_number: int, status: int | None) -> int | None:
                """When to try again (seconds), or None to mark the delivery failed."""
                if status is not None and not should_retry(status):
                    return None
                return next_delay(Attempt(attempt_number, status))
            '''))], "tool",
        [("replace", "acme_api/settings.py", "webhook_max_attempts: int = 8",
          "webhook_max_attempts: int = 5")])),
    (-2, "09:41:52", "why does the webhook test flake on CI? it passed 20 times locally", ()),
    (-2, "10:05:30", "add tests for the retry budget, including the 5th attempt giving up", (
        [("write", "tests/test_retry.py", _TEST_RETRY_PY)], "tool",
        [("append", "tests/test_webhooks.py", _d('''


            def test_rate_limited_is_retried():
                assert should_retry(429)
            '''))])),
    (-2, "14:30:18", "remove the legacy X-Api-Token auth path, nothing sends it anymore "
     "(checked the access logs for the last 90 days, zero hits)", (
        [("delete", "acme_api/auth/legacy_token.py")], "tool",
        [("replace", "acme_api/api/routes.py",
          "from acme_api.auth.legacy_token import legacy_token_user\n", ""),
         ("replace", "acme_api/api/routes.py",
          "def current_user(authorization: str | None = Header(default=None),\n"
          "                 x_api_token: str | None = Header(default=None)):\n"
          "    if authorization:\n        return bearer_user(authorization)\n"
          "    return legacy_token_user(x_api_token)\n",
          "def current_user(authorization: str = Header()):\n"
          "    return bearer_user(authorization)\n")], "tool",
        [("replace", "docs/auth.md", "\n## Legacy header\n\nCLI builds before 2.0 send "
          "`X-Api-Token: <key>` instead. This header is still accepted\nbut deprecated.\n",
          "\nThe `X-Api-Token` header of CLI builds before 2.0 is no longer accepted.\n")],
        "tool",
        [("replace", "CHANGELOG.md", _UNRELEASED,
          _UNRELEASED + "- Remove the legacy X-Api-Token header auth\n")])),
    (-1, "10:12:44", "the invoice total is off by one cent for JPY invoices, find out why", (
        [("replace", "acme_api/billing/money.py",
          "    return net + int(Decimal(net) * tax_rate)\n",
          "    tax = (Decimal(net) * tax_rate).quantize(Decimal(1), rounding=ROUND_HALF_EVEN)\n"
          "    return net + int(tax)\n")], "tool",
        [("append", "tests/test_invoices.py", _d('''


            def test_line_tax_rounds_half_even():
                assert line_total(333, 3, Decimal("0.10")) == 1099
            '''))])),
    (-1, "17:05:09", "document the webhook retry policy for customers in docs/webhooks.md and "
     "link it from the README", (
        [("append", "docs/webhooks.md", _d("""

            ## Retries

            A delivery that fails (network error, 5xx or 429) is retried up to 5 attempts in
            total, after 10 s, 1 min, 5 min and 30 min. After the 5th failure the delivery is
            marked failed; an admin can replay it with `POST /admin/webhooks/replay`.
            """))], "tool",
        [("replace", "README.md", "- `docs/`: customer-facing docs\n",
          "- `docs/`: customer-facing docs ([webhook retries](docs/webhooks.md#retries))\n")])),
    (0, "09:05:31", "reflect on yesterday's invoice rounding session and update the Smith "
     "ledger", (
        [("ledger", "md")], "tool", [("ledger", "meta")])),
    (0, "11:30:02", "bump httpx to 0.28 and fix whatever breaks", (
        [("replace", "pyproject.toml", '"httpx>=0.27,<0.28"', '"httpx>=0.28,<0.29"')], "tool",
        [("replace", "acme_api/clients/provider.py",
          "        proxies=settings.outbound_proxy or None,\n",
          "        proxy=settings.outbound_proxy or None,\n")])),
)


# =========================================================================== slop ledger

# Per bucket: (title, description, source links, slots). A slot named "a+b" picks its values
# together (a tuple per choice), so paired facts (a caller and its file) stay consistent.
_Slots = dict[str, tuple[Any, ...]]
_SLOP_TEMPLATES: dict[str, tuple[tuple[str, str, tuple[str, ...], _Slots], ...]] = {
    "retained_compatibility": (
        ("Legacy {header} header still accepted alongside bearer auth",
         "The {header} path was kept so old CLI builds keep working. Nothing in the current "
         "client sends it.",
         ("acme_api/auth/legacy_token.py:{n}", "acme_api/api/routes.py:{n}"),
         {"header": ("X-Api-Token", "X-Acme-Key", "X-Client-Secret")}),
        ("Deprecated {field} field still serialized in {resource} responses",
         "`{field}` was renamed but the old name is still emitted for the {client} "
         "integration, doubling the payload field count.",
         ("acme_api/api/schemas.py:{n}",),
         {"field": ("amount_cents", "customer_ref", "paid_on", "due_at_ts"),
          "resource": ("invoice", "payment", "refund"),
          "client": ("mobile app 3.x", "Zapier", "partner portal")}),
        ("/v0 alias for {route} kept after the v1 migration",
         "The alias forwards to the v1 handler. Access logs show no /v0 traffic for {days} "
         "days.",
         ("acme_api/api/legacy_routes.py:{n}",),
         {"route": ("GET /invoices", "POST /payments", "GET /customers/{id}"),
          "days": ("60", "90", "120")}),
        ("Payload shim converts {shape} webhook bodies",
         "`{func}` rewrites the old {shape} shape for customers who never upgraded; it runs on "
         "every delivery.",
         ("acme_api/billing/webhooks.py:{n}",),
         {"shape+func": (("v1 flat", "flatten_event"), ("pre-2026 nested", "legacy_envelope"),
                         ("form-encoded", "to_form_body"))}),
    ),
    "unmigrated_callers": (
        ("{Caller} still calls {old} instead of {new}",
         "`{new}` replaced `{old}` but {caller} was not updated, so it skips the new "
         "validation.",
         ("{path}:{n}",),
         {"caller+Caller+path": (
             ("the refund worker", "The refund worker", "acme_api/workers/refunds.py"),
             ("the admin replay endpoint", "The admin replay endpoint", "acme_api/api/admin.py"),
             ("the receipt mailer", "The receipt mailer", "acme_api/mail/receipts.py"),
             ("the dunning job", "The dunning job", "acme_api/workers/dunning.py")),
          "old+new": (("invoices.compute_total", "invoices.total"),
                      ("money.cents", "money.to_minor"),
                      ("provider.charge_legacy", "provider.create_payment"),
                      ("webhooks.send_now", "outbox.enqueue"))}),
        ("{n_sites} call sites still pass amounts as float",
         "Found with `rg 'float\\(' acme_api`: {n_sites} callers of the money helpers pass "
         "floats, which lose precision for large amounts.",
         ("acme_api/billing/money.py:{n}",),
         {"n_sites": ("3", "5", "7", "11")}),
        ("{module} still reads settings from os.environ",
         "It bypasses the ACME_BILLING_ settings object, so overrides in tests do not apply.",
         ("{module}:{n}",),
         {"module": ("acme_api/workers/outbox.py", "acme_api/mail/receipts.py",
                     "scripts/backfill_events.py")}),
    ),
    "duplicate_concepts": (
        ("Two {concept} helpers: {a} and {b}",
         "Both compute {concept} with slightly different rounding; `{b}` is used only by "
         "{user}.",
         ("acme_api/billing/{file}:{n}",),
         {"concept+a+b+file": (("tax", "money.line_total", "invoices._tax_for", "invoices.py"),
                               ("proration", "periods.prorate", "utils.prorate_days",
                                "periods.py"),
                               ("discount", "discounts.apply", "pricing.discounted",
                                "discounts.py"),
                               ("due-date", "periods.due_date", "invoices._due_on",
                                "periods.py"),
                               ("amount formatting", "money.format_amount",
                                "pdf.fmt_money", "money.py"),
                               ("webhook signing", "webhooks.sign", "admin._sign_payload",
                                "webhooks.py")),
          "user": ("the PDF renderer", "the admin dashboard", "the dunning job")}),
        ("Invoice status enum defined in both models and {place}",
         "The copies disagree on 'uncollectible'; {place} uses its own copy.",
         ("acme_api/db/models.py:{n}", "acme_api/{path}:{n}"),
         {"place+path": (("the API schemas", "api/schemas.py"),
                         ("the PDF module", "pdf/render.py"),
                         ("the admin app", "admin/views.py"))}),
        ("Two ways to load the current account: {a} and {b}",
         "`{b}` predates `{a}` and skips the suspended-account check.",
         ("acme_api/{path}:{n}",),
         {"a+b+path": (("deps.current_account", "auth.account_from_token", "api/deps.py"),
                       ("accounts.get_active", "db.load_account", "db/accounts.py"),
                       ("deps.admin_account", "admin.resolve_account", "api/admin.py"))}),
        ("Second retry policy in {file}",
         "{file} has its own backoff table that does not match billing/retry.py.",
         ("{file}:{n}",),
         {"file": ("acme_api/clients/provider.py", "acme_api/mail/sender.py",
                   "acme_api/workers/dunning.py")}),
    ),
    "naming_drift": (
        ("{a} vs {b} used for the same {thing}",
         "New code uses `{a}`, older modules `{b}`; grep finds both in {count} files.",
         ("acme_api/{path}:{n}",),
         {"a+b+thing": (("account_id", "customer_id", "owner of an invoice"),
                        ("invoice_number", "invoice_no", "printed invoice number"),
                        ("captured_amount", "amount_captured", "captured sum"),
                        ("refund_id", "refundId", "refund identifier"),
                        ("webhook_endpoint", "callback_url", "customer webhook URL"),
                        ("period_start", "cycle_start", "billing period start")),
          "count": ("9", "14", "22"),
          "path": ("billing/invoices.py", "api/routes.py", "workers/outbox.py")}),
        ("Module {mod} named after the old provider",
         "The provider changed last year but `{mod}` still carries the old name, which "
         "misleads new readers.",
         ("acme_api/clients/{mod}:{n}",),
         {"mod": ("braintree_compat.py", "old_gateway.py", "paymill.py", "legacy_psp.py",
                  "gateway_v1.py")}),
        ("Setting {setting} does not match its env var",
         "The field is `{setting}` but ops set ACME_BILLING_{env}; pydantic ignores it.",
         ("acme_api/settings.py:{n}",),
         {"setting+env": (("webhook_timeout_s", "WEBHOOK_TIMEOUT"),
                          ("outbox_batch", "OUTBOX_BATCH_SIZE"),
                          ("receipt_sender", "RECEIPT_FROM"),
                          ("replay_limit", "WEBHOOK_REPLAY_MAX"),
                          ("provider_timeout", "PROVIDER_TIMEOUT_S"))}),
    ),
    "stale_docs": (
        ("{doc} still documents {old}",
         "{doc} describes {old}, which changed in {release}.",
         ("{doc}:{n}",),
         {"doc+old": (("docs/webhooks.md", "8 retry attempts"),
                      ("docs/auth.md", "the X-Api-Token header"),
                      ("docs/api.md", "offset pagination"),
                      ("README.md", "port 5432 for tests"),
                      ("docs/webhooks.md", "the X-Acme-Signature header name"),
                      ("docs/api.md", "a 100-item page limit"),
                      ("README.md", "pip install -r requirements.txt"),
                      ("docs/refunds.md", "refunds up to the authorized amount")),
          "release": ("1.12.0", "1.13.0", "1.14.0")}),
        ("Docstring of {func} describes a removed {param} parameter",
         "`{func}` lost `{param}` in a refactor but the docstring still explains it.",
         ("acme_api/{path}:{n}",),
         {"func+param+path": (("deliver", "retries", "billing/webhooks.py"),
                              ("finalize", "sync", "billing/invoices.py"),
                              ("page", "offset", "billing/invoices.py"),
                              ("refund", "force", "billing/refunds.py"),
                              ("sign", "algorithm", "billing/webhooks.py"),
                              ("to_minor", "rounding", "billing/money.py"))}),
        ("Runbook for {incident} references a deleted dashboard",
         "The {incident} runbook links to a Grafana board removed in the metrics migration.",
         ("https://github.com/acme-corp/acme-api/wiki/Runbook-{slug}",),
         {"incident+slug": (("webhook backlog", "Webhook-Backlog"),
                            ("provider outage", "Provider-Outage"),
                            ("stuck outbox", "Stuck-Outbox"),
                            ("refund backlog", "Refund-Backlog"))}),
    ),
    "stale_tests": (
        ("Fixture {fixture} references removed config key {key}",
         "tests/fixtures/{fixture} still sets `{key}`, which the loader now ignores.",
         ("tests/fixtures/{fixture}",),
         {"key": ("compact_threshold", "legacy_auth", "webhook_max_attempts"),
          "fixture": ("settings_v1.env", "config_v1.toml", "staging.env")}),
        ("{test} asserts the old {behaviour}",
         "The assertion was loosened instead of updated when the {behaviour} changed; it now "
         "passes for both the old and the new behaviour.",
         ("tests/{test}:{n}",),
         {"test+behaviour": (("test_webhooks.py", "retry count"),
                             ("test_pagination.py", "page size"),
                             ("test_refunds.py", "refund limit"),
                             ("test_invoices.py", "rounding"),
                             ("test_idempotency.py", "key expiry"),
                             ("test_admin_replay.py", "replay limit"))}),
        ("Skipped test {name} hides a regression",
         "`{name}` is marked skip as 'flaky'; run alone it fails every time.",
         ("tests/{file}:{n}",),
         {"name+file": (("test_outbox_backpressure", "test_outbox.py"),
                        ("test_dst_rollover", "test_periods.py"),
                        ("test_idn_webhook_url", "test_webhooks.py"),
                        ("test_refund_after_chargeback", "test_refunds.py"),
                        ("test_cursor_after_delete", "test_pagination.py"))}),
    ),
    "suspected_dead_code": (
        ("{func} in {file} has no callers",
         "No references in acme_api, tests or scripts; last touched in {release}.",
         ("acme_api/{file}:{n}",),
         {"func+file": (("recalculate_all", "billing/invoices.py"),
                        ("render_legacy_pdf", "pdf/render.py"),
                        ("sync_customer_cache", "workers/sync.py"),
                        ("export_csv_v1", "api/exports.py"),
                        ("legacy_totals", "billing/invoices.py"),
                        ("warm_provider_cache", "clients/provider.py")),
          "release": ("1.9.0", "1.11.2", "1.12.0")}),
        ("Celery task {task} is never scheduled",
         "Registered in the worker but absent from beat and from every .delay() call.",
         ("acme_api/workers/{file}:{n}",),
         {"task+file": (("purge_stale_sessions", "maintenance.py"),
                        ("reindex_invoices", "search.py"),
                        ("retry_dead_letters", "outbox.py"),
                        ("send_trial_reminders", "mail.py"))}),
        ("Backfill helper {helper} left after the migration",
         "The one-off backfill ran in {release}; the helper and its CLI flag remain.",
         ("scripts/{helper}.py:{n}",),
         {"helper": ("backfill_event_ids", "backfill_currency", "fix_negative_refunds",
                     "rehash_api_tokens"),
          "release": ("1.12.0", "1.13.0")}),
    ),
    "unverified_public_behavior": (
        ("{endpoint} returns {code} on {case}; untested",
         "Behaviour visible to API clients that no test pins down.",
         ("acme_api/api/routes.py:{n}",),
         {"endpoint+case": (("GET /v1/invoices", "an expired cursor"),
                            ("POST /v1/refunds", "a zero amount"),
                            ("POST /v1/payments", "a reused Idempotency-Key"),
                            ("POST /v1/invoices", "an unknown currency")),
          "code": ("500", "422", "200 with an empty body")}),
        ("Webhook {aspect} change not checked against customer SDKs",
         "The {aspect} changed in the retry work; the published Node and Python SDKs were "
         "not re-tested.",
         ("docs/webhooks.md:{n}", "https://github.com/acme-corp/acme-sdk-node/issues/{n}"),
         {"aspect": ("signature header", "retry schedule", "event envelope")}),
        ("Cursor stability when {case}",
         "Keyset cursors may skip or repeat rows when {case}; no test covers it.",
         ("acme_api/billing/invoices.py:{n}",),
         {"case": ("two invoices share created_at", "an invoice is deleted mid-scan",
                   "the sort order flips")}),
    ),
    "tool_gaps": (
        ("No linter rule catches {thing}",
         "The ruff config does not flag {thing}; three occurrences slipped in this month.",
         ("pyproject.toml:{n}",),
         {"thing": ("float() on money", "naive datetime.now()", "broad except Exception",
                    "print() in library code", "mutable default arguments",
                    "assert used for request validation")}),
        ("CI does not run {check}",
         "{Check} only runs locally when someone remembers.",
         (".github/workflows/ci.yml:{n}",),
         {"check+Check": (("the OpenAPI diff", "The OpenAPI diff"),
                          ("mypy --strict on acme_api/billing", "mypy --strict"),
                          ("pip-audit", "pip-audit"),
                          ("the slow test marker", "The slow test job"),
                          ("the migration dry-run", "The migration dry-run"),
                          ("the docs link checker", "The docs link checker"))}),
        ("No test covers {case}",
         "Found while reviewing the agent's change: nothing in tests/ exercises {case}.",
         ("tests/",),
         {"case": ("refunds after a chargeback", "webhook replay rate limits",
                   "KWD three-decimal rounding", "expired idempotency keys",
                   "IDN webhook hostnames", "refunds in a closed billing period")}),
    ),
    "accepted_debt": (
        ("{Thing} kept until {when}",
         "Agreed with the team: {thing} stays until {when}; tracked for the next planning.",
         ("https://github.com/acme-corp/acme-api/issues/{n}",),
         {"thing+Thing": (("synchronous PDF rendering", "Synchronous PDF rendering"),
                          ("the single-node outbox worker", "The single-node outbox worker"),
                          ("polling the provider for refunds", "Polling the provider for refunds"),
                          ("the hand-rolled cursor encoding", "The hand-rolled cursor encoding")),
          "when": ("Q1 2027", "the queue migration", "the provider's events v2")}),
        ("{n_sites} TODOs in {file} accepted for the release",
         "Reviewed with the team before release 1.14.0; none affect correctness.",
         ("acme_api/{file}:{n}",),
         {"n_sites": ("2", "4", "6"),
          "file": ("billing/invoices.py", "api/admin.py", "workers/outbox.py")}),
    ),
}

_SLOP_CLEANUP = {
    "resolved": ("Removed in PR #{pr}.", "Callers migrated and the old path deleted (#{pr}).",
                 "Fixed together with the retry budget work (#{pr})."),
    "accepted": ("Accepted for now: documented in docs/decisions/00{d}.md.",
                 "Keep until the next major version; owner agreed."),
    "wont_fix": ("Kept on purpose: removing it would break a paying customer's integration.",
                 "Fixture kept on purpose to prove unknown keys are ignored."),
    "in_progress": ("Migration PR #{pr} open.", "Split into two PRs; first one merged."),
    "open": ("Delete once the access logs show no use for 30 days.",
             "Add a test first, then remove the old path."),
}

_OWNERS = ("auto", "auto", "auto", "jane.doe", "omar.khalil", "priya.raman", "billing-team",
           "platform-team")

# Two hand-written entries that exercise redaction in exports.
_SLOP_SPECIAL = (
    ("tool_gaps", "high", "certain",
     "Provider test key committed in a fixture",
     "tests/fixtures/provider_events.json embeds Authorization: Bearer sk-test-51HxDemoNotRealKey "
     "from a copied curl command; secret scanning does not run on fixtures.",
     ("tests/fixtures/provider_events.json:3",)),
    ("naming_drift", "low", "medium",
     "Prompt template still names the deepseek-v4-pro model",
     "The agent prompt in .codesmith/prompts/review.md hardcodes deepseek-v4-pro while the "
     "config moved to a model alias.",
     (".codesmith/prompts/review.md:12",)),
)


def _rfc3339(when: dt.datetime, rng: random.Random) -> str:
    digits = rng.choice((0, 3, 6, 9))
    base = when.strftime("%Y-%m-%dT%H:%M:%S")
    if digits:
        base += "." + "".join(str(rng.randint(0, 9)) for _ in range(digits))
    return base + "+00:00"


def _slop_entries(seed: int, anchor: dt.date, count: int = 150) -> list[dict[str, Any]]:
    rng = _rng(seed, "slop")
    start = _moment(anchor, -42, "00:00:00")
    end = _moment(anchor, 0, "23:59:59")
    span = int((end - start).total_seconds())

    def cover(values: Sequence[str], weights: Sequence[int]) -> list[str]:
        out = list(values) + rng.choices(list(values), weights=weights, k=count - len(values))
        rng.shuffle(out)
        return out

    buckets = cover(SLOP_BUCKETS, (12, 11, 8, 8, 10, 10, 9, 11, 10, 9))
    severities = cover(("critical", "high", "medium", "low", "info"), (4, 20, 40, 26, 10))
    confidences = cover(("certain", "high", "medium", "low"), (15, 35, 35, 15))
    statuses = cover(SLOP_STATUSES, (45, 15, 20, 10, 10))
    # Created at least two hours before the end, so an update always fits after it.
    times = sorted(start + dt.timedelta(seconds=rng.randrange(span - 7200))
                   for _ in range(count))
    special_at = {count // 3: _SLOP_SPECIAL[0], (2 * count) // 3: _SLOP_SPECIAL[1]}
    seen: set[str] = set()
    entries = []
    for i in range(count):
        n = rng.randint(12, 480)
        links: tuple[str, ...]
        if i in special_at:
            bucket, severity, confidence, title, description, links = special_at[i]
        else:
            bucket, severity, confidence = buckets[i], severities[i], confidences[i]
            for _attempt in range(50):
                tmpl_title, tmpl_desc, tmpl_links, slots = rng.choice(_SLOP_TEMPLATES[bucket])
                values: dict[str, str] = {}
                for names, choices in slots.items():
                    chosen = rng.choice(choices)
                    values.update(zip(names.split("+"), (chosen,) if "+" not in names
                                      else chosen, strict=True))
                title = tmpl_title.format(**values)
                if title not in seen:
                    break
            description = tmpl_desc.format(**values)
            links = tuple(link.format(n=rng.randint(12, 480), **values) for link in tmpl_links)
        seen.add(title)
        status = statuses[i]
        created = times[i]
        entry: dict[str, Any] = {"id": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
                                 "bucket": bucket, "severity": severity,
                                 "confidence": confidence}
        owner_roll = rng.random()
        if owner_roll < 0.75:
            entry["owner"] = rng.choice(_OWNERS)
        link_roll = rng.random()
        if link_roll < 0.8:
            chosen = list(links)
            if rng.random() < 0.25:
                chosen.append(f"https://github.com/acme-corp/acme-api/"
                              f"{rng.choice(('issues', 'pull'))}/{n}")
            entry["source_links"] = chosen
        entry["title"] = title
        entry["description"] = description
        entry["status"] = status
        if ((status != "open" or rng.random() < 0.15)
                and (status != "open" or rng.random() < 0.5)):
            entry["cleanup_recommendation"] = rng.choice(_SLOP_CLEANUP[status]).format(
                pr=rng.randint(40, 90), d=rng.randint(1, 9))
        entry["created_at"] = created_s = _rfc3339(created, rng)
        if status == "open" and rng.random() < 0.8:
            entry["updated_at"] = created_s
        else:
            room = int((end - created).total_seconds())
            later = created + dt.timedelta(seconds=rng.randint(60, room))
            entry["updated_at"] = _rfc3339(later, rng)
        if rng.random() < 0.4:
            alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
            entry["task_id"] = "task_01J" + "".join(rng.choice(alphabet) for _ in range(8))
            entry["thread_id"] = f"thr_{rng.getrandbits(24):06x}"
        entries.append(entry)
    return entries


# =========================================================================== audit DB

# The CREATE statements of nagi-ledger's ledger.py SCHEMA, verbatim
# (shared/formats/nagi-ledger/audit_schema.sql), so sqlite_master holds the same text.
from toolkit.audit_ops import SCHEMA_SQL as AUDIT_DDL  # noqa: E402 - one copy of the DDL

_FILES_API = ("acme_api/billing/webhooks.py", "acme_api/billing/invoices.py",
              "acme_api/billing/money.py", "acme_api/billing/refunds.py",
              "acme_api/api/routes.py", "acme_api/api/admin.py", "acme_api/workers/outbox.py",
              "acme_api/clients/provider.py", "acme_api/settings.py", "docs/webhooks.md")
_TESTS_API = ("tests/test_webhooks.py", "tests/test_invoices.py", "tests/test_refunds.py",
              "tests/test_outbox.py", "tests/test_pagination.py", "tests/test_idempotency.py")
_FILES_WEB = ("src/pages/Billing.tsx", "src/components/InvoiceTable.tsx",
              "src/api/client.ts", "src/hooks/useInvoices.ts")
_TESTS_WEB = ("src/components/InvoiceTable.test.tsx", "src/api/client.test.ts")
_BRANCHES_WEB = ("web-41-invoice-badges", "web-44-empty-invoice-crash", "main")
_BRANCHES = ("58-invoice-cursor-pagination", "60-idempotency-keys", "63-partial-capture-refund",
             "65-webhook-replay-admin", "67-invoice-total-rounding", "main")
_PKGS = (("httpx", "0.27.2", "0.28.1"), ("sqlalchemy", "2.0.35", "2.0.36"),
         ("fastapi", "0.115.2", "0.115.5"), ("celery", "5.4.0", "5.4.1"),
         ("pydantic-settings", "2.5.2", "2.6.1"), ("respx", "0.21.1", "0.22.0"))

# category: (weight, tier weights, description templates)
_ACTIONS: dict[str, tuple[int, tuple[int, int, int], tuple[str, ...]]] = {
    "file_write": (30, (85, 13, 2), (
        "Wrote {file}", "Edited {file} ({n} lines)", "Created {test}",
        "Applied patch to {file} and {test}")),
    "tool_failure": (14, (100, 0, 0), (
        "Bash: exit code 1: pytest: {n} failed, {m} passed",
        "Bash: exit code 1: ruff check: {n} errors in {file}",
        "Edit: old_string not found in {file}",
        "Bash: exit code 2: mypy: {n} errors in acme_api",
        "Bash: exit code 1: alembic: Target database is not up to date.",
        "Bash: exit code 127: uv: command not found",
        "WebFetch: 404 Not Found",
        "Bash: exit code 1: docker compose: service \"postgres\" is not running")),
    "test_run": (14, (90, 10, 0), (
        "Ran pytest {test}: {m} passed", "Ran the full suite: {m} passed, {n} skipped",
        "Re-ran {test} 50 times to check for flakes: all green")),
    "git": (14, (20, 70, 10), (
        "Committed {n} files on {branch}", "Rebased {branch} onto origin/main",
        "Created branch {branch}", "Force-pushed {branch} after squashing fixups",
        "Merged PR #{pr} into main", "Opened PR #{pr} from {branch}")),
    "refactor": (9, (30, 65, 5), (
        "Extracted a helper from {file}", "Renamed a function across {n} files",
        "Moved retry logic out of {file}", "Inlined a one-call wrapper in {file}")),
    "dependency_change": (5, (10, 60, 30), (
        "Bumped {pkg} {v1} -> {v2}", "Added {pkg}=={v2} to pyproject.toml",
        "Regenerated uv.lock after bumping {pkg}")),
    "config": (4, (10, 50, 40), (
        "Changed WEBHOOK_MAX_ATTEMPTS from 8 to 5 in staging settings",
        "Enabled the outbox worker's second queue on staging",
        "Raised the provider client timeout to {n}s")),
    "deploy": (4, (0, 25, 75), (
        "Deployed acme-api {ver} to staging", "Deployed acme-api {ver} to production",
        "Rolled back the worker deployment to {ver}",
        "Pushed staging config change enabling webhook retries")),
    "migration": (3, (0, 30, 70), (
        "Ran alembic upgrade head on staging ({n} revisions)",
        "Created index ix_invoices_account_created concurrently on staging",
        "Backfilled event ids for {m} provider events")),
    "security": (2, (0, 40, 60), (
        "Rotated the staging webhook signing secret",
        "Revoked {n} API tokens unused for 180 days",
        "Restricted /admin/webhooks/replay to the billing-admin role")),
}

# Tasks for dispatches: (task, file, test, approaches [(approach, outcome, reason)])
_TASKS: tuple[tuple[str, str, str, tuple[tuple[str, str, str], ...]], ...] = (
    ("Cap webhook retries at 5 attempts", "acme_api/billing/webhooks.py",
     "tests/test_retry.py", (
         ("Use the HTTP client's built-in retry adapter", "DEAD_END",
          "Adapter retries are per-connection and ignore the per-delivery budget"),
         ("Track attempts in the outbox row and stop at 5", "WORKS",
          "Deterministic, survives worker restarts"))),
    ("Remove the legacy X-Api-Token auth path", "acme_api/api/routes.py",
     "tests/test_auth.py", (
         ("Keep the header behind a feature flag for one more release", "NO_GO",
          "Access logs show zero use in 90 days; a flag only adds code"),
         ("Delete the module and the dependency, update docs/auth.md", "WORKS",
          "Tests green; no client sends the header"))),
    ("Fix JPY invoice total rounding", "acme_api/billing/money.py", "tests/test_invoices.py", (
        ("Round the invoice total once at the end", "DEAD_END",
         "PDF shows per-line amounts; totals then disagree with the lines"),
        ("Round tax per line with ROUND_HALF_EVEN in minor units", "WORKS",
         "Matches the PDF for all sampled invoices"))),
    ("Deduplicate provider invoice.paid events", "acme_api/billing/provider_events.py",
     "tests/test_provider_events.py", (
         ("Deduplicate in Redis with a 10 minute TTL", "DEAD_END",
          "Events arrive again after hours during provider incidents"),
         ("Unique index on provider_event_id and ignore conflicts", "WORKS",
          "Exactly-once side effects, no extra infrastructure"))),
    ("Add keyset pagination to GET /v1/invoices", "acme_api/billing/invoices.py",
     "tests/test_pagination.py", (
         ("Keep offset paging and add an index", "DEAD_END",
          "Still scans all skipped rows for large offsets"),
         ("Order by (created_at, id) with an opaque cursor", "WORKS",
          "p95 35ms for the largest account"))),
    ("Support Idempotency-Key on POST /v1/payments", "acme_api/api/idempotency.py",
     "tests/test_idempotency.py", (
         ("Store full responses in Redis", "NO_GO",
          "Responses can exceed Redis memory budget; Postgres table is simpler"),
         ("Postgres table keyed by (account, key) with a body fingerprint", "WORKS",
          "Replays the first response; 409 on a different body"))),
    ("Stabilise test_outbox_delivers_in_order", "tests/test_outbox.py", "tests/test_outbox.py", (
        ("Increase the wait to 5 seconds", "DEAD_END", "Only hides the race; still fails at "
         "2x CI load"),
        ("Run one worker tick synchronously in the test", "WORKS",
         "Deterministic and 40x faster"))),
    ("Refund partially captured payments", "acme_api/billing/refunds.py",
     "tests/test_refunds.py", (
         ("Validate against the authorized amount minus refunds", "DEAD_END",
          "Allows refunding money that was never captured"),
         ("Validate against captured amount minus refunds", "WORKS",
          "Matches the provider's own check"))),
    ("Replay failed webhook deliveries from the admin API", "acme_api/api/admin.py",
     "tests/test_admin_replay.py", (
         ("Re-send synchronously from the admin request", "NO_GO",
          "Same failure mode as inline delivery; see antipatterns"),
         ("Re-queue the outbox rows with attempt=0", "WORKS",
          "Worker applies the normal retry budget"))),
    ("Support three-decimal currencies (KWD)", "acme_api/billing/money.py",
     "tests/test_money.py", (
         ("Store amounts as Decimal in the database", "NO_GO",
          "Would touch every table; minor units with an exponent table suffice"),)),
    ("Move webhook delivery to the outbox worker", "acme_api/workers/outbox.py",
     "tests/test_webhooks.py", ()),
    ("Verify provider signatures behind the ingress proxy",
     "acme_api/billing/provider_events.py", "tests/test_provider_events.py", (
         ("Re-serialise the parsed JSON before verifying", "DEAD_END",
          "Key order and whitespace change; signature never matches"),
         ("Verify over the raw body bytes", "WORKS", "Proxy config fixed separately"))),
    ("Render PDFs for invoices without line items", "acme_api/pdf/render.py",
     "tests/test_pdf.py", ()),
    ("Roll billing periods over at month end", "acme_api/billing/periods.py",
     "tests/test_periods.py", (
         ("Add 30 days to the period start", "DEAD_END", "Drifts for 31-day months and Feb"),
         ("Use dateutil relativedelta(months=1) clamped to month end", "WORKS",
          "All 31 period tests pass"))),
    ("Detect HTML error pages returned with 200 by webhook endpoints",
     "acme_api/billing/webhooks.py", "tests/test_webhooks.py", ()),
    ("Bump httpx to 0.28", "acme_api/clients/provider.py", "tests/test_provider.py", (
        ("Pin httpx below 0.28 for another quarter", "NO_GO",
         "respx 0.22 needs httpx 0.28"),)),
    ("Add an authz matrix check to the route tests", "tests/test_authz.py",
     "tests/test_authz.py", ()),
    ("Normalise IDN webhook URLs on save", "acme_api/api/endpoints.py",
     "tests/test_endpoints.py", ()),
    ("Use transaction-level advisory locks in the outbox worker",
     "acme_api/workers/outbox.py", "tests/test_outbox.py", (
         ("Session-level lock with a watchdog", "DEAD_END",
          "PgBouncer keeps the server connection; the lock outlives the worker"),
         ("pg_try_advisory_xact_lock per batch", "WORKS", "Released with the transaction"))),
    ("Snapshot the OpenAPI schema in tests", "tests/test_openapi.py", "tests/test_openapi.py",
     ()),
    ("Redact customer emails from worker logs", "acme_api/workers/outbox.py",
     "tests/test_logging.py", (
         ("Log hashed payloads only", "WORKS", "Event id, type and sha256 are enough"),)),
    ("Zero-amount invoices skip the payment intent", "acme_api/billing/invoices.py",
     "tests/test_invoices.py", ()),
    ("Recreate the Redis pool after a sentinel failover", "acme_api/cache.py",
     "tests/test_cache.py", ()),
    ("Split the invoices status migration into expand and contract", "migrations/versions",
     "tests/test_migrations.py", (
         ("One migration with a table rewrite", "NO_GO", "Locks invoices for ~40s"),)),
    ("Audit the refund endpoints for missing account scoping", "acme_api/api/routes.py",
     "tests/test_authz.py", ()),
    ("Speed up the pre-commit test run", "pyproject.toml", "tests/conftest.py", ()),
    ("Pin the provider API version in the client", "acme_api/clients/provider.py",
     "tests/test_provider.py", ()),
    ("Add respx mocks for provider refunds", "tests/test_refunds.py", "tests/test_refunds.py",
     ()),
    ("Explain the staging webhook proxy in the runbook", "docs/runbooks/webhooks.md",
     "tests/test_docs.py", ()),
    ("Generate the customer invoices CSV export", "acme_api/api/exports.py",
     "tests/test_exports.py", ()),
    ("Reproduce the DST billing period bug", "acme_api/billing/periods.py",
     "tests/test_periods.py", ()),
    ("Clean up float amounts in the dunning job", "acme_api/workers/dunning.py",
     "tests/test_dunning.py", ()),
    ("Wire pip-audit into CI", ".github/workflows/ci.yml", "tests/test_ci.py", ()),
    ("Show invoice status badges in the billing page", "src/components/InvoiceTable.tsx",
     "src/components/InvoiceTable.test.tsx", ()),
    ("Fix the billing page crash on empty invoices", "src/pages/Billing.tsx",
     "src/pages/Billing.test.tsx", ()),
    ("Survey admin routes and propose an audit log schema", "acme_api/api/admin.py",
     "tests/test_admin.py", ()),
    ("Check the receipt mailer for duplicate sends", "acme_api/mail/receipts.py",
     "tests/test_receipts.py", ()),
    ("Remove the unused export_csv_v1 endpoint", "acme_api/api/exports.py",
     "tests/test_exports.py", ()),
    ("Document webhook retries for customers", "docs/webhooks.md", "tests/test_docs.py", ()),
)

# Tasks pinned to the turn snapshot windows: task index -> [(day, "HH:MM:SS")] per dispatch.
_PINNED_DISPATCHES: dict[int, tuple[tuple[int, str], ...]] = {
    0: ((-2, "09:15:40"), (-2, "09:38:12"), (-2, "10:06:55")),
    1: ((-2, "14:31:30"),),
    2: ((-1, "10:13:58"), (-1, "10:26:41")),
    15: ((0, "11:31:20"),),
}

# Approaches that fit almost any task; each task gets each of them at most once.
_GENERIC_APPROACHES = (
    ("Let the subagent work without the task's test file in the brief", "DEAD_END",
     "It reported success but nothing exercised the change"),
    ("Ask the subagent to rewrite the module from scratch", "NO_GO",
     "Too much churn for the size of the change"),
    ("Add a failing regression test first, then change the code", "WORKS",
     "The test failed before the change and passes after it"),
    ("Patch the dependency in site-packages", "NO_GO", "Not reproducible for the rest of the team"),
    ("Split the change into two smaller PRs", "WORKS", "Each half was reviewed in minutes"),
    ("Retry with the same brief and a bigger model", "DEAD_END",
     "Same misunderstanding of the task; the brief was the problem"),
    ("Bisect the recent commits to find where it started", "WORKS",
     "Found the offending change in a few steps"),
)

_VERDICT_NOTES = {
    "CONFIRMED": ("Verified: {test} passes ({m} passed)", "Reviewed the diff; matches the spec",
                  "Verified with a 200-run flake loop", "Confirmed on staging"),
    "REFUTED": ("Claimed fixed but {test} still fails", "Changed the wrong module; {file} "
                "untouched", "Tests pass only because the assertion was removed",
                "Introduced a regression in {test}"),
    "PARTIAL": ("Core change works but no test for the edge case",
                "Fix works; docs not updated", "Works for USD only, JPY still off",
                "Cap works but backoff jitter missing"),
}
_AGENTS = ("general-purpose", "Explore", "code-reviewer", "test-runner", "fork", "Plan")
_MODELS = ("sonnet", "opus", "haiku", "inherit", "claude-sonnet-4-5")


@dataclass
class _AuditRows:
    actions: list[tuple[Any, ...]] = field(default_factory=list)
    dispatches: list[tuple[Any, ...]] = field(default_factory=list)
    approaches: list[tuple[Any, ...]] = field(default_factory=list)


def _fill(template: str, rng: random.Random, project: str | None) -> str:
    web = project == "acme-web"
    pkg, v1, v2 = rng.choice(_PKGS)
    return template.format(
        file=rng.choice(_FILES_WEB if web else _FILES_API),
        test=rng.choice(_TESTS_WEB if web else _TESTS_API),
        n=rng.randint(1, 12), m=rng.randint(40, 900), pr=rng.randint(40, 90),
        branch=rng.choice(_BRANCHES_WEB if web else _BRANCHES), pkg=pkg, v1=v1, v2=v2,
        ver=f"1.{rng.randint(12, 14)}.{rng.randint(0, 4)}")


def _audit_rows(seed: int, anchor: dt.date, total: int,
                turn_actions: list[tuple[dt.datetime, int, str, str]]) -> _AuditRows:
    rng = _rng(seed, "audit")
    rows = _AuditRows()
    start_day = -41
    n_disp = max(len(_TASKS), round(total * 0.04))
    n_appr = max(20, round(total * 0.03))
    n_act = total - n_disp - n_appr
    window_end = _moment(anchor, 0, "23:59:59")

    # ---------------------------------------------------------------- actions
    days = list(range(start_day, 1))
    day_weights = []
    for d in days:
        wd = (anchor + dt.timedelta(days=d)).weekday()
        day_weights.append((0.25 if wd >= 5 else 1.0) * (1.0 + (d - start_day) / 80))
    hour_weights = [1, 1, 0, 0, 0, 0, 1, 3, 8, 12, 13, 12, 8, 11, 13, 12, 10, 7, 4, 3, 2, 2, 1,
                    1]
    cats = list(_ACTIONS)
    cat_weights = [_ACTIONS[c][0] for c in cats]
    fixed = turn_actions[: max(0, n_act)]
    for when, tier, category, description in fixed:
        rows.actions.append((_ts(when), tier, category, description, PROJECT))
    for _ in range(n_act - len(fixed)):
        day = rng.choices(days, weights=day_weights)[0]
        hour = rng.choices(range(24), weights=hour_weights)[0]
        when = _moment(anchor, day, f"{hour:02d}:{rng.randrange(60):02d}:{rng.randrange(60):02d}")
        category = rng.choices(cats, weights=cat_weights)[0]
        _w, tier_w, templates = _ACTIONS[category]
        tier = rng.choices((0, 1, 2), weights=tier_w)[0]
        roll = rng.random()
        if category == "tool_failure":
            project = None if roll < 0.8 else PROJECT
        else:
            project = PROJECT if roll < 0.84 else (None if roll < 0.92 else "acme-web")
        rows.actions.append((_ts(when), tier, category,
                             _fill(rng.choice(templates), rng, project), project))

    # ---------------------------------------------------------------- dispatches
    tasks = list(_TASKS)
    # Big DBs (benchmarks) get follow-up tasks, so no task collects hundreds of dispatches.
    for k in range(max(0, n_disp // 3 - 4 * len(_TASKS))):
        task, file, test, _appr = _TASKS[k % len(_TASKS)]
        tasks.append((f"{task} (follow-up {k // len(_TASKS) + 1})", file, test, ()))
    counts = [1] * len(tasks)
    for idx, pinned in _PINNED_DISPATCHES.items():
        counts[idx] = len(pinned)
    hard = [i for i in range(len(tasks)) if i not in _PINNED_DISPATCHES]
    hard = rng.sample(hard, k=min(8, len(hard)))
    free = [i for i in range(len(tasks)) if i not in _PINNED_DISPATCHES]
    for _ in range(n_disp - sum(counts)):
        pick = rng.choice(hard if rng.random() < 0.6 else free)
        if counts[pick] >= 8:  # a task is retried a handful of times, not hundreds
            pick = rng.choice(free)
        counts[pick] += 1
    task_times: dict[int, list[dt.datetime]] = {}
    for i, (task, file, test, _appr) in enumerate(tasks):
        prev: str | None = None
        if i in _PINNED_DISPATCHES:
            stamps = [_moment(anchor, d, hms) for d, hms in _PINNED_DISPATCHES[i]]
        else:
            day = rng.randint(start_day, -1)
            t = _moment(anchor, day, f"{rng.randint(8, 17):02d}:{rng.randrange(60):02d}:"
                                     f"{rng.randrange(60):02d}")
            stamps = []
            for _j in range(counts[i]):
                stamps.append(min(t, window_end))
                t += dt.timedelta(minutes=rng.randint(12, 200))
        task_times[i] = stamps
        for j, when in enumerate(stamps):
            last = j == len(stamps) - 1
            auto = rng.random() < 0.4
            if auto:
                agent, model = "general-purpose", "inherit"
                prompt = (f"{task}. Work in {file} and keep the change minimal. Run "
                          f"{test} before you report back, and list every file you touched. "
                          f"Do not change public behaviour beyond what the task needs.")
                brief = "[auto] " + prompt[:200]
            else:
                agent, model = rng.choice(_AGENTS), rng.choice(_MODELS)
                brief = (f"Retry {j}: previous attempt {(prev or 'pending').lower()}; "
                         f"focus on {file} and rerun {test}" if j
                         else f"{task} in {file}; verify with {test}")
            recent = when > window_end - dt.timedelta(days=2)
            if last:
                verdict = rng.choices(("CONFIRMED", "PARTIAL", "REFUTED", None),
                                      weights=(25, 10, 10, 55) if recent else (62, 12, 12, 14))[0]
            else:
                verdict = rng.choices(("REFUTED", "PARTIAL"), weights=(55, 45))[0]
            if verdict is None:
                vts = notes = None
            else:
                vwhen = min(when + dt.timedelta(minutes=rng.randint(3, 50)), window_end)
                vts = _ts(vwhen)
                notes = rng.choice(_VERDICT_NOTES[verdict]).format(
                    test=test, file=file, m=rng.randint(40, 400))
            rows.dispatches.append((_ts(when), task, agent, model, brief, verdict, vts, notes))
            prev = verdict

    # ---------------------------------------------------------------- approaches
    with_appr = [i for i, t in enumerate(tasks) if t[3]]
    plan: list[tuple[int, tuple[str, str, str]]] = []
    for i in with_appr:
        plan += [(i, a) for a in tasks[i][3]]
    order = list(range(len(tasks)))
    rng.shuffle(order)
    k = 0
    while len(plan) < n_appr:  # generic approaches, spread over the tasks, then repeated
        i = order[k % len(order)]
        plan.append((i, _GENERIC_APPROACHES[(k // len(order) + i) % len(_GENERIC_APPROACHES)]))
        k += 1
    plan = plan[:n_appr]
    per_task: dict[int, int] = {}
    for i, (approach, outcome, reason) in plan:
        n = per_task.get(i, 0)
        per_task[i] = n + 1
        stamps = task_times[i]
        base = stamps[min(n, len(stamps) - 1)]
        when = min(base + dt.timedelta(minutes=rng.randint(2, 40) + 5 * n), window_end)
        rows.approaches.append((_ts(when), tasks[i][0], approach, outcome, reason))

    for name in ("actions", "dispatches", "approaches"):
        getattr(rows, name).sort(key=lambda r: r[0])
    return rows


# (goal, outcome, note, day set, time set, hours open, turns used, max turns)
_GOALS: tuple[tuple[str, str, str | None, int, str, int, int, int], ...] = (
    ("Cap webhook retries at 5 attempts, tests green", "done",
     "tests/test_retry.py 3 passed; outbox attempts column stops at 5", -30, "09:12:40", 3, 6,
     10),
    ("Remove the legacy X-Api-Token auth path", "superseded", None, -24, "14:03:11", 1, 2, 10),
    ("Remove the X-Api-Token path and update docs/auth.md", "done",
     "module deleted, docs/auth.md updated, 412 tests green", -24, "15:20:05", 2, 4, 10),
    ("Fix JPY invoice total rounding for every sampled invoice", "budget_exhausted", None, -17,
     "10:41:52", 5, 15, 15),
    ("Fix JPY rounding: round tax per line in minor units", "done",
     "PDF totals match for all 40 sampled invoices", -16, "09:05:30", 4, 7, 10),
    ("Deduplicate provider invoice.paid events in Redis", "aborted",
     "events come back hours later during provider incidents; needs a DB constraint", -9,
     "11:17:09", 2, 3, 10),
)


def _goals(anchor: dt.date) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The active goal and the history of closed ones, with goal_gate.py's keys and times."""
    closed = []
    for goal, outcome, note, day, hms, hours, used, _max in _GOALS:
        start = _moment(anchor, day, hms)
        closed.append({"goal": goal, "outcome": outcome, "note": note,
                       "created": start.isoformat(),
                       "closed": (start + dt.timedelta(hours=hours, minutes=7)).isoformat(),
                       "turns_used": used})
    state = {"goal": "Deduplicate provider invoice.paid events with a unique index",
             "remaining": 6, "max_turns": 20,
             "created": _moment(anchor, 0, "16:02:44").isoformat(), "extensions": 1}
    return state, closed


def _write_audit_db(path: Path, rows: _AuditRows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.executescript(AUDIT_DDL)
        conn.execute("BEGIN")
        conn.executemany("INSERT INTO actions (ts, tier, category, description, project) "
                         "VALUES (?, ?, ?, ?, ?)", rows.actions)
        conn.executemany("INSERT INTO dispatches (ts, task, agent_type, model, brief_summary, "
                         "verdict, verdict_ts, verdict_notes) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                         rows.dispatches)
        conn.executemany("INSERT INTO approaches (ts, task, approach, outcome, reason) "
                         "VALUES (?, ?, ?, ?, ?)", rows.approaches)
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


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
        self.ledger = _Ledger(anchor)
        self.session_rng = _rng(seed, "sessions")
        self.session_texts = {s.key: _session_text(s, anchor, self.session_rng)
                              for s in _SESSIONS}
        self.vault_commits = 0
        self.snapshot_count = 0
        self.turn_actions: list[tuple[dt.datetime, int, str, str]] = []
        self.side_repo = side_repo_for(self.project, self.snapshots_home)
        self.side_head: str | None = None

    def at(self, name: str) -> dt.datetime:
        return _moment(self.anchor, *_MOMENTS[name])

    def build(self) -> DemoWorld:
        self.say("Writing the project repository and its Smith vault history")
        self.build_project()
        self.say("Writing the CodeSmith slop ledger")
        slop_path = self.codesmith / "slop_ledger" / "slop_ledger.json"
        entries = _slop_entries(self.seed, self.anchor)
        _write(slop_path, json.dumps({"entries": entries}, indent=2, ensure_ascii=False))
        self.say(f"Writing the nagi-ledger audit DB ({self.audit_rows} rows)")
        audit_db = self.root / "nagi" / "ledger.db"
        rows = _audit_rows(self.seed, self.anchor, self.audit_rows, self.turn_actions)
        _write_audit_db(audit_db, rows)
        self.say("Writing the nagi-ledger goal gate (goal.json, goal_history.jsonl)")
        goal_file, goal_history = self.root / "nagi" / "goal.json", \
            self.root / "nagi" / "goal_history.jsonl"
        state, closed = _goals(self.anchor)
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
            "sessions": len(_SESSIONS),
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
        self.git.run("add", "-A", cwd=self.project)
        self.git.run("commit", "-q", "--no-verify", "-m", message, cwd=self.project, when=when,
                     who=_PEOPLE[who].ident)

    def write_session(self, key: str) -> None:
        spec = _SESSION_BY_KEY[key]
        _write(self.vault / "sessions" / f"{_session_name(spec, self.anchor)}.md",
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
        _write(path, text.replace(_UNRELEASED, f"{_UNRELEASED}- {line}\n", 1))

    def build_project(self) -> None:
        p = self.project
        p.mkdir(parents=True)
        self.git.run("init", "-q", str(p))
        self.git.run("remote", "add", "origin", "git@github.com:acme-corp/acme-api.git", cwd=p)
        for rel, text in _BASE_FILES.items():
            _write(p / rel, text)
        self.commit(self.at("import"), "jane", "Initial import of acme-api\n\nHistory before "
                    "this point lives in the old monorepo.")

        # The vault, as it stood when the team started committing it.
        vault_at = self.at("vault")
        _write(p / ".smith" / "config.json", json.dumps(_SMITH_CONFIG, indent=2) + "\n")
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
        for spec in _SESSIONS:
            if spec.key in ("E", "F", "G", "H", "I", "J", "K"):
                when = _session_start(spec, self.anchor) + dt.timedelta(
                    hours=2, minutes=17 + len(spec.branch))
                events.append((when, "session", spec.key))
        for name in ("promote", "reconcile2", "demote", "release"):
            events.append((self.at(name), name, name))
        events.sort()
        for when, kind, key in events:
            if kind == "session":
                spec = _SESSION_BY_KEY[key]
                self.write_session(key)
                self.write_ledger(when)
                self.changelog(spec.commit)
                self.commit(when, spec.author or "jane", f"{spec.commit}\n\nSmith: reflected on "
                            f"session {_session_name(spec, self.anchor)}.")
                self.vault_commits += 1
            elif kind == "promote":
                self.write_ledger(when)
                title = _ENTRY_BY_KEY["P3"].title
                self.commit(when, "jane", f"smith-ledger: promote '{title}' to high\n\n"
                            "Every webhook test now relies on it.")
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
            elif kind == "demote":
                self.write_ledger(when)
                title = _ENTRY_BY_KEY["N2"].title
                self.commit(when, "omar", f"smith-ledger: demote '{title}' to medium\n\n"
                            "Repository unit tests now mock on purpose; keep it as a caution.")
                self.vault_commits += 1
            elif kind == "release":
                text = (p / "CHANGELOG.md").read_text(encoding="utf-8")
                text = text.replace(_UNRELEASED, f"{_UNRELEASED}## 1.14.0 ({when:%Y-%m-%d})\n\n",
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
                    f"{_session_name(_SESSION_BY_KEY['M'], self.anchor)}.")
        self.vault_commits += 1

        # Local, git-ignored state: the session pointers and the active workflow marker.
        newest = _SESSION_BY_KEY["N"]
        log = self.vault / "sessions" / f"{_session_name(newest, self.anchor)}.md"
        person = _PEOPLE[newest.author or "jane"]
        for pointer in (".current-session", f".current-session-{person.slug}"):
            _write(self.vault / pointer, f"{log}\n")
        feature = newest.branch.split("-", 1)[1]
        _write(self.vault / "active-workflows" / f"{newest.branch}.yaml", _d(f"""
            workflow: smith-{newest.skill}
            feature: {feature}
            branch: {newest.branch}
            worktree: /tmp/smith-{feature}
            session_log: {log}
            started: "{_session_start(newest, self.anchor):%Y-%m-%dT%H:%M:%SZ}"
            """))

    # ------------------------------------------------------------------ turn snapshots

    def side(self, *args: str, when: dt.datetime | None = None) -> str:
        return self.git.run(f"--git-dir={self.side_repo}", f"--work-tree={self.project}", *args,
                            when=when)

    def snapshot(self, label: str, when: dt.datetime) -> None:
        self.side("add", "-A")
        tree = self.side("write-tree")
        args = ["commit-tree", tree]
        if self.side_head:
            args += ["-p", "HEAD"]
        sha = self.side(*args, "-m", label, when=when)
        self.side("update-ref", "HEAD", sha, when=when)
        self.side_head = sha
        self.snapshot_count += 1

    def apply(self, edit: _Edit, when: dt.datetime) -> None:
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
        rng = _rng(self.seed, "turns")
        self.side_repo.parent.mkdir(parents=True)
        self.side("init", "-q")
        for key, value in (("user.name", "deepseek-snapshots"),
                           ("user.email", "snapshots@codesmith.local"), ("gc.auto", "0"),
                           ("core.autocrlf", "false")):
            self.side("config", key, value)
        _write(self.side_repo / "info" / "exclude",
               "# CodeSmith built-in snapshot excludes\n.git\n.toolkit/\n.venv/\nnode_modules/\n"
               "target/\n__pycache__/\n*.pyc\n")
        alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
        m_start = _session_start(_SESSION_BY_KEY["M"], self.anchor)
        wrote_m = False
        for seq, (day, hms, prompt, steps) in enumerate(_TURNS, 1):
            when = _moment(self.anchor, day, hms)
            if not wrote_m and when > m_start:
                self.write_session("M")  # the Smith session log of that afternoon
                wrote_m = True
            snippet = prompt.split("\n", 1)[0]
            if len(snippet) > 100:
                snippet = snippet[:100] + "…"
            self.snapshot(f"pre-turn:{seq}: {snippet}", when)
            for step in steps:
                when += dt.timedelta(seconds=rng.randint(25, 140))
                if step == "tool":
                    call = "call_" + "".join(rng.choice(alphabet) for _ in range(9))
                    self.snapshot(f"tool:{call}", when)
                else:
                    for edit in step:
                        self.apply(edit, when)
            when += dt.timedelta(seconds=rng.randint(20, 90))
            self.snapshot(f"post-turn:{seq}: {snippet}", when)
            self.turn_actions.append((when, 1, "git", f"CodeSmith turn {seq} finished: "
                                                      f"{snippet[:60]}"))
