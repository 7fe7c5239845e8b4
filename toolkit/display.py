"""Showing untrusted text in a terminal: control, bidi and zero-width characters made visible.

AI-written titles may hold RTL overrides (U+202E), zero-width joiners or terminal escape codes.
Printed raw they can disguise text or drive the terminal; ``visible`` shows each as ``<U+XXXX>``
while leaving ordinary text (accents, CJK, emoji) untouched. The stored bytes never change.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

_PLACEHOLDER = "[???]"


def _needs_escape(ch: str) -> bool:
    if ch in "\n\t":
        return False
    cat = unicodedata.category(ch)
    # Cc: control (ESC, BEL...), Cf: format (bidi overrides, zero-width), Zl/Zp: separators,
    # Co/Cs/Cn: private, surrogate, unassigned.
    return cat in ("Cc", "Cf", "Zl", "Zp", "Co", "Cs", "Cn")


# The ASCII characters _needs_escape is true of: the controls (Cc) but newline and tab.
_ASCII_ESCAPED = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_TO_SPACES = str.maketrans("\n\t", "  ")
_LINE_BREAKS = re.compile(r"([\n\t])")


def visible(text: str, *, single_line: bool = False) -> str:
    """Text safe to print: invisible and control characters shown as <U+XXXX>."""
    if text.isascii():  # the common cases, fast: one line, or lines of plain ASCII
        if text.isprintable():
            return text
        if not _ASCII_ESCAPED.search(text):  # its only controls are newlines and tabs
            return text.translate(_TO_SPACES) if single_line else text
    # A printable piece holds none of the characters _needs_escape is true of (str.isprintable
    # is false exactly for Other and Separator, which include them all): only the pieces that
    # are not, between newlines and tabs, are looked at one character at a time.
    out = []
    for piece in _LINE_BREAKS.split(text):
        if piece in ("\n", "\t"):
            out.append(" " if single_line else piece)
        elif piece.isprintable():
            out.append(piece)
        else:
            out.extend(f"<U+{ord(ch):04X}>" if _needs_escape(ch) else ch for ch in piece)
    return "".join(out)


def shown(value: object) -> str:
    """A field for display: ``[???]`` when missing, made visible otherwise."""
    if value is None or value == "":
        return _PLACEHOLDER
    return visible(str(value), single_line=True)


def display_roots(project_root: Path) -> list[tuple[Path, str]]:
    """Where paths are shown from in what leaves this machine (the site, the handoff, check
    results): the project, then the home folder as ``~/``."""
    return [(project_root.resolve(), ""), (Path.home().resolve(), "~/")]
