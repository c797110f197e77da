"""The embedded default's stores: SQLite through SQLAlchemy Core (`SqliteLedger`, `SqliteRuns`)."""
