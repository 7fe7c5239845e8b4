"""FAULTS.md A5/I5: deeply nested YAML and JSON are refused by a pre-scan that reads the input
once, before PyYAML (whose scanner slows down quadratically with flow nesting and whose
composer recurses) or the JSON parser ever sees it; shallow documents with brackets, dashes and
colons inside their scalars still load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.conftest import tree_digest
from toolkit.errors import DataError
from toolkit.ledger import vault
from toolkit.textio import MAX_JSON_DEPTH, MAX_YAML_DEPTH, load_json, load_yaml

KB10, MB1 = 10_000, 1_000_000


def _fill(unit: str, size: int, tail: str = "x\n") -> str:
    return unit * ((size - len(tail)) // len(unit)) + tail


def _indented(size: int) -> str:  # one level per line, each line one space further in
    out, i, total = [], 0, 0
    while total < size:
        line = " " * i + f"k{i}:\n"
        out.append(line)
        total += len(line)
        i += 1
    return "".join(out) + " " * i + "v\n"


DEEP_YAML = {
    "flow sequences": lambda n: "a: " + "[" * (n // 2) + "]" * (n // 2) + "\n",
    "flow mappings": lambda n: "{a: " * (n // 5) + "1" + "}" * (n // 5) + "\n",
    "block sequences on one line": lambda n: _fill("- ", n),
    "complex keys": lambda n: _fill("? ", n),
    "block then flow": lambda n: "- " * 150 + "[" * (n // 2),
    "indented mappings": lambda n: _indented(max(n, 100_000)),  # 10 KB is only 135 deep
    "after a multi-line plain scalar": lambda n: ("a: foo\n  'bar\nb: " + "[" * (n // 2)
                                                  + "]" * (n // 2) + "\n"),
    "after a flow plain scalar with a quote": lambda n: "[a:'b, " + "[" * (n // 2) + "\n",
    "after a block scalar": lambda n: "a: |\n  text\nb: " + "[" * (n // 2) + "\n",
    "after a comment line": lambda n: "# [[[ ]\n" + "{" * (n // 2) + "\n",
}


@pytest.mark.parametrize("size", [KB10, MB1], ids=["10KB", "1MB"])
@pytest.mark.parametrize("shape", list(DEEP_YAML))
def test_deep_yaml_is_refused_by_the_pre_scan(shape: str, size: int) -> None:
    text = DEEP_YAML[shape](size)
    with pytest.raises(DataError) as err:
        load_yaml(text, "deep.yaml")
    assert str(err.value).startswith("deep.yaml:")
    assert f": YAML nested deeper than {MAX_YAML_DEPTH} levels. Flatten the nested lists or " \
        "mappings" in str(err.value)
    assert err.value.exit_code == 65


def test_the_parser_never_sees_deep_yaml(monkeypatch: pytest.MonkeyPatch) -> None:
    def parser_called(*args: object, **kw: object) -> None:
        raise AssertionError("the YAML parser ran on deep input")

    for name in ("parse", "load", "compose", "safe_load"):
        monkeypatch.setattr(yaml, name, parser_called)
    text = "a: " + "[" * 500_000 + "]" * 500_000 + "\n"
    with pytest.raises(DataError, match="YAML nested deeper than 200 levels"):
        load_yaml(text, "deep.yaml")
    with pytest.raises(DataError, match="YAML nested deeper than 200 levels"):
        vault.compose_yaml(text, Path("meta.yaml"))


def test_the_error_names_the_line_where_the_limit_is_passed() -> None:
    text = "a: 1\r\nb:\r\n  c: 2\r\nd: " + "[" * 300 + "]" * 300 + "\r\n"
    with pytest.raises(DataError) as err:
        load_yaml(text, "deep.yaml")
    assert str(err.value).startswith("deep.yaml:4: YAML nested deeper")
    text = "".join(" " * i + f"k{i}:\n" for i in range(MAX_YAML_DEPTH + 5))
    with pytest.raises(DataError) as err:
        load_yaml(text, "deep.yaml")
    assert str(err.value).startswith(f"deep.yaml:{MAX_YAML_DEPTH + 1}: YAML nested deeper")


@pytest.mark.parametrize("make", [
    lambda d: "a: " + "[" * (d - 1) + "]" * (d - 1) + "\n",  # the mapping is one level
    lambda d: "- " * d + "x\n",
    lambda d: "".join(" " * i + f"k{i}:\n" for i in range(d)) + " " * d + "v\n",
    lambda d: "k0:\n" + "".join(" " * (2 * i) + f"- k{i + 1}:\n" for i in range((d - 2) // 2))
    + " " * (d - 2) + "- x\n",  # a sequence at its mapping's own column is a level of its own
], ids=["flow", "block sequences", "mappings", "indentless sequences"])
def test_the_limit_is_exact(make) -> None:  # type: ignore[no-untyped-def]
    assert load_yaml(make(MAX_YAML_DEPTH), "ok.yaml") is not None
    with pytest.raises(DataError, match="YAML nested deeper than 200 levels"):
        load_yaml(make(MAX_YAML_DEPTH + 2), "deep.yaml")


SHALLOW_YAML = [
    # brackets, dashes and colons inside scalars are text, not nesting
    "".join(f"t{i}: 'it''s [{i}: {{ - ? '\n" for i in range(300)),
    "".join(f't{i}: "say \\"[[{{ - ? \\"[{i}"\n' for i in range(300)),
    "".join(f"t{i}: don't [open {i} {{ more\n" for i in range(300)),
    "items:\n" + "".join(f"  - title: fix [WIP {i}\n    tags: [a, {{b: c}}]\n" for i in range(300)),
    "notes: |\n" + "".join("  " + "- " * 30 + "[[[{{{\n" for _ in range(50)) + "next: 1\n",
    "folded: >-\n" + "".join("    ? : - [ {\n" for _ in range(300)) + "after: [1, 2]\n",
    "# " + "[" * 400 + "\n" + "".join(f"k{i}: v  # [{{ - ? :\n" for i in range(300)),
    "--- \n" + "".join(f"- - a{i}\n- b: [c, d]\n" for i in range(100)) + "...\n",
    "key:\n" + "".join(f"- x{i}\n" for i in range(300)) + "other: {a: [b]}\n",
    "text: first line\n  continued - with ? and [ here\n  and more: not a key [\nnext: 2\n"
    .replace("and more: not a key [", "and more not a key [") * 60,
]


@pytest.mark.parametrize("text", SHALLOW_YAML)
def test_shallow_yaml_with_indicators_in_its_text_still_loads(text: str) -> None:
    assert load_yaml(text, "ok.yaml") == _safe_load_all_first(text)


def _safe_load_all_first(text: str) -> object:
    docs = list(yaml.safe_load_all(text))
    return docs[0] if docs else None


# --------------------------------------------------------------------------- JSON

DEEP_JSON = {
    "arrays": lambda n: "[" * (n // 2) + "]" * (n // 2),
    "arrays with spaces": lambda n: "[ " * (n // 3) + "]" * (n // 3),  # no run of brackets
    "objects": lambda n: '{"a": ' * (n // 6) + "1" + "}" * (n // 6),
    "behind a string with brackets": lambda n: '["]]]]\\"]]", ' + "[" * (n // 2),
}


@pytest.mark.parametrize("size", [KB10, MB1], ids=["10KB", "1MB"])
@pytest.mark.parametrize("shape", list(DEEP_JSON))
def test_deep_json_is_refused_by_the_pre_scan(shape: str, size: int) -> None:
    with pytest.raises(DataError) as err:
        load_json(DEEP_JSON[shape](size), "deep.json")
    assert str(err.value) == f"deep.json:1: JSON nested deeper than {MAX_JSON_DEPTH} levels"


def test_json_with_many_brackets_in_strings_still_loads() -> None:
    data = {"entries": [{"title": "[" * 1000 + "{" * 1000, "n": i} for i in range(50)]}
    assert load_json(json.dumps(data), "ok.json") == data
    deep_ok = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert load_json(deep_ok, "ok.json") == json.loads(deep_ok)
    with pytest.raises(DataError, match="nested deeper"):
        load_json("[" + deep_ok + "]", "deep.json")


ESCAPED_STRINGS = {  # strings whose escapes decide where they end; brackets inside are text
    "escaped quotes": '"say \\"[[{{\\" twice \\"]]\\""',
    "escaped backslash before the closing quote": '"C:\\\\dir\\\\[", "]]]\\\\"',
    "line break escapes": '"a\\n]]\\n}}\\r\\t"',
    "unicode escapes": '"\\u005b\\u007b [ \\u0022 ]"',
}


@pytest.mark.parametrize("shape", list(ESCAPED_STRINGS))
def test_json_nesting_limit_is_exact_behind_escaped_strings(shape: str) -> None:
    head = "[\n" + ESCAPED_STRINGS[shape] + ",\n"
    ok = head + "[" * (MAX_JSON_DEPTH - 1) + "]" * (MAX_JSON_DEPTH - 1) + "]"
    assert load_json(ok, "ok.json") == json.loads(ok)
    deep = head + "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH + "]"
    with pytest.raises(DataError) as err:
        load_json(deep, "deep.json")
    assert str(err.value) == f"deep.json:3: JSON nested deeper than {MAX_JSON_DEPTH} levels"


def test_broken_json_is_scanned_as_before() -> None:
    """Not JSON, so the parser would refuse it anyway; the pre-scan still answers first, as
    it always did: a backslash before a line break ends the string token there, and a quote
    after a stray backslash outside a string opens one."""
    deep = "[" * (MAX_JSON_DEPTH + 1)
    with pytest.raises(DataError) as err:
        load_json('["text \\\n' + deep, "deep.json")
    assert str(err.value) == f"deep.json:2: JSON nested deeper than {MAX_JSON_DEPTH} levels"
    with pytest.raises(DataError) as err:  # the string runs to the end: nothing is deep
        load_json('[\\"' + deep, "x.json")
    assert "invalid JSON" in str(err.value)


# --------------------------------------------------------------------------- every entry point

DEEP = "x: " + "[" * 5000 + "]" * 5000 + "\n"


def test_deep_meta_yaml_is_a_warning_on_read_and_refuses_a_write(project, cli_run) -> None:  # type: ignore[no-untyped-def]
    meta = project.ledger / "meta.yaml"
    meta.write_text(DEEP)
    data = json.loads(cli_run("status", "--json").output)
    assert f"{meta}:1: YAML nested deeper than 200 levels" in [
        f"{w['path']}:{w['line']}: {w['message']}" for w in data["warnings"]]
    before = tree_digest(project.root)
    result = cli_run("ledger", "promote", "route table")
    assert result.exit_code == 65
    assert result.output.splitlines()[-1] == (
        f"Error: {meta}:1: YAML nested deeper than 200 levels. Flatten the nested lists or "
        "mappings; nothing was written")
    assert tree_digest(project.root) == before


def test_deep_toolkit_yaml_is_a_one_line_error(project, cli_run) -> None:  # type: ignore[no-untyped-def]
    (project.root / "toolkit.yaml").write_text(DEEP)
    result = cli_run("status")
    assert result.exit_code == 65
    assert result.output.splitlines() == [(
        f"Error: {project.root / 'toolkit.yaml'}:1: YAML nested deeper than 200 levels. "
        "Flatten the nested lists or mappings")]


def test_deep_session_frontmatter_is_reported_not_fatal(project, cli_run) -> None:  # type: ignore[no-untyped-def]
    sessions = project.root / ".smith" / "vault" / "sessions"
    (sessions / "2026-05-09-deep.md").write_text("---\n" + DEEP + "---\n\n# Session\n")
    data = json.loads(cli_run("status", "--json").output)
    assert any("YAML nested deeper than 200 levels" in w["message"] for w in data["warnings"])


def test_deep_slop_json_with_spaces_is_exit_65(project, cli_run) -> None:  # type: ignore[no-untyped-def]
    project.slop.write_text('{"entries": ' + "[ " * 3000 + "]" * 3000 + "}")
    result = cli_run("load")
    assert result.exit_code == 65
    assert result.output.splitlines()[-1] == (
        f"Error: {project.slop}:1: JSON nested deeper than 200 levels")


@pytest.mark.parametrize("reader", ["handoff", "site"])
def test_deep_toolkit_state_files_count_as_damaged(tmp_path: Path, reader: str) -> None:
    path = tmp_path / "state.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    if reader == "handoff":
        from toolkit.handoff import load_state
        assert load_state(path) == {}
    else:
        from toolkit.site import _read_state
        assert _read_state(path) == {}

