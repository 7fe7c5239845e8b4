"""A fake GitHub REST API on 127.0.0.1 for the publish tests (FAULTS.md F1-F3).

It speaks the real endpoints the publisher uses, with GitHub's JSON shapes, headers and
error bodies, and records every request so a test can assert what was (not) sent:

* ``GET  {prefix}/repos/{o}/{r}`` (with ``permissions`` and ``has_issues``)
* ``GET  {prefix}/repos/{o}/{r}/issues?labels=&state=&per_page=&page=&sort=&direction=``
  with ``Link`` pagination headers (pull requests are returned too, as GitHub does)
* ``POST {prefix}/repos/{o}/{r}/issues``, ``PATCH`` and ``GET {prefix}/repos/{o}/{r}/issues/{n}``
* ``GET/POST {prefix}/repos/{o}/{r}/labels`` (issue writes create missing labels, as GitHub
  does for users with push access, and silently drop them for users without it)
* ``GET/POST {prefix}/repos/{o}/{r}/issues/{n}/comments`` (listed oldest first, ``Link``
  pagination) and ``GET/PATCH {prefix}/repos/{o}/{r}/issues/comments/{id}``; a comment body
  over 65,536 characters is a 422, as on GitHub
* ``GET {prefix}/rate_limit``, ``GET {prefix}/user``

Every response carries ``x-ratelimit-*`` headers. Faults are scripted per request with
:meth:`FakeGitHub.fail_next`: 401, 404, 410, a 403 that is not a rate limit, a primary
rate limit (403, ``x-ratelimit-remaining: 0`` + ``x-ratelimit-reset``), 429 with
``retry-after``, a secondary limit (403 without headers, "secondary rate limit" in the
message), 502, and ``slow``: the request is applied, then the response is delayed past the
client's timeout. ``prefix`` lets the same server stand in for GitHub Enterprise
(``/api/v3``). It binds 127.0.0.1 only; nothing here reaches the network.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

DOCS = "https://docs.github.com/rest"
BODY_MAX = 65_536


@dataclass
class Recorded:
    """One request as the server saw it."""

    method: str
    path: str  # without the prefix and query
    query: dict[str, str]
    headers: dict[str, str]
    body: Any  # decoded JSON, or the raw text when not JSON, or None
    raw: str  # the request body exactly as received ("" when none)


@dataclass
class Fault:
    method: str
    pattern: re.Pattern[str]
    kind: str
    times: int
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class FakeRepo:
    owner: str
    name: str
    has_issues: bool = True
    push: bool = True
    issues: list[dict[str, Any]] = field(default_factory=list)
    labels: dict[str, dict[str, Any]] = field(default_factory=dict)
    comments: list[dict[str, Any]] = field(default_factory=list)  # every issue's, in order


class FakeGitHub:
    """The server and its state. Use as a context manager or call ``start``/``stop``."""

    def __init__(self, *, token: str = "test-token", prefix: str = "",
                 clock: Callable[[], float] = time.time, max_per_page: int = 100) -> None:
        self.token = token
        self.prefix = prefix.rstrip("/")
        self.clock = clock
        self.max_per_page = max_per_page
        self.repos: dict[str, FakeRepo] = {}
        self.requests: list[Recorded] = []
        self.faults: list[Fault] = []
        self.remaining = 5000  # x-ratelimit-remaining of the next response (counts down)
        self.reset_in = 3600  # length of a rate-limit window (x-ratelimit-reset)
        self._window_end: int | None = None
        self._lock = threading.Lock()
        self._next_id = 1000
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------
    def start(self) -> FakeGitHub:
        handler = type("Handler", (_Handler,), {"fake": self})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        server.block_on_close = False
        self._server = server
        # a short poll: stop() returns within 0.01 s instead of the default 0.5 s (every test
        # stops a server; the idle loop costs next to nothing)
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01},
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeGitHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.server_address[1])

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.prefix}"

    # -- scripting -----------------------------------------------------------
    def add_repo(self, full_name: str, *, has_issues: bool = True, push: bool = True
                 ) -> FakeRepo:
        owner, name = full_name.split("/")
        repo = FakeRepo(owner, name, has_issues=has_issues, push=push)
        self.repos[full_name.lower()] = repo
        return repo

    def add_issue(self, full_name: str, *, title: str, body: str = "",
                  labels: tuple[str, ...] = (), state: str = "open",
                  pull_request: bool = False) -> dict[str, Any]:
        repo = self.repos[full_name.lower()]
        with self._lock:
            return self._create_issue(repo, {"title": title, "body": body,
                                             "labels": list(labels)}, state=state,
                                      pull_request=pull_request, force_labels=True)

    def fail_next(self, method: str, path_regex: str, kind: str, *, times: int = 1,
                  **params: Any) -> None:
        """Answer the next ``times`` matching requests with a fault.

        kinds: ``401``, ``404``, ``410``, ``422``, ``403`` (not a rate limit), ``primary`` (params:
        ``reset`` epoch seconds), ``429`` (params: ``retry_after``), ``secondary``, ``502``,
        ``slow`` (params: ``delay`` seconds; the request is applied first).
        """
        self.faults.append(Fault(method.upper(), re.compile(path_regex), kind, times, params))

    def issues(self, full_name: str) -> list[dict[str, Any]]:
        return [i for i in self.repos[full_name.lower()].issues if "pull_request" not in i]

    def comments(self, full_name: str, number: int) -> list[dict[str, Any]]:
        """The comments of issue ``number``, oldest first."""
        repo = self.repos[full_name.lower()]
        return [c for c in repo.comments if c["issue_number"] == number]

    def add_comment(self, full_name: str, number: int, body: str) -> dict[str, Any]:
        """A comment written by someone (not through the API), e.g. a person's reply."""
        repo = self.repos[full_name.lower()]
        with self._lock:
            return self._create_comment(repo, number, body)

    @property
    def writes(self) -> list[Recorded]:
        return [r for r in self.requests if r.method in ("POST", "PATCH", "PUT", "DELETE")]

    # -- internals -------------------------------------------------------------
    def _take_fault(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.method == method and fault.pattern.search(path) and fault.times > 0:
                    fault.times -= 1
                    return fault
        return None

    def _label(self, repo: FakeRepo, name: str) -> dict[str, Any]:
        key = name.lower()
        if key not in repo.labels:
            self._next_id += 1
            repo.labels[key] = {
                "id": self._next_id, "node_id": f"LA_{self._next_id}", "name": name,
                "url": f"{self.api_url}/repos/{repo.owner}/{repo.name}/labels/{name}",
                "color": "ededed", "default": False, "description": None}
        return repo.labels[key]

    def _create_issue(self, repo: FakeRepo, data: dict[str, Any], *, state: str = "open",
                      pull_request: bool = False, force_labels: bool = False
                      ) -> dict[str, Any]:
        self._next_id += 1
        number = len(repo.issues) + 1
        now = _iso(self.clock())
        base = f"{self.api_url}/repos/{repo.owner}/{repo.name}"
        labels = []
        if repo.push or force_labels:  # GitHub drops labels silently without push access
            labels = [self._label(repo, str(n)) for n in data.get("labels") or []]
        issue: dict[str, Any] = {
            "id": self._next_id, "node_id": f"I_{self._next_id}",
            "url": f"{base}/issues/{number}",
            "repository_url": base,
            "html_url": f"https://github.example/{repo.owner}/{repo.name}/issues/{number}",
            "number": number, "state": state, "state_reason": None,
            "title": data.get("title"), "body": data.get("body"),
            "user": {"login": "toolkit-bot", "id": 1, "type": "User"},
            "labels": labels, "assignee": None, "assignees": [], "milestone": None,
            "locked": False, "comments": 0, "created_at": now, "updated_at": now,
            "closed_at": None, "author_association": "OWNER"}
        if pull_request:
            issue["pull_request"] = {"url": f"{base}/pulls/{number}"}
        repo.issues.append(issue)
        return issue


    def _create_comment(self, repo: FakeRepo, number: int, body: str) -> dict[str, Any]:
        self._next_id += 1
        base = f"{self.api_url}/repos/{repo.owner}/{repo.name}"
        now = _iso(self.clock())
        comment = {
            "id": self._next_id, "node_id": f"IC_{self._next_id}",
            "url": f"{base}/issues/comments/{self._next_id}",
            "html_url": f"https://github.example/{repo.owner}/{repo.name}/issues/{number}"
                        f"#issuecomment-{self._next_id}",
            "issue_url": f"{base}/issues/{number}", "body": body,
            "user": {"login": "toolkit-bot", "id": 1, "type": "User"},
            "created_at": now, "updated_at": now, "author_association": "OWNER",
            "issue_number": number}  # not GitHub's: how this fake files it
        repo.comments.append(comment)
        issue = next(i for i in repo.issues if i["number"] == number)
        issue["comments"] = issue.get("comments", 0) + 1
        return comment


def _public(comment: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in comment.items() if k != "issue_number"}


def _iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class _Handler(BaseHTTPRequestHandler):
    fake: FakeGitHub
    server_version = "FakeGitHub/1.0"

    def log_message(self, format: str, *args: Any) -> None:  # silence
        pass

    def handle(self) -> None:
        # the client may time out and go away (the "slow" fault)
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            super().handle()

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    # -- plumbing --------------------------------------------------------------
    def _dispatch(self, method: str) -> None:
        fake = self.fake
        parts = urlsplit(self.path)
        path = parts.path
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length).decode("utf-8", "replace") if length else ""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw
        if fake.prefix:
            if not path.startswith(fake.prefix + "/"):
                return self._send(404, {"message": "Not Found", "documentation_url": DOCS})
            path = path[len(fake.prefix):]
        with fake._lock:
            fake.requests.append(Recorded(method, path, query, dict(self.headers.items()),
                                          body, raw))

        auth = self.headers.get("Authorization", "")
        if auth not in (f"token {fake.token}", f"Bearer {fake.token}"):
            return self._send(401, {"message": "Bad credentials", "documentation_url": DOCS})

        fault = fake._take_fault(method, path)
        delay = 0.0
        if fault is not None:
            if fault.kind == "slow":
                delay = float(fault.params.get("delay", 2.0))
            else:
                return self._fault(fault)

        status, payload, headers = self._route(method, path, query, body)
        if delay:
            time.sleep(delay)  # applied already; the client has given up by now
        self._send(status, payload, headers)

    def _fault(self, fault: Fault) -> None:
        kind = fault.kind
        if kind == "401":
            return self._send(401, {"message": "Bad credentials", "documentation_url": DOCS})
        if kind == "404":
            return self._send(404, {"message": "Not Found", "documentation_url": DOCS})
        if kind == "410":
            return self._send(410, {"message": "Issues are disabled for this repo",
                                    "documentation_url": DOCS})
        if kind == "403":
            return self._send(403, {"message": "Resource not accessible by personal access token",
                                    "documentation_url": DOCS})
        if kind == "primary":
            reset = int(fault.params.get("reset", self.fake.clock() + 60))
            return self._send(403, {"message": "API rate limit exceeded for user ID 1.",
                                    "documentation_url": DOCS},
                              {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(reset)},
                              rate_headers=False)
        if kind == "429":
            return self._send(429, {"message": "Too many requests", "documentation_url": DOCS},
                              {"retry-after": str(fault.params.get("retry_after", 30))})
        if kind == "secondary":
            return self._send(403, {"message": "You have exceeded a secondary rate limit. Please "
                                    "wait a few minutes before you try again. If you reach out "
                                    "to GitHub Support for help, please include the request ID.",
                                    "documentation_url": DOCS}, rate_headers=False)
        if kind == "422":
            return self._send(422, {"message": "Validation Failed", "errors": [
                {"resource": "Issue", "code": "custom", "field": "body",
                 "message": f"body is too long (maximum is {BODY_MAX} characters)"}],
                "documentation_url": DOCS})
        if kind == "502":
            return self._send(502, {"message": "Server Error"})
        raise AssertionError(f"unknown fault kind {kind}")

    def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None,
              *, rate_headers: bool = True) -> None:
        fake = self.fake
        data = b"" if payload is None else json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-github-api-version-selected", "2022-11-28")
        if rate_headers:
            with fake._lock:
                now = fake.clock()
                if fake._window_end is None:
                    fake._window_end = int(now) + fake.reset_in
                elif now >= fake._window_end:  # a new window: the budget is back
                    fake._window_end, fake.remaining = int(now) + fake.reset_in, 5000
                fake.remaining = max(fake.remaining - 1, 0)
                remaining, reset = fake.remaining, fake._window_end
            self.send_header("x-ratelimit-limit", "5000")
            self.send_header("x-ratelimit-remaining", str(remaining))
            self.send_header("x-ratelimit-reset", str(reset))
            self.send_header("x-ratelimit-used", str(5000 - remaining))
            self.send_header("x-ratelimit-resource", "core")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if data:
            self.wfile.write(data)

    # -- the endpoints ---------------------------------------------------------
    def _route(self, method: str, path: str, query: dict[str, str], body: Any
               ) -> tuple[int, Any, dict[str, str] | None]:
        fake = self.fake
        not_found = (404, {"message": "Not Found", "documentation_url": DOCS}, None)
        if method == "GET" and path == "/rate_limit":
            core = {"limit": 5000, "remaining": fake.remaining, "used": 5000 - fake.remaining,
                    "reset": fake._window_end or int(fake.clock()) + fake.reset_in}
            return 200, {"resources": {"core": core}, "rate": core}, None
        if method == "GET" and path == "/user":
            return 200, {"login": "toolkit-bot", "id": 1, "type": "User"}, None
        m = re.fullmatch(r"/repos/([^/]+)/([^/]+)(/.*)?", path)
        if not m:
            return not_found
        repo = fake.repos.get(f"{m.group(1)}/{m.group(2)}".lower())
        if repo is None:
            return not_found
        rest = m.group(3) or ""
        with fake._lock:
            if rest == "" and method == "GET":
                return 200, self._repo_json(repo), None
            if rest == "/labels" and method == "GET":
                return 200, list(repo.labels.values()), None
            if rest == "/labels" and method == "POST":
                if not repo.push:
                    return 403, {"message": "Must have admin rights to Repository.",
                                 "documentation_url": DOCS}, None
                return 201, fake._label(repo, str((body or {}).get("name"))), None
            if rest == "/issues" and method == "GET":
                return self._list(repo, query)
            if rest == "/issues" and method == "POST":
                if not repo.has_issues:
                    return 410, {"message": "Issues are disabled for this repo",
                                 "documentation_url": DOCS}, None
                invalid = _validate(body, creating=True)
                if invalid:
                    return invalid
                return 201, fake._create_issue(repo, body), None
            c = re.fullmatch(r"/issues/(\d+)/comments", rest)
            if c:
                number = int(c.group(1))
                if not any(i["number"] == number for i in repo.issues):
                    return not_found
                if method == "GET":
                    items = [_public(x) for x in repo.comments if x["issue_number"] == number]
                    return self._page(items, query, f"/repos/{repo.owner}/{repo.name}{rest}")
                if method == "POST":
                    invalid = _validate(body, creating=False, require_body=True)
                    if invalid:
                        return invalid
                    return 201, _public(fake._create_comment(repo, number, body["body"])), None
            c = re.fullmatch(r"/issues/comments/(\d+)", rest)
            if c:
                found = next((x for x in repo.comments if x["id"] == int(c.group(1))), None)
                if found is None:
                    return not_found
                if method == "GET":
                    return 200, _public(found), None
                if method == "PATCH":
                    invalid = _validate(body, creating=False, require_body=True)
                    if invalid:
                        return invalid
                    found["body"] = body["body"]
                    found["updated_at"] = _iso(fake.clock())
                    return 200, _public(found), None
            n = re.fullmatch(r"/issues/(\d+)", rest)
            if n:
                number = int(n.group(1))
                issue = next((i for i in repo.issues if i["number"] == number), None)
                if issue is None:
                    return not_found
                if method == "GET":
                    return 200, issue, None
                if method == "PATCH":
                    invalid = _validate(body, creating=False)
                    if invalid:
                        return invalid
                    for key in ("title", "body", "state"):
                        if key in body:
                            issue[key] = body[key]
                    if "labels" in body and repo.push:
                        issue["labels"] = [fake._label(repo, str(x)) for x in body["labels"]]
                    issue["updated_at"] = _iso(fake.clock())
                    return 200, issue, None
        return not_found

    def _repo_json(self, repo: FakeRepo) -> dict[str, Any]:
        base = f"{self.fake.api_url}/repos/{repo.owner}/{repo.name}"
        return {"id": 1, "node_id": "R_1", "name": repo.name,
                "full_name": f"{repo.owner}/{repo.name}",
                "owner": {"login": repo.owner, "id": 2, "type": "Organization"},
                "private": False, "html_url": f"https://github.example/{repo.owner}/{repo.name}",
                "url": base, "issues_url": base + "/issues{/number}",
                "has_issues": repo.has_issues, "open_issues_count": len(repo.issues),
                "permissions": {"admin": False, "maintain": repo.push, "push": repo.push,
                                "triage": repo.push, "pull": True}}

    def _list(self, repo: FakeRepo, query: dict[str, str]
              ) -> tuple[int, Any, dict[str, str] | None]:
        state = query.get("state", "open")
        wanted = [w.strip().lower() for w in query.get("labels", "").split(",") if w.strip()]
        items = []
        for issue in repo.issues:
            if state != "all" and issue["state"] != state:
                continue
            names = {lab["name"].lower() for lab in issue["labels"]}
            if any(w not in names for w in wanted):
                continue
            items.append(issue)
        if query.get("direction", "desc") == "desc":
            items = list(reversed(items))  # created order; newest first is GitHub's default
        return self._page(items, query, f"/repos/{repo.owner}/{repo.name}/issues")

    def _page(self, items: list[dict[str, Any]], query: dict[str, str], path: str
              ) -> tuple[int, Any, dict[str, str] | None]:
        """One page of ``items`` (``per_page``, ``page``) with GitHub's ``Link`` header."""
        per_page = min(int(query.get("per_page", 30)), self.fake.max_per_page)
        page = int(query.get("page", 1))
        pages = max((len(items) + per_page - 1) // per_page, 1)
        chunk = items[(page - 1) * per_page: page * per_page]
        links = []
        base = f"{self.fake.api_url}{path}"

        def link(p: int, rel: str) -> str:
            q = dict(query, page=str(p), per_page=str(per_page))
            return f'<{base}?{urlencode(q)}>; rel="{rel}"'

        if page < pages:
            links += [link(page + 1, "next"), link(pages, "last")]
        if page > 1:
            links += [link(1, "first"), link(page - 1, "prev")]
        return 200, chunk, ({"Link": ", ".join(links)} if links else None)


def _validate(body: Any, *, creating: bool, require_body: bool = False
              ) -> tuple[int, Any, None] | None:
    if not isinstance(body, dict):
        return 400, {"message": "Problems parsing JSON", "documentation_url": DOCS}, None
    errors = []
    if require_body and not isinstance(body.get("body"), str):
        errors.append({"resource": "IssueComment", "code": "missing_field", "field": "body"})
    if creating and not body.get("title"):
        errors.append({"resource": "Issue", "code": "missing_field", "field": "title"})
    text = body.get("body")
    if isinstance(text, str) and len(text) > BODY_MAX:
        errors.append({"resource": "Issue", "code": "custom", "field": "body",
                       "message": f"body is too long (maximum is {BODY_MAX} characters)"})
    if errors:
        return 422, {"message": "Validation Failed", "errors": errors,
                     "documentation_url": DOCS}, None
    return None
