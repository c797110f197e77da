"""The REST resources: one router module per resource family, with the HTTP models beside
them (`schemas.py` for most, `event_models.py` for the typed events, `schedule_schemas.py`
and `webhook_schemas.py` next to their routes)."""
