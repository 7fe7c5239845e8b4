"""Benchmark: a site page holding a table of 10,000 rows, in headless Chromium, against a plain
page of the same site measured in the same run.

The world is the demo's (``toolkit.demo.write_demo``) with 11,000 audit rows (10,000+ actions);
the site is built in this process with its page limits lifted (100 actions a page, the
``MAX_PAGE_TABLES`` budget of table HTML a page) so that audit/actions/ holds every action:
more rows than any page of a real build, where the budget cuts long tables and links to the
data downloads. The site is served on 127.0.0.1; every request to another host is aborted and
counted (there must be none).

Measured, each the median of ``--reps`` fresh page loads (milliseconds from the start of the
page load, by the page's own clock):

1. floor: a plain page of the same site (data/, one short table) until its tables are ready
   (``data-tk-tables`` on <body>, set by toolkit/site_assets/tables.js);
2. the 10,000-row page until its tables are ready: sortable, filterable, paged;
3. the same page with the table scripts blocked: the browser's cost of the rows alone, until
   the ``load`` event;
4. on the ready 10,000-row page: one sort by a column and one filter (DataTables' calls, as a
   header click or typing makes them), in ms.

Also printed: the rows the page's HTML holds and the rows in the document once it is ready.
Run: ``python bench/bench_tables.py [--rows 11000] [--reps 5]``. Needs /usr/bin/chromium and
Playwright (the test extra). No assertions.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import os
import statistics
import sys
import tempfile
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
CHROMIUM = "/usr/bin/chromium"
BUILD_TIME = dt.datetime(2026, 11, 28, 12, 0, tzinfo=dt.UTC)


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a page closed while a file was still being sent


def build(base: Path, audit_rows: int) -> Path:
    os.environ["TOOLKIT_ANALYSES"] = "0"
    os.environ["HOME"] = str(base / "home")
    from toolkit import config as config_mod
    from toolkit import reports
    from toolkit import site as site_mod
    from toolkit.demo import write_demo
    from toolkit.loaders import SOURCES
    from toolkit.store import Store

    reports.RECENT_ACTIONS = 10 * audit_rows
    reports.ACTIONS_PER_PAGE = 10 * audit_rows
    site_mod.MAX_PAGE_TABLES = 10**9
    world = write_demo(base / "demo", audit_rows=audit_rows)
    cfg = config_mod.resolve(project=world.project).with_overrides(analyses=False)
    with Store.open(cfg.db_path, sources=SOURCES) as store:
        store.refresh(cfg)
        result = site_mod.build_site(cfg, store, build_time=BUILD_TIME)
    return result.out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=11_000, help="audit rows of the demo world")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="bench-tables-") as tmp:
        site = build(Path(tmp), args.rows)
        html_rows = (site / "audit" / "actions" / "index.html").read_text(
            encoding="utf-8").count("\n<tr><td>")
        server = _Server(("127.0.0.1", 0),
                         functools.partial(_Quiet, directory=str(site)))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{server.server_address[1]}/"
        foreign: list[str] = []
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                         args=["--no-sandbox", "--disable-gpu"])

            def load(path: str, *, scripts: bool = True) -> tuple[float, Any, Any]:
                context = browser.new_context(viewport={"width": 1280, "height": 900})

                def route(r: Any) -> None:
                    url = r.request.url
                    if urlsplit(url).hostname not in ("127.0.0.1", None):
                        foreign.append(url)
                        r.abort()
                    elif not scripts and "/assets/toolkit/" in url:
                        r.abort()
                    else:
                        r.continue_()

                context.route("**/*", route)
                page = context.new_page()
                page.goto(base + path, wait_until="load")
                if scripts:
                    page.wait_for_selector("body[data-tk-tables]", state="attached")
                    ms = float(page.get_attribute("body", "data-tk-tables") or "nan")
                else:
                    ms = page.evaluate("performance.getEntriesByType('navigation')[0]"
                                       ".loadEventEnd")
                return ms, page, context

            plain, big, raw, sorts, filters = [], [], [], [], []
            in_document = 0
            for _ in range(args.reps):
                ms, _, ctx = load("data/")
                plain.append(ms)
                ctx.close()
                ms, _, ctx = load("audit/actions/", scripts=False)
                raw.append(ms)
                ctx.close()
                ms, page, ctx = load("audit/actions/")
                big.append(ms)
                in_document = page.evaluate("document.querySelectorAll('article tbody tr')"
                                            ".length")
                # DataTables' own calls, timed in the page (a click or a key press would
                # only schedule them)
                sorts.append(page.evaluate("""() => {
                    const dt = document.querySelector('article table.dataTable').tkTable;
                    const t = performance.now(); dt.order([3, 'asc']).draw();
                    return performance.now() - t;
                }"""))
                filters.append(page.evaluate("""() => {
                    const dt = document.querySelector('article table.dataTable').tkTable;
                    const t = performance.now(); dt.search('pytest').draw();
                    return performance.now() - t;
                }"""))
                ctx.close()
            browser.close()
        server.shutdown()
        floor, ready, bare = (statistics.median(x) for x in (plain, big, raw))
        print(f"audit/actions/: {html_rows:,} rows in the page's HTML, {in_document} in the "
              f"document once ready; {args.reps} loads each (medians), 1280 px")
        print(f"floor (plain page data/, tables ready): {floor:.0f} ms")
        print(f"{html_rows:,}-row page, tables ready (sortable, filterable, paged): "
              f"{ready:.0f} ms = {ready / floor:.2f}x of floor")
        print(f"{html_rows:,}-row page without the table scripts (load event): {bare:.0f} ms "
              f"= {bare / floor:.2f}x of floor")
        print(f"on the ready page: sort by a column {statistics.median(sorts):.0f} ms, "
              f"filter {statistics.median(filters):.0f} ms")
        print(f"requests to other hosts: {len(foreign)}")


if __name__ == "__main__":
    main()
