"""Careful reading of users' files: size limits, exact decoding errors, safe YAML and JSON.

Every reader goes through these helpers so that bad input (FAULTS.md A3-A8) gets the same clear,
located error everywhere: junk bytes are reported by byte offset, oversized files are refused
before they are read whole, YAML never constructs Python objects or expands alias bombs, and JSON
rejects NaN, duplicate keys and absurd nesting.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import yaml

from toolkit.errors import DataError

DEFAULT_MAX_FILE_BYTES = 20 * 1024 * 1024
MAX_FILE_ENV = "TOOLKIT_MAX_FILE_MB"
MAX_YAML_ALIASES = 100
MAX_YAML_NODES = 100_000
MAX_JSON_DEPTH = 200


def max_file_bytes(override: int | None = None) -> int:
    if override is not None:
        return override
    env = os.environ.get(MAX_FILE_ENV)
    if env:
        try:
            limit = int(float(env) * 1024 * 1024)
        except ValueError:
            limit = 0
        if limit > 0:  # a bad value is reported by toolkit.config, with what to do
            return limit
    return DEFAULT_MAX_FILE_BYTES


def read_bytes(path: Path, limit: int | None = None) -> bytes:
    """Read a whole file, refusing it before reading when it is larger than the limit."""
    limit = max_file_bytes(limit)
    if Path(path).is_dir():
        raise DataError("is a folder, not a file", path=path)
    try:
        st = path.stat()
    except OSError as exc:
        raise DataError(f"cannot read: {exc.strerror}", path=path) from None
    if not stat.S_ISREG(st.st_mode):  # opening a FIFO would wait for a writer forever
        raise DataError("is not a regular file (a FIFO, socket or device)", path=path)
    size = st.st_size
    if size > limit:
        raise DataError(
            f"file is {size / 1024 / 1024:.1f} MB, over the {limit / 1024 / 1024:.0f} MB limit",
            path=path,
            hint=f"Raise the limit with {MAX_FILE_ENV}=<MB> or `max_file_mb:` in toolkit.yaml",
        )
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:  # unreadable (permissions), or gone since the stat
        raise DataError(f"cannot read: {exc.strerror}", path=path) from None
    if len(data) > limit:  # grew while we read it
        raise DataError("file grew past the size limit while being read", path=path)
    return data


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


def read_text(path: Path, limit: int | None = None) -> str:
    return decode_utf8(read_bytes(path, limit), path)


class _SafeLoader(yaml.SafeLoader):
    """SafeLoader that refuses alias-heavy documents (billion-laughs) before building them."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        # A value the safe constructors cannot build (2026-13-45, `!!int twelve`) raises a
        # plain ValueError (or worse) without a position: report it at the node instead.
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, TypeError, AttributeError, OverflowError) as exc:
            raise yaml.constructor.ConstructorError(
                None, None, str(exc) or type(exc).__name__, node.start_mark) from None


def load_yaml(text: str, path: Path | str) -> Any:
    """Parse YAML with the safe loader; errors name the line and column."""
    try:
        aliases = 0
        for event in yaml.parse(text, Loader=_SafeLoader):
            if isinstance(event, yaml.AliasEvent):
                aliases += 1
                if aliases > MAX_YAML_ALIASES:
                    raise DataError(
                        f"more than {MAX_YAML_ALIASES} YAML aliases; refusing a possible alias bomb",
                        path=path,
                    )
        data = yaml.load(text, Loader=_SafeLoader)  # noqa: S506 - SafeLoader subclass
        if aliases and _expanded_nodes(data, MAX_YAML_NODES) > MAX_YAML_NODES:
            raise DataError("YAML aliases expand to too many values; refusing a possible "
                            "alias bomb", path=path)
        return data
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
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _depth_ok(text: str, limit: int = MAX_JSON_DEPTH) -> int | None:
    """Return the offset where nesting first exceeds the limit (outside strings), else None."""
    depth = 0
    in_str = False
    escape = False
    for i, ch in enumerate(text):
        if in_str:
            if escape:
                escape = False
            elif ch == "\\":
                escape = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return i
        elif ch in "]}":
            depth -= 1
    return None


def load_json(text: str, path: Path | str) -> Any:
    """Strict JSON: no NaN/Infinity, no duplicate keys, bounded nesting; errors with line."""
    if ("[" * 64) in text or ("{" * 64) in text or text.count("[") + text.count("{") > 10_000:
        deep = _depth_ok(text)
        if deep is not None:
            line = text.count("\n", 0, deep) + 1
            raise DataError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels", path=path, line=line)
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise DataError(f"invalid JSON, column {exc.colno}: {exc.msg}", path=path, line=exc.lineno,
                        hint="Fix the JSON or restore the file from a backup") from None
    except ValueError as exc:
        raise DataError(f"invalid JSON: {exc}", path=path) from None
    except RecursionError:
        raise DataError("JSON nested too deeply", path=path) from None
