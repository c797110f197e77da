"""The store contract suite: every test here runs on each backend the tier can reach.

`store` is parametrized: the run's own database (SQLite, or PostgreSQL in the PostgreSQL
tier), plus, in the PostgreSQL tier, a SQLite store of its own, so that one run checks that
both backends keep the same contract (same results, same refusals).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.settings import Settings
from app.store.engine import make_engine
from app.store.migrations import upgrade_head
from app.store.stores import Stores, open_stores
from tests.conftest import PG_ENV, TenantKey, make_tenant

_BACKENDS = ["suite", "sqlite"] if os.environ.get(PG_ENV) else ["suite"]


@pytest.fixture(scope="session", params=_BACKENDS)
async def store(
    request: pytest.FixtureRequest,
    settings: Settings,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Stores]:
    if request.param == "suite":
        url = settings.database_url
    else:
        path = Path(tmp_path_factory.mktemp("contract")) / "contract.db"
        url = f"sqlite+aiosqlite:///{path}"
        await asyncio.to_thread(upgrade_head, url)  # Alembic runs its own event loop
    engine = make_engine(Settings(database_url=url, bootstrap_default_tenant=False))
    yield open_stores(engine)
    await engine.dispose()


@pytest.fixture
async def tenant(store: Stores) -> TenantKey:
    return await make_tenant(store)


@pytest.fixture
async def other_tenant(store: Stores) -> TenantKey:
    return await make_tenant(store)
