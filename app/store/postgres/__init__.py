"""PostgreSQL-only parts of the store: the stored functions' SQL sources and their installer."""
