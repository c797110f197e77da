"""Where the fault tests run: the PostgreSQL ones in the suite's PostgreSQL tier
(ASR_TEST_DATABASE_URL is a postgresql URL), on a cluster of their own; the SQLite one in
the SQLite tier (ASR_TEST_DATABASE_URL unset)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.faults.cluster import PgCluster, create_cluster, find_bin_dir, remove_cluster

PG_ENV = "ASR_TEST_DATABASE_URL"


def postgres_tier() -> bool:
    return os.environ.get(PG_ENV, "").startswith("postgresql")


@pytest.fixture(scope="module")
def pg_cluster() -> Iterator[PgCluster]:
    """A throwaway cluster for this module's PostgreSQL fault tests, removed afterwards
    (also when a test fails). Without the server binaries the tests are skipped, except
    under CI=true, where that is a failure."""
    if not postgres_tier():
        pytest.skip("PostgreSQL fault tests run in the PostgreSQL tier (ASR_TEST_DATABASE_URL)")
    bin_dir = find_bin_dir()
    if bin_dir is None:
        if os.environ.get("CI") == "true":
            pytest.fail("PostgreSQL server binaries (/usr/lib/postgresql/*/bin) are missing")
        pytest.skip("PostgreSQL server binaries (/usr/lib/postgresql/*/bin) are missing")
    cluster = create_cluster(bin_dir)
    try:
        yield cluster
    finally:
        remove_cluster(cluster)


@pytest.fixture
def sqlite_tier() -> None:
    if postgres_tier():
        pytest.skip("the SQLite fault test runs in the SQLite tier (ASR_TEST_DATABASE_URL unset)")
