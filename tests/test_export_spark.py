"""The Parquet datasets read by real engines: Apache Spark (pyspark, local mode) and DuckDB.

Two demo worlds (as docs/guide/lake.md exports them), projects with odd names (escaped in
their folder names) and a project with no rows are exported into one folder. For every table,
both engines must agree with the toolkit's own stores on row counts, column types and a GROUP BY
project; the Spark examples of docs/guide/lake.md run here too, against the two demo worlds,
and its DuckDB queries give the same answers as its Spark ones.

One SparkSession (local[1], no UI) serves the whole module: its JVM takes seconds to start.
It is stopped, JVM and all, when the module ends.
"""

from __future__ import annotations

import doctest
import functools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

from toolkit.config import resolve
from toolkit.demo import write_demo
from toolkit.export import RENAMED, engine_types, export_parquet
from toolkit.loaders import SOURCES
from toolkit.store import Store

DOC = Path(__file__).resolve().parents[1] / "docs" / "guide" / "lake.md"
# names Spark and DuckDB must read back exactly from the folder names (all one thinned store)
ODD = ("café ☕ x/y=z", "../up %41", "__HIVE_DEFAULT_PARTITION__", "2024", "a\\b:c*?")


def _copy(first: Store, path: Path, where: str) -> Store:
    """A copy of a store with the rows matching ``where`` removed from every table."""
    first.copy_database(path)
    copy = Store.open(path, sources=SOURCES)
    for table in copy.tables():
        if table not in {t for t, kind, _c, _d in copy.schema() if kind == "view"}:
            copy.conn.execute(f'DELETE FROM "{table}" WHERE {where}')
    return copy


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Two demo worlds (seeds 7 and 8) exported as 'acme-api' and 'acme-web' into ``doc``
    (the guide's folder; each store reads the actions its name names, as the CLI's do) and
    into ``out`` with more projects: a thinned copy of the first under each odd name, and an
    emptied copy; with each project's table counts and the column types."""
    from toolkit.cli._common import open_store

    tmp = tmp_path_factory.mktemp("lake")
    demos: dict[str, Store] = {}
    scopes = {}
    for name, seed, rows in (("acme-api", 7, 3000), ("acme-web", 8, 1000)):
        world = write_demo(tmp / name, seed=seed, audit_rows=rows)
        cfg = resolve(project=world.project, env={"HOME": str(tmp)})
        scopes[name] = cfg.with_overrides(project_name=name).action_scope
        demos[name] = open_store(cfg, quiet=True)
    thinned = _copy(demos["acme-api"], tmp / "thinned.duckdb", "rowid % 3 = 0")
    empty = _copy(demos["acme-api"], tmp / "empty.duckdb", "true")
    for name, store in demos.items():  # as `toolkit export [--project-name NAME]` reads them
        store.scope_actions(scopes[name])
    stores = {**demos, **dict.fromkeys(ODD, thinned), "empty": empty}
    doc, out = tmp / "doc" / "lake", tmp / "lake"
    export_parquet(doc, list(demos.items()))
    export_parquet(out, list(stores.items()))
    columns: dict[str, list[tuple[str, str]]] = {}
    for table, kind, column, duck_type in demos["acme-api"].schema():
        if kind == "table":
            columns.setdefault(table, []).append((column, duck_type))
    # each store counted once (the odd names share one store)
    counted = {id(store): store.counts() for store in stores.values()}
    counts = {name: counted[id(store)] for name, store in stores.items()}
    try:
        yield {"out": out, "doc": doc, "stores": stores, "columns": columns, "counts": counts}
    finally:
        for store in {id(s): s for s in stores.values()}.values():
            store.close()


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """One local Spark session for the module. Its JVM compiles with the client compiler only
    (-XX:TieredStopAtLevel=1: these reads are too short for the optimising compiler to pay
    off, and it would cost about as much CPU again as the reads), in one compiler thread (a
    second one compiles more of the methods these short reads never need again), and
    collects garbage in one thread (one task at a time) with a young generation of half the
    driver's 1 GB heap (the default third of a smaller start heap filled fifteen times in
    this module, each collection copying the same ~60 MB that lives on; now six times). It
    keeps no perf-data file and does not verify the bytecode of the classes it loads from
    Spark's own jars (about 20,000, almost none in the JDK's shared archive: verifying them
    was about a fifth of the JVM's CPU here; the JDK's own classes are never verified).
    Adaptive query execution is off: it plans each query again between its stages, which
    costs more than these tiny queries run for (about a tenth of the JVM's CPU for the
    reads), and it changes no answer; so is whole-stage code generation, which writes Java
    source for each query's plan and compiles it (Janino) before running it: for a few
    thousand rows the compiling costs more than it saves (about a sixth of the module's
    CPU), and the same operators, run without it, give the same rows. stop() leaves the
    JVM running until this Python process ends (a whole xdist worker), so it is ended
    here."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[1]").appName("toolkit-tests")
               .config("spark.driver.extraJavaOptions",
                       "-XX:TieredStopAtLevel=1 -XX:CICompilerCount=1 -XX:+UseSerialGC "
                       "-Xms768m -Xmn512m -XX:-UsePerfData -XX:+UnlockDiagnosticVMOptions "
                       "-XX:-BytecodeVerificationRemote")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "1")
               .config("spark.sql.adaptive.enabled", "false")
               .config("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.codegen.wholeStage", "false")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    gateway = session.sparkContext._gateway
    try:
        yield session
    finally:
        session.stop()
        jvm = getattr(gateway, "proc", None)
        gateway.shutdown()
        SparkContext._gateway = SparkContext._jvm = None  # a later session starts its own
        if jvm is not None and jvm.stdin is not None:
            jvm.stdin.close()  # the gateway JVM exits when its standard input closes
            jvm.wait(timeout=60)


def _expected_by_project(lake: dict[str, Any], table: str) -> dict[str, int]:
    return {name: c[table] for name, c in lake["counts"].items() if c[table]}


def test_spark_reads_every_table_with_the_stores_counts_types_and_projects(lake, spark):
    from pyspark.sql import functions as F

    projects = []
    for table, columns in lake["columns"].items():
        df = spark.read.parquet(str(lake["out"] / table))
        got_types = [(f.name, f.dataType.simpleString()) for f in df.schema.fields]
        want_types = [(RENAMED.get(c, c), engine_types(t)["spark"]) for c, t in columns]
        assert got_types == [*want_types, ("project", "string")], table
        projects.append(df.select(F.lit(table).alias("table"), "project"))
    # every table's rows counted by project in one Spark job (a job per table cost more
    # than the counting)
    counted = functools.reduce(lambda a, b: a.unionAll(b), projects)
    by_table: dict[str, dict[str, int]] = {}
    for row in counted.groupBy("table", "project").count().collect():
        by_table.setdefault(row["table"], {})[row["project"]] = row["count"]
    for table in lake["columns"]:
        assert by_table.get(table, {}) == _expected_by_project(lake, table), table


def _duck_read(out: Path, table: str) -> str:
    glob = str(out / table / "project=*" / "*.parquet").replace("'", "''")
    return (f"read_parquet('{glob}', hive_partitioning = true, "
            "hive_types = {'project': VARCHAR})")


def test_duckdb_reads_every_table_with_the_stores_counts_types_and_projects(lake):
    conn = duckdb.connect()
    for table, columns in lake["columns"].items():
        source = _duck_read(lake["out"], table)
        got = [(r[0], r[1]) for r in conn.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()]
        # DuckDB writes JSON as Parquet's JSON string; reading it back gives VARCHAR or JSON
        got = [(c, "JSON" if t == "VARCHAR" and (c, "JSON") in columns else t) for c, t in got]
        want = [(RENAMED.get(c, c), t) for c, t in columns]
        assert got == [*want, ("project", "VARCHAR")], table
        rows = conn.execute(f"SELECT project, count(*) FROM {source} GROUP BY project").fetchall()
        assert dict(rows) == _expected_by_project(lake, table), table


def test_values_survive_timestamps_tiers_and_lists_in_both_engines(lake, spark):
    sql_store = ("SELECT tier, count(*), min(ts), max(ts) FROM actions GROUP BY tier")
    want = sorted((name, *row) for name, store in lake["stores"].items()
                  for row in store.fetch(sql_store)[1])
    assert {w[1] for w in want} == {0, 1, 2}
    spark.read.parquet(str(lake["out"] / "actions")).createOrReplaceTempView("actions")
    got_spark = spark.sql("SELECT project, tier, count(*), min(ts), max(ts) FROM actions "
                          "GROUP BY project, tier").collect()
    assert sorted(tuple(r) for r in got_spark) == want
    conn = duckdb.connect()
    got_duck = conn.execute(f"SELECT project, tier, count(*), min(ts), max(ts) FROM "
                            f"{_duck_read(lake['out'], 'actions')} GROUP BY ALL").fetchall()
    assert sorted(got_duck) == want
    lists = sorted((name, store.scalar("SELECT sum(len(problems)) FROM ledger_entries"))
                   for name, store in lake["stores"].items()
                   if lake["counts"][name]["ledger_entries"])
    entries = spark.read.parquet(str(lake["out"] / "ledger_entries"))
    entries.createOrReplaceTempView("ledger_entries")
    got = spark.sql("SELECT project, sum(size(problems)) FROM ledger_entries "
                    "GROUP BY project").collect()
    assert sorted(tuple(r) for r in got) == lists


def test_the_spark_examples_of_the_guide_run_and_show_their_output(lake, spark):
    # the guide's examples read ./lake; Spark resolves a relative path against the folder
    # its JVM started in, so the examples are pointed at the exported folder
    text = DOC.read_text(encoding="utf-8")
    test = doctest.DocTestParser().get_doctest(text, {}, DOC.name, str(DOC), 0)
    assert len(test.examples) >= 6
    for example in test.examples:
        example.source = example.source.replace('"lake/', f'"{lake["doc"]}/')
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    failures: list[str] = []
    runner.run(test, out=failures.append)
    assert runner.failures == 0, "\n".join(failures)


def _guide_queries(section: str) -> list[str]:
    """The SELECTs of the guide's Spark examples or of its DuckDB block, in order."""
    text = DOC.read_text(encoding="utf-8")
    if section == "spark":
        return [q.strip() for q in re.findall(r'spark\.sql\("""\n(.*?)"""\)', text, re.S)
                for q in [re.sub(r"^\.\.\. ", "", q, flags=re.M)]]
    block = text.split("### DuckDB", 1)[1].split("```sql", 1)[1].split("```", 1)[0]
    return [q.strip() for q in block.split(";") if q.strip()]


def test_the_guides_duckdb_queries_answer_as_its_spark_ones(lake, spark):
    spark_queries = _guide_queries("spark")
    duck = [q.replace("'lake/", f"'{lake['doc']}/") for q in _guide_queries("duckdb")]
    views = [q for q in duck if q.startswith("CREATE VIEW")]
    selects = [q for q in duck if q.startswith("SELECT")]
    assert len(selects) == len(spark_queries) == 4 and len(views) == 4
    conn = duckdb.connect()
    for view in views:
        conn.execute(view)
    for table in ("actions", "dispatches", "slop_entries", "ledger_entries"):
        spark.read.parquet(str(lake["doc"] / table)).createOrReplaceTempView(table)
    for spark_sql, duck_sql in zip(spark_queries, selects, strict=True):
        got_spark = [tuple(r) for r in spark.sql(spark_sql).collect()]
        assert got_spark, spark_sql
        assert conn.execute(duck_sql).fetchall() == got_spark, duck_sql


def test_leftovers_of_a_killed_export_are_not_read_as_data(lake, spark, tmp_path):
    # what a killed export leaves beside the partitions (K1, K2): hidden folders that hold
    # a whole partition each; Spark and the guide's DuckDB glob must not read them
    import shutil

    out = tmp_path / "lake"
    shutil.copytree(lake["out"] / "actions", out / "actions")
    for leftover in (".toolkit-staging-0123456789abcdef-1-aa", ".toolkit-aside-0123-1-bb"):
        shutil.copytree(out / "actions" / "project=acme-web", out / "actions" / leftover)
    want = _expected_by_project(lake, "actions")
    df = spark.read.parquet(str(out / "actions"))
    assert {r["project"]: r["count"] for r in df.groupBy("project").count().collect()} == want
    rows = duckdb.connect().execute(
        f"SELECT project, count(*) FROM {_duck_read(out, 'actions')} GROUP BY ALL").fetchall()
    assert dict(rows) == want
