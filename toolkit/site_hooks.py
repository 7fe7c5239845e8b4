"""MkDocs hooks of the generated site (the generated mkdocs.yml lists this file).

``toolkit.site`` renders tables straight to HTML (escaped there) and leaves a placeholder
paragraph in the Markdown; this hook puts each table's HTML in place of its placeholder, from
``tables/`` next to the generated mkdocs.yml (one JSON file per first two digits of the
tables' digests, read when a page needs one). The placeholder holds an HTML entity that
AI-written text cannot produce, and the replacement always comes from those files, never from
the page. Every table is put in place after the search plugin read the page. Before that, a
searchable table's placeholder becomes a paragraph of the table's text, cells apart (what the
search plugin indexes, without parsing every tag of a large table); a table kept out of search
has its placeholder marked ``data-search-exclude``. So the search index holds no placeholder.

The hook also puts the site's bundled scripts and styles (``toolkit/site_assets/``: the tables'
sorting, filtering and paging, listed in mkdocs.yml's ``extra_javascript``/``extra_css``) in
the site at ``assets/toolkit/``, from the installed package, so no page fetches them elsewhere.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

_TOKEN = re.compile(r"<p>&#35;tktable-([0-9a-f]{20})</p>")  # searchable
_POST = re.compile(r"<p>&#35;tkpost-([0-9a-f]{20})</p>")  # not searchable
# what the search plugin reads in their place: the table's text, or (not searchable) the
# placeholder in an element the plugin skips (it keeps the attribute: it only strips
# data-search-* attributes that have a value)
_HIDDEN = '<p data-search-exclude>&#35;tkpost-{}</p>'
_READ = re.compile(r'<p data-tktable="([0-9a-f]{20})">[^<]*</p>'
                   r"|<p data-search-exclude>&#35;tkpost-([0-9a-f]{20})</p>")
_TAG = re.compile(r"<[^>]+>")
_folder = Path("tables")  # the build folder's tables/ (set by on_config)
_tables: dict[str, dict[str, str]] = {}  # the tables files read so far, by name
ASSETS = Path(__file__).resolve().parent / "site_assets"
ASSETS_URL = "assets/toolkit"


def on_config(config: Any) -> Any:
    global _folder
    _folder = Path(config.config_file_path).parent / "tables"
    _tables.clear()
    return config


def _shard(name: str) -> dict[str, str]:
    """The tables whose digest starts with ``name``, read when a page first needs one."""
    from toolkit.errors import DataError
    from toolkit.textio import check_json_depth

    path = _folder / f"{name}.json"
    try:
        text = path.read_text(encoding="utf-8") if path.is_file() else "{}"
        check_json_depth(text, path)
        tables = json.loads(text)
        if not isinstance(tables, dict):
            raise ValueError("not an object")
    except (ValueError, DataError) as exc:
        raise PluginError(f"{path} is damaged ({exc}); run toolkit build-site --clean") from None
    _tables[name] = tables
    return tables


def on_files(files: Any, *, config: Any) -> Any:
    from mkdocs.structure.files import File

    for asset in sorted(ASSETS.iterdir()):
        if asset.suffix in (".js", ".css", ".txt"):
            files.append(File.generated(config, f"{ASSETS_URL}/{asset.name}",
                                        abs_src_path=str(asset)))
    return files


def _table(digest: str, page: Any) -> str:
    tables = _tables.get(digest[:2])
    if tables is None:
        tables = _shard(digest[:2])
    try:
        return str(tables[digest])
    except KeyError:
        raise PluginError(f"{page.file.src_uri}: table {digest} is not in the build folder's "
                          "tables; run toolkit build-site again") from None


def _text(m: re.Match[str], page: Any) -> str:
    """A searchable table as one paragraph of its text (still escaped), cells apart."""
    text = " ".join(_TAG.sub(" ", _table(m.group(1), page)).split())
    return f'<p data-tktable="{m.group(1)}">{text}</p>'


def on_page_content(html: str, *, page: Any, config: Any, files: Any) -> str:
    if "&#35;tkpost-" in html:
        html = _POST.sub(lambda m: _HIDDEN.format(m.group(1)), html)
    if "&#35;tktable-" in html:
        html = _TOKEN.sub(lambda m: _text(m, page), html)
    return html


def on_post_page(output: str, *, page: Any, config: Any) -> str:
    if "data-tktable=" not in output and "&#35;tkpost-" not in output:
        return output
    return _READ.sub(lambda m: _table(m.group(1) or m.group(2), page), output)
