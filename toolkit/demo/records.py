"""The demo's CodeSmith slop ledger, nagi-ledger audit DB and goal gate.

Each is written by the toolkit's own writer for that file: the slop ledger with
:mod:`toolkit.slop_ops`' serialization, CodeSmith load check and locked atomic write; the audit
DB with :func:`toolkit.audit_ops.insert_rows` (nagi-ledger's connection and DDL).
"""

from __future__ import annotations

import datetime as dt
import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit import audit_ops, slop_ops
from toolkit.demo.content import (
    ACTIONS,
    AGENTS,
    BRANCHES,
    BRANCHES_WEB,
    FILES_API,
    FILES_WEB,
    GENERIC_APPROACHES,
    GOALS,
    MODELS,
    OWNERS,
    PACKAGES,
    PINNED_DISPATCHES,
    PROJECT,
    SLOP_CLEANUP,
    SLOP_SPECIAL,
    SLOP_TEMPLATES,
    TASKS,
    TESTS_API,
    TESTS_WEB,
    VERDICT_NOTES,
    moment,
    random_stream,
)
from toolkit.records import SLOP_BUCKETS, SLOP_STATUSES

# =========================================================================== slop ledger

def _rfc3339(when: dt.datetime, rng: random.Random) -> str:
    digits = rng.choice((0, 3, 6, 9))
    base = when.strftime("%Y-%m-%dT%H:%M:%S")
    if digits:
        base += "." + "".join(str(rng.randint(0, 9)) for _ in range(digits))
    return base + "+00:00"


def slop_entries(seed: int, anchor: dt.date, count: int = 150) -> list[dict[str, Any]]:
    rng = random_stream(seed, "slop")
    start = moment(anchor, -42, "00:00:00")
    end = moment(anchor, 0, "23:59:59")
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
    special_at = {count // 3: SLOP_SPECIAL[0], (2 * count) // 3: SLOP_SPECIAL[1]}
    seen: set[str] = set()
    entries = []
    for i in range(count):
        n = rng.randint(12, 480)
        links: tuple[str, ...]
        if i in special_at:
            special = special_at[i]
            bucket, severity, confidence = special.bucket, special.severity, special.confidence
            title, description, links = special.title, special.description, special.links
        else:
            bucket, severity, confidence = buckets[i], severities[i], confidences[i]
            for _attempt in range(50):
                tmpl = rng.choice(SLOP_TEMPLATES[bucket])
                tmpl_title, tmpl_desc, tmpl_links, slots = (tmpl.title, tmpl.description,
                                                            tmpl.links, tmpl.slots)
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
            entry["owner"] = rng.choice(OWNERS)
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
            entry["cleanup_recommendation"] = rng.choice(SLOP_CLEANUP[status]).format(
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

def _ts(when: dt.datetime) -> str:
    """nagi-ledger's time text (SQLite ``datetime('now')``: UTC, no zone)."""
    return when.strftime("%Y-%m-%d %H:%M:%S")


@dataclass
class AuditRows:
    actions: list[tuple[Any, ...]] = field(default_factory=list)
    dispatches: list[tuple[Any, ...]] = field(default_factory=list)
    approaches: list[tuple[Any, ...]] = field(default_factory=list)


def _fill(template: str, rng: random.Random, project: str | None) -> str:
    web = project == "acme-web"
    pkg, v1, v2 = rng.choice(PACKAGES)
    return template.format(
        file=rng.choice(FILES_WEB if web else FILES_API),
        test=rng.choice(TESTS_WEB if web else TESTS_API),
        n=rng.randint(1, 12), m=rng.randint(40, 900), pr=rng.randint(40, 90),
        branch=rng.choice(BRANCHES_WEB if web else BRANCHES), pkg=pkg, v1=v1, v2=v2,
        ver=f"1.{rng.randint(12, 14)}.{rng.randint(0, 4)}")


def audit_rows(seed: int, anchor: dt.date, total: int,
                turn_actions: list[tuple[dt.datetime, int, str, str]]) -> AuditRows:
    rng = random_stream(seed, "audit")
    rows = AuditRows()
    start_day = -41
    n_disp = max(len(TASKS), round(total * 0.04))
    n_appr = max(20, round(total * 0.03))
    n_act = total - n_disp - n_appr
    window_end = moment(anchor, 0, "23:59:59")

    # ---------------------------------------------------------------- actions
    days = list(range(start_day, 1))
    day_weights = []
    for d in days:
        wd = (anchor + dt.timedelta(days=d)).weekday()
        day_weights.append((0.25 if wd >= 5 else 1.0) * (1.0 + (d - start_day) / 80))
    hour_weights = [1, 1, 0, 0, 0, 0, 1, 3, 8, 12, 13, 12, 8, 11, 13, 12, 10, 7, 4, 3, 2, 2, 1,
                    1]
    cats = list(ACTIONS)
    cat_weights = [ACTIONS[c].weight for c in cats]
    fixed = turn_actions[: max(0, n_act)]
    for when, tier, category, description in fixed:
        rows.actions.append((_ts(when), tier, category, description, PROJECT))
    for _ in range(n_act - len(fixed)):
        day = rng.choices(days, weights=day_weights)[0]
        hour = rng.choices(range(24), weights=hour_weights)[0]
        when = moment(anchor, day, f"{hour:02d}:{rng.randrange(60):02d}:{rng.randrange(60):02d}")
        category = rng.choices(cats, weights=cat_weights)[0]
        kind = ACTIONS[category]
        tier_w, templates = kind.tiers, kind.templates
        tier = rng.choices((0, 1, 2), weights=tier_w)[0]
        roll = rng.random()
        if category == "tool_failure":
            project = None if roll < 0.8 else PROJECT
        else:
            project = PROJECT if roll < 0.84 else (None if roll < 0.92 else "acme-web")
        rows.actions.append((_ts(when), tier, category,
                             _fill(rng.choice(templates), rng, project), project))

    # ---------------------------------------------------------------- dispatches
    tasks = list(TASKS)
    # Big DBs (benchmarks) get follow-up tasks, so no task collects hundreds of dispatches.
    for k in range(max(0, n_disp // 3 - 4 * len(TASKS))):
        task, file, test, _appr = TASKS[k % len(TASKS)]
        tasks.append((f"{task} (follow-up {k // len(TASKS) + 1})", file, test, ()))
    counts = [1] * len(tasks)
    for idx, pinned in PINNED_DISPATCHES.items():
        counts[idx] = len(pinned)
    hard = [i for i in range(len(tasks)) if i not in PINNED_DISPATCHES]
    hard = rng.sample(hard, k=min(8, len(hard)))
    free = [i for i in range(len(tasks)) if i not in PINNED_DISPATCHES]
    for _ in range(n_disp - sum(counts)):
        pick = rng.choice(hard if rng.random() < 0.6 else free)
        if counts[pick] >= 8:  # a task is retried a handful of times, not hundreds
            pick = rng.choice(free)
        counts[pick] += 1
    task_times: dict[int, list[dt.datetime]] = {}
    for i, (task, file, test, _appr) in enumerate(tasks):
        prev: str | None = None
        if i in PINNED_DISPATCHES:
            stamps = [moment(anchor, d, hms) for d, hms in PINNED_DISPATCHES[i]]
        else:
            day = rng.randint(start_day, -1)
            t = moment(anchor, day, f"{rng.randint(8, 17):02d}:{rng.randrange(60):02d}:"
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
                agent, model = rng.choice(AGENTS), rng.choice(MODELS)
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
                notes = rng.choice(VERDICT_NOTES[verdict]).format(
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
        plan.append((i, GENERIC_APPROACHES[(k // len(order) + i) % len(GENERIC_APPROACHES)]))
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


def goals(anchor: dt.date) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The active goal and the history of closed ones, with goal_gate.py's keys and times."""
    closed = []
    for g in GOALS:
        start = moment(anchor, g.day, g.time)
        closed.append({"goal": g.goal, "outcome": g.outcome, "note": g.note,
                       "created": start.isoformat(),
                       "closed": (start + dt.timedelta(hours=g.hours, minutes=7)).isoformat(),
                       "turns_used": g.turns_used})
    state = {"goal": "Deduplicate provider invoice.paid events with a unique index",
             "remaining": 6, "max_turns": 20,
             "created": moment(anchor, 0, "16:02:44").isoformat(), "extensions": 1}
    return state, closed


def write_audit_db(path: Path, rows: AuditRows) -> None:
    """The audit DB as nagi-ledger keeps it: its DDL, the rows in time order, WAL folded in."""
    audit_ops.insert_rows(path, actions=rows.actions, dispatches=rows.dispatches,
                          approaches=rows.approaches)


def write_slop_ledger(path: Path, entries: list[dict[str, Any]]) -> None:
    """A new slop ledger file, serialized as CodeSmith writes it (serde_json, two-space indent,
    no final newline) and checked to load in CodeSmith, by the slop writer's own steps."""
    slop_ops.write_ledger(path, entries)
