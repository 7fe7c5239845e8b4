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

import difflib
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

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

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


_NO_NEWLINE = "\\ No newline at end of file"


def redacted_patch(repo: Path, old: str | None, new: str) -> str:
    """The turn's diff as the redacted site shows it: each changed file redacted whole, as it
    was and as it is, then the two compared (three lines of context, as git's diff).

    Redacting the diff's own text missed what only the files show: a token hard-wrapped
    across two changed lines (each line starts with ``+`` or ``-``, which the wrap rule does
    not take) and the base64 lines of a private key whose ``BEGIN`` line is outside the
    hunk. The files' header lines (their paths) go through the redactor as text."""
    from toolkit.redact import redact

    out: list[str] = []
    for header, old_lines, new_lines in _file_sections(snap.patch(repo, old, new, whole=True)):
        out.append(redact("".join(header), fold=True))
        if old_lines is None:  # binary, or a mode change only: no lines to show
            continue
        before = redact("".join(old_lines), fold=True).splitlines(keepends=True)
        after = redact("".join(new_lines), fold=True).splitlines(keepends=True)
        for line in list(difflib.unified_diff(before, after, n=3))[2:]:  # (git's ---/+++)
            out.append(line if line.endswith("\n") else f"{line}\n{_NO_NEWLINE}\n")
    return "".join(out)


def _file_sections(text: str) -> Iterator[tuple[list[str], list[str] | None, list[str]]]:
    """Each file of a whole-file diff (:func:`toolkit.sources.snapshots.patch`, ``whole``):
    (its header lines, its lines as they were, as they are); None for a file without lines
    shown (binary, a mode change)."""
    header: list[str] = []
    old: list[str] = []
    new: list[str] = []
    in_hunk = False
    last = ""  # the kind of the hunk's line before: " ", "-" or "+"
    for line in text.splitlines(keepends=True):
        if line.startswith("diff --git "):
            if header:
                yield header, old if in_hunk else None, new
            header, old, new, in_hunk, last = [line], [], [], False, ""
        elif not in_hunk:
            if line.startswith("@@"):
                in_hunk = True
            else:
                header.append(line)
        elif line.startswith("\\"):  # the line before ends without a line break
            for side, kinds in ((old, " -"), (new, " +")):
                if last in kinds and side and side[-1].endswith("\n"):
                    side[-1] = side[-1][:-1]
        elif not line.startswith("@@"):
            last, body = line[:1], line[1:]
            if last and last in " -":
                old.append(body)
            if last and last in " +":
                new.append(body)
    if header:
        yield header, old if in_hunk else None, new


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
