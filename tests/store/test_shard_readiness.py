"""Shard readiness: the schema and the store stay distributable by tenant.

A database distributed by tenant (Citus and its kind) places each tenant's rows on one node.
It can enforce a key only when the key contains the distribution column, run a query on one
node only when the query names the tenant, and run a function there only when the function
reads one tenant's rows. Three checks hold the schema and the store to that, so sharding
stays a deployment decision (`docs/how-to/scale-out.md`) rather than a rewrite:

1. every primary key, unique constraint (or unique index) and foreign key of a table that
   holds tenant rows contains `tenant_id`, in the migrated database of either backend (the
   directory and bookkeeping tables of `GLOBAL_TABLES` excepted);
2. on PostgreSQL, every stored function that may read more than one tenant's rows (SECURITY
   DEFINER, or turning `app.cross_tenant` on) is one of the documented cross-tenant ones
   (`app.store.postgres.install.CROSS_TENANT`), and every table of tenant rows has its
   row-level wall forced, so a SECURITY INVOKER function is held to one tenant;
3. statically, every function of the store that names a table of tenant rows also names
   `tenant_id`, outside the cross-tenant modules and a short allow-list, each with its reason.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest
from sqlalchemy import inspect, text

from app.store import tables
from app.store.postgres.install import CROSS_TENANT, SOURCES, function_name
from app.store.stores import Stores
from tests.conftest import PG_ENV

STORE = Path(tables.__file__).parent

# Every table with rows of tenants: those with a `tenant_id` column, less the directory.
SHARDED = sorted(
    t.name
    for t in tables.metadata.sorted_tables
    if "tenant_id" in t.c and t.name not in tables.GLOBAL_TABLES
)

# The modules whose whole point is to span tenants (`app/store/cross_tenant.py`).
CROSS_TENANT_MODULES = {
    "cross_tenant.py",
    "sqlite/cross_tenant.py",
    "postgres/cross_tenant.py",
    # SQL's installer and the frozen function texts are checked by (2), not by (3).
    "postgres/install.py",
    "tables.py",
}

# Store functions that name a table of tenant rows without `tenant_id`, and why that is sound.
ALLOWED = {
    ("postgres/erasure.py", "_result_session"): "a column expression, used in a tenant's query",
    ("sqlite/erasure.py", "_result_session"): "a column expression, used in a tenant's query",
}


def _violations_in_keys(inspector: object, table: str) -> list[str]:
    problems: list[str] = []
    pk = inspector.get_pk_constraint(table)  # type: ignore[attr-defined]
    if "tenant_id" not in pk["constrained_columns"]:
        problems.append(f"{table}: primary key {pk['constrained_columns']}")
    for uq in inspector.get_unique_constraints(table):  # type: ignore[attr-defined]
        if "tenant_id" not in uq["column_names"]:
            problems.append(f"{table}: unique {uq['name']} {uq['column_names']}")
    for ix in inspector.get_indexes(table):  # type: ignore[attr-defined]
        if ix.get("unique") and "tenant_id" not in ix["column_names"]:
            problems.append(f"{table}: unique index {ix['name']} {ix['column_names']}")
    for fk in inspector.get_foreign_keys(table):  # type: ignore[attr-defined]
        referred = fk["referred_table"]
        if referred in tables.GLOBAL_TABLES and referred == "tenants":
            continue  # the tenant itself: a reference table, on every node
        if (
            "tenant_id" not in fk["constrained_columns"]
            or "tenant_id" not in fk["referred_columns"]
        ):
            problems.append(f"{table}: foreign key {fk['name']} to {referred}")
    return problems


async def test_every_key_of_a_tenant_table_contains_tenant_id(store: Stores) -> None:
    """In the migrated database (either backend), not only in the models: what a shard
    would enforce is what the migrations made."""
    async with store.database.engine.connect() as conn:

        def check(sync_conn: object) -> tuple[list[str], list[str]]:
            inspector = inspect(sync_conn)
            names = inspector.get_table_names()
            problems: list[str] = []
            for table in names:
                if table in tables.GLOBAL_TABLES:
                    continue
                problems += _violations_in_keys(inspector, table)
            return names, problems

        names, problems = await conn.run_sync(check)
    assert set(SHARDED) <= set(names)
    assert problems == [], "keys without tenant_id:\n" + "\n".join(problems)


def test_the_models_keys_contain_tenant_id() -> None:
    """The same rule on the models, so a new table fails here before any migration."""
    problems = []
    for table in tables.metadata.sorted_tables:
        if table.name in tables.GLOBAL_TABLES:
            continue
        assert "tenant_id" in table.c, f"{table.name} holds rows of no tenant"
        if "tenant_id" not in table.primary_key.columns:
            problems.append(f"{table.name}: primary key")
        for constraint in table.constraints:
            columns = getattr(constraint, "columns", None)
            if columns is not None and "tenant_id" not in columns:
                problems.append(f"{table.name}: {constraint.name or type(constraint).__name__}")
        for index in table.indexes:
            if index.unique and "tenant_id" not in index.columns:
                problems.append(f"{table.name}: unique index {index.name}")
    assert problems == [], problems


@pytest.mark.skipif(not os.environ.get(PG_ENV), reason="stored functions are PostgreSQL's")
async def test_only_the_documented_functions_read_across_tenants(store: Stores) -> None:
    async with store.database.engine.connect() as conn:
        functions = (
            await conn.execute(
                text(
                    "SELECT p.proname, p.prosecdef, p.prosrc FROM pg_proc p"
                    " JOIN pg_namespace n ON n.oid = p.pronamespace"
                    " WHERE n.nspname = 'public' AND p.proname LIKE 'asr\\_%'"
                )
            )
        ).all()
        walls = dict(
            (
                await conn.execute(
                    text(
                        "SELECT c.relname, c.relrowsecurity AND c.relforcerowsecurity"
                        " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                        " WHERE n.nspname = 'public' AND c.relkind = 'r'"
                    )
                )
            ).all()
        )
    documented = {function_name(s) for s in CROSS_TENANT}
    assert documented <= {function_name(s) for s in SOURCES}
    spanning = {name for name, definer, body in functions if definer or "app.cross_tenant" in body}
    assert spanning <= documented, f"undocumented cross-tenant functions: {spanning - documented}"
    unwalled = [t for t in SHARDED if not walls.get(t)]
    assert unwalled == [], f"tables of tenant rows without a forced row-level wall: {unwalled}"


def _table_names(tree: ast.Module, names: set[str]) -> set[str]:
    """The names a module binds to a table of tenant rows: imported from `app.store.tables`
    (`from app.store.tables import runs`), or module-level aliases of those
    (`_D = webhook_deliveries`, `_E = session_events.c`)."""
    aliases = {
        alias.asname or alias.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module == "app.store.tables"
        for alias in node.names
        if alias.name in names
    }
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
            while isinstance(value, ast.Attribute):
                value = value.value
            if isinstance(target, ast.Name) and isinstance(value, ast.Name):
                if value.id in aliases:
                    aliases.add(target.id)
    return aliases


def _sql_tables(literal: str, names: set[str]) -> set[str]:
    words = literal.replace("(", " ").replace(",", " ").split()
    found = set()
    for i, word in enumerate(words[1:], 1):
        if words[i - 1].upper() in {"FROM", "JOIN", "UPDATE", "INTO"} and word in names:
            found.add(word)
    return found


def _untenanted(source: str, rel: str) -> list[str]:
    """The functions of one store module that name a table of tenant rows, not `tenant_id`."""
    names = set(SHARDED)
    tree = ast.parse(source)
    watched = _table_names(tree, names)
    problems = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if (rel, node.name) in ALLOWED:
            continue
        used = set()
        mentions_tenant = False
        for inner in ast.walk(node):
            if isinstance(inner, ast.Name) and inner.id in watched:
                used.add(inner.id)
            elif (
                isinstance(inner, ast.Attribute)
                and inner.attr in names
                and isinstance(inner.value, ast.Name)
                and inner.value.id in {"tables", "t"}
            ):
                used.add(inner.attr)
            elif isinstance(inner, ast.Constant) and isinstance(inner.value, str):
                used |= _sql_tables(inner.value, names)
                mentions_tenant |= "tenant_id" in inner.value or "p_tenant" in inner.value
            if isinstance(inner, ast.Name | ast.arg | ast.Attribute):
                ident = getattr(inner, "id", None) or getattr(inner, "arg", None)
                ident = ident or getattr(inner, "attr", None)
                mentions_tenant |= ident in {"tenant_id", "tenant"}
        if used and not mentions_tenant:
            problems.append(f"{rel}:{node.lineno} {node.name} uses {sorted(used)}")
    return problems


def test_store_queries_name_their_tenant() -> None:
    """Every function of the store that names a table of tenant rows (as a SQLAlchemy table
    or in SQL text) also names `tenant_id`: a query that forgot its tenant would, sharded,
    run on every node (and, on PostgreSQL today, meet the row-level wall at run time)."""
    problems = []
    for path in sorted(STORE.rglob("*.py")):
        rel = path.relative_to(STORE).as_posix()
        if rel not in CROSS_TENANT_MODULES:
            problems += _untenanted(path.read_text(), rel)
    assert problems == [], "store queries without their tenant:\n" + "\n".join(problems)


def test_the_static_check_finds_a_query_without_its_tenant() -> None:
    """The check itself: a forgotten filter, by table or in SQL text, is found; a query
    that names its tenant is not."""
    source = (
        "from app.store.tables import sessions as S\n"
        "_E = S.c\n"
        "async def every_session(conn):\n"
        "    return await conn.execute(select(S).where(_E.status == 'idle'))\n"
        "async def raw(conn):\n"
        "    return await conn.execute(text('SELECT * FROM session_events WHERE seq > 1'))\n"
        "async def fine(conn, tenant_id):\n"
        "    return await conn.execute(select(S).where(_E.tenant_id == tenant_id))\n"
    )
    found = _untenanted(source, "example.py")
    assert [p.split()[1] for p in found] == ["every_session", "raw"]
