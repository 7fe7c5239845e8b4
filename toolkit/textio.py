"""Careful reading of users' files: size limits, exact decoding errors, safe YAML and JSON.

Every reader goes through these helpers so that bad input (FAULTS.md A3-A8) gets the same clear,
located error everywhere: junk bytes are reported by byte offset, oversized files are refused
before they are read whole, YAML never constructs Python objects or expands alias bombs, and JSON
rejects NaN, duplicate keys and absurd nesting.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
from collections.abc import Callable, Iterator
from itertools import accumulate
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast
from urllib.parse import SplitResult, urlsplit

from toolkit.errors import DataError, TooLargeError, permission_denied

if TYPE_CHECKING:
    import yaml

# A unified diff's hunk header: "@@ -<old start>[,<count>] +<new start>[,<count>] @@"
# (difflib's and git's; git may add a function's name after it).
HUNK_HEADER = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")

DEFAULT_MAX_FILE_BYTES = 20 * 1024 * 1024
MAX_FILE_ENV = "TOOLKIT_MAX_FILE_MB"
MAX_YAML_ALIASES = 100
MAX_YAML_NODES = 100_000
MAX_JSON_DEPTH = 200
MAX_YAML_DEPTH = 200

_T = TypeVar("_T")


def max_file_bytes(override: int | None = None) -> int:
    if override is not None:
        return override
    env = os.environ.get(MAX_FILE_ENV)
    if env:
        try:
            limit = int(float(env) * 1024 * 1024)
        except (ValueError, OverflowError):  # (inf)
            limit = 0
        if limit > 0:  # a bad value is reported by toolkit.config, with what to do
            return limit
    return DEFAULT_MAX_FILE_BYTES


def value_kind(value: Any) -> str:
    """What a JSON or YAML value is, for a warning that it is not what belongs there:
    "null", "a boolean", "a number", "a list", "an object", "a string"."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, str):
        return "a string"
    return type(value).__name__


def split_url(url: str) -> SplitResult | None:
    """``urlsplit(url)``, or None for text it cannot split (an unclosed ``[`` of an IPv6
    host raises ValueError there): every URL the toolkit reads from a setting, an option or
    a file is split here, so such text is no URL, never a traceback."""
    try:
        return urlsplit(url)
    except ValueError:
        return None


def within(path: str | Path, root: str | Path, *, strictly: bool = False) -> bool:
    """Whether ``path`` is ``root`` or below it (``strictly``: below it only), every symbolic
    link on the way of either resolved: the one test of the toolkit's walls (FAULTS G3, G6),
    for writes that must stay inside the folder the user gave and reads that say when they
    leave it."""
    real, top = os.path.realpath(path), os.path.realpath(root)
    below = real.startswith(top.rstrip(os.sep) + os.sep)
    return below or (not strictly and real == top)


def _size_text(n: float, decimals: int) -> str:
    for unit, scale in (("MB", 1024 * 1024), ("KB", 1024)):
        if n >= scale:
            value = n / scale
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.{decimals}f} {unit}"
    return f"{n:.0f} bytes"


def too_large(path: Path, size: int, limit: int) -> TooLargeError:
    """The error for a file of ``size`` bytes over the ``limit``: both in the unit that shows
    them (a limit of 0.005 MB is "5.1 KB", not "0 MB"), with how to raise the limit."""
    return TooLargeError(
        f"file is {_size_text(size, 1)}, over the {_size_text(limit, 1)} limit", path=path,
        hint=f"Raise the limit with {MAX_FILE_ENV}=<MB> or `max_file_mb:` in toolkit.yaml")


def read_bytes(path: Path, limit: int | None = None) -> bytes:
    """Read a whole file, refusing it before reading when it is larger than the limit."""
    limit = _readable(path, limit)
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:  # unreadable (permissions), or gone since the stat
        raise _unreadable(path, exc) from None
    if len(data) > limit:  # grew while we read it
        raise TooLargeError("file grew past the size limit while being read", path=path)
    return data


def read_chunks(path: Path, limit: int | None = None, chunk: int = 1 << 20
                ) -> Iterator[bytes]:
    """A file's bytes ``chunk`` at a time (a reader that needs to see them once, never all
    held), refused as :func:`read_bytes` refuses it; read when iterated."""
    limit = _readable(path, limit)
    try:
        with open(path, "rb") as fh:
            read = 0
            while more := fh.read(min(chunk, limit + 1 - read)):
                read += len(more)
                if read > limit:  # grew while we read it
                    raise TooLargeError("file grew past the size limit while being read",
                                        path=path)
                yield more
    except OSError as exc:  # unreadable (permissions), or gone since the stat
        raise _unreadable(path, exc) from None


def _unreadable(path: Path, exc: OSError) -> DataError:
    """A file that could not be read: a permission denied names what to change (exit 1,
    :func:`toolkit.errors.permission_denied`); anything else is the file's problem (65)."""
    if exc.errno == errno.EACCES:
        return permission_denied(path)
    return DataError(f"cannot read: {exc.strerror}", path=path)


def not_regular(mode: int) -> str | None:
    """What a file of this ``st_mode`` is, when it is not a regular file (every reader and
    writer says it so): None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "is a folder, not a file"
    return "is not a regular file (a FIFO, socket or device)"


def _readable(path: Path, limit: int | None) -> int:
    """The size limit, once ``path`` is a regular file within it (else :class:`DataError`)."""
    limit = max_file_bytes(limit)
    try:
        st = os.stat(path)
    except OSError as exc:
        raise _unreadable(path, exc) from None
    what = not_regular(st.st_mode)  # (opening a FIFO would wait for a writer forever)
    if what:
        raise DataError(what, path=path)
    if st.st_size > limit:
        raise too_large(path, st.st_size, limit)
    return limit


def decode_utf8(data: bytes, path: Path | str) -> str:
    """Decode UTF-8 (a BOM is allowed and dropped), naming the byte offset of the first junk."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    nul = data.find(b"\x00")
    if nul >= 0:
        raise DataError(f"NUL byte at byte offset {nul}; this is not a text file", path=path,
                        hint="Restore the file from a backup or remove the binary junk")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(
            f"invalid UTF-8 at byte offset {exc.start}",
            path=path,
            hint="Save the file as UTF-8 or restore it from a backup",
        ) from None


def check_utf8(data: bytes, path: Path | str) -> None:
    """Raise :class:`DataError` (with the byte offset) unless ``data`` is UTF-8 text without
    NUL bytes: the same verdict as :func:`decode_utf8`, without building the decoded text
    (decoded a MB at a time, so a big file's whole text never exists; a sequence cut at the
    end of a part is decoded with the next)."""
    import codecs

    if b"\x00" in data or data.isascii():
        if b"\x00" in data:
            decode_utf8(data, path)  # raises with the offset
        return
    decode = codecs.utf_8_decode  # the codec itself: a fifth quicker than an incremental one
    step = 1 << 20
    view = memoryview(data)
    pos, size = 0, len(data)
    try:
        while True:
            final = pos + step >= size
            pos += decode(view[pos:pos + step], "strict", final)[1]
            if final:
                return
    except UnicodeDecodeError:
        decode_utf8(data, path)  # raises with the exact offset


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def lone_surrogate(text: str) -> str | None:
    """The first lone UTF-16 surrogate in ``text`` as a JSON escape (``\\ud800``), or None.

    JSON text can carry one (``"\\ud800"``) and Python reads it, and undecodable bytes in an
    argument arrive as one; it has no UTF-8 form, so nothing can write it."""
    m = _LONE_SURROGATE.search(text)
    return None if m is None else f"\\u{ord(m.group()):04x}"


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")


def json_surrogate_free(text: str) -> bool:
    """True when no string parsed from this JSON text can hold a lone surrogate: the text has
    none of its own and no ``\\udXXX`` surrogate escape (a paired one counts too: the answer
    may be False when there is none, never True when there is one). A few whole-text scans,
    so readers can skip searching every string."""
    if _SURROGATE_ESCAPE.search(text):
        return False
    if text.isascii():
        return True
    try:
        text.encode("utf-16-le")  # refuses a lone surrogate, and is the quickest scan for one
    except UnicodeEncodeError:
        return False
    return True


def as_text(value: Any) -> Any:
    """``value`` with every lone surrogate (in strings and keys, at any depth) shown as U+FFFD:
    what a reader hands on (display, the store, JSON output) must be text. Files are not
    changed; readers that must report the surrogate look for it first (``lone_surrogate``)."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [as_text(v) for v in value]
    if isinstance(value, dict):
        return {as_text(k): as_text(v) for k, v in value.items()}
    return value


def read_text(path: Path, limit: int | None = None) -> str:
    return decode_utf8(read_bytes(path, limit), path)


_YAML_BREAKS = re.compile("\r\n?|[\x85\u2028\u2029]")
_YAML_QUOTED = {'"': re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL),
                "'": re.compile(r"'[^']*(?:''[^']*)*'")}
_WS = " \t\r\n"


def _yaml_open(blocks: list[tuple[int, str]], col: int, kind: str) -> None:
    """Open a block collection of ``kind`` at ``col`` unless it continues the innermost one
    (PyYAML's indents, plus a sequence written at its mapping's own column)."""
    if blocks and blocks[-1][0] == col:
        if blocks[-1][1] == kind:
            return
        if kind == "map":  # a key after an indentless sequence: back in its mapping
            blocks.pop()
            if blocks and blocks[-1] == (col, "map"):
                return
    blocks.append((col, kind))


def _yaml_plain_end(text: str, i: int, line: int, flow: int,
                    indent: int) -> tuple[int, int, bool]:
    """Where the plain scalar starting at ``i`` (on the line starting at ``line``) ends, as
    PyYAML's ``scan_plain`` decides: (offset, start of its line, whether only spaces precede
    it on that line)."""
    n = len(text)
    while True:
        while i < n and text[i] not in _WS:
            ch = text[i]
            if ch == ":" and (i + 1 >= n or text[i + 1] in _WS
                              or (flow and text[i + 1] in ",[]{}")):
                return i, line, False
            if flow and ch in ",?[]{}":
                return i, line, False
            i += 1
        while i < n and text[i] in " \t\r":
            i += 1
        if i >= n or text[i] == "#":
            return i, line, False
        if text[i] != "\n":
            continue
        while i < n and text[i] == "\n":  # line breaks: the scalar may go on below
            line = i + 1
            i = line
            while i < n and text[i] in " \t\r":
                i += 1
        if i >= n:
            return i, line, True
        if (text[i] == "#" or (not flow and i - line <= indent)
                or (i == line and text.startswith(("---", "..."), i)
                    and text[i + 3:i + 4] in ("", " ", "\t", "\n"))):
            return i, line, True


def _yaml_block_scalar_end(text: str, i: int, indent: int) -> int:
    """The start of the first line after the block scalar (``|`` or ``>``) at ``i``."""
    n = len(text)
    j = i + 1
    step = 0
    while j < n and text[j] in "+-123456789":
        if text[j].isdigit():
            step = int(text[j])
        j += 1
    k = text.find("\n", j)
    if k < 0:
        return n
    k += 1
    if step:
        body = indent + step if indent >= 0 else step
    else:  # PyYAML: the most spaces on the leading blank lines and the first content line
        body, p = max(indent + 1, 1), k
        while p < n:
            s = p
            while p < n and text[p] == " ":
                p += 1
            body = max(body, p - s)
            if p < n and text[p] == "\n":
                p += 1
                continue
            break
    while k < n:
        s = k
        while k < n and text[k] == " ":
            k += 1
        if k < n and text[k] not in "\r\n" and k - s < body:
            return s
        nl = text.find("\n", k)
        k = n if nl < 0 else nl + 1
    return n


def _yaml_too_deep(text: str, limit: int = MAX_YAML_DEPTH) -> int | None:
    """The offset where YAML collections first nest deeper than ``limit``, else None.

    One pass, linear in the text, reading it the way PyYAML's scanner does (flow collections,
    block collections by indentation and their ``-``/``?``/``:`` indicators; quoted, plain
    and block scalars and comments skipped), so deep input is refused before the parser,
    which slows down quadratically and recurses, ever sees it. ``text`` has ``\n`` breaks.
    """
    n = len(text)
    flow = 0
    blocks: list[tuple[int, str]] = []  # (column, "map" | "seq") of open block collections
    key = -1  # column of the token that would be a simple key, if a ":" follows
    line = 0  # offset where the current line starts
    fresh = True  # no token yet on this line
    i = 1 if text.startswith("\ufeff") else 0
    while i < n:
        ch = text[i]
        if ch == "\n":
            i += 1
            line, fresh, key = i, True, -1
            continue
        if ch in " \t\r":
            i += 1
            continue
        if ch == "#":
            nl = text.find("\n", i)
            i = n if nl < 0 else nl
            continue
        col = i - line
        nxt = text[i + 1] if i + 1 < n else "\n"
        if fresh and not flow:
            if col == 0 and ch == "%":
                nl = text.find("\n", i)
                i = n if nl < 0 else nl
                continue
            if col == 0 and text.startswith(("---", "..."), i) and text[i + 3:i + 4] in (
                    "", " ", "\t", "\r", "\n"):
                blocks.clear()
                i += 3
                continue
            while blocks and blocks[-1][0] > col:
                blocks.pop()
        fresh = False
        start = i
        if ch in "[{":
            if not flow:
                key = col
            flow += 1
            i += 1
        elif ch in "]},":
            if ch != "," and flow:
                flow -= 1
            i += 1
        elif ch == "-" and nxt in _WS:
            if not flow:
                _yaml_open(blocks, col, "seq")
            i += 1
        elif ch in "?:" and (flow or nxt in _WS):
            if not flow:
                _yaml_open(blocks, key if ch == ":" and key >= 0 else col, "map")
                key = -1
            i += 1
        elif ch in "&!*":  # an anchor, tag or alias: up to the next space or flow indicator
            if not flow:
                key = col
            while i < n and text[i] not in _WS and not (flow and text[i] in ",[]{}"):
                i += 1
        elif ch in "|>" and not flow:
            i = _yaml_block_scalar_end(text, i, blocks[-1][0] if blocks else -1)
            line, fresh, key = i, True, -1
        elif ch in "\"'":
            if not flow:
                key = col
            m = _YAML_QUOTED[ch].match(text, i)
            end = m.end() if m else n
            nl = text.rfind("\n", i, end)
            if nl >= 0:
                line = nl + 1
            i = end
        else:
            if not flow:
                key = col
            i, line, fresh = _yaml_plain_end(text, i, line, flow,
                                             blocks[-1][0] if blocks else -1)
            if fresh:
                key = -1
        if len(blocks) + flow > limit:
            return start
    return None


def check_yaml_depth(text: str, path: Path | str,
                     hint: str = "Flatten the nested lists or mappings") -> None:
    """DataError (with the line) when YAML nests deeper than MAX_YAML_DEPTH; linear time."""
    if sum(text.count(c) for c in "[{-?:") <= MAX_YAML_DEPTH:  # each level needs one
        return
    text = _YAML_BREAKS.sub("\n", text)  # PyYAML's line breaks; the lines stay the same
    deep = _yaml_too_deep(text)
    if deep is not None:
        line = text.count("\n", 0, deep) + 1
        raise DataError(f"YAML nested deeper than {MAX_YAML_DEPTH} levels", path=path, line=line,
                        hint=hint)


def parse_yaml(parse: Callable[[type[yaml.SafeLoader]], _T]) -> _T:
    """``parse(loader)`` with libyaml's safe loader (``CSafeLoader``, about ten times faster)
    where PyYAML was built with it; when that raises, ``parse`` runs again with PyYAML's
    pure-Python ``SafeLoader``, whose error says more (the character it could not read, what
    it expected instead): an error reads the same with or without libyaml. Both build the
    same values with the same safe constructors."""
    import yaml

    fast = getattr(yaml, "CSafeLoader", None)
    if fast is not None:
        try:
            return parse(fast)
        except (yaml.YAMLError, DataError):
            pass  # said again below, in more words
    return parse(yaml.SafeLoader)


_LOADERS: dict[tuple[type, bool], type] = {}  # (a base loader, dates): its _safe_loader


def _safe_loader(base: type[yaml.SafeLoader], dates: bool = True) -> type[yaml.SafeLoader]:
    """``base`` (see :func:`parse_yaml`) reporting a value it cannot build at its node
    (``dates=False``: building no dates, which stay text). Made on first use: PyYAML is
    imported by what reads YAML, not by every command (a project without toolkit.yaml
    answers `toolkit slop query` without it)."""
    import yaml

    made: type[yaml.SafeLoader] | None = _LOADERS.get((base, dates))
    if made is not None:
        return made
    if not dates:
        text_dates = cast("type[yaml.SafeLoader]", type("_TextDates", (_safe_loader(base),), {}))
        text_dates.add_constructor("tag:yaml.org,2002:timestamp",
                                   yaml.constructor.SafeConstructor.construct_yaml_str)
        _LOADERS[(base, dates)] = text_dates
        return text_dates

    class _SafeLoader(base):
        def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
            # A value the safe constructors cannot build (2026-13-45, `!!int twelve`) raises a
            # plain ValueError (or worse) without a position: report it at the node instead.
            try:
                return super().construct_object(node, deep=deep)
            except (ValueError, TypeError, AttributeError, OverflowError) as exc:
                raise yaml.constructor.ConstructorError(
                    None, None, str(exc) or type(exc).__name__, node.start_mark) from None

    _LOADERS[(base, dates)] = _SafeLoader
    return _SafeLoader


def load_yaml(text: str, path: Path | str, *, dates: bool = True) -> Any:
    """Parse YAML with the safe loader; errors name the line and column. ``dates=False``:
    an unquoted date (``2026-11-28``) stays text, for a reader that checks its values itself
    (toolkit.yaml: ``today: 2026-13-01`` is a bad setting, exit 2, not a file YAML cannot
    read, exit 65)."""
    import yaml

    check_yaml_depth(text, path)
    try:
        return parse_yaml(lambda base: _load_yaml(text, path, _safe_loader(base, dates)))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        col = f", column {mark.column + 1}" if mark else ""
        problem = exc.problem or exc.context or "invalid YAML"
        raise DataError(f"invalid YAML{col}: {problem}", path=path, line=line,
                        hint="Fix the YAML (spaces, not tabs; close every quote)") from None
    except yaml.YAMLError as exc:
        raise DataError(f"invalid YAML: {exc}", path=path) from None
    except RecursionError:
        raise DataError("invalid YAML: nested too deeply", path=path,
                        hint="Flatten the nested lists or mappings") from None


def count_yaml_aliases(text: str, path: Path | str, loader: type[yaml.SafeLoader], *,
                       hint: str | None = None) -> int:
    """How many aliases the YAML ``text`` holds, read with ``loader``; a :class:`DataError`
    (with ``hint``) past :data:`MAX_YAML_ALIASES`, a possible alias bomb. An alias is written
    "*name": text without a "*" has none, and is not parsed for them."""
    import yaml

    aliases = 0
    for event in yaml.parse(text, Loader=loader) if "*" in text else ():
        if isinstance(event, yaml.AliasEvent):
            aliases += 1
            if aliases > MAX_YAML_ALIASES:
                raise DataError(
                    f"more than {MAX_YAML_ALIASES} YAML aliases; refusing a possible alias bomb",
                    path=path, hint=hint)
    return aliases


def _load_yaml(text: str, path: Path | str, loader: type[yaml.SafeLoader]) -> Any:
    import yaml

    aliases = count_yaml_aliases(text, path, loader)
    data = yaml.load(text, Loader=loader)  # a safe loader
    if aliases and _expanded_nodes(data, MAX_YAML_NODES) > MAX_YAML_NODES:
        raise DataError("YAML aliases expand to too many values; refusing a possible "
                        "alias bomb", path=path)
    return data


def _expanded_nodes(data: Any, limit: int) -> int:
    """How many values ``data`` has once aliases are expanded, counting no further than limit."""
    count = 0
    stack = [data]
    while stack and count <= limit:
        item = stack.pop()
        count += 1
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return count


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) == len(pairs):  # no key twice (the usual case, decided in C)
        return out
    seen: set[str] = set()
    for key, _value in pairs:
        if key in seen:
            raise ValueError(f"duplicate key {key!r}")
        seen.add(key)
    return out


def _noting_duplicates(found: list[tuple[dict[str, Any], str]]
                       ) -> Callable[[list[tuple[str, Any]]], dict[str, Any]]:
    """An ``object_pairs_hook`` that keeps the last value of a key given twice (as
    ``json.loads`` does) and notes (object, key) in ``found`` for the caller to judge."""
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out = dict(pairs)
        if len(out) != len(pairs):
            seen: set[str] = set()
            for key, _value in pairs:
                if key in seen:
                    found.append((out, key))
                seen.add(key)
        return out
    return hook


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


_JSON_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]')
# The bytes that matter to the nesting scan: quotes, brackets and 0xFF, which stands for an
# escaped quote (it never occurs in UTF-8, so it cannot be confused with the text's own bytes).
_NESTING_BYTES = bytes(c for c in range(256) if chr(c) not in '"[]{}\xff')
_ESCAPE_THAT_MATTERS = re.compile(rb'\\[\\"\n]')
# (the regex engine finds these rare backslashes quicker than bytes.replace and ``in`` do)
_BACKSLASH_PAIR = re.compile(rb"\\\\")
_ODD_BACKSLASH_AT_BREAK = re.compile(rb"\\\n")  # once the pairs are gone
_ESCAPED_QUOTE = re.compile(rb'\\"')
_KEPT_STRING = re.compile(rb'["\xff][^"]*"?')
_BRACKET_STEP = [0] * 256
for _c in b"[{":
    _BRACKET_STEP[_c] = 1
for _c in b"]}":
    _BRACKET_STEP[_c] = -1


def _depth_ok(text: str, limit: int = MAX_JSON_DEPTH) -> int | None:
    """Return the offset where nesting first exceeds the limit (outside strings), else None.

    A string token is what ``_JSON_TOKENS`` matches: from a quote to the next unescaped quote
    (or the end of the text, or an odd backslash before a line break, where ``.`` stops).
    """
    depth = 0
    for m in _JSON_TOKENS.finditer(text):
        ch = text[m.start()]
        if ch in "[{":
            depth += 1
            if depth > limit:
                return m.start()
        elif ch in "]}":
            depth -= 1
    return None


def _may_nest_deeper(text: str, limit: int = MAX_JSON_DEPTH, raw: bytes | None = None
                     ) -> bool:
    """Whether ``_depth_ok`` would find nesting deeper than ``limit``, decided with a few
    whole-buffer byte operations instead of a Python step per string: False only when it
    would not (True also when the shortcut cannot tell; ``_depth_ok`` then decides).

    Exact because a string token's bytes other than quotes and brackets only matter through
    backslashes: pairs of backslashes are content and go; an odd backslash before a quote is
    an escaped quote (0xFF: content inside a string, a string's start outside, where the
    backslash is inert); any other backslash escapes a character that is content anyway,
    except before a line break (left to ``_depth_ok``). What is left is quotes, 0xFF and
    brackets, where a string runs from a quote or 0xFF to the next quote. ``raw``: the UTF-8
    bytes ``text`` was decoded from (a BOM changes nothing), when the caller has them.
    """
    data = text.encode("utf-8", "surrogatepass") if raw is None else raw
    if _ESCAPE_THAT_MATTERS.search(data):  # else every backslash goes with the other bytes
        data = _BACKSLASH_PAIR.sub(b"", data)
        if _ODD_BACKSLASH_AT_BREAK.search(data):
            return True
        data = _ESCAPED_QUOTE.sub(b"\xff", data)
    kept = data.translate(None, _NESTING_BYTES).replace(b'""', b"")  # "" changes nothing
    if b'"' in kept or b"\xff" in kept:
        kept = _KEPT_STRING.sub(b"", kept)
    return max(accumulate(map(_BRACKET_STEP.__getitem__, kept), initial=0)) > limit


def check_json_depth(text: str, path: Path | str, raw: bytes | None = None) -> None:
    """DataError (with the line) when JSON nests deeper than MAX_JSON_DEPTH; linear time.
    ``raw``: the UTF-8 bytes ``text`` was decoded from, when the caller has them."""
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH and _may_nest_deeper(text, raw=raw):
        deep = _depth_ok(text)
        if deep is not None:
            line = text.count("\n", 0, deep) + 1
            raise DataError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels", path=path,
                            line=line)


def load_json(text: str, path: Path | str, raw: bytes | None = None,
              duplicates: list[tuple[dict[str, Any], str]] | None = None) -> Any:
    """Strict JSON: no NaN/Infinity, no duplicate keys, bounded nesting; errors with line.
    ``raw``: the UTF-8 bytes ``text`` was decoded from, when the caller has them.
    ``duplicates``: a key given twice in an object is not an error but noted there as
    (object, key), the object holding the last value, for a caller whose format allows it in
    some places (the slop ledger: serde skips unknown fields unread)."""
    check_json_depth(text, path, raw)
    hook = _no_duplicates if duplicates is None else _noting_duplicates(duplicates)
    try:
        return json.loads(text, object_pairs_hook=hook, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise DataError(f"invalid JSON, column {exc.colno}: {exc.msg}", path=path, line=exc.lineno,
                        hint="Fix the JSON or restore the file from a backup") from None
    except ValueError as exc:
        raise DataError(f"invalid JSON: {exc}", path=path) from None
    except RecursionError:
        raise DataError("JSON nested too deeply", path=path) from None


# --------------------------------------------------------------------------- JSON columns

def json_text(value: Any) -> str:
    """``value`` as the text of a JSON column: always valid JSON. A number JSON cannot hold
    (NaN or an infinity: what Python's json reads from ``NaN``, ``Infinity`` or ``1e400``
    in a source's file) is null there, as JavaScript's ``JSON.stringify`` writes it;
    :func:`non_finite` names such values for a warning."""
    try:
        return json.dumps(value, ensure_ascii=False, default=str, allow_nan=False)
    except ValueError:
        return json.dumps(_finite(value), ensure_ascii=False, default=str, allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def non_finite(value: Any, where: str = "") -> list[tuple[str, float]]:
    """Each number JSON cannot hold in ``value`` (parsed JSON), with its key path
    (``a.b[2]``): :func:`json_text` stores it as null (the store writes JSON columns with it;
    a reader warns of each with this, without importing the store)."""
    if isinstance(value, float) and not math.isfinite(value):
        return [(where, value)]
    if isinstance(value, dict):
        return [hit for k, v in value.items()
                for hit in non_finite(v, f"{where}.{k}" if where else str(k))]
    if isinstance(value, list | tuple):
        return [hit for i, v in enumerate(value) for hit in non_finite(v, f"{where}[{i}]")]
    return []
