"""Hand-over commands: handoff (the report as Markdown) and publish (the report as an issue)."""

from __future__ import annotations

import datetime as dt

import click

from toolkit.cli._common import OutputFile, get_config


def _since(value: str | None) -> dt.date | None:
    from toolkit.errors import UsageError

    if value is None:
        return None
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        raise UsageError(f"--since {value!r} is not a date; use YYYY-MM-DD") from None


@click.command()
@click.option("--since", metavar="YYYY-MM-DD", default=None,
              help="Report ledger entries dated on or after this day, instead of the changes "
                   "since the last handoff.")
@click.option("--output", "-o", type=OutputFile(), default=None, metavar="FILE",
              help="Write the report to FILE (atomically) instead of printing it.")
@click.option("--full", is_flag=True,
              help="Add the complete listing: every open slop entry in CodeSmith's layout, "
                   "every ledger change, refuted and pending dispatch, dead end and no-go.")
def handoff(since: str | None, output: str | None, full: bool) -> None:
    """Render the handoff report as redacted Markdown.

    Most urgent first: a short summary, the active goal, the checks that fail (`toolkit
    check`), dispatches awaiting a verdict, tasks
    over the retry limit each with its dead ends and no-gos, what the ledger learned since
    the last handoff (new, promoted, demoted, removed), then debt: open slop by bucket and
    severity with the critical and high items. The rest is one click away (with site_url
    configured, links to the built site) or counted with the command that lists it; --full
    adds the complete listing. Every value is redacted (toolkit.redact) before it is written.

    "Since the last handoff": the last handoff is remembered in .toolkit/handoff-state.json;
    the first handoff covers the last 7 days of activity (--since sets another start). While
    the sources do not change, re-running gives the same report. --since does not update
    that state.
    """
    from pathlib import Path

    from toolkit.cli._common import open_store_checked
    from toolkit.handoff import hand_over, render_report
    from toolkit.site import site_redaction_warning

    cfg = get_config()
    warning = site_redaction_warning(cfg)
    if warning:
        click.echo(f"Warning: {warning}", err=True)
    store, checks = open_store_checked(cfg)
    day = _since(since)
    with store:
        report, text = render_report(store, cfg, since=day, full=full, checks=checks)
    # printed (or written) with the store closed, a reader like `less` holding up no other
    # command; remembered only once it was (see hand_over)
    if not output:
        click.echo(text, nl=False)
    hand_over(cfg, report, text, output=Path(output) if output else None)
    if output:
        click.echo(f"Handoff report written to {output} ({len(text):,} characters)", err=True)


@click.command()
@click.option("--repo", metavar="OWNER/NAME", default=None,
              help="Repository to publish to (default: publish.repo in toolkit.yaml).")
@click.option("--label", "labels", multiple=True, metavar="L",
              help="Extra label for the issue (repeatable). The issue always carries the "
                   "'agent-handoff' label, which the toolkit finds it by.")
@click.option("--title", default=None, metavar="T",
              help="Issue title (default: 'Agent handoff: <project>').")
@click.option("--dry-run", is_flag=True,
              help="Print the title and body that would be sent; send nothing (no token needed).")
@click.option("--api-url", default=None, metavar="URL",
              help="GitHub API URL (default: https://api.github.com; GitHub Enterprise: "
                   "https://HOST/api/v3).")
@click.option("--timeout", type=click.IntRange(1, 600), default=30, show_default=True,
              help="Seconds to wait for one GitHub response.")
@click.option("--full", is_flag=True,
              help="Also post the complete listing (what `handoff --full` adds) as comments on "
                   "the same issue, each under the limit, updated in place on later runs.")
def publish(repo: str | None, labels: tuple[str, ...], title: str | None, dry_run: bool,
            api_url: str | None, timeout: int, full: bool) -> None:
    """Publish the handoff report as a GitHub issue, and keep that one issue up to date.

    The first run creates the issue; later runs update the same issue, found by a hidden
    marker in its body among the issues labelled 'agent-handoff' (listed, not searched).
    When the body, title and labels are unchanged nothing is written (a closed handoff issue
    is reopened, not duplicated). The body is the report of `toolkit handoff`, redacted,
    kept under GitHub's 65,536 characters (the longest sections are cut, with a note), and
    scanned for secrets one last time: if anything is found, nothing is sent (exit 1).
    With --full the complete listing follows as comments (scanned the same way), one per
    part, each found again by a hidden marker and edited in place.

    "Since the last handoff" comes from .toolkit/handoff-state.json; when that file knows
    no earlier handoff, from the hidden time line of the published issue; else the last 7
    days of activity.

    The token comes from GH_TOKEN, GITHUB_TOKEN, or `gh auth token`. Rate limits are
    honoured as GitHub documents them (retry-after, x-ratelimit-reset, secondary limits);
    when GitHub asks for a wait longer than 15 minutes the command exits 75 and says when to
    run again.
    """
    from toolkit.cli._common import open_store_checked
    from toolkit.errors import UsageError
    from toolkit.publish import BODY_LIMIT, parse_repo, token_for
    from toolkit.publish import publish as run_publish
    from toolkit.site import site_redaction_warning

    cfg = get_config()
    repo = repo or cfg.publish.get("repo")
    if not repo:
        raise UsageError("no repository given", hint="Pass --repo OWNER/NAME or set "
                         "publish.repo in toolkit.yaml")
    # what the user must fix is said before the store is loaded and the checks are run
    parse_repo(str(repo))
    token = None if dry_run else token_for(cfg, api_url)

    def notify(message: str) -> None:
        click.echo(message, err=True)

    warning = site_redaction_warning(cfg)
    if warning:
        notify(f"Warning: {warning}")

    store, checks = open_store_checked(cfg)
    with store:
        result = run_publish(store, cfg, repo=str(repo), labels=labels, title=title,
                             dry_run=dry_run, api_url=api_url, timeout=timeout, notify=notify,
                             full=full, checks=checks, token=token)
    if dry_run:
        click.echo(f"Title:  {result.title}")
        click.echo(f"Labels: {', '.join(result.labels)}")
        click.echo(f"Repo:   {result.repo}")
        click.echo(f"Body:   {len(result.body):,} characters (limit {BODY_LIMIT:,})")
        click.echo("")
        click.echo(result.body, nl=False)
        click.echo("")
        for n, part in enumerate(result.comments, 1):
            click.echo(f"Comment {n} of {len(result.comments)}: {len(part):,} characters")
            click.echo("")
            click.echo(part, nl=False)
            click.echo("")
    for item in result.left_out:
        click.echo(f"Left out to fit the body limit: {item}", err=True)
    for note in result.notes:
        click.echo(f"Note: {note}", err=True)
    if dry_run:
        click.echo("Dry run: nothing was sent to GitHub.")
    elif result.action == "unchanged":
        click.echo(f"Issue #{result.number} is up to date; nothing was sent: {result.url}")
    else:
        click.echo(f"{result.action.capitalize()} issue #{result.number}: {result.url}")
    if result.comment_actions:
        counts = {a: result.comment_actions.count(a) for a in dict.fromkeys(
            result.comment_actions)}
        click.echo("Listing comments: " + ", ".join(f"{n} {a}" for a, n in counts.items()))
