"""The meta files beside the ledger: ``meta.yaml`` (counts, edited in place in whichever of the
three schemas it uses) and ``.meta.json`` (signals, the lock field), read in one place
(:func:`read_meta_json`), and the seed's token estimate."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from toolkit.errors import DataError
from toolkit.ledger.codec import BOM
from toolkit.records import LEDGER_FILES
from toolkit.safewrite import FileSnapshot
from toolkit.sources.smith import recorded_key

_WORDS_PART = 1 << 18  # count_words splits a big text a part of about this size at a time
# (a part's words as a list are about 8 times its size: a 1 MB part added 12 MB to the peak of
# a 50,000-entry load, whose parse is then all in memory; 256 KB parts take half the CPU time)


def count_words(data: bytes | str) -> int:
    """Whitespace-separated words (the seed's token estimate is words x 1.3). A big text is
    counted a part at a time, each cut just after a newline (a word never spans one, nor does
    a UTF-8 sequence), so a 30 MB ledger is never held as a list of its 4 million words."""
    n = at = 0
    while at < len(data):
        cut = (data.find(b"\n", at + _WORDS_PART) if isinstance(data, bytes)
               else data.find("\n", at + _WORDS_PART))
        end = len(data) if cut < 0 else cut + 1
        part = data[at:end]
        n += len((part.decode("utf-8", "replace") if isinstance(part, bytes) else part).split())
        at = end
    return n


def tokens_for_words(words: int) -> int:
    """Word count x 1.3, rounded down."""
    return words * 13 // 10


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


_YAML_STD_TAGS = {f"tag:yaml.org,2002:{t}" for t in (
    "str", "int", "float", "bool", "null", "map", "seq", "timestamp", "binary", "merge",
    "omap", "pairs", "set", "value")}


def compose_yaml(text: str, path: Path) -> Any:
    """The YAML node tree (with positions) of ``text``, or a :class:`DataError` naming the
    line and column. Nothing is constructed, so no tag can run code and aliases cannot
    multiply; a tag the safe loader would refuse (``!!python/...``) is refused here too."""
    import yaml

    from toolkit.textio import check_yaml_depth, count_yaml_aliases, parse_yaml

    check_yaml_depth(text, path, hint="Flatten the nested lists or mappings; nothing was written")

    def compose(loader: type[yaml.SafeLoader]) -> Any:
        count_yaml_aliases(text, path, loader, hint="Nothing was written")
        return yaml.compose(text, Loader=loader)

    try:
        root = parse_yaml(compose)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        col = f", column {mark.column + 1}" if mark else ""
        raise DataError(f"invalid YAML{col}: {exc.problem or exc.context or 'invalid YAML'}",
                        path=path, line=mark.line + 1 if mark else None,
                        hint="Fix the YAML (spaces, not tabs; close every quote) or restore "
                             "it from a backup; nothing was written") from None
    except yaml.YAMLError as exc:
        raise DataError(f"invalid YAML: {exc}", path=path) from None
    seen: set[int] = set()
    stack = [root] if root is not None else []
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if node.tag not in _YAML_STD_TAGS:
            raise DataError(f"YAML tag {node.tag!r} is not allowed (safe loader)", path=path,
                            line=node.start_mark.line + 1,
                            hint="Remove the tag; nothing was written")
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                stack.extend((k, v))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
    return root


def update_meta_yaml(data: bytes, path: Path, *, entries: dict[str, int | None] | None,
                     confidences: dict[str, int] | None, deltas: dict[str, int] | None = None,
                     notes: list[str] | None = None) -> bytes:
    """``meta.yaml`` with its count values replaced in place (comments and format kept).

    Count keys of the three schemas are updated where present: ``total_entries`` and
    ``entries_by_file.<file>`` (smith-ledger), ``entries.<file_with_underscores>`` and
    ``confidence_distribution.{high,medium,low}`` (smith-reflect), ``<file>_recorded``
    (smith-init, what ``/smith`` scaffolds); a missing per-file key is added to a block
    mapping that exists (to the top level for smith-init). ``entries``: exact per-file counts
    (None for a file whose count is unknown) or None to leave entry counts alone;
    ``confidences``: exact totals, or None and ``deltas`` to move the recorded ones. Raises
    :class:`DataError` with line and column for invalid YAML (nothing is written then).
    """
    import yaml

    from toolkit.textio import decode_utf8

    bom = data.startswith(BOM)
    text = decode_utf8(data, path)
    root = compose_yaml(text, path)
    if root is None:
        return data
    if not isinstance(root, yaml.MappingNode):
        raise DataError("meta.yaml is not a mapping; counts cannot be updated", path=path,
                        hint="Fix the file or restore it from a backup")
    edits: list[tuple[int, int, str]] = []
    nl = "\r\n" if "\r\n" in text else "\n"

    def child(node: Any, key: str) -> Any:
        if not isinstance(node, yaml.MappingNode):
            return None
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode) and k.value == key:
                return v
        return None

    def int_of(node: Any) -> int | None:
        if isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:int":
            try:
                return int(node.value.replace("_", ""), 0) if node.value[:2].lower() in (
                    "0x", "0o", "0b") else int(node.value.replace("_", ""))
            except ValueError:
                return None
        return None

    def set_in(parent: Any, key: str, value: int | None, *, add: bool) -> None:
        if value is None or not isinstance(parent, yaml.MappingNode):
            return
        node = child(parent, key)
        if isinstance(node, yaml.ScalarNode):
            if int_of(node) != value:
                edits.append((node.start_mark.index, node.end_mark.index, str(value)))
        elif node is None and add and parent.value and not parent.flow_style:
            indent = " " * parent.value[0][0].start_mark.column
            end = parent.value[-1][1].end_mark.index
            line_end = text.find("\n", end)
            pos = len(text) if line_end < 0 else line_end + 1
            lead = "" if pos == 0 or text[pos - 1] == "\n" else nl
            edits.append((pos, pos, f"{lead}{indent}{key}: {value}{nl}"))

    by_file = child(root, "entries_by_file")
    reflect_entries = child(root, "entries")
    if entries is not None:
        for kind, count in entries.items():
            set_in(by_file, kind, count, add=True)
            set_in(reflect_entries, kind.replace("-", "_"), count, add=True)
        # the smith-init schema (what /smith scaffolds): one `<kind>_recorded` count per file
        # at the top level; Smith's prune "updates meta.yaml counts", so these are kept true
        keys = [k.value for k, _v in root.value if isinstance(k, yaml.ScalarNode)]
        if any(k.endswith("_recorded") or k in ("workflows_completed", "created")
               for k in keys):
            for kind, count in entries.items():
                set_in(root, recorded_key(kind), count, add=True)
        total_node = child(root, "total_entries")
        if isinstance(total_node, yaml.ScalarNode):
            total = 0
            for kind in LEDGER_FILES:
                count = entries.get(kind)
                if count is None:
                    count = int_of(child(by_file, kind)) \
                        or int_of(child(reflect_entries, kind.replace("-", "_"))) or 0
                total += count
            set_in(root, "total_entries", total, add=False)
    dist = child(root, "confidence_distribution")
    if isinstance(dist, yaml.MappingNode):
        for conf in ("high", "medium", "low"):
            if confidences is not None:
                set_in(dist, conf, confidences.get(conf, 0), add=True)
                continue
            cur = int_of(child(dist, conf))
            delta = (deltas or {}).get(conf, 0)
            if cur is None or not delta:
                continue
            value = cur + delta
            if value < 0:
                if notes is not None:
                    notes.append(f"meta.yaml confidence_distribution.{conf} was {cur}, fewer "
                                 "than the files hold; set to 0")
                value = 0
            set_in(dist, conf, value, add=False)
    if not edits:
        return data
    out = text
    # from the end backwards; insertions at one spot go in the order they were made
    order = sorted(range(len(edits)), key=lambda n: (edits[n][0], edits[n][1], n), reverse=True)
    for n in order:
        start, end, new = edits[n]
        out = out[:start] + new + out[end:]
    return (BOM if bom else b"") + out.encode("utf-8")


def update_meta_json(data: bytes, path: Path, updates: dict[str, Any]) -> bytes:
    """``.meta.json`` with ``updates`` applied, keeping every other key and, where it can, the
    file's own layout (values are replaced in place; a file it cannot edit in place is
    re-written with two-space indentation)."""
    from toolkit.textio import decode_utf8, load_json

    bom = data.startswith(BOM)
    text = decode_utf8(data, path) if data.strip() else "{}"
    current = load_json(text, path)
    if not isinstance(current, dict):
        raise DataError("expected a JSON object", path=path,
                        hint="Fix the file or restore it from a backup")
    wanted = dict(current)
    wanted.update(updates)
    if wanted == current and all(type(current.get(k)) is type(v) for k, v in updates.items()):
        return data
    out = text
    ok = True
    decoder = json.JSONDecoder()
    for key, value in updates.items():
        if key not in current:
            ok = False
            break
        m = re.search(r'"' + re.escape(key) + r'"\s*:\s*', out)
        if not m:
            ok = False
            break
        try:
            _, end = decoder.raw_decode(out, m.end())
        except ValueError:
            ok = False
            break
        out = out[:m.end()] + json.dumps(value, ensure_ascii=False) + out[end:]
    if ok:
        try:
            ok = json.loads(out) == wanted
        except ValueError:
            ok = False
    if not ok:
        out = json.dumps(wanted, indent=2, ensure_ascii=False) + "\n"
    return (BOM if bom else b"") + out.encode("utf-8")



def read_meta_json(path: Path, max_bytes: int | None = None, *,
                   hint: str = "Fix the file or restore it from a backup"
                   ) -> tuple[FileSnapshot | None, dict[str, Any] | None]:
    """``.meta.json`` for a writer: (its snapshot, its object), (None, None) when it does not
    exist, an empty object for an empty file. Invalid JSON or a non-object is a
    :class:`DataError` (exit 65): a writer must not drop what it cannot read."""
    from toolkit.textio import decode_utf8, load_json

    if not path.is_file():
        return None, None
    snap = FileSnapshot.read(path, max_bytes)
    if not snap.data.strip():
        return snap, {}
    data = load_json(decode_utf8(snap.data, snap.given), snap.given)
    if not isinstance(data, dict):
        raise DataError("expected a JSON object", path=snap.given, hint=hint)
    return snap, data


def meta_json_bytes(snap: FileSnapshot | None, updates: dict[str, Any],
                    new_file: Callable[[], dict[str, Any]]) -> bytes:
    """``.meta.json`` with ``updates``: edited in place when it exists (its layout and every
    other key kept), else a new file of ``new_file()``'s fields."""
    if snap is None:
        data = new_file()
        data.update(updates)
        return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    return update_meta_json(snap.data, snap.given, updates)


def write_meta_json(path: Path, updates: Callable[[dict[str, Any] | None], dict[str, Any]],
                    new_file: Callable[[], dict[str, Any]], *, hint: str) -> bytes:
    """Apply ``updates(current object)`` to ``.meta.json`` (the caller holds the OS lock);
    written only when the bytes change. Returns the file's bytes after."""
    from toolkit.safewrite import atomic_replace

    snap, data = read_meta_json(path, hint=hint)
    new = meta_json_bytes(snap, updates(data), new_file)
    if snap is None or new != snap.data:
        atomic_replace(snap if snap is not None else path, new, expected=snap)
    return new
