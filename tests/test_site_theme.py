"""The theme's navigation rendered once per folder of off-nav pages (toolkit.site_theme): the
site's bytes are those of the theme rendering it on every page."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._site_helpers import build, make_world, tree_bytes
from toolkit import site_theme


def test_nav_rendered_once_per_folder_gives_the_same_site(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    world = make_world(tmp_path / "w", hostile=True)
    monkeypatch.setattr(site_theme, "ENABLED", False)
    plain = build(world, out=tmp_path / "plain" / "site")
    monkeypatch.setattr(site_theme, "ENABLED", True)
    cached = build(world, out=tmp_path / "cached" / "site", clean=True)
    # entry pages (off the nav) reused a nav rendered for another page of their folder
    assert site_theme.counts["reused"] >= 10
    # every page's nav, and the 404 page's
    assert site_theme.counts["reused"] + site_theme.counts["rendered"] == cached.pages + 1
    assert tree_bytes(cached.out) == tree_bytes(plain.out)
