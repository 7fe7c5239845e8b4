"""Resolve every path and setting: command-line flags > toolkit.yaml > environment > defaults.

The sources' path settings (flag, toolkit.yaml key, environment variable, default) are
declared by the sources themselves (``toolkit.source.Setting``, ``toolkit.loaders.settings``);
this module adds the store's and the site's own settings and resolves them all.

The project root is found like git finds ``.git``: walking up from the current directory to
the first folder holding ``.smith/vault`` or ``toolkit.yaml``. Without either, the current
directory is the project root (a project with no vault still has slop, audit and snapshots).
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from toolkit import loaders
from toolkit.errors import RefusedError, UsageError
from toolkit.source import Place
from toolkit.textio import load_yaml, read_text, within

CONFIG_NAME = "toolkit.yaml"

# toolkit.yaml keys that hold paths (relative paths are relative to the file's folder): the
# sources' settings, the store and the site folder.
_PATH_KEYS = (*(s.key for s in loaders.settings()), "db", "site_dir")
# Environment variables of the seed tools read as those tools read them: nagi-ledger's
# get_db_path() takes $NAGI_LEDGER_DB as written (Path(value): no "~" expanded), and its
# session_brief.py and goal_gate.py the goal files' variables so, so the toolkit opens the
# files nagi-ledger's own server and hooks write, whatever the value says.
_AS_WRITTEN_ENV = {"NAGI_LEDGER_DB", "NAGI_GOAL_FILE", "NAGI_GOAL_HISTORY"}
_KNOWN_KEYS = set(_PATH_KEYS) | {"site_url", "max_file_mb", "today", "publish", "redact",
                                  "checks", "notebooks", "analyses", "project_name",
                                  "site_scope"}

# site_scope: whose audit actions the site (and the handoff and the API) shows.
SITE_SCOPES = ("project", "all")

# What each toolkit.yaml value must be: (accepted Python types, how the error names it).
# YAML gives a date for an unquoted 2026-11-28, numbers for numbers; null means "not set".
_TEXT = ((str,), "text (a path)")
_KEY_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    **{key: _TEXT for key in _PATH_KEYS},
    "site_url": ((str,), "text (a URL)"),
    "max_file_mb": ((int, float, str), "a number of MB"),
    "today": ((dt.date, str), "a date (YYYY-MM-DD)"),
    "publish": ((dict,), "a mapping (repo, labels, title, api_url, key)"),
    "redact": ((bool,), "true or false"),
    "checks": ((list,), "a list of checks (name, sql, expect, level, description)"),
    "notebooks": ((list,), "a list of notebook paths"),
    "analyses": ((bool,), "true or false"),
    "project_name": ((str,), "text (the project's name in nagi-ledger's project column)"),
    "site_scope": ((str,), "project or all"),
}
_PUBLISH_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "repo": ((str,), "text (OWNER/NAME)"),
    "title": ((str,), "text"),
    "api_url": ((str,), "text (a URL)"),
    "key": ((str, int), "text"),
    "labels": ((list, str), "a list of labels"),
}


def _check_types(data: dict[str, Any], types: dict[str, tuple[tuple[type, ...], str]],
                 path: Path, prefix: str = "") -> None:
    """A usage error naming the first key whose value has the wrong type."""
    for key, value in data.items():
        if value is None or key not in types:
            continue
        accepted, expected = types[key]
        ok = isinstance(value, accepted) and (bool in accepted or not isinstance(value, bool))
        if ok and isinstance(value, list) and str in accepted:  # a list of labels
            ok = all(isinstance(v, str) for v in value)
        if not ok:
            got = {dict: "a mapping", list: "a list", bool: "true/false", int: "a number",
                   float: "a number", dt.date: "a date", str: f"the text {value!r}"}.get(
                type(value), type(value).__name__)
            if isinstance(value, list) and list in accepted:
                got = "a list with a value that is not text"
            raise UsageError(f"setting {prefix}{key} must be {expected}, not {got}", path=path)


def find_project_root(start: Path) -> Path | None:
    """The nearest folder at or above ``start`` with ``.smith/vault`` or ``toolkit.yaml``."""
    start = start.resolve()
    for folder in (start, *start.parents):
        if (folder / ".smith" / "vault").is_dir() or (folder / CONFIG_NAME).is_file():
            return folder
    return None


# The state files the toolkit keeps in the state folder (named here, where Config.outputs
# lists them; the site and the handoff write them)
BUILD_RECORD = "site-build.json"  # where the site was built, redacted or not
HANDOFF_STATE = "handoff-state.json"  # what the last handoff reported


@dataclass(frozen=True)
class Config:
    """Every path and setting one command needs, already resolved."""

    project_root: Path
    vault: Path  # .smith/vault (may not exist)
    slop_path: Path
    audit_db: Path
    audit_json: Path | None
    snapshots_home: Path  # ~/.codesmith/snapshots
    workspace: Path  # the workspace whose turn snapshots we read
    db_path: Path  # the DuckDB store
    site_dir: Path  # where build-site writes the HTML site
    site_url: str | None = None
    goal_file: Path | None = None  # nagi-ledger's active goal (goal.json); None: not configured
    goal_history: Path | None = None  # nagi-ledger's goal_history.jsonl
    max_file_bytes: int | None = None
    today: dt.date | None = None  # injected "today" (pruning, ages); None = the real date
    config_file: Path | None = None
    publish: dict[str, Any] = field(default_factory=dict)
    redact: bool = False  # build-site redacts the site (toolkit.yaml ``redact: true``)
    # toolkit.yaml ``checks:`` as written (validated by toolkit.checks when checks run, so a
    # bad entry fails `toolkit check`, not every command)
    checks: tuple[Any, ...] = ()
    # analysis notebooks build-site runs besides the bundled ones (toolkit.yaml ``notebooks:``)
    notebooks: tuple[Path, ...] = ()
    # build-site runs the analysis notebooks (toolkit.yaml ``analyses:``, $TOOLKIT_ANALYSES)
    analyses: bool = True
    # the project's name (the site's and the handoff's title, the Parquet export's partition)
    # and the name nagi-ledger's actions.project holds for it: toolkit.yaml ``project_name:``,
    # else the project folder's name (resolve always sets it)
    project_name: str = ""
    # whose audit actions the site, the handoff and the API read: "project" (this project's
    # and the unassigned ones) or "all" (toolkit.yaml ``site_scope:``, $TOOLKIT_SITE_SCOPE,
    # build-site --scope)
    site_scope: str = "project"

    @property
    def ledger_dir(self) -> Path:
        return self.vault / "ledger"

    @property
    def sessions_dir(self) -> Path:
        return self.vault / "sessions"

    @property
    def smith_config(self) -> Path:
        """``.smith/config.json``: the vault's parent folder holds it."""
        return self.vault.parent / "config.json"

    @property
    def state_dir(self) -> Path:
        return self.db_path.parent

    def check_state_links(self) -> None:
        """Refuse the project's ``.toolkit``, or a place in it where the toolkit writes, that
        is a symbolic link leading outside the project (FAULTS G6), when the store or the
        site is kept there: called by whatever opens the store or builds the site, so the
        commands that keep nothing there (the audit writers, ``audit brief``) still run."""
        state = self.project_root / ".toolkit"
        if self.db_path.parent == state or self.site_dir.parent == state:
            _check_state_inside(state, self.project_root)
            _check_outputs_inside(self, state, self.project_root)

    def outputs(self) -> tuple[Path, ...]:
        """Every file and folder the toolkit itself writes for this project: the state folder,
        the store with its ``.wal``, DuckDB's ``.tmp`` spill folder and the parse cache, the
        handoff state and the site's build record, the site folder and its ``.build`` folder.
        A snapshot restore leaves each alone wherever the configuration puts it
        (:func:`toolkit.snapshot_ops.plan_restore`)."""
        db = self.db_path
        site = self.site_dir
        return (self.state_dir, db, *(db.with_name(db.name + end)
                                      for end in (".wal", ".tmp", ".cache")),
                self.state_dir / HANDOFF_STATE, self.state_dir / BUILD_RECORD,
                site, site.with_name(site.name + ".build"))

    @property
    def parse_cache(self) -> Path | None:
        """Where readers keep parses of big files (:mod:`toolkit.parsecache`): beside the
        store, as DuckDB keeps its ``.wal``. None while there is no store: a project where
        nothing was loaded gets no cache either (its reads write nothing)."""
        if not self.db_path.is_file():
            return None
        return self.db_path.with_name(self.db_path.name + ".cache")

    @property
    def action_scope(self) -> str | None:
        """The project whose audit actions (with the unassigned ones) the site, the handoff
        and the API read; None: every project's (``site_scope: all``)."""
        return self.project_name if self.site_scope == "project" else None

    def today_date(self) -> dt.date:
        """The day ages count to (``toolkit.clock.today``): the injected today, else now's."""
        from toolkit import clock

        return clock.today(self.today)

    def source_paths(self) -> tuple[Path, ...]:
        """The files and folders the toolkit reads its sources and settings from (and its
        store): an output the user names (``--output``) never replaces a file among them
        (``toolkit.safewrite.write_output``)."""
        audit = self.audit_db
        paths = [self.ledger_dir, self.sessions_dir, self.vault / ".current-session",
                 self.smith_config, self.slop_path, self.audit_json, self.goal_file,
                 self.goal_history, self.snapshots_home, self.config_file, self.db_path,
                 self.db_path.with_name(self.db_path.name + ".wal"), audit,
                 *(audit.with_name(audit.name + end) for end in ("-wal", "-shm", "-journal"))]
        return tuple(dict.fromkeys(p for p in paths if p is not None))

    def with_overrides(self, **kwargs: Any) -> Config:
        return replace(self, **kwargs)


def _folder_key(folder: Path) -> str:
    """A readable, unique cache folder name for a working folder."""
    import hashlib
    import re

    digest = hashlib.sha256(str(folder).encode("utf-8", "surrogateescape")).hexdigest()[:12]
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", folder.name).strip("-.") or "root"
    return f"{name}-{digest}"


def home_dir(env: Mapping[str, str]) -> Path:
    """The user's home folder: ``$HOME`` of ``env`` (tests give their own)."""
    return Path(env.get("HOME") or os.path.expanduser("~"))


def cache_dir(env: Mapping[str, str]) -> Path:
    """The toolkit's folder in the user's cache: ``$XDG_CACHE_HOME`` or ``~/.cache``, then
    ``agent-ledger-toolkit``."""
    cache = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else home_dir(env) / ".cache"
    return cache / "agent-ledger-toolkit"


def _parse_today(value: Any, origin: str, path: Path | None = None) -> dt.date:
    if isinstance(value, dt.date):
        return value
    try:
        return dt.date.fromisoformat(str(value))
    except ValueError:
        raise UsageError(f"{origin}: {value!r} is not a date; use YYYY-MM-DD",
                         path=path) from None


def load_file_settings(path: Path) -> dict[str, Any]:
    """Read toolkit.yaml: a mapping of known keys; relative paths made absolute."""
    data = load_yaml(read_text(path), path, dates=False)  # today: is checked as text
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError("toolkit.yaml must be a mapping of settings", path=path)
    unknown = sorted(str(k) for k in set(data) - _KNOWN_KEYS)
    if unknown:
        raise UsageError(
            f"unknown setting(s) {', '.join(unknown)}",
            path=path,
            hint=f"Known settings: {', '.join(sorted(_KNOWN_KEYS))}",
        )
    _check_types(data, _KEY_TYPES, path)
    if isinstance(data.get("publish"), dict):
        unknown = sorted(str(k) for k in set(data["publish"]) - set(_PUBLISH_TYPES))
        if unknown:
            raise UsageError(f"unknown setting(s) publish.{', publish.'.join(unknown)}",
                             path=path, hint=f"Known: {', '.join(sorted(_PUBLISH_TYPES))}")
        _check_types(data["publish"], _PUBLISH_TYPES, path, prefix="publish.")
    out = dict(data)
    for key in _PATH_KEYS:
        if out.get(key) is not None:
            p = Path(os.path.expanduser(str(out[key])))
            out[key] = Path(os.path.normpath(p if p.is_absolute() else (path.parent / p)))
    if out.get("notebooks") is not None:  # a list of paths, each relative to the file
        out["notebooks"] = tuple(
            Path(os.path.normpath(path.parent / os.path.expanduser(str(n))))
            for n in out["notebooks"])
    return out


def resolve(
    *,
    project: str | Path | None = None,
    config_file: str | Path | None = None,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    **flags: Any,
) -> Config:
    """Build the Config for one command.

    ``flags`` uses the toolkit.yaml key names (``vault``, ``slop``, ``audit_db``, ``db``...);
    None means "not given on the command line".
    """
    env = dict(os.environ) if env is None else env
    cwd = (cwd or Path.cwd()).resolve()
    home = home_dir(env)

    if project is not None and not str(project).strip():
        # (Path("") is the current folder, taken as the root without looking for the project
        # above it, as no project given does: a store was written into whatever folder it was)
        raise UsageError("the project folder is empty text; give a folder, or none to find "
                         "the project from the current folder")
    if project is not None:
        root = Path(project).expanduser().resolve()
        if not root.is_dir():
            raise UsageError(f"project folder {root} "
                             + ("is not a folder" if root.exists() else "does not exist"))
    else:
        found = find_project_root(cwd)
        root = found or cwd

    settings: dict[str, Any] = {}
    cfg_path: Path | None = None
    if config_file is not None:
        cfg_path = Path(config_file).expanduser().resolve()
        if not cfg_path.exists():
            raise UsageError(f"config file {cfg_path} not found")
        if not cfg_path.is_file():  # a folder, a FIFO (never opened), a device
            raise UsageError("the config file is not a regular file", path=cfg_path)
    elif (root / CONFIG_NAME).is_file():
        cfg_path = root / CONFIG_NAME
    if cfg_path is not None:
        settings = load_file_settings(cfg_path)

    def pick(key: str, env_value: str | None, default: Any, env_name: str = "") -> Any:
        if flags.get(key) is not None:
            value = flags[key]
            return Path(value).expanduser().resolve() if key in _PATH_KEYS else value
        if settings.get(key) is not None:
            return settings[key]
        if env_value:
            if key not in _PATH_KEYS:
                return env_value
            return Path(env_value) if env_name in _AS_WRITTEN_ENV else \
                Path(env_value).expanduser()
        return default

    def origin(key: str, env_name: str | None) -> tuple[str, Path | None]:
        """Where :func:`pick` took ``key``'s value from, as an error names it: the option,
        the key (with toolkit.yaml as the error's path) or the environment variable."""
        if flags.get(key) is not None:
            return f"--{key.replace('_', '-')}", None
        if settings.get(key) is not None:
            return key, cfg_path
        return (f"${env_name}" if env_name and env.get(env_name) else key), None

    place = Place(root=root, home=home, env=env)
    paths: dict[str, Any] = {}  # Config field -> Path or None
    for setting in loaders.settings():
        value = pick(setting.key, env.get(setting.env) if setting.env else None,
                     setting.default(place), setting.env or "")
        paths[setting.attr] = Path(value) if value else None
    # A project keeps its store in .toolkit/; a folder that is no project (no vault, no
    # toolkit.yaml) gets one in the user's cache, so running a command there leaves no trace.
    state = root / ".toolkit"
    if project is None and found is None:
        state = cache_dir(env) / _folder_key(root)
    default_db, default_site = state / "ledger.duckdb", state / "site"
    db = pick("db", env.get("TOOLKIT_DB"), default_db)
    site_dir = pick("site_dir", None, default_site)
    site_url = pick("site_url", env.get("TOOLKIT_SITE_URL"), None)

    max_mb = pick("max_file_mb", env.get("TOOLKIT_MAX_FILE_MB"), None)
    max_bytes = None
    if max_mb is not None:
        name, where = origin("max_file_mb", "TOOLKIT_MAX_FILE_MB")
        size_hint = "Give a number of MB above 0 (toolkit.yaml max_file_mb or TOOLKIT_MAX_FILE_MB)"
        try:
            max_bytes = int(float(max_mb) * 1024 * 1024)
        except (TypeError, ValueError, OverflowError):  # (inf, 1e400: no size either)
            raise UsageError(f"{name}: {max_mb!r} is not a number", path=where,
                             hint=size_hint) from None
        if max_bytes <= 0:
            raise UsageError(f"{name}: {max_mb} MB is not a size limit", path=where,
                             hint=size_hint)

    today_raw = pick("today", env.get("TOOLKIT_TODAY"), None)
    today = _parse_today(today_raw, *origin("today", "TOOLKIT_TODAY")) \
        if today_raw is not None else None

    publish = settings.get("publish") or {}
    if not isinstance(publish, dict):
        raise UsageError("publish: must be a mapping", path=cfg_path)

    redact = bool(settings.get("redact"))  # type-checked with every key by _check_types
    analyses = _parse_switch(pick("analyses", env.get("TOOLKIT_ANALYSES"), True),
                             "analyses", "TOOLKIT_ANALYSES")
    in_file = flags.get("site_scope") is None and settings.get("site_scope") is not None
    site_scope = parse_site_scope(pick("site_scope", env.get("TOOLKIT_SITE_SCOPE"), "project"),
                                  cfg_path if in_file else None)
    project_name = str(pick("project_name", None, "") or "").strip() or root.name

    return Config(
        project_root=root,
        **paths,  # each source setting is a Config field (tests/test_source_contract.py)
        db_path=Path(db),
        site_dir=Path(site_dir),
        site_url=str(site_url) if site_url else None,
        max_file_bytes=max_bytes,
        today=today,
        config_file=cfg_path,
        publish=publish,
        redact=redact,
        checks=tuple(settings.get("checks") or ()),
        notebooks=tuple(settings.get("notebooks") or ()),
        analyses=analyses,
        project_name=project_name,
        site_scope=site_scope,
    )


def _check_outputs_inside(cfg: Config, state: Path, root: Path) -> None:
    """Refuse a link in the project's ``.toolkit`` where the toolkit writes (the store, its
    ``.wal`` and caches, the site and its build folder: ``cfg.outputs()``) that leads outside
    the project, as ``.toolkit`` itself is refused (FAULTS G6): the store would be written,
    and the site written and deleted by ``--clean``, wherever it points. (The handoff state
    and the build record replace a link with a file, never writing through it.)"""
    replaced = {HANDOFF_STATE, BUILD_RECORD}
    for path in cfg.outputs():
        if path.parent == state and path.name not in replaced:
            _refuse_link_out(path, root, "refusing to write through it",
                             "Remove the link, or name the places in toolkit.yaml "
                             "(db:, site_dir:)")


def _check_state_inside(state: Path, root: Path) -> None:
    """Refuse a project's ``.toolkit`` that is a link leading outside the project folder
    (FAULTS G6): the store, its caches, the handoff state and the site would all be written
    wherever it points. A link that stays inside is followed; places named in toolkit.yaml,
    the environment or options are used as named."""
    _refuse_link_out(state, root, "refusing to keep the store and the site there",
                     "Replace the link with a folder, or name those places in toolkit.yaml "
                     "(db:, site_dir:)")


def _refuse_link_out(path: Path, root: Path, refusing: str, hint: str) -> None:
    """RefusedError when ``path`` is a symbolic link leading outside ``root``."""
    if path.is_symlink() and not within(path, root):
        raise RefusedError(f"is a symlink to {os.path.realpath(path)}, outside the project "
                           f"folder ({os.path.realpath(root)}); {refusing}", path=path,
                           hint=hint)


def parse_site_scope(value: Any, path: Path | None = None) -> str:
    """``project`` or ``all`` (any case, surrounding spaces ignored); else a usage error."""
    text = str(value).strip().lower()
    if text not in SITE_SCOPES:
        raise UsageError(f"site_scope: {value!r} is not a scope", path=path,
                         hint="Use project (this project's audit actions and the unassigned "
                              "ones) or all (every project's), in toolkit.yaml, "
                              "$TOOLKIT_SITE_SCOPE or build-site --scope")
    return text


def _parse_switch(value: Any, key: str, env_name: str) -> bool:
    """A yes/no setting: a YAML boolean, or the environment variable's 1/0, true/false,
    yes/no, on/off."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise UsageError(f"{env_name}={value!r} is not a yes/no value",
                     hint=f"Use 1 or 0 (or `{key}: true|false` in toolkit.yaml)")
