"""Where the vault's writers may write: the vault and its folders stay inside the root the
user gave (FAULTS G3)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from toolkit.errors import RefusedError
from toolkit.textio import within

# Files of ledger/ that the editor and reconcile write besides the five ledger files.
LEDGER_SIDE_FILES = ("meta.yaml", ".meta.json", "reconcile-log.md")


def _walk_out(path: Path, base: Path, root_real: Path) -> Path:
    """The first component of ``path`` below ``base`` whose real location leaves ``root_real``
    (the symlink to blame), or ``path`` itself."""
    try:
        parts = path.relative_to(base).parts
    except ValueError:
        return path
    current = base
    for part in parts:
        current = current / part
        if not within(current, root_real):
            return current
    return path


def vault_roots(vault: str | Path) -> tuple[Path, Path]:
    """(the folder the user named, the vault as named). The named folder is the project root
    when the vault is ``<project>/.smith/vault``, else the vault itself."""
    vault = Path(os.path.abspath(vault))
    if vault.name == "vault" and vault.parent.name == ".smith":
        return vault.parent.parent, vault
    return vault, vault


def check_inside(vault: str | Path) -> None:
    """Refuse (:class:`RefusedError`, before anything is read or written) when a folder the
    editor writes in resolves outside the root the user gave (FAULTS G3).

    "Inside" is decided on real paths (every parent resolved, so a link anywhere on the way
    counts): ``.smith`` and the vault must stay inside the project folder (the folder holding
    ``.smith``; links above it are the user's business), and ``ledger/``, ``ledger/.backups``
    and ``ledger/archive`` inside the vault, as must ``meta.yaml``, ``.meta.json`` and
    ``reconcile-log.md`` when they are links. A link that stays inside is followed. The ledger
    files themselves follow the same rule in :func:`toolkit.safewrite.check_editable`."""
    root, vault = vault_roots(vault)
    root_real = Path(os.path.realpath(root))
    vault_real = Path(os.path.realpath(vault))
    ledger = vault / "ledger"
    checks = [(vault, root, root_real, "the project folder"),
              (ledger, vault, vault_real, "the vault"),
              (ledger / ".backups", vault, vault_real, "the vault"),
              (ledger / "archive", vault, vault_real, "the vault")]
    for path, base, base_real, what in checks:
        if not (path.exists() or path.is_symlink()):
            continue
        real = Path(os.path.realpath(path))
        if within(real, base_real):
            continue
        culprit = _walk_out(path, base if path != base else root, base_real)
        target = Path(os.path.realpath(culprit))
        raise RefusedError(
            f"is a symlink to {target}, outside {what} ({base_real}); refusing to edit the "
            "ledger through it", path=culprit,
            hint="Replace the link with the folder itself; nothing was written")
    # the files an edit writes besides the five ledger files (those follow check_editable's
    # rule when they change): a link leading out of the vault is refused as a folder's is
    for name in LEDGER_SIDE_FILES:
        path = ledger / name
        if not path.is_symlink():
            continue
        real = Path(os.path.realpath(path))
        if not within(real, vault_real):
            raise RefusedError(
                f"is a symlink to {real}, outside the vault ({vault_real}); refusing to edit "
                "the ledger through it", path=path,
                hint="Replace the link with the file itself; nothing was written")



def make_ledger_dir(vault: str | Path) -> Path:
    """Create ``<vault>/ledger`` (for a reset of a vault that has none); checked inside first."""
    check_inside(vault)
    ledger = Path(vault) / "ledger"
    ledger.mkdir(exist_ok=True)
    return ledger


def write_export(path: Path, text: str, keep: Sequence[Path]) -> None:
    """Write an export of the ledger to the file the user named (``--output``): atomically,
    or through it when it is a pipe or a device, never over a file among ``keep``
    (``safewrite.write_output``)."""
    from toolkit.safewrite import write_output

    write_output(path, text.encode("utf-8"), keep=keep)
