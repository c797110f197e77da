"""Persistence: SQLAlchemy 2 (async) on PostgreSQL and SQLite. Only this package imports it."""
