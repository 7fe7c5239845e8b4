"""The only module that talks to GitHub: publish the handoff report as one issue.

``publish()`` builds the handoff report (``toolkit.handoff``), redacts it, keeps it under
GitHub's 65,536-character body limit, scans the outgoing title and body one last time for
secrets (refusing to send if anything is found), and then creates the issue the first time
and updates the same issue on every later run. The issue is found by a hidden marker line in
its body among the issues carrying the toolkit's label, listed through the issues endpoint
(not the search API, whose index lags behind). When title, body, labels and state are already
what we would send, no write request is made at all.

Division of labour with PyGithub (the client library):

* PyGithub does the HTTP: authentication, the base URL (GitHub Enterprise through
  ``--api-url``), JSON encoding, ``Link``-header pagination, typed ``Issue``/``Repository``
  objects and exceptions that carry the status, headers and message of each error.
* This module does the waiting, because it has to be testable without real minutes going by
  and because a blind retry of a create can duplicate the issue. PyGithub's own ``GithubRetry``
  sleeps with ``time.sleep`` and retries a POST after a read timeout, so it is switched off
  (``retry=None``, no built-in request spacing) and GitHub's documented policy is applied here
  once, with an injectable :class:`Clock`:

  - ``retry-after``: wait that many seconds;
  - ``x-ratelimit-remaining: 0``: wait until ``x-ratelimit-reset`` (also before the next
    request when a successful response says the budget is spent);
  - a secondary limit (a 403/429 without those headers but "rate limit" in its message):
    wait at least a minute, doubling on each repeat;
  - 5xx and network errors: short exponential backoff; all of these bounded by
    ``max_attempts`` and by ``max_wait`` for one wait (beyond it: exit 75, "run again at");
  - at least one second between writes;
  - 401, 404, 410, 422 and a 403 that is not a rate limit fail at once with what to fix;
  - a create that fails ambiguously (timeout, 5xx, dropped connection) may have been applied:
    the next step lists the issues again and adopts the one it finds instead of creating a
    duplicate.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from toolkit.errors import BusyError, NotFoundError, RefusedError, ToolkitError, UsageError
from toolkit.textio import split_url

if TYPE_CHECKING:
    from toolkit.checks import Result
    from toolkit.config import Config
    from toolkit.store import Store

DEFAULT_API_URL = "https://api.github.com"
TOOLKIT_LABEL = "agent-handoff"
BODY_LIMIT = 65_536  # GitHub's maximum issue body, in characters
USER_AGENT = "agent-ledger-toolkit"
MARKER_TEMPLATE = "<!-- agent-ledger-toolkit:handoff key={key} -->"

_REPO_RE = re.compile(r"^([A-Za-z0-9](?:[A-Za-z0-9-]{0,38}))/([A-Za-z0-9._-]{1,100})$")


# --------------------------------------------------------------------------- clock and policy

class Clock(Protocol):
    """Where waits happen: the real clock, or a fake one in tests."""

    def now(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


@dataclass(frozen=True)
class WaitPolicy:
    """GitHub's documented rate-limit advice, as numbers."""

    max_attempts: int = 5  # tries of one request (or one create) before giving up
    max_wait: float = 15 * 60  # the longest single wait; beyond it, exit 75 and say when
    secondary_wait: float = 60.0  # first wait after a secondary limit; doubles on repeats
    write_spacing: float = 1.0  # seconds between writes
    relist_wait: float = 5.0  # after an ambiguous create, before listing again


# --------------------------------------------------------------------------- inputs

@dataclass(frozen=True)
class Token:
    value: str = field(repr=False)
    source: str  # "GH_TOKEN", "GITHUB_TOKEN" or "gh auth token"


def parse_repo(repo: str) -> tuple[str, str]:
    """``OWNER/NAME`` -> (owner, name), or a usage error saying what the form is."""
    m = _REPO_RE.match((repo or "").strip())
    if not m or m.group(2) in (".", ".."):
        raise UsageError(f"--repo {repo!r} is not OWNER/NAME", hint="For example --repo acme/api")
    return m.group(1), m.group(2)


_LOOPBACK_NAMES = {"localhost"}


def normalize_api_url(url: str | None) -> str:
    """Check ``--api-url``: http(s), no credentials; plain http only to this machine."""
    if not url:
        return DEFAULT_API_URL
    parts = split_url(url.strip())
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--api-url {url!r} is not an http(s) URL",
                         hint="For GitHub Enterprise use https://HOST/api/v3")
    if parts.username or parts.password:
        raise UsageError("--api-url must not contain credentials",
                         hint="The token comes from GH_TOKEN, GITHUB_TOKEN or `gh auth token`")
    if parts.query or parts.fragment:
        raise UsageError(f"--api-url {url!r} must not have a query or fragment")
    if parts.scheme == "http" and not _is_loopback(parts.hostname):
        raise RefusedError(f"refusing to send the token over plain http to {parts.hostname}",
                           hint="Use an https:// --api-url")
    return f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}"


def _is_loopback(host: str) -> bool:
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _gh_hostname(api_url: str) -> str | None:
    """The ``gh --hostname`` for an API URL (None for github.com)."""
    parts = split_url(api_url)
    host = (parts.hostname if parts else None) or ""
    return None if host in ("api.github.com", "github.com") else host


NO_TOKEN_HINT = ("Set GH_TOKEN or GITHUB_TOKEN, or install the GitHub CLI and run `gh auth login` "
                 "so that `gh auth token` prints one")


def find_token(env: Mapping[str, str], *, api_url: str = DEFAULT_API_URL) -> Token:
    """The token from GH_TOKEN, then GITHUB_TOKEN, then ``gh auth token`` (if gh is on PATH)."""
    for name in ("GH_TOKEN", "GITHUB_TOKEN"):
        value = (env.get(name) or "").strip()
        if value:
            return Token(value, name)
    gh = shutil.which("gh", path=env.get("PATH"))
    if gh:
        cmd = [gh, "auth", "token"]
        host = _gh_hostname(api_url)
        if host:
            cmd += ["--hostname", host]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=20,
                                  env=dict(env), check=False)
        except (OSError, subprocess.SubprocessError):
            done = None
        lines = (done.stdout or "").strip().splitlines() if done and done.returncode == 0 else []
        if lines and lines[0].strip():
            return Token(lines[0].strip(), "gh auth token")
        raise ToolkitError("no GitHub token found: GH_TOKEN and GITHUB_TOKEN are not set and "
                           "`gh auth token` printed none",
                           hint="Set GH_TOKEN or GITHUB_TOKEN, or run `gh auth login`")
    raise ToolkitError("no GitHub token found: GH_TOKEN and GITHUB_TOKEN are not set and the "
                       "GitHub CLI (gh) is not installed", hint=NO_TOKEN_HINT)


def token_for(cfg: Config, api_url: str | None = None,
              env: Mapping[str, str] | None = None) -> Token:
    """:func:`find_token` for the API ``publish`` sends to (``api_url``, else
    ``publish.api_url`` of ``toolkit.yaml``, else GitHub's), from ``env`` (default: the
    process's environment)."""
    import os

    return find_token(os.environ if env is None else env,
                      api_url=normalize_api_url(api_url or cfg.publish.get("api_url")))


def marker_for(key: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", key).strip("-") or "default"
    return MARKER_TEMPLATE.format(key=safe)


def has_marker(body: str | None, marker: str) -> bool:
    return body is not None and any(line.strip() == marker for line in body.splitlines())


# --------------------------------------------------------------------------- the client

class _Ambiguous(Exception):
    """A write whose outcome is unknown (timeout, 5xx, dropped connection)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class IssueView:
    """What we need of one issue from the list endpoint."""

    number: int
    title: str
    body: str
    state: str
    labels: list[str]
    url: str
    obj: Any = field(repr=False, default=None)  # the PyGithub Issue, for edit()


class GitHubClient:
    """PyGithub with the wait policy around it. One instance per publish run."""

    def __init__(self, api_url: str, token: Token, *, clock: Clock | None = None,
                 policy: WaitPolicy | None = None, timeout: int = 30, per_page: int = 100,
                 notify: Callable[[str], None] | None = None) -> None:
        from github import Auth, Github

        self.api_url = api_url
        self.token = token
        self.clock = clock or SystemClock()
        self.policy = policy or WaitPolicy()
        self.notify = notify or (lambda message: None)
        self.waited = 0.0
        self.requests = 0
        self._last_write: float | None = None
        self._secondary_hits = 0
        self.gh = Github(auth=Auth.Token(token.value), base_url=api_url, timeout=int(timeout),
                         per_page=per_page, retry=None, seconds_between_requests=None,
                         seconds_between_writes=None, user_agent=USER_AGENT)

    def close(self) -> None:
        self.gh.close()

    # -- the policy ------------------------------------------------------------
    def pause(self, seconds: float, why: str) -> None:
        """Wait on the client's clock (counted in ``waited``)."""
        self._sleep(seconds, why)

    def _sleep(self, seconds: float, why: str) -> None:
        if seconds <= 0:
            return
        if seconds > self.policy.max_wait:
            until = dt.datetime.fromtimestamp(self.clock.now() + seconds, dt.UTC)
            raise BusyError(f"GitHub asks to wait {seconds / 60:.0f} minutes: {why}",
                            hint=f"Run again after {until:%Y-%m-%d %H:%M} UTC")
        self.notify(f"Waiting {seconds:.0f} s: {why}")
        self.clock.sleep(seconds)
        self.waited += seconds

    def _before(self, write: bool) -> None:
        remaining, _limit = self.gh.requester.rate_limiting
        if remaining == 0:
            reset = self.gh.requester.rate_limiting_resettime
            self._sleep(max(reset - self.clock.now(), 0) + 1,
                        "the API rate limit is used up until its reset")
            self.gh.requester.rate_limiting = (-1, -1)
        if write and self._last_write is not None:
            gap = self.clock.now() - self._last_write
            if gap < self.policy.write_spacing:
                self._sleep(self.policy.write_spacing - gap, "spacing writes")

    def call(self, what: str, fn: Callable[[], Any], *, write: bool = False,
             create: bool = False, repo: str = "") -> Any:
        """Run one request with the wait policy. ``create`` makes 5xx/timeouts ambiguous."""
        import requests
        from github import GithubException

        attempt = 0
        while True:
            attempt += 1
            self._before(write)
            self.requests += 1
            try:
                result = fn()
            except GithubException as exc:
                if write:
                    self._last_write = self.clock.now()
                wait, why = self._classify(exc, what, repo, create=create, attempt=attempt)
            except (AssertionError, ValueError, KeyError, TypeError) as exc:
                # PyGithub asserts that URLs in an answer point at the API it was given
                # (another port, another host), and parses JSON bodies: a malformed answer
                if create:
                    raise _Ambiguous(_unexpected_reason(exc)) from None
                raise _unexpected(what, exc, self.api_url) from None
            except requests.exceptions.RequestException as exc:
                if write:
                    self._last_write = self.clock.now()
                reason = _network_reason(exc)
                if create:
                    raise _Ambiguous(reason) from None
                if attempt >= self.policy.max_attempts:  # kept failing: exit 75, as a 5xx
                    raise BusyError(f"cannot reach GitHub at {self.api_url} for {what}: "
                                       f"{reason}", hint="Check --api-url and the network, "
                                       "then run again") from None
                wait, why = min(2.0 ** attempt, 60.0), f"{reason}; retrying {what}"
            else:
                if write:
                    self._last_write = self.clock.now()
                return result
            if attempt >= self.policy.max_attempts:
                raise BusyError(f"GitHub still refuses {what} after {attempt} attempts "
                                f"({why})", hint="Run again later")
            self._sleep(wait, f"{why} (attempt {attempt + 1} of {self.policy.max_attempts})")

    def _classify(self, exc: Any, what: str, repo: str, *, create: bool, attempt: int
                  ) -> tuple[float, str]:
        """(seconds to wait, why) for a retryable error; raise for the others."""
        status = int(getattr(exc, "status", 0) or 0)
        headers = {str(k).lower(): str(v) for k, v in (getattr(exc, "headers", None) or {}).items()}
        message = _message(exc)
        lower = message.lower()
        retry_after = headers.get("retry-after")
        exhausted = headers.get("x-ratelimit-remaining") == "0"
        if status in (403, 429) and (retry_after or exhausted or "rate limit" in lower
                                     or status == 429):
            if retry_after:
                return max(_seconds(retry_after, 60.0), 1.0), "GitHub sent retry-after"
            if exhausted:
                reset = _seconds(headers.get("x-ratelimit-reset", ""), 0.0)
                wait = max(reset - self.clock.now(), 0.0) + 1 if reset else 60.0
                return wait, "the API rate limit is used up until its reset"
            self._secondary_hits += 1
            wait = self.policy.secondary_wait * 2 ** (self._secondary_hits - 1)
            return wait, "GitHub's secondary rate limit"
        if status >= 500:
            if create:
                raise _Ambiguous(f"GitHub answered {status}") from None
            return min(2.0 ** attempt, 60.0), f"GitHub answered {status}"
        source = self.token.source
        if status == 401:
            raise ToolkitError(f"GitHub rejected the token from {source} "
                               f"(401 {message or 'Bad credentials'})",
                               hint="It is wrong, expired or revoked; set a valid one in GH_TOKEN "
                               "or GITHUB_TOKEN, or run `gh auth login`") from None
        if status == 404:
            hint = ("Check --repo and that the token can see the repository (the `repo` scope "
                    "or fine-grained access to it for a private one)")
            parts = split_url(self.api_url)
            host = (parts.hostname if parts else None) or ""
            if (parts is not None and parts.path in ("", "/") and _gh_hostname(self.api_url)
                    and not _is_loopback(host)):
                hint += "; GitHub Enterprise serves the API under /api/v3"
            raise NotFoundError(f"{what}: not found at {self.api_url} (404), or the token "
                                f"from {source} cannot see it", hint=hint) from None
        if status == 410:
            raise ToolkitError(f"{what}: GitHub answered 410 Gone: issues are disabled there "
                               "(or the issue was deleted)",
                               hint="Enable Issues in the repository settings, or publish to "
                               "another --repo") from None
        if status == 403:
            raise RefusedError(f"{what}: GitHub refused it (403: {message or 'Forbidden'})",
                               hint=f"The token from {source} lacks permission; give it Issues "
                               "read and write access (fine-grained) or the `repo` scope "
                               "(classic)") from None
        if status == 422:
            raise ToolkitError(f"{what}: GitHub rejected the issue (422: {message})",
                               hint="Nothing was changed") from None
        raise ToolkitError(f"{what}: GitHub answered {status or 'an error'}"
                           f"{': ' + message if message else ''}") from None

    # -- the operations ----------------------------------------------------------
    def repository(self, full_name: str) -> Any:
        return self.call(f"reading repository {full_name}", lambda: self.gh.get_repo(full_name),
                         repo=full_name)

    def labelled_issues(self, repo: Any, label: str) -> list[IssueView]:
        """Every issue (any state) carrying ``label``, oldest first, all pages (Link headers)."""
        plist = repo.get_issues(state="all", labels=[label], sort="created", direction="asc")
        out: list[IssueView] = []
        # PyGithub pages lazily while iterating; drive it one page at a time so each page
        # request gets the wait policy (a failed page leaves the list where it was).
        while plist._couldGrow():
            page = self.call(f"listing issues labelled {label} in {repo.full_name}", plist._grow,
                             repo=repo.full_name)
            for issue in page:
                raw = issue._rawData  # list data as sent; attribute access could refetch
                if isinstance(raw, dict) and raw.get("pull_request"):
                    continue
                out.append(_view(issue))
        return out

    def create(self, repo: Any, *, title: str, body: str, labels: Sequence[str]) -> IssueView:
        issue = self.call(f"creating the issue in {repo.full_name}",
                          lambda: repo.create_issue(title=title, body=body, labels=list(labels)),
                          write=True, create=True, repo=repo.full_name)
        return _view(issue)

    def update(self, issue: IssueView, repo_name: str, **changes: Any) -> IssueView:
        obj = issue.obj
        self.call(f"updating issue #{issue.number} in {repo_name}", lambda: obj.edit(**changes),
                  write=True,
                  repo=repo_name)
        return _view(obj)

    def comments(self, issue: IssueView, repo_name: str) -> list[CommentView]:
        """Every comment of ``issue``, oldest first, all pages (one request per page)."""
        plist = issue.obj.get_comments()
        out: list[CommentView] = []
        while plist._couldGrow():
            page = self.call(f"listing the comments of issue #{issue.number} in {repo_name}",
                             plist._grow, repo=repo_name)
            out += [_comment_view(c) for c in page]
        return out

    def add_comment(self, issue: IssueView, repo_name: str, body: str) -> CommentView:
        obj = issue.obj
        comment = self.call(f"commenting on issue #{issue.number} in {repo_name}",
                            lambda: obj.create_comment(body), write=True, create=True,
                            repo=repo_name)
        return _comment_view(comment)

    def edit_comment(self, comment: CommentView, repo_name: str, body: str) -> None:
        obj = comment.obj
        self.call(f"updating comment {comment.id} in {repo_name}", lambda: obj.edit(body),
                  write=True, repo=repo_name)


@dataclass
class CommentView:
    """What we need of one issue comment."""

    id: int
    body: str
    obj: Any = field(repr=False, default=None)  # the PyGithub IssueComment, for edit()


def _comment_view(comment: Any) -> CommentView:
    try:
        raw = comment._rawData
        return CommentView(id=int(raw["id"]), body=raw.get("body") or "", obj=comment)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise _unexpected("reading a comment", exc) from None


def _unexpected_reason(exc: BaseException) -> str:
    if isinstance(exc, AssertionError):  # PyGithub's check of the URLs in an answer
        detail = "a URL that is not on the API's host, port and path"
    else:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"GitHub answered something unexpected ({detail})"


def _unexpected(what: str, exc: BaseException, api_url: str | None = None) -> ToolkitError:
    """A malformed answer from the API (a URL on another host or port, a broken body)."""
    where = f"--api-url {api_url}" if api_url else "--api-url"
    return ToolkitError(f"{what}: {_unexpected_reason(exc)}",
                        hint=f"Check that {where} is the GitHub API (a proxy in between may "
                             "rewrite its answers)")


def _view(issue: Any) -> IssueView:
    try:
        return _parse_view(issue)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise _unexpected("reading an issue", exc) from None


def _parse_view(issue: Any) -> IssueView:
    raw = issue._rawData
    return IssueView(number=int(raw["number"]), title=raw.get("title") or "",
                     body=raw.get("body") or "", state=raw.get("state") or "open",
                     labels=[lab.get("name", "") for lab in raw.get("labels") or []
                             if isinstance(lab, dict)],
                     url=raw.get("html_url") or "", obj=issue)


def _message(exc: Any) -> str:
    from toolkit.display import visible

    data = getattr(exc, "data", None)
    message = ""
    if isinstance(data, dict):
        message = str(data.get("message") or "")
        errors = data.get("errors")
        if isinstance(errors, list):
            details = [str(e.get("message") or e.get("code") or "") for e in errors
                       if isinstance(e, dict)]
            details = [d for d in details if d]
            if details:
                message += ": " + "; ".join(details)
    elif isinstance(data, str):
        message = data
    message = visible(message.strip(), single_line=True)
    return message if len(message) <= 300 else message[:299] + "…"


def _seconds(value: str, default: float) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def _network_reason(exc: Exception) -> str:
    import requests

    if isinstance(exc, requests.exceptions.Timeout):
        return "the request timed out"
    if isinstance(exc, requests.exceptions.ConnectionError):
        return "the connection failed"
    return type(exc).__name__


# --------------------------------------------------------------------------- publish

@dataclass
class PublishResult:
    action: str  # "created", "updated", "unchanged", "dry-run"
    repo: str
    title: str
    body: str
    labels: list[str]
    number: int | None = None
    url: str | None = None
    left_out: list[str] = field(default_factory=list)  # what the body limit cut
    notes: list[str] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)  # --full: the complete listing's parts
    comment_actions: list[str] = field(default_factory=list)  # per part: created/updated/...
    requests: int = 0
    waited: float = 0.0


def final_scan(title: str, body: str, scanner: Callable[[str], list[Any]] | None = None,
               comments: Sequence[str] = ()) -> None:
    """Refuse (exit 1) when a secret is still present in what would be sent (the title, the
    body and any comments): in the text as written, with Markdown escapes undone,
    URL-decoded, entity-decoded, and case-folded (a slug or a link lowercases a key; FAULTS
    H1)."""
    from toolkit.mdsafe import unescape as unescape_markdown
    from toolkit.redact import find_secrets_anywhere, scan_variants

    parts = [("title", title), ("body", body)]
    parts += [(f"comment {n}", text) for n, text in enumerate(comments, 1)]
    for part, text in parts:
        findings: list[Any] = []
        for plain in dict.fromkeys((text, unescape_markdown(text))):
            if scanner is None:
                findings = find_secrets_anywhere(plain)
            else:
                for variant in scan_variants(plain):
                    findings = list(scanner(variant)) or list(scanner(variant.casefold()))
                    if findings:
                        break
            if findings:
                break
        if findings:
            first = findings[0]
            kinds = sorted({f.kind for f in findings})
            line = getattr(first, "line", None)
            where = f"line {line}, " if line else ""
            raise RefusedError(
                f"the issue {part} still contains {len(findings)} possible secret(s) after "
                f"redaction ({', '.join(kinds)}; first at {where}character {first.start}); "
                "nothing was sent",
                hint="Remove the secret from the source records, or extend toolkit.redact")


def publish(store: Store, cfg: Config, *, repo: str, labels: Sequence[str] = (),
            title: str | None = None, dry_run: bool = False, api_url: str | None = None,
            since: dt.date | None = None, env: Mapping[str, str] | None = None,
            clock: Clock | None = None, policy: WaitPolicy | None = None,
            redactor: Callable[[str], str] | None = None,
            scanner: Callable[[str], list[Any]] | None = None, timeout: int = 30,
            per_page: int = 100, now: dt.datetime | None = None,
            notify: Callable[[str], None] | None = None, full: bool = False,
            checks: Sequence[Result] | None = None, token: Token | None = None
            ) -> PublishResult:
    """Publish the handoff report as one GitHub issue (created once, then kept up to date).

    ``full``: the complete listing goes to comments on the same issue, each under the body
    limit, found again by a hidden marker per part and updated in place. When the state file
    knows no earlier handoff, "since the last handoff" is read from the issue itself.
    ``checks``: the check results the report lists (``toolkit.checks.run_configured``).
    ``token``: the one :func:`find_token` gave (looked up here when not given, before the
    report is built: a missing token is said before any work)."""
    from toolkit import handoff

    full_name = "/".join(parse_repo(repo))
    api = normalize_api_url(api_url or cfg.publish.get("api_url"))
    if not dry_run:
        token = token or token_for(cfg, api_url, env)
    wanted = _labels(labels, cfg.publish.get("labels"))
    marker = marker_for(handoff.project_key(cfg))

    def render(previous: tuple[str, str] | None = None) -> tuple[Any, Any, list[str]]:
        report = handoff.build_report(store, cfg, since=since, now=now, previous=previous,
                                      checks=checks)
        doc = handoff.render_issue(report, title=title or cfg.publish.get("title"),
                                   redactor=redactor, limit=BODY_LIMIT, marker=marker,
                                   full=full)
        parts = (handoff.render_comments(report, key_marker=lambda n: part_marker(marker, n),
                                         redactor=redactor, limit=BODY_LIMIT)
                 if full else [])
        final_scan(doc.title, doc.body, scanner, parts)
        return report, doc, parts

    report, doc, parts = render()
    result = PublishResult(action="dry-run", repo=full_name, title=doc.title, body=doc.body,
                           labels=wanted, left_out=list(doc.left_out), comments=parts)
    if dry_run or token is None:  # (a token is found above unless this is a dry run)
        return result

    client = GitHubClient(api, token, clock=clock, policy=policy, timeout=timeout,
                          per_page=per_page, notify=notify)
    try:
        gh_repo = _repository(client, full_name)
        found = _find(client, gh_repo, marker, result)
        at = handoff.read_handoff_at(found.body) if found is not None else None
        if at and since is None and not handoff.has_earlier_handoff(cfg):
            report, doc, parts = render((at, f"issue #{found.number}" if found else "the issue"))
            result.title, result.body, result.comments = doc.title, doc.body, parts
            result.left_out = list(doc.left_out)
        issue = _send(client, gh_repo, full_name, marker, result, found)
        if full:
            _sync_comments(client, full_name, issue, marker, result)
    finally:
        result.requests, result.waited = client.requests, client.waited
        client.close()
    handoff.record_state(cfg, report)
    return result


def part_marker(marker: str, n: int) -> str:
    """The hidden first line of part ``n`` of the complete listing (``publish --full``)."""
    return marker.replace(" -->", f" part={n} -->")


EMPTY_PART = "_This part of the complete listing is empty since the latest `toolkit publish`._"


def _sync_comments(client: GitHubClient, full_name: str, issue: IssueView, marker: str,
                   result: PublishResult) -> None:
    """Make the issue's listing comments the parts in ``result.comments``: each part updated
    in place where its comment exists, created where not; parts no longer needed say so."""
    found: dict[int, CommentView] = {}
    extra: list[int] = []
    pattern = re.compile(re.escape(marker.replace(" -->", "")) + r" part=(\d+) -->")
    for listed in client.comments(issue, full_name):
        n = _part_of(listed.body, pattern)
        if n is None:
            continue
        if n in found:
            extra.append(listed.id)
        else:
            found[n] = listed
    wanted = {n: body for n, body in enumerate(result.comments, 1)}
    for n in sorted(set(found) - set(wanted)):
        wanted[n] = part_marker(marker, n) + "\n" + EMPTY_PART + "\n"
    for n, body in sorted(wanted.items()):
        comment = found.get(n)
        if comment is None:
            _add_comment(client, full_name, issue, body, pattern, n)
            result.comment_actions.append("created")
        elif _norm(comment.body) != _norm(body):
            client.edit_comment(comment, full_name, body)
            result.comment_actions.append("updated")
        else:
            result.comment_actions.append("unchanged")
    if extra:
        result.notes.append("other comments carry the same part marker and were left alone: "
                            + ", ".join(str(x) for x in extra))


def _part_of(body: str, pattern: re.Pattern[str]) -> int | None:
    """The part number of a listing comment: a line that is exactly its marker (the issue
    body's rule, ``has_marker``)."""
    for line in body.splitlines():
        m = pattern.fullmatch(line.strip())
        if m:
            return int(m.group(1))
    return None


def _add_comment(client: GitHubClient, full_name: str, issue: IssueView, body: str,
                 pattern: re.Pattern[str], n: int) -> None:
    """Create part ``n``; after an ambiguous failure, list again and adopt it if it landed."""
    for _attempt in range(client.policy.max_attempts):
        try:
            client.add_comment(issue, full_name, body)
            return
        except _Ambiguous as amb:
            client.notify(f"Commenting: {amb.reason}; listing again before retrying")
            client.pause(client.policy.relist_wait, "before listing the comments again")
        for comment in client.comments(issue, full_name):
            if _part_of(comment.body, pattern) == n:
                if _norm(comment.body) != _norm(body):
                    client.edit_comment(comment, full_name, body)
                return
    raise BusyError(f"GitHub did not confirm the comment on issue #{issue.number} after "
                    f"{client.policy.max_attempts} attempts",
                    hint="Run again later; the next run looks for it before commenting")


def _labels(extra: Sequence[str], configured: Any) -> list[str]:
    out = [TOOLKIT_LABEL]
    more = list(configured or []) if isinstance(configured, (list, tuple)) else (
        [configured] if configured else [])
    for label in [*more, *extra]:
        label = str(label).strip()
        if not label:
            raise UsageError("--label must not be empty")
        if len(label) > 50:
            raise UsageError(f"--label {label[:20]!r}… is longer than GitHub's 50 characters")
        if label.lower() not in {x.lower() for x in out}:
            out.append(label)
    return out


def _repository(client: GitHubClient, full_name: str) -> Any:
    """The repository, checked: issues enabled and a token that can keep the label."""
    repo = client.repository(full_name)
    raw = repo._rawData
    if raw.get("has_issues") is False:
        raise ToolkitError(f"issues are disabled in {full_name}",
                           hint="Enable Issues in the repository settings, or publish to "
                           "another --repo")
    perms = raw.get("permissions")
    if isinstance(perms, dict) and not (perms.get("push") or perms.get("triage")):
        raise RefusedError(
            f"the token from {client.token.source} has no write access to {full_name}: GitHub "
            f"would drop the {TOOLKIT_LABEL!r} label the toolkit finds its issue by, and every "
            "run would open a new issue", hint="Use a token with push (or triage) access")
    return repo


def _send(client: GitHubClient, repo: Any, full_name: str, marker: str, result: PublishResult,
          found: IssueView | None) -> IssueView:
    """Update the issue found (by ``_find``, already run once) or create it; returns it."""
    policy = client.policy
    ambiguous: str | None = None
    for attempt in range(policy.max_attempts):
        existing = found if attempt == 0 else _find(client, repo, marker, result)
        if existing is not None:
            _update(client, full_name, existing, result)
            if ambiguous:
                result.action = "created"
                result.notes.append(f"creating the issue failed ambiguously ({ambiguous}) but "
                                    f"it had been applied: found #{existing.number} on listing "
                                    "again, no duplicate created")
            return existing
        try:
            issue = client.create(repo, title=result.title, body=result.body,
                                  labels=result.labels)
        except _Ambiguous as amb:
            ambiguous = amb.reason
            client.notify(f"Creating the issue: {amb.reason}; listing again before retrying")
            client.pause(policy.relist_wait, "before listing the issues again")
            continue
        if TOOLKIT_LABEL.lower() not in {x.lower() for x in issue.labels}:
            raise ToolkitError(
                f"issue #{issue.number} was created in {full_name} but GitHub dropped its "
                f"{TOOLKIT_LABEL!r} label, so the next run cannot find it",
                hint=f"Add the label by hand ({issue.url}) and use a token with push access")
        result.action, result.number, result.url = "created", issue.number, issue.url
        return issue
    raise BusyError(f"GitHub did not confirm creating the issue in {full_name} after "
                    f"{policy.max_attempts} attempts, and it is not listed",
                    hint="Run again later; the next run looks for it before creating one")


def _find(client: GitHubClient, repo: Any, marker: str, result: PublishResult
          ) -> IssueView | None:
    found = [i for i in client.labelled_issues(repo, TOOLKIT_LABEL) if has_marker(i.body, marker)]
    if not found:
        return None
    open_ = [i for i in found if i.state == "open"]
    chosen = (open_ or found)[0]
    others = [f"#{i.number}" for i in found if i is not chosen]
    if others:
        result.notes.append(f"other issues carry the same marker and were left alone: "
                            f"{', '.join(others)}")
    return chosen


def _norm(text: str) -> str:
    return text.replace("\r\n", "\n").rstrip()


def _update(client: GitHubClient, full_name: str, issue: IssueView, result: PublishResult
            ) -> None:
    changes: dict[str, Any] = {}
    if _norm(issue.body) != _norm(result.body):
        changes["body"] = result.body
    if issue.title != result.title:
        changes["title"] = result.title
    have = {x.lower() for x in issue.labels}
    if any(x.lower() not in have for x in result.labels):
        changes["labels"] = issue.labels + [x for x in result.labels if x.lower() not in have]
    if issue.state != "open":
        changes["state"] = "open"
        result.notes.append(f"issue #{issue.number} was closed and has been reopened")
    result.number, result.url = issue.number, issue.url
    if not changes:
        result.action = "unchanged"
        return
    client.update(issue, full_name, **changes)
    result.action = "updated"
