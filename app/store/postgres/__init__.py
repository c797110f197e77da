"""The PostgreSQL backend's stores (`PostgresLedger`, `PostgresRuns`, ...), their stored
functions' SQL sources and their installer."""
