"""The demo's Smith vault: session logs, and the ledger as it stood at any moment.

The ledger's numbers follow the toolkit's own Smith rules, imported rather than restated: the
file order (:func:`toolkit.ledger.codec.confidence_rank`), the confidence recalculation
(:func:`toolkit.reconcile.confidence_for`), the token estimate (``count_words`` and
``tokens_for_words`` of :mod:`toolkit.ledger.vault.meta`) and the header of a freshly reset
file (:data:`toolkit.ledger.vault.session.FILE_TEMPLATE`). An entry's text in Form A or B is
written by the entry codec (:func:`toolkit.ledger.codec.render_entry`).
"""

from __future__ import annotations

import datetime as dt
import json
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from toolkit.demo.content import (
    ARCHIVE,
    DESCRIPTIONS,
    ENTRIES,
    ENTRY_BY_KEY,
    MOMENTS,
    OUTCOMES,
    PEOPLE,
    PROJECT,
    SESSION_BY_KEY,
    SESSIONS,
    EntrySpec,
    SessionSpec,
    keyed_choice,
    moment,
)
from toolkit.ledger import codec
from toolkit.ledger.vault.meta import count_words, tokens_for_words
from toolkit.ledger.vault.session import FILE_TEMPLATE
from toolkit.reconcile import confidence_for
from toolkit.records import LEDGER_FILES, LEDGER_TITLES

# =========================================================================== sessions


def session_start(spec: SessionSpec, anchor: dt.date) -> dt.datetime:
    return moment(anchor, spec.day, spec.time)


def session_name(spec: SessionSpec, anchor: dt.date) -> str:
    stamp = session_start(spec, anchor).strftime("%Y-%m-%d_%H%M%S")
    if spec.author is None:
        return stamp
    person = PEOPLE[spec.author]
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


def session_text(spec: SessionSpec, anchor: dt.date, rng: random.Random) -> str:
    start = session_start(spec, anchor)
    person = PEOPLE.get(spec.author or "")
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


# =========================================================================== ledger state


def render_entry(form: str, title: str, fields: Sequence[tuple[str, str]],
                 sections: Sequence[tuple[str, str]]) -> str:
    """One entry through the entry codec, without the ``---`` that opens Form B (the file
    writer places it); Form A keeps its closing ``---``."""
    return codec.render_entry(form, title, fields, sections, separator=form == "A")


@dataclass(frozen=True)
class _Line:
    when: dt.datetime
    text: str
    counts: bool  # a reflection (True) or a reconcile note (False)


@dataclass
class _State:
    key: str
    spec: EntrySpec
    lines: list[_Line]
    confidence: str

    @property
    def reflections(self) -> int:
        return sum(1 for ln in self.lines if ln.counts)

    @property
    def date(self) -> dt.date:
        return max(ln.when for ln in self.lines if ln.counts).date()


class Ledger:
    """The ledger's entries as they stood at any moment, rendered to the files' bytes."""

    def __init__(self, anchor: dt.date) -> None:
        self.anchor = anchor
        # entry key -> all its evidence lines (the ledger is rendered at ~40 moments: each
        # takes the lines up to then instead of formatting them all again)
        self._lines: dict[str, list[_Line]] = {}
        self._rendered: dict[dt.datetime, dict[str, str]] = {}

    def moment(self, name: str) -> dt.datetime:
        return moment(self.anchor, *MOMENTS[name])

    def _evidence(self, spec: EntrySpec, t: dt.datetime) -> list[_Line]:
        lines = self._lines.get(spec.key)
        if lines is None:
            lines = self._lines[spec.key] = []
            for item in spec.evidence:
                key, outcome = (item, None) if isinstance(item, str) else item
                session = SESSION_BY_KEY[key]
                when = session_start(session, self.anchor)
                if outcome is None:
                    outcome = keyed_choice(OUTCOMES[spec.file], spec.key, key).format(
                        feat=session.feat)
                name = session_name(session, self.anchor)
                lines.append(_Line(when, f"- {when:%Y-%m-%d} -- session {name}: {outcome}",
                                   True))
        return [ln for ln in lines if ln.when <= t]

    def state(self, t: dt.datetime) -> dict[str, list[_State]]:
        files: dict[str, list[_State]] = {kind: [] for kind in LEDGER_FILES}
        for spec in ENTRIES:
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
                    other = ENTRY_BY_KEY[other_key]
                    lines += self._evidence(other, t)
                    lines.append(_Line(when, f'- {when:%Y-%m-%d} — reconcile merge: absorbed '
                                             f'"{other.title}"', False))
            lines.sort(key=lambda ln: ln.when)
            count = sum(1 for ln in lines if ln.counts)
            confidence = confidence_for(count)
            last = max(ln.when for ln in lines)
            for when_name, conf in spec.overrides:
                when = self.moment(when_name)
                if last < when <= t:
                    confidence = conf
            files[spec.file].append(_State(spec.key, spec, lines, confidence))
        for entries in files.values():
            entries.sort(key=lambda s: (codec.confidence_rank(s.confidence), -s.date.toordinal(),
                                        s.spec.title))
        return files

    # ------------------------------------------------------------------ rendering

    @staticmethod
    def _related(spec: EntrySpec) -> str:
        if not spec.related:
            return "None"
        parts = [f"See {ENTRY_BY_KEY[k].file}.md: '{ENTRY_BY_KEY[k].title}'"
                 for k in spec.related]
        return "; ".join(parts)

    def _render(self, st: _State) -> str:
        spec = st.spec
        fields = [("Date", f"{st.date:%Y-%m-%d}")]
        if spec.category:
            fields.append(("Category", spec.category))
        fields.append(("Confidence", st.confidence))
        if spec.form == "A":
            dates = sorted({f"{ln.when:%Y-%m-%d}" for ln in st.lines if ln.counts})
            fields += [("Observations", str(st.reflections)),
                       ("Source reflections", ", ".join(dates))]
        else:
            fields.append(("Source reflections", str(st.reflections)))
        sections = [("Context", spec.context), ("Pattern", spec.pattern),
                    ("Evidence", "\n".join(ln.text for ln in st.lines)),
                    ("Related", self._related(spec))]
        return render_entry(spec.form, spec.title, fields, sections)

    @staticmethod
    def header(kind: str, style: str) -> str:
        title = LEDGER_TITLES[kind]
        if style == "reset":
            return FILE_TEMPLATE.format(title=title)
        return (f"# Ledger: {title}\n\n{DESCRIPTIONS[kind]}\n\n<!-- Entries are sorted: high "
                f"confidence first, then medium, then low. Within same confidence, most recent "
                f"first. -->\n")

    def render_file(self, kind: str, entries: list[_State]) -> str:
        # edge-cases.md kept the header /smith-ledger reset wrote; reflect rewrote the others.
        text = self.header(kind, "reset" if kind == "edge-cases" else "reflect")
        prev = None
        for st in entries:
            # A Form B entry opens with a --- separator unless a Form A entry's closes above.
            lead = "\n" if "A" in (st.spec.form, prev) else "\n---\n\n"
            text += lead + self._render(st)
            prev = st.spec.form
        return text

    def render(self, t: dt.datetime) -> dict[str, str]:
        """The five .md files, meta.yaml and .meta.json as they stood at ``t``."""
        if t not in self._rendered:  # (the reconcile log renders the same two moments often)
            self._rendered[t] = self._render_at(t)
        return dict(self._rendered[t])

    def _render_at(self, t: dt.datetime) -> dict[str, str]:
        state = self.state(t)
        out = {f"{kind}.md": self.render_file(kind, state[kind]) for kind in LEDGER_FILES}
        reflected = [s for s in SESSIONS
                     if s.reflect and session_start(s, self.anchor) <= t]
        dist = {"high": 0, "medium": 0, "low": 0}
        for entries in state.values():
            for st in entries:
                dist[st.confidence] += 1
        last = max(session_start(s, self.anchor) for s in reflected).date()
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
        for spec in ENTRIES:
            times = sorted(ln.when for ln in self._evidence(spec, t))
            n += sum(1 for when in times[1:] if since is None or when > since)
        return n

    def meta_json(self, t: dt.datetime, state: dict[str, list[_State]],
                  files: dict[str, str]) -> str:
        recon = [self.moment(n) for n in ("reconcile1", "reconcile2") if self.moment(n) <= t]
        last_recon = recon[-1] if recon else None
        violations = sum(1 for s in SESSIONS if s.violation
                         and (last_recon is None or session_start(s, self.anchor) > last_recon)
                         and session_start(s, self.anchor) <= t)
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
            merged, absorbed = ENTRY_BY_KEY["P4"], ENTRY_BY_KEY["P4b"]
            pruned = ENTRY_BY_KEY["N12"]
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
        for old in ARCHIVE:
            specs = [SESSION_BY_KEY[k] for k in old.sessions]
            dates = [f"{session_start(s, self.anchor):%Y-%m-%d}" for s in specs]
            evidence = [f"- {d} -- session {session_name(s, self.anchor)}: seen in {s.feat}"
                        for d, s in zip(dates, specs, strict=True)]
            by_file[old.file].append(render_entry("A", old.title, [
                ("Date", dates[-1]), ("Category", old.category),
                ("Confidence", old.confidence), ("Observations", str(len(specs))),
                ("Source reflections", ", ".join(dates))], [
                ("Context", old.context), ("Pattern", old.pattern),
                ("Evidence", "\n".join(evidence)), ("Related", "None")]))
        out = {}
        for kind in LEDGER_FILES:
            out[f"{kind}.md"] = self.header(kind, "reset") + "".join(
                "\n" + text for text in by_file[kind])
        last = max(session_start(SESSION_BY_KEY[k], self.anchor) for k in ("L1", "L2"))
        counts = {kind: sum(1 for a in ARCHIVE if a.file == kind) for kind in LEDGER_FILES}
        meta = ["# Ledger overview (written by /smith-ledger)",
                f'last_reflection: "{last:%Y-%m-%d}"', "total_reflections: 2",
                f"total_entries: {len(ARCHIVE)}", "config:", "  low_confidence_prune_days: 30",
                "  medium_confidence_demote_days: 90", "entries_by_file:",
                *(f"  {kind}: {counts[kind]}" for kind in LEDGER_FILES)]
        out["meta.yaml"] = "\n".join(meta) + "\n"
        return out


def _tokens(files: dict[str, str]) -> int:
    """The seed's estimate for the five ledger files: words x 1.3."""
    return tokens_for_words(sum(count_words(files[f"{kind}.md"]) for kind in LEDGER_FILES))

