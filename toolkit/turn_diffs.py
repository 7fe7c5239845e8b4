"""The diff on each turn page of the site: the same text as ``toolkit snapshots diff --patch``
(``toolkit.snapshot_ops.turn_patch``), read from CodeSmith's side repo at build time.

A turn is found by its snapshots' SHAs (the store's, which redaction leaves alone). A diff
longer than ``MAX_LINES`` lines or ``MAX_BYTES`` bytes as the page shows it (escaped) is cut
at a line boundary with a note naming the command that prints it whole. With ``--redact`` the
diff goes through ``toolkit.redact`` like every other text of the site. Diffs are cached in the
build folder by their two commits (a snapshot commit never changes), the code that makes the
patch and, redacted, the redactor's code, so a rebuild runs git only for new turns; a cache
file is a ``toolkit.parsecache`` file, so one cut short (a build killed while writing it) is a
miss.
"""

from __future__ import annotations

import hashlib
import html
from pathlib import Path
from typing import TYPE_CHECKING

from toolkit import parsecache
from toolkit.display import visible
from toolkit.parsecache import code_version
from toolkit.reports import TurnPage
from toolkit.snapshot_ops import turn_patch, turn_start
from toolkit.sources import snapshots as snap
from toolkit.textio import HUNK_HEADER

if TYPE_CHECKING:
    from collections.abc import Sequence

    from toolkit.config import Config
    from toolkit.pages import Deferred, Page

MAX_LINES = 2_000  # lines of one turn's diff shown on its page
MAX_BYTES = 250_000  # bytes of one turn's diff on its page, escaped as the page shows it


def add_diffs(cfg: Config, pages: Sequence[Page | Deferred], *, redact: bool, cache: Path
              ) -> None:
    """Fill ``diff`` and ``diff_note`` of every turn page in ``pages``."""
    todo = [p for p in pages if isinstance(p, TurnPage)]
    if not todo:
        return
    repo = snap.side_repo_for(cfg.workspace, cfg.snapshots_home)
    if not repo.is_dir():
        for p in todo:
            p.diff_note = "The snapshot repository is gone: no diff to show."
        return
    snaps = snap.list_snapshots(repo)
    by_sha = {s.sha: s for s in snaps}
    turn_of = {s.sha: t for t in snap.group_turns(snaps) for s in t.snapshots}
    used: set[str] = set()
    # a diff is cached as the code that made it made it: the patch's (a toolkit whose diffs
    # read otherwise must not reuse it) and, redacted, the redactor's (a new redactor, one
    # that finds more, must not either)
    made_by = code_version(snap.__name__, "toolkit.snapshot_ops", __name__)
    variant = f"True|{made_by}|{code_version('toolkit.redact')}" if redact else f"False|{made_by}"
    for p in todo:
        last = p.turn.shas[-1] if p.turn.shas else ""
        turn = turn_of.get(last)
        if turn is None and last in by_sha:  # a snapshot outside any turn: its own change
            s = by_sha[last]
            turn = snap.Turn(key=s.key or s.sha, turn=None, snippet=s.snippet, snapshots=(s,))
        if turn is None:
            p.diff_note = ("The snapshot repository no longer holds this turn (pruned since "
                           "the last load): run toolkit load, then build the site again.")
            continue
        start, _, _ = turn_start(turn, by_sha)
        end = turn.snapshots[-1]
        name = hashlib.sha1(f"{variant}|{start.sha if start else ''}|{end.sha}".encode()
                            ).hexdigest()
        used.add(name)
        # a parse-cache file: one cut short (a build killed while writing it) or damaged is
        # a miss, never a diff shown cut
        text = parsecache.load(cache, name, (name,))
        if not isinstance(text, str):
            text = redacted_patch(repo, start.sha if start else None, end.sha) if redact \
                else turn_patch(repo, start, end)
            parsecache.save(cache, name, (name,), text)
        how = (f"toolkit snapshots diff --turn {turn.turn} --patch" if turn.turn is not None
               else "toolkit snapshots diff N --patch (N: this snapshot's number in "
                    "toolkit snapshots)")
        p.diff, p.diff_note = cut(text, how)
    parsecache.prune(cache, used)


def redacted_patch(repo: Path, old: str | None, new: str) -> str:
    """The turn's diff as the redacted site shows it: git's diff, each of its lines taken
    from the changed file redacted whole (as it was for a removed line, as it is for the
    others), so the diff is git's, line for line, with the secrets of the files replaced.

    Redacting the diff's own text missed what only the files show: a token hard-wrapped
    across two changed lines (each line starts with ``+`` or ``-``, which the wrap rule does
    not take) and the base64 lines of a private key whose ``BEGIN`` line is outside the
    hunk. A file is redacted line for line (``redact_keeping_lines``: a key's lines each
    become ``[REDACTED]``), so git's line numbers still point at its lines. The header lines
    (paths) and the text git adds after a hunk's ``@@`` go through the redactor as text."""
    from toolkit.redact import redact, redact_keeping_lines

    plain = _sections(snap.patch(repo, old, new))
    whole = _sections(snap.patch(repo, old, new, whole=True))
    if len(plain) != len(whole):  # (the same diff twice: never; the safe answer if it were)
        return redact(snap.patch(repo, old, new), fold=True)
    out: list[str] = []
    for (header, body), (_, every) in zip(plain, whole, strict=True):
        out.append(redact("".join(header), fold=True))
        was, now = (redact_keeping_lines("".join(side), fold=True).split("\n")
                    for side in _sides(every))
        at = {"-": 0, "+": 0}  # the index of the next line of each side
        for line in body:
            end = "\n" if line.endswith("\n") else ""
            hunk = HUNK_HEADER.match(line)
            if hunk:
                at = {"-": int(hunk[1]) - 1, "+": int(hunk[3]) - 1}
                rest = line[hunk.end():].removesuffix("\n")
                out.append(hunk[0] + redact(rest, fold=True) + end)
            elif line[:1] in ("-", "+", " "):
                kind = line[:1]
                lines, i = (was, at["-"]) if kind == "-" else (now, at["+"])
                shown = lines[i] if i < len(lines) else \
                    redact(line[1:].removesuffix("\n"), fold=True)  # (never: the safe answer)
                for side in ("-", "+") if kind == " " else (kind,):
                    at[side] += 1
                out.append(kind + shown + end)
            else:  # "\ No newline at end of file"
                out.append(line)
    return "".join(out)


def _split(text: str) -> list[str]:
    """``text``'s lines, each with its ``\n``: split at ``\n`` only (git's line break), not
    at the ``\r``, form feeds or separators :meth:`str.splitlines` also breaks at."""
    lines = text.split("\n")
    return [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])


def _sections(text: str) -> list[tuple[list[str], list[str]]]:
    """Each file of a diff: (its header lines, its hunks' lines)."""
    files: list[tuple[list[str], list[str]]] = []
    for line in _split(text):
        if line.startswith("diff --git ") or not files:
            files.append(([line], []))
        elif files[-1][1] or line.startswith("@@"):
            files[-1][1].append(line)
        else:
            files[-1][0].append(line)
    return files


def _sides(body: list[str]) -> tuple[list[str], list[str]]:
    """A whole-file diff's hunk lines (:func:`toolkit.sources.snapshots.patch`, ``whole``):
    the file's lines as they were and as they are."""
    old: list[str] = []
    new: list[str] = []
    last = ""
    for line in body:
        kind = line[:1]
        if kind in ("-", "+", " "):
            if kind != "+":
                old.append(line[1:])
            if kind != "-":
                new.append(line[1:])
            last = kind
        elif kind == "\\":  # the line before ends without a line break
            for side, kinds in ((old, " -"), (new, " +")):
                if last and last in kinds and side:
                    side[-1] = side[-1].removesuffix("\n")
    return old, new


def cut(text: str, how: str) -> tuple[str, str]:
    """A diff cut to ``MAX_LINES`` lines and ``MAX_BYTES`` bytes as shown (escaped, invisible
    characters spelled out), and the note saying so (empty when the diff is whole; a note
    for an empty diff)."""
    if not text:
        return "", "This turn changed no file."
    lines = text.splitlines(keepends=True)
    kept: list[str] = []
    size = 0
    for line in lines[:MAX_LINES]:
        size += len(html.escape(visible(line), quote=True).encode("utf-8"))
        if size > MAX_BYTES:
            break
        kept.append(line)
    if len(kept) == len(lines):
        return text, ""
    return "".join(kept), (f"The diff is cut: {len(kept):,} of its {len(lines):,} lines are "
                           f"shown. The whole diff: {how}")
