"""R25: golden ledgers of earlier event shapes, replayed by the current projector.

Each `tests/golden/ledgers/<name>.jsonl` is a session export recorded by
`python -m tests.golden.record` with the release that wrote it; `<name>.state.json` is the
state that release reported. Today's fold of every file must equal its recorded state, both
as a pure fold and after importing the file into this run's database and loading it the
way the service does (snapshot plus tail). Unknown event types (there is one in
`v1-handwritten`) are skipped by rule, never a crash. Every type of the current vocabulary
must occur in some golden file, so adding an event type without a fixture fails here.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from app.runtime.session.events import Event, EventType
from app.runtime.session.projector import fold
from app.runtime.session.transfer import import_ledger, parse_export
from app.services import services_of
from tests.conftest import TenantKey

GOLDEN = Path(__file__).parent / "golden" / "ledgers"
NAMES = sorted(p.name.removesuffix(".jsonl") for p in GOLDEN.glob("*.jsonl"))


def _lines(name: str) -> list[str]:
    return (GOLDEN / f"{name}.jsonl").read_text().splitlines()


def _expected(name: str) -> dict[str, Any]:
    return json.loads((GOLDEN / f"{name}.state.json").read_text())


def _events(name: str) -> list[Event]:
    return [
        Event(
            event_id=data["event_id"],
            session_id=data["session_id"],
            seq=data["seq"],
            type=data["type"],
            payload=data["payload"],
            created_at=datetime.fromisoformat(data["created_at"]),
            run_id=data.get("run_id"),
            turn_id=data.get("turn_id"),
        )
        for data in map(json.loads, _lines(name)[1:])
    ]


def test_there_are_golden_ledgers() -> None:
    assert len(NAMES) >= 5, NAMES


@pytest.mark.parametrize("name", NAMES)
def test_current_projector_folds_each_golden_ledger_to_its_recorded_state(name: str) -> None:
    assert fold(None, _events(name)).to_json() == _expected(name)


@pytest.mark.parametrize("name", NAMES)
async def test_golden_ledger_imported_and_loaded_gives_the_recorded_state(
    name: str, app: Any, tenant: TenantKey
) -> None:
    header, events = parse_export(_lines(name))
    loaded = await import_ledger(services_of(app).runtime, tenant.tenant_id, header, events)
    assert loaded.state.to_json() == _expected(name)


def test_every_event_type_has_a_golden_fixture() -> None:
    seen = {json.loads(line)["type"] for name in NAMES for line in _lines(name)[1:]}
    missing = sorted(set(EventType) - seen)
    assert not missing, f"record a golden ledger for {missing}: python -m tests.golden.record"
    assert seen - set(EventType), "a golden ledger keeps one unknown type to prove it is skipped"
