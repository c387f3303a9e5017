"""mqstore's Alembic migrations (frozen DDL; see env.py for how DSN and prefix are chosen)."""
