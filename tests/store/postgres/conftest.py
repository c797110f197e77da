"""PostgreSQL's own machinery: stored functions, group commit, NOTIFY, row-level security.

Everything here runs in the PostgreSQL tier only (ASR_TEST_DATABASE_URL); what both
backends must do alike is the contract suite's (`tests/store/contract`).
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _postgresql_tier(is_postgres: bool) -> None:
    if not is_postgres:
        pytest.skip("PostgreSQL's machinery: the PostgreSQL tier runs it")
