"""A page per turn on the site (issue 15 item 6): its prompt, snapshots, files, the diff of
``toolkit snapshots diff --patch`` (escaped, cut with a note when huge) and its audit actions;
the snapshots overview links to every turn page. Real git side repos, real MkDocs builds."""

from __future__ import annotations

import datetime as dt
import html
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests._history_helpers import SideRepo
from tests.conftest import isolate
from tests.test_secrets_in_links import STANDARD, _secret_part
from toolkit import config as config_mod
from toolkit import parsecache, turn_diffs
from toolkit.display import visible
from toolkit.loaders import SOURCES
from toolkit.site import build_site
from toolkit.snapshot_ops import turn_diff
from toolkit.store import Store

HOSTILE = ("<script>alert('diff')</script>\n[x](javascript:alert(1)) **bold** {{ 7*7 }} "
           "{% raw %} --8<-- \"/etc/hostname\"\n<img src=x onerror=alert(2)>\n# not a heading\n"
           "\u202eevil\n")


def _env(home: Path) -> dict[str, str]:
    """The build's environment: these tests look at the turn pages, not the analyses (so no
    kernel runs, as tests/conftest.py has it for the suite)."""
    return {"HOME": str(home), "TOOLKIT_ANALYSES": "0"}


def _build(root: Path, home: Path, redact: bool = False, out: Path | None = None) -> Path:
    cfg = config_mod.resolve(cwd=root, env=_env(home))
    with Store.open(cfg.db_path, sources=SOURCES) as store:
        store.refresh(cfg)
        result = build_site(cfg, store, build_time=dt.datetime(2026, 5, 10, tzinfo=dt.UTC),
                            redact=redact, out=out)
    assert result.warnings == []
    return result.out


def _workspace(tmp_path: Path, home: Path) -> tuple[Path, SideRepo]:
    root = tmp_path / "acme"
    (root / ".smith" / "vault").mkdir(parents=True)
    (root / ".gitignore").write_text(".toolkit/\n")
    side = SideRepo.create(root, home / ".codesmith" / "snapshots")
    return root, side


def _diff_shown(page_html: str) -> str:
    [block] = re.findall(r'<pre class="tk-code"><code>(.*?)</code></pre>', page_html, re.S)
    return html.unescape(block)


@dataclass
class Turns:
    """A workspace whose snapshots hold four turns, and its site (read it only)."""

    root: Path
    home: Path
    site: Path

    def page(self, turn: int) -> str:
        return (self.site / "snapshots" / "turns" / f"turn-{turn}" / "index.html").read_text(
            encoding="utf-8")


SECRET = STANDARD[0]


@pytest.fixture(scope="module")
def turns(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Turns]:
    """Turns 1 and 2: hostile file names, contents and prompts; turn 3: a diff too big to show
    whole; turn 4: a secret in a file. The site is built once, for the tests that read it."""
    base = tmp_path_factory.mktemp("turns")
    with pytest.MonkeyPatch.context() as mp:
        isolate(mp, base / "home")
        root, side = _workspace(base, base / "home")
        (root / "app.py").write_text("print('one')\n")
        side.snapshot("pre-turn:1: add the app")
        (root / "app.py").write_text("print('two')\n")
        (root / "notes.md").write_text(HOSTILE)
        (root / "<img src=x onerror=alert(3)>.md").write_text("x\n")
        side.snapshot("post-turn:1: add the app")
        side.snapshot("pre-turn:2: <b>bold</b> {{ 7*7 }} prompt")
        (root / "app.py").write_text("print('three')\n")
        side.snapshot("post-turn:2: <b>bold</b> {{ 7*7 }} prompt")
        side.snapshot("pre-turn:3: generate")
        (root / "big.txt").write_text("".join(f"line {i}\n" for i in range(5000)))
        side.snapshot("post-turn:3: generate")
        side.snapshot("pre-turn:4: add config")
        (root / "settings.py").write_text(f"TOKEN = '{SECRET}'\n")
        side.snapshot("post-turn:4: add config")
        yield Turns(root, base / "home", _build(root, base / "home"))


def test_each_turn_has_a_page_with_the_cli_diff_and_the_overview_links_to_it(
        turns: Turns) -> None:
    site = turns.site
    overview = (site / "snapshots" / "index.html").read_text(encoding="utf-8")
    for n in (1, 2):
        assert f'href="turns/turn-{n}/"' in overview
        page = turns.page(n)
        assert 'href="../../"' in page  # back to the overview
        cfg = config_mod.resolve(cwd=turns.root, env={"HOME": str(turns.home)})
        cli = turn_diff(cfg, turn=n, with_patch=True).patch
        # the CLI's text, with control and bidi characters shown as <U+XXXX> (as everywhere)
        assert cli and _diff_shown(page) == visible(cli)
    turn1 = turns.page(1)
    assert "add the app" in turn1 and "notes.md" in turn1
    turn2 = turns.page(2)
    assert "&lt;b&gt;bold&lt;/b&gt;" in turn2 and "<b>bold</b>" not in turn2
    # the hostile file's diff is literal text: no tag, no link, no template, no heading
    assert "<script>alert" not in turn1 and "&lt;script&gt;alert(&#x27;diff&#x27;)" in turn1
    assert "<img src=x" not in turn1 and 'href="javascript' not in turn1
    assert "&lt;img src=x onerror=alert(3)&gt;.md" in turn1  # a hostile file name, as text
    assert "{{ 7*7 }}" in _diff_shown(turn1) and "49" not in _diff_shown(turn1)
    assert "**bold**" in _diff_shown(turn1) and "<strong>bold" not in turn1
    assert "<U+202E>evil" in _diff_shown(turn1) and "\u202e" not in turn1
    assert 'id="not-a-heading"' not in turn1
    # the overview no longer holds each turn's tables, and search holds no diff
    assert "print(" not in overview
    index = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))
    assert not any("print(" in d["text"] for d in index["docs"])
    assert any(d["location"].startswith("snapshots/turns/turn-1/") and "notes.md" in d["text"]
               for d in index["docs"])


def test_a_huge_diff_is_cut_with_a_note(turns: Turns) -> None:
    page = turns.page(3)
    shown = _diff_shown(page)
    assert len(shown.splitlines()) == turn_diffs.MAX_LINES
    assert "line 1990" in shown and "line 4999" not in shown
    assert "The diff is cut: 2,000 of its 5,006 lines are shown" in page
    assert "toolkit snapshots diff --turn 3 --patch" in page


def test_cut_keeps_whole_lines_within_the_character_limit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(turn_diffs, "MAX_BYTES", 25)
    text, note = turn_diffs.cut("+aaaaaaaaaa\n+bbbbbbbbbb\n+cccccccccc\n", "the command")
    assert text == "+aaaaaaaaaa\n+bbbbbbbbbb\n" and "2 of its 3 lines" in note
    # measured as the page shows it: "<" takes 4 bytes there
    assert turn_diffs.cut("+<<<<\n+<<<<\n", "x")[0] == "+<<<<\n"
    assert turn_diffs.cut("+a\n", "x") == ("+a\n", "")
    assert turn_diffs.cut("", "x") == ("", "This turn changed no file.")


def _copy_site(site: Path, out: Path) -> None:
    """A copy of a built site and its build folder at ``out`` (and ``out``.build)."""
    import shutil

    for name in ("", ".build"):
        shutil.copytree(site.with_name(site.name + name), out.with_name(out.name + name),
                        symlinks=True)


@pytest.fixture(scope="module")
def redacted(turns: Turns, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The turns site built again with --redact over a copy of the plain site and its build
    folder (the diffs the plain build kept there must not be taken). Read it only."""
    out = tmp_path_factory.mktemp("redacted") / "site"
    _copy_site(turns.site, out)
    with pytest.MonkeyPatch.context() as mp:
        isolate(mp, turns.home)
        return _build(turns.root, turns.home, redact=True, out=out)


def test_a_redacted_site_redacts_the_diffs(turns: Turns, redacted: Path) -> None:
    # the plain site shows the records
    assert _secret_part(SECRET) in _diff_shown(turns.page(4))
    page = (redacted / "snapshots" / "turns" / "turn-4" / "index.html").read_text("utf-8")
    assert _secret_part(SECRET) not in page and "[REDACTED]" in _diff_shown(page)


def test_a_redacted_diff_cached_by_another_redactor_is_not_reused(
        turns: Turns, redacted: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A redacted diff is cached as its build's redactor made it: after the redactor changes
    (a new toolkit finds more, FAULTS.md H3), the diff is redacted again, not taken from the
    cache where the older redactor left the secret."""
    out = tmp_path / "site"
    _copy_site(redacted, out)  # a redacted build's site and build folder
    cache = out.with_name("site.build") / "diff-cache"
    kept = sorted(cache.glob("*.marshal"))
    assert kept
    for diff in kept:  # what an older redactor that missed the secret kept
        text = parsecache.load(cache, diff.stem, (diff.stem,))
        assert isinstance(text, str)
        parsecache.save(cache, diff.stem, (diff.stem,), text.replace("[REDACTED]", SECRET))
    monkeypatch.setattr(turn_diffs, "code_version", lambda *modules: "a newer redactor")
    again = _build(turns.root, turns.home, redact=True, out=out)
    page = (again / "snapshots" / "turns" / "turn-4" / "index.html").read_text("utf-8")
    assert _secret_part(SECRET) not in page and "[REDACTED]" in _diff_shown(page)


def test_a_cached_diff_cut_short_is_read_from_the_side_repo_again(
        turns: Turns, tmp_path: Path) -> None:
    """A build killed while it wrote a diff into its cache leaves the file cut short: the next
    build shows every turn's diff whole, as the first build did, not what the file holds."""
    out = tmp_path / "site"
    _copy_site(turns.site, out)
    kept = sorted((out.with_name("site.build") / "diff-cache").iterdir())
    assert kept
    for diff in kept:
        with open(diff, "r+b") as fh:
            fh.truncate(diff.stat().st_size // 2)
    again = _build(turns.root, turns.home, out=out)
    for turn in (1, 2, 3, 4):
        page = (again / "snapshots" / "turns" / f"turn-{turn}" / "index.html").read_text("utf-8")
        assert page == turns.page(turn)


def test_a_side_repo_gone_since_the_load_leaves_a_note_not_a_failure(
        tmp_path: Path, isolated_env: Path) -> None:
    import shutil

    root, side = _workspace(tmp_path, isolated_env)
    side.snapshot("pre-turn:1: a")
    (root / "a.txt").write_text("a\n")
    side.snapshot("post-turn:1: a")
    cfg = config_mod.resolve(cwd=root, env=_env(isolated_env))
    with Store.open(cfg.db_path, sources=SOURCES) as store:
        store.refresh(cfg)
        shutil.rmtree(side.git_dir)  # between the load and the build
        result = build_site(cfg, store, build_time=dt.datetime(2026, 5, 10, tzinfo=dt.UTC))
    page = (result.out / "snapshots" / "turns" / "turn-1" / "index.html").read_text("utf-8")
    assert "The snapshot repository is gone: no diff to show." in page
    assert "a.txt" in page and 'class="tk-code"' not in page


def test_a_diff_cached_by_other_patch_code_is_not_reused(
        turns: Turns, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The diffs are cached by their commits, which never change, but the text is the
    toolkit's (``snapshots diff --patch``): after an upgrade whose patches read otherwise, a
    rebuild shows every turn's diff as the new code makes it, as a clean build would."""
    import toolkit.parsecache as parsecache
    import toolkit.turn_diffs as turn_diffs

    out = tmp_path / "site"
    _copy_site(turns.site, out)
    made = turn_diffs.turn_patch
    monkeypatch.setattr(turn_diffs, "turn_patch", lambda *a: made(*a) + "+ the new code\n")
    again = _build(turns.root, turns.home, out=out)
    # the same code: the cached diffs are shown
    assert "the new code" not in (again / "snapshots" / "turns" / "turn-1" / "index.html"
                                  ).read_text("utf-8")
    # the patch's code changed
    installed = parsecache.code_version
    monkeypatch.setattr(turn_diffs, "code_version", lambda *names: (
        "other" if "toolkit.snapshot_ops" in names else installed(*names)))
    again = _build(turns.root, turns.home, out=out)
    for turn in (1, 2, 4):
        page = (again / "snapshots" / "turns" / f"turn-{turn}" / "index.html").read_text("utf-8")
        assert "the new code" in page


# a private key as a config file holds it (indented under a YAML key); made up, never a key
FAKE_KEY_LINES = ["MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun",
                  "LhsQZrbDCJUH4gcOQuoCL8xWLyrT4ER8Ojq5o8E2Z0Qnb8wTHHg4UCTqThkbYqml",
                  "bTKNb5z5Vd0gK0jMSpG5jbSoZwxCKgRwYSa8S7gDhdI5mbvYxKUDBOajyNOmdyJO",
                  "7Klb2nYFsq+Vd9Hs3P2qGfPhRLXmHWiXxqNP8FTyNXw0IxARXBMsVH5rNRJu2w=="]


def test_a_redacted_diff_is_made_from_the_files_redacted_whole(tmp_path: Path) -> None:
    """The redacted site's diff takes each line from the file redacted whole, not from the
    diff's text redacted: a token hard-wrapped across two added lines (each starts with "+",
    which the wrap rule does not take) and the base64 lines of a private key whose BEGIN line
    is outside the hunk were shown. A diff holding no secret is git's, byte for byte: binary
    files, lines without a final line break, and lines holding a carriage return, a form
    feed, a line separator or text that looks like a diff's header."""
    from toolkit.redact import redact
    from toolkit.sources.snapshots import patch

    home = tmp_path / "home"
    root, side = _workspace(tmp_path, home)
    odd = "progress 50%\rdiff --git a/x b/x\n@@ -1 +1 @@\x0cform feed\u2028after\n"
    (root / "app.py").write_text("def main():\n" + "".join(f"    x{i} = {i}\n"
                                                           for i in range(20)))
    (root / "gone.txt").write_text("old\n")
    (root / "blob.bin").write_bytes(b"\0\1\2")
    (root / "last.txt").write_text("no line break at the end")
    (root / "odd.log").write_text(odd + "tail\n")
    (root / "crlf.txt").write_bytes(b"one\r\ntwo\r\n")
    s0 = side.snapshot("pre-turn:1: tidy")
    (root / "app.py").write_text("def main():\n" + "".join(f"    x{i} = {i}\n"
                                                           for i in range(20) if i != 12))
    (root / "gone.txt").unlink()
    (root / "blob.bin").write_bytes(b"\0\1\3")
    (root / "last.txt").write_text("still no line break")
    (root / "new.txt").write_text("new\n")
    (root / "odd.log").write_text(odd + "TAIL\n")
    (root / "crlf.txt").write_bytes(b"one\r\nTWO\r\n")
    s1 = side.snapshot("post-turn:1: tidy")
    # no secret: git's diff, byte for byte
    git_says = patch(side.git_dir, s0, s1)
    assert "Binary files" in git_says and "\\ No newline at end of file" in git_says
    assert "@@ def main():" in git_says  # (git's function name after the @@)
    assert turn_diffs.redacted_patch(side.git_dir, s0, s1) == git_says

    key = ("tls:\n  key: |\n    -----BEGIN RSA PRIVATE KEY-----\n"
           + "".join(f"    {line}\n" for line in FAKE_KEY_LINES)
           + "    -----END RSA PRIVATE KEY-----\n  verify: true\n")
    (root / "tls.yaml").write_text(key)
    s2 = side.snapshot("pre-turn:2: edit")
    (root / "tls.yaml").write_text(key.replace("verify: true", "verify: false"))
    (root / "notes.md").write_text("# Deploy\n\nThe key AKIAQW11XK2M\nW9PLR4TN and the token "
                                   "ghp_Zqw17Kx2mW9pLr\n4Tn8Vb3Yc6Hd1Jf5Gs0AeQ (rotate).\n")
    # a line that looks like a file's header, after a carriage return, in a changed file
    (root / "build.log").write_text("50%\rdiff --git a/x b/x\ntoken: ghp_Zqw17Kx2mW9pLr\n"
                                    "4Tn8Vb3Yc6Hd1Jf5Gs0AeQ\n")
    s3 = side.snapshot("post-turn:2: edit")
    shown = turn_diffs.redacted_patch(side.git_dir, s2, s3)
    secrets = ["AKIAQW11XK2M", "W9PLR4TN", "ghp_Zqw17Kx2mW9pLr", "4Tn8Vb3Yc6Hd1Jf5Gs0AeQ",
               *FAKE_KEY_LINES]
    assert [p for p in secrets if p in shown] == []
    assert "-  verify: true\n+  verify: false\n" in shown
    # line for line git's, the secrets' lines replaced
    git_says = patch(side.git_dir, s2, s3)
    assert len(shown.split("\n")) == len(git_says.split("\n"))
    assert [line[:1] for line in shown.split("\n")] == \
        [line[:1] for line in git_says.split("\n")]
    # the diff's own text, redacted, showed them
    assert [p for p in secrets if p in redact(patch(side.git_dir, s2, s3), fold=True)]
