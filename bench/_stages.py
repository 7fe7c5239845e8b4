"""Where ``toolkit load``'s peak memory is: the process's resident memory sampled every 2 ms in
a thread and as each stage begins and ends, each sample counted against the stage the load is
in, for the benchmarks.

The stages are the store's opening, each source's load (``ledger``, ``history``...), within
it the ledger's parse (``ledger: parse``: reading the vault and parsing its files) and the
batches of rows written to the store (``ledger: insert``, ``history: insert``), its commits
(``ledger: commit``: the load's own transaction ending, or a staged commit of a source that
commits a batch at a time) and what follows it (``ledger: after``; after the last source, the
store's checkpoint). The hooks wrap ``Store.open``, ``Store._run``, ``open_vault``,
``Store.insert_rows``, ``Store.commit_staged`` and the store's transactions; nothing else in
the load changes. A sample 2 ms apart can miss a
shorter peak, and the kernel updates the high-water mark (``VmHWM``, given beside them) only
now and then: either can be a few MB above the other.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _measure import measure  # noqa: E402

# argv: the result file, then the toolkit's arguments. Run with ``python -c`` by measure().
PROFILE = """
import atexit, json, os, sys, threading, time
out = sys.argv.pop(1)
from toolkit import store as st

PAGE = os.sysconf("SC_PAGE_SIZE")
stage = ["start"]
peaks = {}

def sample():
    with open("/proc/self/statm") as fh:
        now = int(fh.read().split()[1]) * PAGE
    where = stage[0]
    if now > peaks.get(where, 0):
        peaks[where] = now

def enter(where):
    sample()  # the stage that ends, then the one that begins (a stage shorter than a period)
    stage[0] = where
    sample()

def sampler():
    while True:
        sample()
        time.sleep(0.002)

def during(label, fn):
    def run(*args, **kwargs):
        before = stage[0]
        enter(label(before))
        try:
            return fn(*args, **kwargs)
        finally:
            enter(before)
    return run

def commit(where):
    return where.removesuffix(": commit") + ": commit"

def part(name):
    return lambda where: where.split(": ")[0] + ": " + name

st.Store.open = classmethod(during(lambda where: "open", st.Store.open.__func__))
import toolkit.ledger.vault as vault  # the ledger's loader imports open_vault when it runs
vault.open_vault = during(part("parse"), vault.open_vault)
st.Store.insert_rows = during(part("insert"), st.Store.insert_rows)
st.Store.commit_staged = during(commit, st.Store.commit_staged)
st._Transaction.__exit__ = during(commit, st._Transaction.__exit__)
run_source = st.Store._run
def _run(self, source, *args, **kwargs):
    enter(source.name)
    try:
        return run_source(self, source, *args, **kwargs)
    finally:
        enter(source.name + ": after")
st.Store._run = _run

def report():
    with open(out, "w") as fh:
        json.dump(peaks, fh)
atexit.register(report)
threading.Thread(target=sampler, daemon=True).start()
from toolkit.cli import cli
cli(sys.argv[1:], prog_name="toolkit")
"""


def load_stages(args: list[str], env: dict[str, str], result: Path) -> tuple[int, dict[str, int]]:
    """Run ``toolkit <args>`` (a load) once with the stage hooks: (its VmHWM in bytes, as
    :func:`measure` reads it, the highest resident bytes sampled in each stage, in the order
    the stages began)."""
    got = measure(["-c", PROFILE, str(result), *args], env=env)
    if got.returncode:
        raise SystemExit(f"{' '.join(args)}: exit {got.returncode}\n{got.stderr}")
    return got.peak, {k: int(v) for k, v in json.loads(result.read_text()).items()}
