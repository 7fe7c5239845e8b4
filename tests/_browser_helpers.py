"""The browser tests' shared parts: the demo site (built once per test run, read by every
browser module), a http.server thread on 127.0.0.1 that serves a site (with its search
entries or, for the tests not about search, without), headless Chromium (one per test
module), and the request guard (``page``: a request to any host but 127.0.0.1 fails
the test, so do a console error and a dialog).

No request leaves the machine: Chromium sends every request for another host to a proxy at
127.0.0.1:1, where nothing listens, and resolves no other host name (it goes to 127.0.0.1
directly). The guard only listens to the requests, so the browser keeps its cache, as a
reader's does (intercepting every request, as a route does, turns the cache off and sends each
request through Python first): the ``page`` tests of a module share one browser context, each
with a page of its own, and no cookie or stored data passes from one test to the next. The
context keeps an empty page open between the tests' pages (``kept_context``).

Registered as a plugin in tests/conftest.py, so every module uses the same fixture instances
(importing a module's fixtures into another makes a second instance, and a second build).
"""

from __future__ import annotations

import functools
import io
import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        # every other host: a proxy that is not there (127.0.0.1 bypasses proxies), no DNS
        "--proxy-server=http://127.0.0.1:1",
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"]


def need_chromium() -> None:
    """At a browser module's top: skip the module when /usr/bin/chromium is missing and CI is
    unset; in CI a missing browser fails."""
    if not CHROMIUM.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is missing: the CI script must install Debian's chromium",
                        pytrace=False)
        pytest.skip(f"{CHROMIUM} not installed (apt install chromium)", allow_module_level=True)


SEARCH_INDEX = "/search/search_index.json"


class _Server(ThreadingHTTPServer):
    # Chromium opens many connections at once; the default backlog (5) lets a busy machine
    # reset some of them, which the page reports as a console error
    request_queue_size = 128

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lock = threading.Lock()
        self.empty_index: bytes | None = None  # the site's search index without its entries


class _Quiet(SimpleHTTPRequestHandler):
    server: _Server

    def __init__(self, *args: Any, overlay: Path | None = None, search: bool = True,
                 **kwargs: Any) -> None:
        self.overlay = overlay
        self.search = search
        super().__init__(*args, **kwargs)  # handles the request

    def translate_path(self, path: str) -> str:
        local = super().translate_path(path)
        if self.overlay is not None:
            mine = self.overlay / Path(local).relative_to(self.directory)
            if mine.is_file() or (mine / "index.html").is_file():  # a page, or its folder
                return str(mine)
        return local

    def send_head(self) -> Any:
        if self.search or urlsplit(self.path).path != SEARCH_INDEX:
            return super().send_head()
        with self.server.lock:  # the site's own index, its entries left out (read once)
            if self.server.empty_index is None:
                index = Path(self.translate_path(SEARCH_INDEX)).read_text(encoding="utf-8")
                self.server.empty_index = json.dumps({**json.loads(index), "docs": []}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.server.empty_index)))
        self.end_headers()
        return io.BytesIO(self.server.empty_index)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@dataclass
class Served:
    base: str
    site: Path
    server: ThreadingHTTPServer
    overlay: Path | None = None


def serve(site: Path, overlay: Path | None = None, *, search: bool = True) -> Iterator[Served]:
    """Serve ``site`` on 127.0.0.1 (a free port) while the generator is suspended; a file
    that exists under ``overlay`` is served from there (a test's own pages beside a shared
    site's, which stays as it was built). With ``search`` off, the site's search index is
    served with its configuration and no entry: for the tests that are not about search,
    as Material's search worker indexes every entry again on each page opened, a third or
    more of what opening a page of the demo site costs the browser."""
    handler = functools.partial(_Quiet, directory=str(site), overlay=overlay, search=search)
    server = _Server(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host, port = server.server_address[:2]
    try:
        yield Served(f"http://{host}:{port}/", site, server, overlay)
    finally:
        server.shutdown()
        server.server_close()


def _build_demo(base: Path) -> Path:
    """`toolkit build-site --demo` as a user runs it (analyses on), in this process (the
    browser tests are about the site, not the process: no interpreter to start and import
    the toolkit into again), in tests/conftest.py's isolated environment."""
    from click.testing import CliRunner

    from tests.conftest import isolate
    from toolkit.cli import cli

    with pytest.MonkeyPatch.context() as mp:
        isolate(mp, base / "home")
        mp.setenv("TOOLKIT_ANALYSES", "1")
        mp.chdir(base)
        result = CliRunner().invoke(cli, ["build-site", "--demo", "--demo-dir",
                                          str(base / "demo"), "--build-time", "1778414400"],
                                    catch_exceptions=False)
    assert result.exit_code == 0, result.output
    [line] = [ln for ln in result.output.splitlines() if ln.startswith("Site:")]
    site = Path(line.split(None, 1)[1])
    assert site.is_relative_to(base / "demo") and (site / "index.html").is_file()
    return site


@pytest.fixture(scope="session")
def demo_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo site as `toolkit build-site --demo` builds it, built once per test run
    (tests/conftest.py's built_once: one build shared by the xdist workers). Read it only;
    build your own for anything else."""
    from tests.conftest import built_once

    return built_once(tmp_path_factory, "browser-demo", _build_demo)


@pytest.fixture(scope="session", autouse=True)
def _demo_site_first(request: pytest.FixtureRequest) -> None:
    """Under pytest-xdist, the first worker builds the shared demo site before its first test
    when any test of the run needs it: the build takes 15-40 s (its notebooks run in a kernel),
    and built when a test first asks, it made the other worker wait on its lock whenever both
    came to a module that reads it at once (the browser modules, test_handoff.py). Built
    first, the other worker runs other modules meanwhile. A build that fails here is left for
    the tests that need it, which report the failure as theirs (pytest keeps the fixture's
    error; in the other worker, built_once tries again from nothing)."""
    if os.environ.get("PYTEST_XDIST_WORKER") != "gw0":
        return
    if not any("demo_site" in getattr(item, "fixturenames", ()) for item in request.session.items):
        return
    try:
        request.getfixturevalue("demo_site")
    except Exception:  # reported by the test that needs the site (see above)
        return


@pytest.fixture(scope="session")
def demo(demo_site: Path) -> Iterator[Served]:
    """The shared demo site, served on 127.0.0.1."""
    yield from serve(demo_site)


@pytest.fixture(scope="session")
def demo_no_search(demo_site: Path) -> Iterator[Served]:
    """The shared demo site, served with an empty search index (``serve``'s ``search``), for
    the tests that are not about search; the tests of search use ``demo``."""
    yield from serve(demo_site, search=False)


@pytest.fixture(scope="session")
def hostile_served(hostile_site: tuple[Any, Path]) -> Iterator[Served]:
    """The hostile site of tests/conftest.py (FAULTS.md E1), served on 127.0.0.1."""
    yield from serve(hostile_site[1])


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's headless Chromium, driven by Playwright: one per test module, each test in a
    context of its own. (Not one per process: Playwright's sync API keeps an asyncio event loop
    running in this thread while it is open, and a later module of the same xdist worker that
    calls asyncio.run(), as the MCP tests do, would fail.)"""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        yield b
        b.close()


@dataclass
class Watch:
    requests: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)

    def opened(self, url: Any) -> None:
        """Record a request or websocket (or its URL): a host but 127.0.0.1 is foreign."""
        url = getattr(url, "url", url)
        self.requests.append(url)
        parts = urlsplit(url)
        if parts.scheme in ("http", "https", "ws", "wss") and parts.hostname != "127.0.0.1":
            self.foreign.append(url)


def watched(context: Any) -> tuple[Any, Watch]:
    """A new page of ``context`` and what it does: every request and websocket it opens (a
    host but 127.0.0.1 is foreign), console errors, uncaught errors and dialogs (dismissed)."""
    watch = Watch()
    context.on("request", watch.opened)
    p = context.new_page()
    p.on("websocket", watch.opened)
    p.on("console", lambda m: watch.errors.append(m.text) if m.type == "error" else None)
    p.on("pageerror", lambda e: watch.errors.append(str(e)))

    def dialog(d: Any) -> None:
        watch.dialogs.append(f"{d.type}: {d.message}")
        d.dismiss()

    p.on("dialog", dialog)
    return p, watch


def check(watch: Watch) -> None:
    """Fail on any request that left 127.0.0.1, any console error and any dialog."""
    assert watch.foreign == [], f"requests left 127.0.0.1: {watch.foreign}"
    assert watch.errors == [], f"console errors: {watch.errors}"
    assert watch.dialogs == [], f"dialogs opened: {watch.dialogs}"


# Clear what the page stored for its origin that outlives it (local storage: Material keeps
# the palette there on every page), and tell whether anything else is left: IndexedDB
# databases (session storage belongs to the page's tab, closed after the test).
_FORGET = """async () => { localStorage.clear();
  return localStorage.length + ((await indexedDB.databases?.()) || []).length; }"""


def _forget(context: Any, p: Any, watch: Watch) -> bool:
    """Clear the local storage ``p`` wrote; whether ``context`` still holds something a page
    stored (a cookie, an IndexedDB, or anything in an origin other than the page's last,
    which is asked of the context only when the page opened more than one): what one test
    could otherwise leave for the next."""
    if context.cookies():
        return True
    origins = {urlsplit(u)[:2] for u in watch.requests if urlsplit(u).scheme in ("http", "https")}
    if p.url.startswith(("http://", "https://")) and origins <= {urlsplit(p.url)[:2]}:
        try:
            return bool(p.evaluate(_FORGET))
        except Exception:  # playwright's Error: the page is gone or stuck; start afresh
            return True
    state = context.storage_state(indexed_db=True)
    return any(o.get("localStorage") or o.get("indexedDB") for o in state["origins"])


def kept_context(browser: Any) -> Any:
    """A new context of ``browser`` that keeps an empty page (about:blank) open. While a context
    has no page open, Chromium lets go of what its next page would reuse: each test's page,
    closed at its end, was the context's only one, and the next test's page cost Chromium about
    0.4 s more CPU (the three browser modules went from ~53 s to ~40 s of Chromium's CPU,
    measured in a cgroup). Any open page does it, whatever it shows; this one loads nothing and
    stores nothing."""
    context = browser.new_context()
    context.new_page()
    return context


@pytest.fixture(scope="module")
def _shared_context(browser: Any) -> Iterator[list[Any]]:
    """The browser context the module's ``page`` tests share (in a one-item list, so that
    ``page`` can replace it): like a reader's browser, it keeps the site's scripts and
    styles in its cache from one page to the next, which a fresh context would load and
    compile again for each test."""
    holder = [kept_context(browser)]
    yield holder
    holder[0].close()


@pytest.fixture
def page(browser: Any, _shared_context: list[Any]) -> Iterator[tuple[Any, Watch]]:
    """A fresh page, in a context without cookies or stored data (the module's shared
    context: its HTTP cache is all a test can inherit, and a context a test stored anything
    in is replaced after it); after the test, any request that left 127.0.0.1, any console
    error and any dialog fail it."""
    context = _shared_context[0]
    p, watch = watched(context)
    yield p, watch
    stored = _forget(context, p, watch)
    p.close()
    context.remove_listener("request", watch.opened)
    if stored:
        context.close()
        _shared_context[0] = kept_context(browser)
    check(watch)
