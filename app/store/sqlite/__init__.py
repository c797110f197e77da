"""The embedded default's store: SQLite through SQLAlchemy Core (`SqliteStore`)."""
