"""The Smith Ledger as one idea.

* :mod:`toolkit.ledger.codec` -- one entry: parse it, edit one field, write it (Form A and B).
* :mod:`toolkit.ledger.vault` -- the only writer of files under ``.smith/``: the lock
  protocol, the meta files, the edit session and its journal, locating entries, diffs.

The reader of whole files stays in :mod:`toolkit.sources.smith` (it uses the codec).
"""
