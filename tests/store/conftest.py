"""Fixtures of the store's tests."""

from __future__ import annotations

import pytest

from app.store.stores import Stores


@pytest.fixture
def sqlite_store(store: Stores) -> Stores:
    """`store` where it is SQLite's; the test is skipped on PostgreSQL (it checks what only
    SQLite does: its one writer, the text it stores)."""
    if store.dialect != "sqlite":
        pytest.skip("SQLite's own behaviour")
    return store
