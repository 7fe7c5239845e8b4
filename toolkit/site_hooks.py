"""MkDocs hooks of the generated site (the generated mkdocs.yml lists this file).

``toolkit.site`` renders tables straight to HTML (escaped there) and leaves a placeholder
paragraph in the Markdown; this hook puts each table's HTML in place of its placeholder, from
``tables.json`` next to the generated mkdocs.yml. The placeholder holds an HTML entity that
AI-written text cannot produce, and the replacement always comes from tables.json, never from
the page. Searchable tables are put in place before the search plugin reads the page; the
others after it, and their placeholders are marked ``data-search-exclude`` first, so the search
index holds no placeholder.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

_TOKEN = re.compile(r"<p>&#35;tktable-([0-9a-f]{20})</p>")  # searchable tables
_POST = re.compile(r"<p>&#35;tkpost-([0-9a-f]{20})</p>")  # not searchable
# the search plugin skips an element with this attribute (and keeps it in the page: it only
# strips data-search-* attributes that have a value)
_HIDDEN = '<p data-search-exclude>&#35;tkpost-{}</p>'
_HIDDEN_POST = re.compile(r"<p data-search-exclude>&#35;tkpost-([0-9a-f]{20})</p>")
_tables: dict[str, str] = {}


def on_config(config: Any) -> Any:
    global _tables
    path = Path(config.config_file_path).parent / "tables.json"
    from toolkit.errors import DataError
    from toolkit.textio import check_json_depth

    try:
        text = path.read_text(encoding="utf-8") if path.is_file() else "{}"
        check_json_depth(text, path)
        _tables = json.loads(text)
    except (ValueError, DataError) as exc:
        raise PluginError(f"{path} is damaged ({exc}); run toolkit build-site --clean") from None
    return config


def _swap(pattern: re.Pattern[str], html: str, page: Any) -> str:
    def table(m: re.Match[str]) -> str:
        try:
            return _tables[m.group(1)]
        except KeyError:
            raise PluginError(f"{page.file.src_uri}: table {m.group(1)} is not in tables.json; "
                              "run toolkit build-site again") from None

    return pattern.sub(table, html)


def on_page_content(html: str, *, page: Any, config: Any, files: Any) -> str:
    if "&#35;tkpost-" in html:
        html = _POST.sub(lambda m: _HIDDEN.format(m.group(1)), html)
    return _swap(_TOKEN, html, page) if "&#35;tktable-" in html else html


def on_post_page(output: str, *, page: Any, config: Any) -> str:
    return _swap(_HIDDEN_POST, output, page) if "&#35;tkpost-" in output else output
