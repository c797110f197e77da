"""The app's assembly: `open_services` enters every service on one exit stack, so stop is
start reversed, also when start fails half-way; `app.state` holds the `Services` and,
from construction on, only the shutdown that must exist before them."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy.exc import SQLAlchemyError

from app.assembly import open_services
from app.main import create_app
from app.services import services_of
from app.settings import Settings
from tests.conftest import create_database, drop_database


async def test_app_state_holds_the_services_and_the_shutdown_alone(settings: Settings) -> None:
    application = create_app(settings)
    built = set(application.state._state)
    assert built == {"shutdown_event", "stream_shutdown"}
    async with application.router.lifespan_context(application):
        services = services_of(application)
        assert set(application.state._state) == {*built, "services"}
        assert services.settings is settings
        assert services.shutdown_event is application.state.shutdown_event
        assert application.state.stream_shutdown.shutdown_event is services.shutdown_event
        assert not services.shutdown_event.is_set()
    assert services.shutdown_event.is_set()  # the first thing stop does


async def test_a_start_that_fails_half_way_stops_what_it_started(tmp_path: Path) -> None:
    """On a database never migrated, the default tenant's bootstrap fails once the engine,
    the bus and the tools are up: the stack stops them, and no task of theirs is left. (In
    a loop of its own: the session's loop runs other tests' services meanwhile.)"""
    url = await asyncio.to_thread(create_database, tmp_path, "unmigrated")
    settings = Settings(database_url=url, webhooks_enabled=False, schedules_enabled=False)

    async def start() -> set[str]:
        with pytest.raises(SQLAlchemyError, match="tenants"):
            async with open_services(settings, metrics=None, shutdown_event=asyncio.Event()):
                pytest.fail("started on a database without tables")
        await asyncio.sleep(0)  # a cancelled task leaves the set on its next turn
        return {t.get_name() for t in asyncio.all_tasks() if t is not asyncio.current_task()}

    try:
        assert await asyncio.to_thread(asyncio.run, start()) == set()
    finally:
        await asyncio.to_thread(drop_database, url)
