"""The stored functions in the database are exactly their sources (PostgreSQL only).

Their SQL lives once, in `app/store/postgres/sql/*.sql`, installed by the repeatable step at
the end of an upgrade to head (`app/store/postgres/install.py`); a function changed in the
database by hand, a source the step did not install, or an old overload left behind by a
signature change without a migration that drops it all fail here.
"""

from __future__ import annotations

import pytest
from sqlalchemy import text

from app.store.postgres.install import SOURCES, function_body, function_name
from app.store.stores import Stores
from tests.conftest import PG_ENV

pytestmark = pytest.mark.skipif(
    not __import__("os").environ.get(PG_ENV), reason="stored functions are PostgreSQL's"
)


async def test_the_database_holds_exactly_the_sources(store: Stores) -> None:
    async with store.database.engine.connect() as conn:
        rows = (
            await conn.execute(
                text(
                    "SELECT p.proname, p.prosrc FROM pg_proc p"
                    " JOIN pg_namespace n ON n.oid = p.pronamespace"
                    " WHERE n.nspname = 'public' AND p.proname LIKE 'asr\\_%'"
                )
            )
        ).all()
    held: dict[str, list[str]] = {}
    for name, body in rows:
        held.setdefault(name, []).append(body)
    expected = {function_name(s): function_body(s) for s in SOURCES}
    assert sorted(held) == sorted(expected), "a function without a source, or one not installed"
    for name, bodies in held.items():
        assert len(bodies) == 1, f"{name} has {len(bodies)} overloads"
        assert bodies[0] == expected[name], f"{name} differs from its source"
