"""The vault package: the only writer of files under ``.smith/`` (tests/test_architecture.py
checks it).

* :mod:`.lock` -- the OS ``flock`` every ledger writer takes, and the seed's ``.meta.json``
  ``lock`` field (holder, expiry, a run-long :class:`LockTicket`).
* :mod:`.meta` -- ``meta.yaml`` and ``.meta.json``: read in one place, counts edited in place.
* :mod:`.session` -- :class:`EditorSession`, the edit session and its journaled commit.
* :mod:`.journal` -- the intent journal's recovery, run by every entry point
  (:func:`open_vault`).
* :mod:`.locate` -- entries by title without a full parse; :mod:`.diff` -- diffs of byte edits.
* :mod:`.backups` -- reconcile's verified backups and the restore of a failed run.
* :mod:`.logs` -- the session log and ``reconcile-log.md``.
* :mod:`.paths` -- where the writers may write (inside the root the user gave).
"""

from toolkit.ledger.vault.backups import Written, make_backup, prune_backups, restore_written
from toolkit.ledger.vault.diff import Change
from toolkit.ledger.vault.journal import journal_path, open_vault, recover_interrupted
from toolkit.ledger.vault.locate import locate_entries
from toolkit.ledger.vault.lock import (
    LockHolder,
    LockTicket,
    give_back_json_lock,
    holder_id,
    iso_z,
    judge_lock,
    lock_path,
    lock_timeout,
    now_for,
    parse_instant,
    read_lock_field,
    take_json_lock,
)
from toolkit.ledger.vault.logs import append_session_log, session_log_path, write_reconcile_log
from toolkit.ledger.vault.meta import (
    compose_yaml,
    count_words,
    read_meta_json,
    tokens_for_words,
    update_meta_json,
    update_meta_yaml,
    write_meta_json,
)
from toolkit.ledger.vault.paths import check_inside, make_ledger_dir, write_export
from toolkit.ledger.vault.session import (
    CommitResult,
    EditorSession,
    ResetPlan,
    refuse_unreadable,
)

__all__ = [
    "Change",
    "CommitResult",
    "EditorSession",
    "LockHolder",
    "LockTicket",
    "ResetPlan",
    "Written",
    "append_session_log",
    "check_inside",
    "compose_yaml",
    "count_words",
    "give_back_json_lock",
    "holder_id",
    "iso_z",
    "journal_path",
    "judge_lock",
    "locate_entries",
    "lock_path",
    "lock_timeout",
    "make_backup",
    "make_ledger_dir",
    "now_for",
    "open_vault",
    "parse_instant",
    "prune_backups",
    "read_lock_field",
    "read_meta_json",
    "recover_interrupted",
    "refuse_unreadable",
    "restore_written",
    "session_log_path",
    "take_json_lock",
    "tokens_for_words",
    "update_meta_json",
    "update_meta_yaml",
    "write_export",
    "write_meta_json",
    "write_reconcile_log",
]
