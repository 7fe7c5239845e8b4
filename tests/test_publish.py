"""`toolkit publish` against a fake GitHub REST API on 127.0.0.1 (FAULTS.md F1-F3).

Every wait goes through a fake clock, so rate-limit tests take no real minutes; the only real
waiting is the one-second client timeout of the "create applied but answered late" case.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from tests._publish_helpers import (
    REPO,
    TOKEN,
    FakeClock,
    add_approach,
    add_dispatch,
    add_slop,
    run_publish,
    slop_entry,
)
from tests._store_helpers import project_with_store
from tests.fake_github import FakeGitHub
from toolkit.errors import BusyError, NotFoundError, RefusedError, ToolkitError, UsageError
from toolkit.publish import (
    BODY_LIMIT,
    TOOLKIT_LABEL,
    WaitPolicy,
    find_token,
    marker_for,
    normalize_api_url,
)

project = project_with_store()  # the store's schema made: not what these tests are about


def issue_writes(fake: FakeGitHub) -> list[str]:
    return [f"{r.method} {r.path}" for r in fake.writes]


# --------------------------------------------------------------------------- create / update

def test_three_runs_make_one_issue_and_unchanged_runs_write_nothing(project, github, clock):
    first = run_publish(project, github, clock)
    second = run_publish(project, github, clock)
    third = run_publish(project, github, clock)

    assert (first.action, second.action, third.action) == ("created", "unchanged", "unchanged")
    assert first.number == second.number == third.number == 1
    issues = github.issues(REPO)
    assert len(issues) == 1
    assert issue_writes(github) == [f"POST /repos/{REPO}/issues"]  # runs 2 and 3: no write
    assert [lab["name"] for lab in issues[0]["labels"]] == [TOOLKIT_LABEL]
    assert issues[0]["title"] == "Agent handoff: acme-api"
    assert clock.sleeps == []


def test_changed_report_updates_the_same_issue(project, github, clock):
    run_publish(project, github, clock)
    add_slop(project.slop, slop_entry("Orphaned feature flag in billing", severity="critical"))

    result = run_publish(project, github, clock)

    assert result.action == "updated" and result.number == 1
    assert issue_writes(github) == [f"POST /repos/{REPO}/issues", f"PATCH /repos/{REPO}/issues/1"]
    patch = github.writes[-1].body
    assert set(patch) == {"body"}  # only what changed: the labels and title are left alone
    assert "Orphaned feature flag in billing" in github.issues(REPO)[0]["body"]
    assert len(github.issues(REPO)) == 1


def test_the_marker_is_a_hidden_first_line_keyed_by_project(project, github, clock):
    run_publish(project, github, clock)
    body = github.issues(REPO)[0]["body"]
    assert body.splitlines()[0] == "<!-- agent-ledger-toolkit:handoff key=acme-api -->"
    assert marker_for("acme-api") == body.splitlines()[0]


def test_marker_issue_on_page_two_is_found_through_link_pagination(project, clock):
    with FakeGitHub(token=TOKEN, clock=clock.now, max_per_page=2) as fake:
        fake.add_repo(REPO)
        marker = marker_for("acme-api")
        # Labelled issues of other projects, and a pull request that carries the marker.
        fake.add_issue(REPO, title="Agent handoff: web", body=marker_for("web"),
                       labels=(TOOLKIT_LABEL,))
        fake.add_issue(REPO, title="not ours", body=f"{marker}\nquoted", labels=(TOOLKIT_LABEL,),
                       pull_request=True)
        fake.add_issue(REPO, title="Agent handoff: cli", body=marker_for("cli"),
                       labels=(TOOLKIT_LABEL,))
        fake.add_issue(REPO, title="Agent handoff: acme-api", body=f"{marker}\nold report",
                       labels=(TOOLKIT_LABEL, "team-x"))

        result = run_publish(project, fake, clock)

        assert result.action == "updated" and result.number == 4
        pages = [r.query.get("page", "1") for r in fake.requests
                 if r.method == "GET" and r.path.endswith("/issues")]
        assert pages == ["1", "2"]
        assert issue_writes(fake) == [f"PATCH /repos/{REPO}/issues/4"]
        assert all(not r.path.startswith("/search") for r in fake.requests)
        assert len(fake.repos[REPO].issues) == 4  # nothing created


def test_extra_labels_are_added_and_labels_set_by_people_are_kept(project, github, clock):
    run_publish(project, github, clock)
    github.repos[REPO].issues[0]["labels"].append({"name": "triaged"})

    result = run_publish(project, github, clock, labels=("handoff", "triaged"))

    assert result.action == "updated"
    assert github.writes[-1].body == {"labels": ["agent-handoff", "triaged", "handoff"]}


def test_a_closed_handoff_issue_is_reopened_not_duplicated(project, github, clock):
    run_publish(project, github, clock)
    github.repos[REPO].issues[0]["state"] = "closed"

    result = run_publish(project, github, clock)

    assert result.action == "updated" and result.number == 1
    assert github.writes[-1].body == {"state": "open"}
    assert any("reopened" in n for n in result.notes)
    assert len(github.issues(REPO)) == 1


def test_dry_run_sends_nothing_and_needs_no_token(project, github, clock):
    result = run_publish(project, github, clock, dry_run=True, env={})

    assert result.action == "dry-run"
    assert github.requests == []
    assert result.body.startswith(marker_for("acme-api") + "\n")
    assert "## Debt: open slop (2)" in result.body


def test_enterprise_api_url_with_path_prefix(project, clock):
    with FakeGitHub(token=TOKEN, clock=clock.now, prefix="/api/v3") as fake:
        fake.add_repo(REPO)
        assert fake.api_url.endswith("/api/v3")

        first = run_publish(project, fake, clock, api_url=fake.api_url + "/")
        again = run_publish(project, fake, clock, api_url=fake.api_url)

        assert (first.action, again.action) == ("created", "unchanged")
        assert len(fake.issues(REPO)) == 1
        assert first.url == "https://github.example/acme/api/issues/1"


def test_without_push_access_it_refuses_before_writing(project, clock):
    with FakeGitHub(token=TOKEN, clock=clock.now) as fake:
        fake.add_repo(REPO, push=False)
        with pytest.raises(RefusedError, match="no write access to acme/api"):
            run_publish(project, fake, clock)
        assert fake.writes == []


def test_repository_with_issues_disabled_fails_before_writing(project, clock):
    with FakeGitHub(token=TOKEN, clock=clock.now) as fake:
        fake.add_repo(REPO, has_issues=False)
        with pytest.raises(ToolkitError, match="issues are disabled in acme/api"):
            run_publish(project, fake, clock)
        assert fake.writes == []


# --------------------------------------------------------------------------- F1: secrets

SECRETS = {
    "ghp": "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
    "pat": "github_pat_" + "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVW",
    "aws": "AKIA" + "IOSFODNN7EXAMPLE",
    "slack": "xoxb-" + "123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "jwt": ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
            "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"),
    "sk": "sk-" + "proj-4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c",
    "password": "hunter2-correct-horse",
    "userpass": "s3cr3t-pw",
    "bearer": "Bearer " + "abcdef0123456789abcdef",
}
PEM = ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7bq98bq9Gm0PmZlqJmJ1bmFyLWtleS1tYXRlcmlh\n"
       "bC1mb3ItdGVzdHMtb25seQ==\n-----END RSA PRIVATE KEY-----")
DECOYS = ["3f2b8c4e-1d5a-4e8b-9c7d-2a6f0e1b3c4d", "75e212cc3a57b3e9b69680042f2ab99fbecbf338",
          "author"]


def _plant_secrets(project) -> None:
    home = str(project.home)
    add_slop(project.slop,
             slop_entry(f"Token {SECRETS['ghp']} left in fixtures", severity="critical",
                        description=(f"aws key {SECRETS['aws']}, pat {SECRETS['pat']}\n"
                                     f"{PEM}\npassword = \"{SECRETS['password']}\"\n"
                                     f"see {home}/work/acme/.env and commit {DECOYS[1]}, "
                                     f"run {DECOYS[0]} by the author"),
                        owner=f"https://bot:{SECRETS['userpass']}@ci.example.com",
                        source_links=[f"{home}/work/acme/config.py:12"]))
    add_dispatch(project.audit_db, f"Rotate {SECRETS['slack']}", verdict="REFUTED",
                 notes=f"curl -H 'Authorization: {SECRETS['bearer']}' used jwt {SECRETS['jwt']}")
    add_approach(project.audit_db, "Call the model API", f"Hard-code {SECRETS['sk']}", "NO_GO",
                 "Keys must come from the vault")


def test_f1_no_secret_reaches_github_home_paths_folded_decoys_kept(project, github, clock):
    from toolkit.mdsafe import unescape as unescape_markdown

    _plant_secrets(project)
    result = run_publish(project, github, clock, full=True)  # the listing comments too

    assert result.action == "created" and result.comment_actions == ["created"]
    assert len(github.writes) == 2  # the issue, then one comment
    sent = "".join(w.raw + json.dumps(w.body, ensure_ascii=False) for w in github.writes)
    plain = unescape_markdown("\n".join(w.body["body"] for w in github.writes))
    for name, secret in {**SECRETS, "pem": "MIIEowIBAAKCAQEA7bq98bq9"}.items():
        assert secret not in sent and secret not in plain, name
    assert str(project.home) not in sent
    assert "~/work/acme/" in plain
    for decoy in DECOYS:
        assert decoy in plain, decoy
    assert "[REDACTED]" in plain


def test_f1_final_scan_stops_a_secret_the_redactor_missed(project, github, clock):
    from toolkit.redact import redact

    _plant_secrets(project)

    def leaky(text: str) -> str:  # a redactor that misses AWS access key ids
        hidden = text.replace(SECRETS["aws"], "AWSKEYPLACEHOLDER")
        return redact(hidden).replace("AWSKEYPLACEHOLDER", SECRETS["aws"])

    with pytest.raises(RefusedError) as err:  # the key is in a slop description, which only
        run_publish(project, github, clock, redactor=leaky, full=True)  # the listing holds

    message = str(err.value)
    assert "the issue comment 1 still contains" in message and "nothing was sent" in message
    assert "aws" in message.lower()
    assert all(secret not in message for secret in SECRETS.values())
    assert github.requests == []


def test_f1_final_scan_also_stops_a_dry_run(project, github, clock):
    _plant_secrets(project)
    with pytest.raises(RefusedError, match="the issue body still contains"):
        run_publish(project, github, clock, dry_run=True, redactor=lambda text: text)


def test_title_has_no_control_or_bidi_characters(project, github, clock):
    result = run_publish(project, github, clock, title="Handoff \u202eevil\u200b\x1b[31m",
                         dry_run=True)
    assert result.title == "Handoff evil[31m"


def test_f1_title_is_scanned_too(project, github, clock):
    with pytest.raises(RefusedError, match="the issue title still contains"):
        run_publish(project, github, clock, title=f"handoff {SECRETS['aws']}",
                    redactor=lambda text: text)
    assert github.requests == []


# --------------------------------------------------------------------------- F2: body limit

def test_f2_body_over_the_limit_is_cut_with_a_note_and_sent_once(project, github, clock):
    long_title = ("Ünïcödé 漢字 and emoji 🧪🔥 " * 10).strip()
    add_slop(project.slop, *[slop_entry(f"Leftover shim {i:03d} 🧪 {long_title}",
                                        severity="high" if i % 2 else "critical")
                             for i in range(400)])

    result = run_publish(project, github, clock)

    body = github.issues(REPO)[0]["body"]
    units = len(body.encode("utf-16-le")) // 2
    assert units <= BODY_LIMIT
    assert len(issue_writes(github)) == 1  # one create, no 422 loop
    assert "This report was shortened" in body
    assert "> **Left out:**" in body and "of 401 slop lines" in body
    assert "run `toolkit handoff --full` in the project for the full report" in body
    assert result.left_out and result.left_out[0].startswith("Debt: open slop (402)")
    # the most severe entries are the ones kept
    assert "Leftover shim 000" in body and "Leftover shim 399" not in body
    # the sections before the cut one are all there
    assert "## Tasks over the retry limit" in body and "## What the ledger learned" in body


def test_f2_note_links_the_full_report_on_the_site(project, github, clock, monkeypatch):
    monkeypatch.setenv("TOOLKIT_SITE_URL", "https://docs.example.com/handoff-site")
    add_slop(project.slop, *[slop_entry(f"Shim {i} " + "x" * 300, severity="high")
                             for i in range(400)])

    run_publish(project, github, clock)

    body = github.issues(REPO)[0]["body"]
    assert "see [the full report](https://docs.example.com/handoff-site/handoff/)" in body


def test_f2_fit_body_is_multibyte_safe_at_the_exact_limit():
    from toolkit.handoff import Section, fit_body, size

    items = ["| " + "🧪" * 50 + f" {i} |" for i in range(100)]
    sec = Section("x", "## Emoji", ["| a |", "|---|"], items, "rows")
    for limit in (1000, 1001, 2048, 4000):
        body, left = fit_body("head", [sec], limit=limit, full_report="see elsewhere")
        assert size(body) <= limit
        assert "\ufffd" not in body and left
        body.encode("utf-8")  # no lone surrogate anywhere


# --------------------------------------------------------------------------- F3: limits, faults

def test_f3_primary_limit_waits_until_reset(project, github, clock):
    github.fail_next("GET", r"/issues$", "primary", reset=int(clock.now()) + 30)

    result = run_publish(project, github, clock)

    assert result.action == "created"
    assert clock.sleeps == [31.0]  # until x-ratelimit-reset, plus one second
    assert len(github.issues(REPO)) == 1


def test_f3_spent_budget_on_a_success_waits_before_the_next_request(project, github, clock):
    github.remaining = 1  # the first response says x-ratelimit-remaining: 0
    github.reset_in = 20

    run_publish(project, github, clock)

    assert clock.sleeps[0] == 21.0
    assert len(github.issues(REPO)) == 1


def test_f3_429_retry_after_is_honoured(project, github, clock):
    github.fail_next("POST", r"/issues$", "429", retry_after=7)

    result = run_publish(project, github, clock)

    assert result.action == "created"
    assert 7.0 in clock.sleeps
    assert issue_writes(github) == [f"POST /repos/{REPO}/issues"] * 2
    assert len(github.issues(REPO)) == 1


def test_f3_secondary_limit_waits_a_minute_then_backs_off(project, github, clock):
    github.fail_next("POST", r"/issues$", "secondary", times=2)

    result = run_publish(project, github, clock)

    assert result.action == "created"
    assert clock.sleeps == [60.0, 120.0]
    assert len(github.issues(REPO)) == 1


def test_f3_retries_are_bounded(project, github, clock):
    github.fail_next("POST", r"/issues$", "secondary", times=50)

    with pytest.raises(BusyError, match="after 5 attempts") as err:
        run_publish(project, github, clock)

    assert err.value.exit_code == 75
    assert len(issue_writes(github)) == 5
    assert github.issues(REPO) == []


def test_f3_an_api_that_cannot_be_reached_fails_after_5_attempts_as_busy(project, github,
                                                                           clock):
    """A network error on a read is retried as a 5xx is (2, 4, 8, 16 s); after the fifth
    attempt the command exits 75, "kept failing after 5 attempts" as the guide says, naming
    the API and what to check (it was exit 1, the code of a refusal to fix first)."""
    import socket

    with socket.socket() as sock:  # a port on 127.0.0.1 that nothing listens on
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"

    with pytest.raises(BusyError, match=f"^cannot reach GitHub at {closed}") as err:
        run_publish(project, github, clock, api_url=closed)

    assert err.value.exit_code == 75
    assert "Check --api-url and the network, then run again" in str(err.value)
    assert clock.sleeps == [2.0, 4.0, 8.0, 16.0]


def test_f3_a_wait_longer_than_the_cap_exits_busy_with_when(project, github, clock):
    github.fail_next("GET", r"/repos/acme/api$", "primary", reset=int(clock.now()) + 7200)

    with pytest.raises(BusyError, match="wait 120 minutes") as err:
        run_publish(project, github, clock)

    assert "Run again after 2027-01-15 10:00 UTC" in str(err.value)
    assert clock.sleeps == []


def test_f3_502_on_list_is_retried(project, github, clock):
    github.fail_next("GET", r"/issues$", "502")

    result = run_publish(project, github, clock)

    assert result.action == "created" and clock.sleeps == [2.0]


def test_f3_502_on_create_lists_again_before_creating(project, github, clock):
    github.fail_next("POST", r"/issues$", "502")

    result = run_publish(project, github, clock, policy=WaitPolicy(relist_wait=0))

    assert result.action == "created"
    methods = [r.method for r in github.requests]
    assert methods == ["GET", "GET", "POST", "GET", "POST"]  # repo, list, create, list, create
    assert clock.sleeps == [1.0]  # writes stay a second apart
    assert len(github.issues(REPO)) == 1


def test_f3_create_applied_but_answered_late_does_not_duplicate(project, github, clock):
    github.fail_next("POST", r"/issues$", "slow", delay=2.5)  # client timeout is 1 s

    result = run_publish(project, github, clock)

    assert result.action == "created" and result.number == 1
    assert len(github.issues(REPO)) == 1
    assert issue_writes(github) == [f"POST /repos/{REPO}/issues"]
    assert any("no duplicate" in n for n in result.notes)
    assert 5.0 in clock.sleeps  # it let GitHub settle before listing again


@pytest.mark.parametrize("kind, error, text", [
    ("401", ToolkitError, "GitHub rejected the token from GH_TOKEN (401 Bad credentials)"),
    ("404", NotFoundError, "not found at"),
    ("410", ToolkitError, "410 Gone: issues are disabled there"),
    ("403", RefusedError, "(403: Resource not accessible by personal access token)"),
    ("422", ToolkitError, "(422: Validation Failed: body is too long (maximum is 65536"),
])
def test_f3_auth_and_permission_errors_fail_at_once(project, github, clock, kind, error, text):
    github.fail_next("POST", r"/issues$", kind)

    with pytest.raises(error) as err:
        run_publish(project, github, clock)

    assert text in str(err.value)
    assert len(issue_writes(github)) == 1
    assert clock.sleeps == []


def test_f3_non_rate_limit_403_with_normal_rate_headers_is_not_retried(project, github, clock):
    # GitHub sends x-ratelimit-* on every response; only remaining == 0 means a rate limit.
    github.fail_next("GET", r"/issues$", "403")
    with pytest.raises(RefusedError, match="Issues read and write access"):
        run_publish(project, github, clock)
    assert clock.sleeps == [] and github.writes == []


# --------------------------------------------------------------------------- token, URL

def test_token_order_gh_token_then_github_token():
    assert find_token({"GH_TOKEN": "a", "GITHUB_TOKEN": "b"}).source == "GH_TOKEN"
    assert find_token({"GH_TOKEN": " ", "GITHUB_TOKEN": "b"}).value == "b"


def _fake_gh(tmp_path: Path, script: str) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    gh = bin_dir / "gh"
    gh.write_text("#!/bin/sh\n" + script)
    gh.chmod(gh.stat().st_mode | stat.S_IXUSR)
    return {"PATH": f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin"}


def test_token_from_gh_auth_token_is_used(project, github, clock, tmp_path):
    args = tmp_path / "gh-args"
    env = _fake_gh(tmp_path, f'echo "$@" > {args}\necho {TOKEN}\n')

    result = run_publish(project, github, clock, env=env)

    assert result.action == "created"
    assert args.read_text().strip() == "auth token --hostname 127.0.0.1"
    assert github.requests[0].headers["Authorization"] == f"token {TOKEN}"


def test_no_token_anywhere_names_all_three(tmp_path):
    with pytest.raises(ToolkitError) as err:
        find_token({"PATH": str(tmp_path)})
    message = str(err.value)
    assert "GH_TOKEN" in message and "GITHUB_TOKEN" in message and "gh auth" in message


def test_gh_installed_but_logged_out(tmp_path):
    env = _fake_gh(tmp_path, "echo 'not logged in' >&2\nexit 1\n")
    with pytest.raises(ToolkitError, match="`gh auth token` printed none"):
        find_token(env)


def test_api_url_rules():
    assert normalize_api_url(None) == "https://api.github.com"
    assert normalize_api_url("https://ghe.example.com/api/v3/") == \
        "https://ghe.example.com/api/v3"
    with pytest.raises(RefusedError, match=r"plain http to ghe\.example\.com"):
        normalize_api_url("http://ghe.example.com/api/v3")
    with pytest.raises(UsageError, match="must not contain credentials"):
        normalize_api_url("https://me:pw@ghe.example.com/api/v3")
    with pytest.raises(UsageError, match="is not an http"):
        normalize_api_url("file:///etc/passwd")


def test_a_url_python_cannot_split_is_no_url_not_a_traceback(project, cli_run):
    """An unclosed IPv6 bracket makes urllib raise ValueError: as --api-url (also with a token
    set, where the gh host is asked) it is refused as no http(s) URL; as the site's URL the
    handoff has no site links, as for any other text that is no http(s) URL."""
    for env, dry in (({}, ("--dry-run",)), ({"GH_TOKEN": TOKEN}, ())):  # (a token: no dry run)
        result = cli_run("publish", "--repo", REPO, "--api-url", "https://[::1", *dry,
                         env=env)
        assert result.exit_code == 2, result.output
        assert result.stderr.splitlines() == [
            "Error: --api-url 'https://[::1' is not an http(s) URL. For GitHub Enterprise use "
            "https://HOST/api/v3"]
    result = cli_run("handoff", env={"TOOLKIT_SITE_URL": "https://[::1"})
    assert result.exit_code == 0, result.output
    assert "[::1" not in result.stdout and "Traceback" not in result.output


# --------------------------------------------------------------------------- the CLI

def test_cli_publish_created_then_up_to_date(project, github, cli_run):
    env = {"GH_TOKEN": TOKEN}
    first = cli_run("publish", "--repo", REPO, "--api-url", github.api_url, env=env)
    second = cli_run("publish", "--repo", REPO, "--api-url", github.api_url, env=env)

    assert first.exit_code == 0, first.output
    assert first.stdout == "Created issue #1: https://github.example/acme/api/issues/1\n"
    assert second.exit_code == 0
    assert second.stdout == ("Issue #1 is up to date; nothing was sent: "
                             "https://github.example/acme/api/issues/1\n")


def test_cli_dry_run_prints_the_body_and_sends_nothing(project, github, cli_run):
    result = cli_run("publish", "--repo", REPO, "--api-url", github.api_url, "--dry-run")

    assert result.exit_code == 0
    assert result.stdout.startswith("Title:  Agent handoff: acme-api\nLabels: agent-handoff\n")
    assert marker_for("acme-api") in result.stdout
    assert result.stdout.endswith("Dry run: nothing was sent to GitHub.\n")
    assert github.requests == []


def test_cli_bad_token_exits_1_with_what_to_fix(project, github, cli_run):
    result = cli_run("publish", "--repo", REPO, "--api-url", github.api_url,
                     env={"GH_TOKEN": "wrong"})
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1] == (
        "Error: GitHub rejected the token from GH_TOKEN (401 Bad credentials). It is wrong, "
        "expired or revoked; set a valid one in GH_TOKEN or GITHUB_TOKEN, or run `gh auth login`")


def test_cli_unknown_repo_exits_1(project, github, cli_run):
    result = cli_run("publish", "--repo", "acme/nope", "--api-url", github.api_url,
                     env={"GH_TOKEN": TOKEN})
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1] == (
        f"Error: reading repository acme/nope: not found at {github.api_url} (404), or the "
        "token from GH_TOKEN cannot see it. Check --repo and that the token can see the "
        "repository (the `repo` scope or fine-grained access to it for a private one)")


def test_cli_missing_repo_and_bad_repo_are_usage_errors(project, cli_run):
    missing = cli_run("publish")
    assert missing.exit_code == 2
    assert missing.stderr == ("Error: no repository given. Pass --repo OWNER/NAME or set "
                              "publish.repo in toolkit.yaml\n")
    bad = cli_run("publish", "--repo", "not-a-repo", "--dry-run")
    assert bad.exit_code == 2
    assert bad.stderr == ("Error: --repo 'not-a-repo' is not OWNER/NAME. "
                          "For example --repo acme/api\n")


def test_cli_no_token_exits_1(bare_project, github, cli_run, tmp_path):
    bin_dir = tmp_path / "bin"  # git (the store's history loader needs it) but no gh
    bin_dir.mkdir()
    (bin_dir / "git").symlink_to(shutil.which("git"))
    result = cli_run("publish", "--repo", REPO, "--api-url", github.api_url,
                     env={"PATH": str(bin_dir)})
    assert result.exit_code == 1
    assert result.stderr == (
        "Error: no GitHub token found: GH_TOKEN and GITHUB_TOKEN are not set and the GitHub "
        "CLI (gh) is not installed. Set GH_TOKEN or GITHUB_TOKEN, or install the GitHub CLI and "
        "run `gh auth login` so that `gh auth token` prints one\n")
    assert github.requests == []
    # said before any work: the store was never made, no check ran
    assert not (bare_project.root / ".toolkit").exists()


def test_cli_bad_repo_is_said_before_the_store_is_loaded(bare_project, cli_run):
    bad = cli_run("publish", "--repo", "not-a-repo", env={"GH_TOKEN": TOKEN})
    assert bad.exit_code == 2
    assert bad.stderr == ("Error: --repo 'not-a-repo' is not OWNER/NAME. "
                          "For example --repo acme/api\n")
    assert not (bare_project.root / ".toolkit").exists()


def test_cli_repo_and_labels_from_toolkit_yaml(project, github, cli_run):
    (project.root / "toolkit.yaml").write_text(
        f"publish:\n  repo: {REPO}\n  labels: [handoff]\n  api_url: {github.api_url}\n")
    result = cli_run("publish", env={"GH_TOKEN": TOKEN})
    assert result.exit_code == 0, result.output
    assert [lab["name"] for lab in github.issues(REPO)[0]["labels"]] == [TOOLKIT_LABEL, "handoff"]


def test_fake_clock_counts_waits():
    fake = FakeClock(10.0)
    fake.sleep(2.5)
    assert fake.now() == 12.5 and fake.sleeps == [2.5]


class _OtherPortGitHub(FakeGitHub):
    """A fake whose answers point at another port (a misconfigured proxy or enterprise
    server): PyGithub asserts on such URLs."""

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port + 1}{self.prefix}"


def test_a_malformed_answer_from_github_is_one_line_not_a_traceback(project, cli_run):
    with _OtherPortGitHub(token=TOKEN, clock=FakeClock().now) as fake:
        fake.add_repo(REPO)
        api = f"http://127.0.0.1:{fake.port}"
        result = cli_run("publish", "--repo", REPO, "--api-url", api, env={"GH_TOKEN": TOKEN})
        writes = fake.writes
    assert result.exit_code == 1
    [line] = result.stderr.splitlines()
    assert line.startswith(f"Error: listing issues labelled {TOOLKIT_LABEL} in {REPO}: GitHub "
                           "answered something unexpected (a URL that is not on the API's host, "
                           "port and path)")
    assert line.endswith(f"Check that --api-url {api} is the GitHub API (a proxy in between "
                         "may rewrite its answers)")
    assert writes == []


# --------------------------------------------------------------------------- --full: comments

def _part(n: int) -> str:
    return marker_for("acme-api").replace(" -->", f" part={n} -->")


def _comment_writes(fake: FakeGitHub) -> list[str]:
    return [f"{r.method} {r.path}" for r in fake.writes if "/comments" in r.path]


def test_full_posts_the_listing_as_comments_each_under_the_limit(project, github, clock):
    long_text = "A long account of what the agent left behind. " * 100  # ~4,700 characters
    add_slop(project.slop, *[slop_entry(f"Leftover shim {i:03d}", description=long_text,
                                        severity="low") for i in range(40)])

    result = run_publish(project, github, clock, full=True)

    comments = github.comments(REPO, 1)
    assert len(comments) == len(result.comments) >= 3
    assert result.comment_actions == ["created"] * len(comments)
    for n, comment in enumerate(comments, 1):
        body = comment["body"]
        assert body.splitlines()[0] == _part(n)
        assert f"part {n} of {len(comments)}" in body
        assert len(body.encode("utf-16-le")) // 2 <= BODY_LIMIT
    listing = "".join(c["body"] for c in comments)
    assert all(f"Leftover shim {i:03d}" in listing for i in range(40))
    assert "## All open slop (42) (continued)" in listing  # one section split in parts
    issue_body = github.issues(REPO)[0]["body"]
    assert "_The complete listing follows in the comments below._" in issue_body
    assert "Leftover shim" not in issue_body  # low severity: counted in the body, listed below


def test_full_reruns_update_the_comments_in_place_without_duplicates(project, github, clock):
    add_slop(project.slop, *[slop_entry(f"Shim {i:02d}", description="x " * 2500,
                                        severity="low") for i in range(30)])
    run_publish(project, github, clock, full=True)
    parts = len(github.comments(REPO, 1))
    github.add_comment(REPO, 1, "Thanks, picking up the flaky test.")  # a person's reply

    again = run_publish(project, github, clock, full=True, per_page=2)  # comments on pages

    assert again.comment_actions == ["unchanged"] * parts
    writes = len(github.writes)
    add_slop(project.slop, slop_entry("Shim added later", severity="low"))
    third = run_publish(project, github, clock, full=True)

    assert len(github.comments(REPO, 1)) == parts + 1  # the parts and the person's reply
    assert "updated" in third.comment_actions and "created" not in third.comment_actions
    new = [f"{r.method} {r.path}" for r in github.writes[writes:]]
    assert all(w.startswith(("PATCH /repos/acme/api/issues/comments/",
                             "PATCH /repos/acme/api/issues/1")) for w in new)
    assert "Shim added later" in "".join(c["body"] for c in github.comments(REPO, 1))
    assert github.comments(REPO, 1)[parts]["body"] == "Thanks, picking up the flaky test."


def test_full_parts_no_longer_needed_say_so(project, github, clock):
    from tests._publish_helpers import write_slop

    original = json.loads(project.slop.read_text(encoding="utf-8"))["entries"]
    add_slop(project.slop, *[slop_entry(f"Shim {i:02d}", description="x " * 2500,
                                        severity="low") for i in range(30)])
    first = run_publish(project, github, clock, full=True)
    write_slop(project.slop, original)

    second = run_publish(project, github, clock, full=True)

    comments = github.comments(REPO, 1)
    assert len(comments) == len(first.comments) > len(second.comments) == 1
    assert second.comment_actions[0] == "updated"
    for comment in comments[1:]:
        assert comment["body"].splitlines()[1] == (
            "_This part of the complete listing is empty since the latest `toolkit publish`._")


def test_full_dry_run_prints_the_comments_and_sends_nothing(project, github, cli_run):
    result = cli_run("publish", "--repo", REPO, "--dry-run", "--full")

    assert result.exit_code == 0
    assert "Comment 1 of 1: " in result.stdout and _part(1) in result.stdout
    assert "## All open slop (2)" in result.stdout
    assert github.requests == []


# --------------------------------------------------------------------------- since the last one

def test_a_fresh_checkout_reads_the_last_handoff_from_the_issue(project, github, clock):
    from tests._publish_helpers import NOW

    run_publish(project, github, clock, now=NOW)
    body = github.issues(REPO)[0]["body"]
    assert body.splitlines()[1] == "<!-- agent-ledger-toolkit:handoff-at 2026-05-06 09:30 UTC -->"
    assert "this is the first handoff" in body
    (project.root / ".toolkit" / "handoff-state.json").unlink()  # another machine, say

    result = run_publish(project, github, clock, now=NOW.replace(day=9))

    body = github.issues(REPO)[0]["body"]
    assert result.action == "updated"
    assert ("ledger changes since the handoff of 2026-05-06 09:30 UTC (the last published "
            "handoff, read from issue #1)") in body
    assert "## What the ledger learned since the handoff of 2026-05-06 09:30 UTC (0)" in body
    # the state file remembers it: the next run (and `toolkit handoff`) says the same
    assert run_publish(project, github, clock, now=NOW.replace(day=10)).action == "unchanged"


def test_full_a_comment_applied_but_answered_late_is_not_duplicated(project, github, clock):
    run_publish(project, github, clock)  # the issue exists
    github.fail_next("POST", r"/issues/1/comments$", "slow", delay=1.5)

    result = run_publish(project, github, clock, full=True)

    assert result.comment_actions == ["created"]
    assert len(github.comments(REPO, 1)) == 1
    assert _comment_writes(github) == [f"POST /repos/{REPO}/issues/1/comments"]
