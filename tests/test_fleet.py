"""`toolkit fleet`: the projects a user's agents work in, and one site over them (issue 17).

The fleet is built in tmp_path by tests/_fleet_helpers.py: alpha and beta with vaults, gone
with its folder deleted, ci-only seen only in the records, and rows with no project."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests._audit_helpers import insert
from tests._fleet_helpers import (
    SHARED_TITLE,
    FleetWorld,
    fleet_build_site,
    ledger_entry,
    make_fleet,
    write_vault,
)
from tests._site_helpers import BUILD_TIME
from toolkit.config import resolve
from toolkit.fleet import normalise_title, open_fleet, recurring_knowledge


@pytest.fixture
def world(tmp_path: Path, isolated_env: Path, monkeypatch: pytest.MonkeyPatch) -> FleetWorld:
    w = make_fleet(tmp_path, isolated_env)
    for key, value in w.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)  # where toolkit-fleet.yaml is found
    return w


def _fleet(cli_run, w: FleetWorld, *args: str):  # type: ignore[no-untyped-def]
    return cli_run("fleet", "--store", str(w.store), *args)


def _open(w: FleetWorld):  # type: ignore[no-untyped-def]
    cfg = resolve(cwd=w.base, env=w.env())
    return open_fleet(cfg, store_path=w.store, fleet_file=w.fleet_file, env=w.env())


# --------------------------------------------------------------------------- fleet list

def _shown(path) -> str:
    """A path as the table shows it: cells longer than 80 characters end in an ellipsis."""
    text = str(path)
    return text if len(text) <= 80 else text[:79] + "\u2026"


def test_list_shows_every_known_project_with_its_status_and_last_activity(world, cli_run):
    result = _fleet(cli_run, world, "list")
    assert result.exit_code == 0, result.output
    lines = {ln.split()[0]: ln for ln in result.stdout.splitlines()[2:]}
    assert sorted(lines) == ["alpha", "beta", "ci-only", "gone"]
    assert lines["alpha"].split()[1:] == [_shown(world.alpha), "found", "found", "2026-05-08",
                                          "07:00:00"]  # the slop change is the latest
    assert lines["beta"].split()[1:] == [_shown(world.beta), "found", "found", "2026-05-03",
                                         "11:00:00"]
    # the folder is gone: listed as missing, never an error; its audit row still counts
    assert lines["gone"].split()[1:] == [_shown(world.gone), "missing", "-", "2026-04-02",
                                         "12:00:00"]
    assert lines["ci-only"].split()[1:] == ["-", "no", "folder", "-", "2026-05-05", "12:00:00"]


def test_list_json_gives_each_project_and_its_activity(world, cli_run):
    result = _fleet(cli_run, world, "list", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    rows = {p["name"]: p for p in data["projects"]}
    alpha = rows["alpha"]
    assert alpha["path"] == str(world.alpha) and alpha["vault"] is True
    assert alpha["origins"] == ["smith", "audit", "slop"]
    # Smith's index says 2026-05-06, the newest session log is of 2026-05-04
    assert alpha["last_session"] == "2026-05-06 09:00:00"
    assert alpha["last_action"] == "2026-05-07 10:00:00"
    assert alpha["last_slop_change"] == "2026-05-08 07:00:00"
    assert alpha["last_activity"] == "2026-05-08 07:00:00"
    assert alpha["entries_by_confidence"] == {"high": 1, "medium": 1, "low": 1, "unknown": 0}
    assert rows["beta"]["origins"] == ["fleet file", "audit", "slop"]
    assert rows["beta"]["open_debt"] == 1  # one open, one resolved
    assert rows["gone"]["status"] == "missing" and rows["gone"]["vault"] is False
    assert rows["ci-only"] == {**rows["ci-only"], "path": None, "status": "no folder",
                               "origins": ["audit"]}
    assert sorted(data["read"]) == ["alpha", "beta", "gone"] and data["unchanged"] == []


def test_the_home_folder_is_the_one_given(world, cli_run, tmp_path):
    other = tmp_path / "other-home"
    other.mkdir()
    result = cli_run("fleet", "--store", str(world.store), "list", "--json",
                     env={"HOME": str(other)})
    rows = {p["name"]: p for p in json.loads(result.stdout)["projects"]}
    # alpha and gone are in $HOME/.smith/projects.json: that home has none, so they are
    # known from the audit records only, without a folder
    assert rows["alpha"]["path"] is None and rows["alpha"]["origins"] == ["audit", "slop"]
    assert rows["gone"]["status"] == "no folder"
    assert rows["beta"]["path"] == str(world.beta)  # from the fleet file


def test_a_fleet_file_may_list_bare_paths(world, cli_run, tmp_path):
    other = tmp_path / "other.yaml"
    other.write_text(f"projects:\n  - {world.beta}\n", encoding="utf-8")
    result = _fleet(cli_run, world, "--fleet", str(other), "list", "--json")
    beta = [p for p in json.loads(result.stdout)["projects"] if p["name"] == "beta"]
    assert beta[0]["path"] == str(world.beta) and beta[0]["vault"] is True


@pytest.mark.parametrize(("text", "message"), [
    ("projects: code/beta\n", "setting projects must be a list"),
    ("projects:\n  - {name: beta, path: code/beta, colour: red}\n",
     "projects[1]: unknown key(s) colour"),
    ("projects:\n  - {name: beta, path: 3}\n", "projects[1]: path must be text"),
    ("projects:\n  - [code/beta]\n", "projects[1] must be a path or a {name, path} mapping"),
    ("project:\n  - code/beta\n", "unknown setting(s) project"),
    ("- code/beta\n", "a fleet file must be a mapping"),
    # two folders of one name: the second was listed, the first dropped without a word
    ("projects:\n  - code/beta\n  - other/beta\n",
     "projects[1] and projects[2] are both named beta"),
    ("projects:\n  - code/beta\n  - {name: beta, path: other}\n",
     "projects[1] and projects[2] are both named beta"),
])
def test_a_bad_fleet_file_is_bad_data_naming_what_is_wrong(world, cli_run, text, message):
    world.fleet_file.write_text(text, encoding="utf-8")
    result = _fleet(cli_run, world, "list")
    assert result.exit_code == 65
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("Error: ") and str(world.fleet_file) in line and message in line


@pytest.mark.parametrize("text", ['{"name": "alpha"}', '[{"name": "alpha"}]', "[1]", "not json"])
def test_a_bad_smith_index_is_bad_data(world, cli_run, text):
    (world.home / ".smith" / "projects.json").write_text(text, encoding="utf-8")
    result = _fleet(cli_run, world, "list")
    assert result.exit_code == 65
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("Error: ") and "projects.json" in line


def test_two_projects_reading_the_same_records_are_told_they_count_them_twice(
        world, cli_run, tmp_path):
    """Two folders named beta (the fleet names one beta-copy) both read the records of beta
    (their project_name): each counted beta's actions and slop, and nothing said so. fleet
    list, build-site and export now say it, on stderr, with what to change."""
    write_vault(world.base / "other" / "beta", [("Another ledger", "low")], session=False)
    world.fleet_file.write_text("projects:\n  - {name: beta, path: code/beta}\n"
                                "  - {name: beta-copy, path: other/beta}\n", encoding="utf-8")
    note = ("note: beta and beta-copy both read the records named beta as theirs (their "
            "project_name), so each counts its actions and slop entries; give each its own "
            "project_name: in its toolkit.yaml")
    listed = _fleet(cli_run, world, "list")
    assert listed.exit_code == 0 and listed.stderr.splitlines()[-1] == note, listed.output
    exported = _fleet(cli_run, world, "export", "--out", str(tmp_path / "lake"))
    assert exported.exit_code == 0 and exported.stderr.splitlines()[-1] == note
    (world.base / "other" / "beta" / "toolkit.yaml").write_text("project_name: beta-copy\n")
    assert note not in _fleet(cli_run, world, "list").stderr


def test_one_folder_listed_twice_through_a_link_is_one_project(world, cli_run):
    """The same folder reached by its path and through a link to it is one project, as before
    the two-folders-one-name check, not an error."""
    (world.base / "links").mkdir()
    (world.base / "links" / "beta").symlink_to(world.beta)
    world.fleet_file.write_text("projects:\n  - code/beta\n  - links/beta\n", encoding="utf-8")
    result = _fleet(cli_run, world, "list", "--json")
    assert result.exit_code == 0, result.output
    assert [p["name"] for p in json.loads(result.stdout)["projects"]].count("beta") == 1


def test_a_name_smiths_index_and_the_fleet_file_give_two_folders_is_noted(world, cli_run):
    """Smith's index has alpha at code/alpha; the fleet file names another folder alpha: the
    fleet keeps the fleet file's, and said nothing of the other. fleet list notes it."""
    write_vault(world.base / "other" / "alpha", [("Another ledger", "low")], session=False)
    world.fleet_file.write_text("projects:\n  - {name: beta, path: code/beta}\n"
                                "  - {name: alpha, path: other/alpha}\n", encoding="utf-8")
    listed = _fleet(cli_run, world, "list")
    assert listed.exit_code == 0, listed.output
    other = world.base / "other" / "alpha"
    assert (f"note: alpha names 2 folders: {world.alpha} (Smith's index), {other} (fleet file); "
            f"the fleet uses {other}. Give the others their own names in the fleet file "
            "({name: ..., path: ...})") in listed.stderr.splitlines()


def test_no_smith_index_and_no_fleet_file_lists_the_records_projects(world, cli_run):
    (world.home / ".smith" / "projects.json").unlink()
    world.fleet_file.unlink()
    result = _fleet(cli_run, world, "list", "--json")
    assert result.exit_code == 0, result.output
    rows = {p["name"]: p["status"] for p in json.loads(result.stdout)["projects"]}
    assert rows == {"alpha": "no folder", "beta": "no folder", "ci-only": "no folder",
                    "gone": "no folder"}


def test_a_fleet_of_no_folder_says_where_folders_come_from(world, cli_run, tmp_path):
    """With no Smith index and no fleet file, list, build-site and export found no project
    with a folder and said nothing of why ("Projects: 0 exported, 0 skipped."): each now
    notes where folders come from. The records' projects are still listed."""
    index = world.home / ".smith" / "projects.json"
    index.unlink()
    world.fleet_file.unlink()
    note = (f"note: no project with a folder is known: Smith's index ({index}) names none, "
            "and no toolkit-fleet.yaml was found here or above (nor $TOOLKIT_FLEET). List "
            "your projects' folders in a toolkit-fleet.yaml (docs/guide/fleet.md).")
    listed = _fleet(cli_run, world, "list")
    built = _fleet(cli_run, world, "build-site", "--out", str(tmp_path / "site"))
    exported = _fleet(cli_run, world, "export", "--out", str(tmp_path / "lake"))
    for result in (listed, built, exported):
        assert result.exit_code == 0, result.output
        assert note in result.stderr.splitlines()
    assert "ci-only" in listed.stdout
    assert "Projects: 0 exported, 0 skipped." in exported.stderr
    # a fleet with a folder gets no such note
    world.fleet_file.write_text("projects:\n  - name: beta\n    path: code/beta\n",
                                encoding="utf-8")
    listed = _fleet(cli_run, world, "list")
    assert listed.exit_code == 0 and "no project with a folder" not in listed.stderr


# --------------------------------------------------------------------------- refresh

def test_a_refresh_reads_only_the_project_that_changed(world):
    with _open(world) as first:
        assert sorted(first.load.read) == ["alpha", "beta", "gone"]
    with _open(world) as again:
        assert again.load.read == [] and sorted(again.load.unchanged) == ["alpha", "beta",
                                                                          "gone"]
    patterns = world.beta / ".smith" / "vault" / "ledger" / "patterns.md"
    patterns.write_text(patterns.read_text(encoding="utf-8")
                        + ledger_entry("Cache the wheels", "medium"), encoding="utf-8")
    with _open(world) as third:
        assert third.load.read == ["beta"] and sorted(third.load.unchanged) == ["alpha",
                                                                                "gone"]
        titles = [r[0] for r in third.store.fetch(
            "SELECT title FROM fleet_entries WHERE project = 'beta' ORDER BY title")[1]]
        assert titles == ["Cache the wheels", "Retry flaky network test.",
                          "Use uv for installs"]
        # alpha's rows were kept, not read again
        assert third.store.scalar(
            "SELECT count(*) FROM fleet_entries WHERE project = 'alpha'") == 3


def test_a_project_whose_folder_went_away_loses_its_entries(world):
    import shutil

    with _open(world):
        pass
    shutil.rmtree(world.beta)
    with _open(world) as again:
        assert again.load.read == ["beta"]
        assert again.store.scalar(
            "SELECT count(*) FROM fleet_entries WHERE project = 'beta'") == 0
        assert again.store.scalar(
            "SELECT status FROM fleet_projects WHERE project = 'beta'") == "missing"


# --------------------------------------------------------------------------- recurring knowledge

def test_titles_are_normalised_and_near_same_titles_grouped():
    assert normalise_title("  Retry  flaky-network TESTS!! ") == "retry flaky network tests"
    rows = [
        {"project": "a", "entry_id": "patterns/1", "file": "patterns", "title": SHARED_TITLE,
         "confidence": "high"},
        {"project": "b", "entry_id": "patterns/1", "file": "patterns",
         "title": "Retry flaky network test.", "confidence": "low"},
        {"project": "a", "entry_id": "patterns/2", "file": "patterns",
         "title": "Pin the ruff version", "confidence": "high"},
        {"project": "b", "entry_id": "patterns/2", "file": "patterns",
         "title": "Pin the mypy version", "confidence": "high"},
        {"project": "a", "entry_id": "patterns/3", "file": "patterns",
         "title": "Use uv", "confidence": "high"},
        {"project": "a", "entry_id": "patterns/4", "file": "edge-cases",
         "title": "use UV", "confidence": "low"},
    ]
    [group] = recurring_knowledge(rows)  # "use uv" twice, but in one project only
    assert group.projects == ["a", "b"]
    assert [(e["project"], e["confidence"]) for e in group.entries] == [("a", "high"),
                                                                         ("b", "low")]


# --------------------------------------------------------------------------- the site

class _Text(HTMLParser):
    """The visible text of a page's article, and its links."""

    def __init__(self) -> None:
        super().__init__()
        self.depth = 0
        self.rows: list[list[str]] = []
        self.links: list[str] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "a":
            self.links += [v for k, v in attrs if k == "href" and v]

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self.rows:
            self.rows[-1].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _page(site: Path, rel: str) -> _Text:
    parser = _Text()
    parser.feed((site / rel).read_text(encoding="utf-8"))
    return parser


@pytest.fixture
def fleet_site(world, cli_run, tmp_path) -> Path:
    """The fleet's site, built in this test's world (the test may build it again)."""
    return fleet_build_site(cli_run, world, tmp_path / "fleet-site")


def test_the_overview_has_a_card_per_project_with_its_numbers(shared_fleet_site):
    page = _page(shared_fleet_site, "index.html")
    header = next(r for r in page.rows if r and r[0] == "Project")
    assert header == ["Project", "Status", "Vault", "Entries (high / medium / low)",
                      "Over retry limit", "Pending verdicts", "Open debt", "Last activity"]
    cards = {r[0]: r[1:] for r in page.rows if r and r[0] != "Project" and len(r) == 8}
    assert cards["alpha"] == ["found", "found", "1 / 1 / 1", "0", "0", "1",
                              "2026-05-08 07:00:00"]
    assert cards["beta"] == ["found", "found", "1 / 0 / 1", "0", "0", "1",
                             "2026-05-03 11:00:00"]
    assert cards["gone"] == ["missing", "not found", "0 / 0 / 0", "0", "0", "0",
                             "2026-04-02 12:00:00"]
    # nagi-ledger's dispatches name no project: "fix login" has 2 retries, 2 dispatches wait
    assert cards["(not assigned)"][3:6] == ["1", "2", "1"]
    for rel in ("projects/alpha/", "projects/beta/", "projects/gone/", "projects/ci-only/",
                "unassigned/", "recurring/", "dispatches/", "debt/"):
        assert rel in page.links


def test_a_project_page_lists_its_entries_and_debt(shared_fleet_site):
    page = _page(shared_fleet_site, "projects/alpha/index.html")
    cells = [c for r in page.rows for c in r]
    assert SHARED_TITLE in cells and "Pin the ruff version" in cells
    assert "Entry number 1" in cells  # its open slop entry
    assert "Unowned debt" not in cells
    unassigned = [c for r in _page(shared_fleet_site, "unassigned/index.html").rows for c in r]
    assert "Unowned debt" in unassigned and "Bash: exit 1" not in unassigned  # tiers only


def test_recurring_knowledge_lists_a_title_found_in_two_ledgers(shared_fleet_site):
    page = _page(shared_fleet_site, "recurring/index.html")
    rows = [r for r in page.rows if r and r[0] == SHARED_TITLE]
    assert [(r[2], r[3], r[5]) for r in rows] == [
        ("alpha", SHARED_TITLE, "high"), ("beta", "Retry flaky network test.", "low")]
    assert all(r[1] == "2" for r in rows)
    assert "../projects/alpha/" in page.links and "../projects/beta/" in page.links


def test_retries_verdicts_and_debt_pages(shared_fleet_site):
    disp = [r for r in _page(shared_fleet_site, "dispatches/index.html").rows if len(r) == 11]
    assert ["(not assigned)", "general-purpose", "inherit", "2", "1", "1", "1", "0", "1", "1",
            "0"] in disp
    # no retry in its row, yet its one task is over the limit (counting every agent's
    # dispatches): the column says it counts the row's tasks that are
    assert ["(not assigned)", "general-purpose", "opus", "1", "1", "0", "1", "0", "0", "0",
            "1"] in disp
    assert disp[0][3:7] == ["Dispatches", "Tasks", "Retries", "Of them over the retry limit"]
    debt = {r[0]: r[1:] for r in _page(shared_fleet_site, "debt/index.html").rows if len(r) == 8}
    assert debt["beta"] == ["1", "0", "1", "0", "0", "1", "2"]
    assert debt["(not assigned)"] == ["1", "0", "0", "0", "0", "0", "1"]


def test_a_second_build_reads_nothing_and_links_resolve(world, cli_run, fleet_site):
    result = _fleet(cli_run, world, "build-site", "--out", str(fleet_site), "--build-time",
                    BUILD_TIME.isoformat())
    assert result.exit_code == 0, result.output
    assert "projects read again: 0, unchanged: 3" in result.stdout
    for html_file in fleet_site.rglob("*.html"):
        if html_file.name == "404.html":  # links from the site root, wherever it is served
            continue
        for link in _page(fleet_site, str(html_file.relative_to(fleet_site))).links:
            if re.match(r"^[a-z]+:|^#", link):
                assert not link.startswith(("http:", "https:")) or "squidfunk" in link \
                    or "mkdocs" in link, link
                continue
            target = (html_file.parent / link.split("#")[0]).resolve()
            assert target.exists(), f"{html_file}: {link}"


def test_the_redacted_fleet_site_shows_no_secret(world, cli_run, tmp_path):
    secret = "ghp_" + "R7kQ2mX9vL4pT8sW1nB6cY3hJ5dF0gA2eZ7u"  # a fake of the right shape
    insert(world.audit, "dispatches", ts="2026-05-03 10:00:00", task="t",
           agent_type=f"agent {secret}", model="inherit", brief_summary="s")
    out = tmp_path / "redacted"
    result = _fleet(cli_run, world, "build-site", "--out", str(out), "--redact")
    assert result.exit_code == 0, result.output
    text = b"".join(p.read_bytes() for p in out.rglob("*") if p.is_file())
    assert secret.encode() not in text and b"agent [REDACTED]" in text


def test_without_audit_db_or_slop_ledger_the_index_projects_are_listed(world, cli_run):
    world.audit.unlink()
    world.slop.unlink()
    result = _fleet(cli_run, world, "list", "--json")
    assert result.exit_code == 0, result.output
    rows = {p["name"]: p for p in json.loads(result.stdout)["projects"]}
    assert sorted(rows) == ["alpha", "beta", "gone"]
    # the vault's newer of Smith's last session and the session logs
    assert rows["alpha"]["last_activity"] == "2026-05-06 09:00:00"
    assert rows["gone"]["last_activity"] == "2026-04-01 08:00:00"
    # and the run says why it shows no actions and no slop entries, and where to point it
    assert result.stderr.splitlines() == [
        f"note: no slop ledger at {world.slop}, so the fleet shows no slop entries: it reads "
        "the slop ledger every command finds (--slop, slop: in the toolkit.yaml of the folder "
        "it runs in, CODESMITH_SLOP_LEDGER or CODESMITH_HOME), not the ones its projects' "
        "toolkit.yaml files name",
        f"note: no audit DB at {world.audit}, so the fleet shows no actions: it reads the audit "
        "DB every command finds (--audit-db, audit_db: in the toolkit.yaml of the folder it "
        "runs in, NAGI_LEDGER_DB), not the ones its projects' toolkit.yaml files name"]


def test_a_hostile_project_name_is_shown_as_text(world, cli_run, tmp_path):
    hostile = "<script>alert('p')</script>\u202e evil"
    insert(world.audit, "actions", ts="2026-05-03 10:00:00", tier=0, category="test",
           description="x", project=hostile)
    listed = _fleet(cli_run, world, "list")
    assert "<script>alert('p')</script><U+202E> evil" in listed.stdout  # visible, not acting
    out = tmp_path / "hostile-site"
    result = _fleet(cli_run, world, "build-site", "--out", str(out))
    assert result.exit_code == 0, result.output
    pages = [p for p in out.rglob("*.html")]
    assert not any(b"<script>alert(" in p.read_bytes() for p in pages)
    [page] = [p for p in (out / "projects").iterdir() if p.name.startswith("script-alert")]
    assert "&lt;script&gt;alert" in (page / "index.html").read_text(encoding="utf-8")


def test_a_secret_in_a_project_name_never_reaches_a_page_path(world, cli_run, tmp_path):
    key = "R7kQ2mX9vL4pT8sW1nB6cY3hJ5dF0gA2eZ7u"
    insert(world.audit, "actions", ts="2026-05-03 10:00:00", tier=0, category="test",
           description="x", project=f"leak ghp_{key}")
    out = tmp_path / "plain-site"
    result = _fleet(cli_run, world, "build-site", "--out", str(out))
    assert result.exit_code == 0, result.output
    paths = [str(p.relative_to(out)) for p in out.rglob("*")]
    assert any(p.startswith("projects/leak-") for p in paths)
    assert not any(key.lower() in p.lower() for p in paths)
    index = (out / "index.html").read_text(encoding="utf-8")
    hrefs = re.findall(r'href="([^"]*)"', index)
    assert not any(key.lower() in h.lower() for h in hrefs)


def test_a_project_with_a_bad_toolkit_yaml_is_listed_with_the_error(world, cli_run):
    (world.alpha / "toolkit.yaml").write_text("colour: red\n", encoding="utf-8")
    result = _fleet(cli_run, world, "list", "--json")
    assert result.exit_code == 0, result.output
    rows = {p["name"]: p for p in json.loads(result.stdout)["projects"]}
    assert rows["alpha"]["status"] == "error" and "unknown setting(s) colour" in \
        rows["alpha"]["note"]
    assert rows["alpha"]["entries"] == 0 and rows["beta"]["entries"] == 2


def test_a_project_path_that_is_a_file_is_missing_and_the_others_are_read(world, cli_run,
                                                                         tmp_path):
    world.gone.parent.mkdir(parents=True, exist_ok=True)
    world.gone.write_text("not a folder\n", encoding="utf-8")
    result = _fleet(cli_run, world, "list", "--json")
    assert result.exit_code == 0, result.output
    rows = {p["name"]: p for p in json.loads(result.stdout)["projects"]}
    assert rows["gone"]["status"] == "missing" and rows["gone"]["note"] == \
        "the project path is a file, not a folder"
    assert rows["alpha"]["status"] == rows["beta"]["status"] == "found"
    exported = _fleet(cli_run, world, "export", "--out", str(tmp_path / "lake"))
    assert exported.exit_code == 0, exported.output
    assert f"Skipped gone: the project path is a file, not a folder ({world.gone})." in \
        exported.stderr
    assert world.gone.read_text(encoding="utf-8") == "not a folder\n"


def test_the_fleet_files_name_wins_for_a_folder_both_list(world, cli_run):
    world.fleet_file.write_text(f"projects:\n  - {{name: alpha-app, path: {world.alpha}}}\n",
                                encoding="utf-8")
    result = _fleet(cli_run, world, "list", "--json")
    rows = {p["name"]: p for p in json.loads(result.stdout)["projects"]}
    assert rows["alpha-app"]["path"] == str(world.alpha)
    assert rows["alpha-app"]["origins"] == ["smith", "fleet file", "audit", "slop"]
    assert rows["alpha-app"]["last_session"] == "2026-05-06 09:00:00"  # kept from the index


def test_a_project_the_fleet_names_otherwise_is_one_row_with_its_records(world, cli_run,
                                                                         tmp_path):
    """The fleet file names alpha's folder ``alpha-app``; its records (actions.project, a
    slop entry's project) say ``alpha``, its own project_name. fleet list showed it twice:
    ``alpha-app`` found with no actions and ``alpha`` with no folder holding them, and the
    fleet site did the same, while fleet export gives alpha-app alpha's actions. The list,
    the site and the export now agree: one project, its own records."""
    world.fleet_file.write_text(f"projects:\n  - {{name: alpha-app, path: {world.alpha}}}\n",
                                encoding="utf-8")
    result = _fleet(cli_run, world, "list", "--json")
    assert result.exit_code == 0, result.output
    rows = {p["name"]: p for p in json.loads(result.stdout)["projects"]}
    assert "alpha" not in rows
    app = rows["alpha-app"]
    assert app["records_name"] == "alpha"
    assert app["origins"] == ["smith", "fleet file", "audit", "slop"]
    assert (app["actions"], app["open_debt"]) == (2, 1)
    assert app["last_action"] == "2026-05-07 10:00:00"
    assert app["last_activity"] == "2026-05-08 07:00:00"  # its slop change
    site = fleet_build_site(cli_run, world, tmp_path / "fleet-site")
    index = _page(site, "index.html")
    cards = {r[0]: r[1:] for r in index.rows if r and len(r) == 8 and r[0] != "Project"}
    assert "alpha" not in cards and cards["alpha-app"][5:] == ["1", "2026-05-08 07:00:00"]
    page = [c for r in _page(site, "projects/alpha-app/index.html").rows for c in r]
    assert "Entry number 1" in page  # its open slop entry
    assert page[page.index("Actions") + 1] == "2"
    debt = {r[0] for r in _page(site, "debt/index.html").rows if len(r) == 8}
    assert "alpha-app" in debt and "alpha" not in debt
    out = tmp_path / "lake"
    assert _fleet(cli_run, world, "export", "--out", str(out)).exit_code == 0
    assert _parquet_counts(out, "actions")[("alpha-app", "alpha")] == app["actions"]


def test_a_folder_the_fleet_names_as_another_projects_records_leaves_that_project_listed(
        world, cli_run, tmp_path):
    """The fleet file names alpha's folder ``ci-only``, a name the audit records give
    another project (no folder). The folder's row holds alpha's records; ci-only's own
    actions were in no row of the list or the site. Both are listed, each with its own."""
    world.fleet_file.write_text(f"projects:\n  - {{name: ci-only, path: {world.alpha}}}\n",
                                encoding="utf-8")
    result = _fleet(cli_run, world, "list", "--json")
    assert result.exit_code == 0, result.output
    rows = [p for p in json.loads(result.stdout)["projects"] if p["name"] == "ci-only"]
    assert [(p["path"], p["records_name"], p["actions"], p["last_action"]) for p in rows] == [
        (str(world.alpha), "alpha", 2, "2026-05-07 10:00:00"),
        (None, "ci-only", 1, "2026-05-05 12:00:00")]
    site = fleet_build_site(cli_run, world, tmp_path / "fleet-site")
    assert {"projects/ci-only/", "projects/ci-only-2/"} <= set(_page(site, "index.html").links)
    folder = [c for r in _page(site, "projects/ci-only/index.html").rows for c in r]
    records = [c for r in _page(site, "projects/ci-only-2/index.html").rows for c in r]
    assert folder[folder.index("Actions") + 1] == "2" and SHARED_TITLE in folder
    assert records[records.index("Actions") + 1] == "1" and SHARED_TITLE not in records


# --------------------------------------------------------------------------- fleet export

def _parquet_counts(out: Path, table: str) -> dict[tuple[str, str | None], int]:
    """DuckDB's rows of OUT/<table> by partition and (for actions) the project each names."""
    import duckdb

    glob = str(out / table / "project=*" / "*.parquet").replace("'", "''")
    record = "record_project" if table == "actions" else "NULL"
    rows = duckdb.connect().execute(
        f"SELECT project, {record}, count(*) FROM read_parquet('{glob}', "
        "hive_partitioning = true, hive_types = {'project': VARCHAR}) GROUP BY ALL").fetchall()
    return {(p, r): n for p, r, n in rows}


def test_fleet_export_writes_the_found_projects_and_skips_the_missing_one(world, cli_run,
                                                                         tmp_path):
    out = tmp_path / "lake"
    result = _fleet(cli_run, world, "export", "--format", "parquet", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert f"Skipped gone: the project folder does not exist ({world.gone})." in result.stderr
    assert "Projects: 2 exported, 1 skipped." in result.stderr
    done = [ln for ln in result.stdout.splitlines() if ln.startswith("Exported ")]
    assert [ln.split()[1] for ln in done] == ["alpha", "beta"]
    assert all(ln.endswith(" 0 unchanged") for ln in done), done
    for table in (p for p in out.iterdir()):
        assert sorted(p.name for p in table.iterdir()) == [
            "_schema.json", "project=alpha", "project=beta"], table
    # each project's own store, as `toolkit export` in its folder leaves it
    assert (world.alpha / ".toolkit" / "ledger.duckdb").is_file()
    # nothing changed: nothing is written again, not one file
    before = {p: p.stat().st_ino for p in out.rglob("*")}
    again = _fleet(cli_run, world, "export", "--out", str(out))
    assert again.exit_code == 0, again.output
    done = [ln for ln in again.stdout.splitlines() if ln.startswith("Exported ")]
    assert len(done) == 2 and all(" 0 written, " in ln for ln in done), done
    assert {p: p.stat().st_ino for p in out.rglob("*")} == before


def test_fleet_export_partitions_hold_each_projects_own_actions_as_its_store_reads_them(
        world, cli_run, tmp_path):
    from toolkit.cli._common import open_store

    out = tmp_path / "lake"
    assert _fleet(cli_run, world, "export", "--out", str(out)).exit_code == 0
    # the shared audit DB names alpha, beta, gone, ci-only and no project: a partition
    # holds its project's actions and the unassigned one, never another project's
    assert _parquet_counts(out, "actions") == {
        ("alpha", "alpha"): 2, ("alpha", None): 1, ("beta", "beta"): 1, ("beta", None): 1}
    for name, folder in (("alpha", world.alpha), ("beta", world.beta)):
        cfg = resolve(project=folder, env=world.env())
        with open_store(cfg, refresh=False, scoped=True) as store:
            counts = store.counts()
            tables = {t for t, kind, _c, _d in store.schema() if kind == "table"}
        assert sorted(p.name for p in out.iterdir()) == sorted(tables)
        for table in tables:
            got = sum(n for (p, _r), n in _parquet_counts(out, table).items() if p == name)
            assert got == counts[table], (name, table)


def test_fleet_export_holds_the_actions_a_project_renamed_by_the_fleet_shows_on_its_site(
        world, cli_run, tmp_path):
    """The fleet file names alpha's folder ``alpha-app`` (its records and its own site say
    ``alpha``): fleet export wrote that name over the project's and scoped the actions by
    it, so the partition held only the unassigned action and alpha's own two were in no
    partition at all, though the command says a project's actions are those its site shows.
    The partition keeps the fleet's name; the actions are the project's own."""
    world.fleet_file.write_text(f"projects:\n  - {{name: alpha-app, path: {world.alpha}}}\n",
                                encoding="utf-8")
    out = tmp_path / "lake"
    result = _fleet(cli_run, world, "export", "--out", str(out))
    assert result.exit_code == 0, result.output
    counts = _parquet_counts(out, "actions")
    assert {k: n for k, n in counts.items() if k[0] == "alpha-app"} == {
        ("alpha-app", "alpha"): 2, ("alpha-app", None): 1}


def test_fleet_export_after_one_projects_new_action_rewrites_only_its_actions(world, cli_run,
                                                                             tmp_path):
    out = tmp_path / "lake"
    assert _fleet(cli_run, world, "export", "--out", str(out)).exit_code == 0
    beta = {p: p.stat().st_ino for p in out.glob("*/project=beta/*")}
    # both projects' stores copy the shared audit DB's new row; only alpha's partition has it
    insert(world.audit, "actions", ts="2026-05-09 10:00:00", tier=1, category="commit",
           description="alpha again", project="alpha")
    result = _fleet(cli_run, world, "export", "--out", str(out))
    assert result.exit_code == 0, result.output
    written = [ln.split()[0] for ln in result.stdout.splitlines() if ln.endswith(" written")]
    assert written == ["actions"], result.output
    assert _parquet_counts(out, "actions")[("alpha", "alpha")] == 3
    assert {p: p.stat().st_ino for p in out.glob("*/project=beta/*")} == beta


def test_fleet_export_reports_a_broken_project_and_exports_the_others(world, cli_run,
                                                                     tmp_path):
    (world.beta / "toolkit.yaml").write_text("colour: red\n", encoding="utf-8")
    out = tmp_path / "lake"
    result = _fleet(cli_run, world, "export", "--out", str(out))
    assert result.exit_code == 2, result.output  # the bad setting's own exit code
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("Error:")]
    assert len(errors) == 1 and errors[0].startswith("Error: project beta: ") and \
        "unknown setting(s) colour" in errors[0]
    assert [ln.split()[1] for ln in result.stdout.splitlines()
            if ln.startswith("Exported ")] == ["alpha"]
    assert sorted(p.name for p in (out / "actions").iterdir()) == ["_schema.json",
                                                                   "project=alpha"]


def test_a_project_whose_export_is_refused_is_reported_and_the_others_are_exported(
        world, cli_run, tmp_path):
    """A project whose partition folder cannot be changed (read-only) is refused before any
    change of it, as `toolkit export` refuses it: `fleet export` stopped there for every
    project, printing neither what the others had exported nor its summary. It is now that
    project's error (exit 1) and the others are exported and listed."""
    from tests.conftest import modes, run_unprivileged

    out = tmp_path / "lake"
    assert _fleet(cli_run, world, "export", "--out", str(out)).exit_code == 0
    # a new action of each project: both projects' actions partitions must be written again
    for project in ("alpha", "beta"):
        insert(world.audit, "actions", ts="2026-05-09 10:00:00", tier=1, category="commit",
               description=f"{project} again", project=project)
    beta = out / "actions" / "project=beta"
    before = {p.name: p.read_bytes() for p in beta.iterdir()}
    with modes((beta, 0o555)):
        result = run_unprivileged("fleet", "--store", str(world.store), "export", "--out",
                                  str(out), cwd=world.base)
    assert result.returncode == 1, result.stderr
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("Error:")]
    assert len(errors) == 1 and errors[0].startswith("Error: project beta: ") and \
        "nothing of beta was exported" in errors[0], result.stderr
    assert "Projects: 1 exported, 2 skipped." in result.stderr  # (beta, and gone)
    assert [ln.split()[0] for ln in result.stdout.splitlines()
            if ln.endswith(" written")] == ["actions"], result.stdout
    assert _parquet_counts(out, "actions")[("alpha", "alpha")] == 3
    assert {p.name: p.read_bytes() for p in beta.iterdir()} == before


def test_fleet_export_refuses_a_second_project_on_the_same_store(world, cli_run, tmp_path,
                                                                monkeypatch):
    # TOOLKIT_DB points every project at one store: its rows would be the first project's
    monkeypatch.setenv("TOOLKIT_DB", str(tmp_path / "one.duckdb"))
    out = tmp_path / "lake"
    result = _fleet(cli_run, world, "export", "--out", str(out))
    assert result.exit_code == 1, result.output
    assert "Error: project beta: " in result.stderr and \
        "shares its store with project alpha" in result.stderr
    assert sorted(p.name for p in (out / "ledger_entries").iterdir()) == [
        "_schema.json", "project=alpha"]


def test_a_project_folder_with_a_name_too_long_is_listed_with_the_error(world, cli_run,
                                                                       tmp_path):
    """A project path the system refuses to look at (a name longer than the file system
    allows: ENAMETOOLONG) stopped `fleet list`, `build-site` and `export` for every project
    with a raw error: pathlib raised an OSError that the per-project handling did not catch.
    It is now that project's error, and the others are read and exported. (A symbolic link
    loop is missing, and said so, rather than "does not exist".)"""
    long_name = "x" * 300
    (world.base / "code" / "loop").symlink_to("loop")
    world.fleet_file.write_text(
        f"projects:\n  - name: beta\n    path: code/beta\n  - name: long\n"
        f"    path: code/{long_name}\n  - code/loop\n", encoding="utf-8")
    result = _fleet(cli_run, world, "list", "--json")
    assert result.exit_code == 0, result.output
    rows = {p["name"]: p for p in json.loads(result.stdout)["projects"]}
    assert rows["long"]["status"] == "error" and "File name too long" in rows["long"]["note"]
    assert rows["loop"]["status"] == "missing" and \
        rows["loop"]["note"] == "the project path is a symbolic link loop"
    assert rows["alpha"]["status"] == rows["beta"]["status"] == "found"
    assert rows["beta"]["entries"] == 2
    exported = _fleet(cli_run, world, "export", "--out", str(tmp_path / "lake"))
    assert exported.exit_code == 1, exported.output
    errors = [ln for ln in exported.stderr.splitlines() if ln.startswith("Error:")]
    assert len(errors) == 1 and errors[0].startswith("Error: project long: ") and \
        "File name too long" in errors[0]
    assert sorted(ln.split()[1] for ln in exported.stdout.splitlines()
                  if ln.startswith("Exported ")) == ["alpha", "beta"]


def test_a_project_folder_that_may_not_be_read_is_listed_with_the_chmod(world):
    """One project folder the user may not enter (mode 000) aborted `fleet list` for every
    project with "Permission denied" (exit 1); a project whose sessions folder may not be
    listed did too. Each is now listed as `error` naming the folder and the chmod that fixes
    it, and the other project is read (exit 0)."""
    from tests.conftest import modes, run_unprivileged

    delta = world.base / "code" / "delta"
    delta.mkdir()
    world.fleet_file.write_text("projects:\n  - name: beta\n    path: code/beta\n"
                                "  - code/delta\n", encoding="utf-8")
    sessions = world.alpha / ".smith" / "vault" / "sessions"
    with modes((delta, 0), (sessions, 0)):
        result = run_unprivileged("fleet", "--store", str(world.store), "list", "--json",
                                  cwd=world.base)
    assert result.returncode == 0, result.stderr
    rows = {p["name"]: p for p in json.loads(result.stdout)["projects"]}
    assert rows["delta"]["status"] == "error"
    assert rows["delta"]["note"] == (f"{delta}: Permission denied: the folder cannot be "
                                     f"entered (to reach toolkit.yaml). Make it readable: "
                                     f"chmod u+rx {delta}")
    assert rows["alpha"]["status"] == "error"
    assert rows["alpha"]["note"].endswith(f"Make it readable: chmod u+rx {sessions}")
    assert rows["beta"]["status"] == "found" and rows["beta"]["entries"] == 2
