"""R1: a Hypothesis state machine drives the runtime and store on a real database.

Rules: create, append (with and without expected_seq), stale append, save, fork at a random
seq, restore, resume, delete, runs of the scripted model, compactions (every strategy),
window changes, shared-state sets and JSON Patches (some of which do not apply), and prunes
of the ledger at random points (a dry run, or a real one up to the newest snapshot nothing
pending needs). The model is a plain dict of item lists and one of shared states. After
every step: seqs are gapless per session, 1..N or, once pruned, from the HISTORY_PRUNED
marker on; the projection (fold of the whole ledger, from the snapshot at the marker once
pruned) equals live memory and the model, and so does the shared state; every snapshot
equals the fold of the ledger up to its seq; a fork at k equals the parent's fold at k.

The machine runs its own event loop and engine (Hypothesis drives it synchronously).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    precondition,
    rule,
)

from app.assembly import runtime_over
from app.runtime.access.accounts import Accounts
from app.runtime.errors import InvalidForkPoint, InvalidPatch, SeqConflict
from app.runtime.memory.compact import compact_session
from app.runtime.memory.compaction import ScriptedSummarizer
from app.runtime.models.scripted import ScriptedModel
from app.runtime.runs.manager import RunManager
from app.runtime.runs.plan import RunRequest
from app.runtime.session.events import Event, EventType
from app.runtime.session.json_patch import apply_patch
from app.runtime.session.projector import evict_to_window, fold
from app.runtime.session.state import SessionState
from app.runtime.tools.registry import ToolRegistry
from app.settings import Settings
from app.store.engine import make_engine
from app.store.stores import open_stores

EXAMPLES = int(os.environ.get("ASR_R1_EXAMPLES", "60"))
STEPS = int(os.environ.get("ASR_R1_STEPS", "30"))

text = st.text(alphabet="abcxyz ", max_size=6)
message = st.builds(
    lambda role, content: {"type": "message", "role": role, "content": content},
    st.sampled_from(["user", "assistant", "system"]),
    text,
)

json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), text)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.sampled_from("abl"), inner, max_size=3)
    ),
    max_leaves=6,
)
shared_state = st.dictionaries(st.sampled_from(["a", "b", "l"]), json_value, max_size=3)
pointer = st.sampled_from(["/a", "/b", "/l", "/l/0", "/l/-", "/a/b", "/z"])


@st.composite
def patch_operation(draw: st.DrawFn) -> dict[str, Any]:
    op = draw(st.sampled_from(["add", "remove", "replace", "move", "copy", "test"]))
    out: dict[str, Any] = {"op": op, "path": draw(pointer)}
    if op in ("add", "replace", "test"):
        out["value"] = draw(json_value)
    if op in ("move", "copy"):
        out["from"] = draw(pointer)
    return out


def make_machine(database_url: str) -> type[RuleBasedStateMachine]:
    class LedgerMachine(RuleBasedStateMachine):
        sessions = Bundle("sessions")

        def __init__(self) -> None:
            super().__init__()
            self.loop = asyncio.new_event_loop()
            self.engine = make_engine(Settings(database_url=database_url))
            self.store = open_stores(self.engine)
            self.runtime = runtime_over(self.store)
            self.runs = RunManager(
                self.runtime, models={"scripted": ScriptedModel()}, tools=ToolRegistry()
            )
            self.model: dict[str, list[dict[str, Any]]] = {}
            self.windows: dict[str, int | None] = {}
            self.shared: dict[str, dict[str, Any]] = {}
            self.tenant = ""
            self.counter = 0

        def run_sync(self, coro: Any) -> Any:
            return self.loop.run_until_complete(coro)

        def teardown(self) -> None:
            self.run_sync(self.engine.dispose())
            self.loop.close()

        @initialize()
        def make_tenant(self) -> None:
            name = f"r1-{uuid.uuid4().hex}"
            self.tenant = self.run_sync(Accounts(self.store.accounts).create_tenant(name)).tenant_id

        @rule(target=sessions)
        def create(self) -> str:
            self.counter += 1
            sid = f"s{self.counter}"
            self.run_sync(
                self.runtime.create(self.tenant, session_id=sid, metadata={}, agent={}, binding={})
            )
            self.model[sid] = []
            self.shared[sid] = {}
            return sid

        @rule(sid=sessions, items=st.lists(message, min_size=1, max_size=3), guarded=st.booleans())
        def append(self, sid: str, items: list[dict[str, Any]], guarded: bool) -> None:
            expected = None
            if guarded:
                expected = self.run_sync(self.runtime.get(self.tenant, sid)).last_seq
            self.run_sync(self.runtime.append_items(self.tenant, sid, items, expected_seq=expected))
            self.model[sid] = evict_to_window(self.model[sid] + items, self.windows.get(sid))

        @rule(sid=sessions)
        def append_stale(self, sid: str) -> None:
            head = self.run_sync(self.runtime.get(self.tenant, sid)).last_seq
            with pytest.raises(SeqConflict):
                self.run_sync(
                    self.runtime.append_items(
                        self.tenant,
                        sid,
                        [{"type": "message", "role": "user", "content": "x"}],
                        expected_seq=head - 1,
                    )
                )

        @rule(sid=sessions)
        def save(self, sid: str) -> None:
            self.run_sync(self.runtime.save(self.tenant, sid))

        @rule(sid=sessions)
        def resume(self, sid: str) -> None:
            loaded = self.run_sync(self.runtime.resume(self.tenant, sid))
            assert loaded.state.items == self.model[sid]

        def fold_from_start(self, sid: str, events: list[Event]) -> SessionState:
            """The fold of a ledger read from its start, found independently of the runtime:
            once pruned, from the snapshot at the marker (or the oldest after it)."""
            if not events or events[0].type != EventType.HISTORY_PRUNED:
                return fold(None, events)
            snaps = self.run_sync(self.store.ledger.list_snapshots(self.tenant, sid))
            base = next(x for x in snaps if x.seq >= events[0].seq)
            state = SessionState.from_json(base.state)
            return fold(state, [e for e in events if e.seq > base.seq])

        @rule(sid=sessions, dry_run=st.booleans(), min_events=st.integers(1, 6))
        def prune(self, sid: str, dry_run: bool, min_events: int) -> None:
            before = self.run_sync(self.store.ledger.list_events(self.tenant, sid))
            outcome = self.run_sync(
                self.runtime.prune(self.tenant, sid, min_events=min_events, dry_run=dry_run)
            )
            after = self.run_sync(self.store.ledger.list_events(self.tenant, sid))
            if dry_run or outcome.cut_seq is None:
                assert after == before
                return
            cut = outcome.cut_seq
            assert after[0].type == EventType.HISTORY_PRUNED and after[0].seq == cut
            assert after[1:] == [e for e in before if e.seq > cut]
            # Never across a pending call: every call pending now keeps its TOOL_CALL.
            pending = self.run_sync(self.runtime.load(self.tenant, sid)).state.pending
            kept_calls = {e.payload.get("call_id") for e in after if e.type == "TOOL_CALL"}
            assert set(pending) <= kept_calls

        @rule(target=sessions, sid=sessions, data=st.data())
        def fork(self, sid: str, data: st.DataObject) -> str:
            head = self.run_sync(self.runtime.get(self.tenant, sid)).last_seq
            start = self.run_sync(self.runtime.history_start(self.tenant, sid))
            if start > 1 and data.draw(st.booleans()):
                with pytest.raises(InvalidForkPoint):
                    self.run_sync(self.runtime.fork(self.tenant, sid, at_seq=start - 1))
            at = data.draw(st.integers(start, head))
            expected = self.run_sync(self.runtime.state_at(self.tenant, sid, at))
            self.counter += 1
            child = f"s{self.counter}"
            record = self.run_sync(
                self.runtime.fork(self.tenant, sid, at_seq=at, new_session_id=child)
            )
            loaded = self.run_sync(self.runtime.as_loaded(self.tenant, record))
            assert loaded.state.memory_json() == expected.memory_json()
            # Independent check of "fork at k equals the parent's fold at k": fold from seq 1.
            parent_events = self.run_sync(
                self.store.ledger.list_events(self.tenant, sid, until_seq=at)
            )
            assert self.fold_from_start(sid, parent_events).items == loaded.state.items
            assert loaded.state.shared_state == expected.shared_state
            self.model[child] = list(loaded.state.items)
            self.shared[child] = expected.shared_state
            self.windows[child] = expected.max_items
            return child

        @rule(
            sid=sessions,
            keep=st.integers(0, 3),
            extra=st.lists(message, max_size=2),
            shared=st.one_of(st.none(), shared_state),
        )
        def restore(
            self, sid: str, keep: int, extra: list[dict[str, Any]], shared: dict[str, Any] | None
        ) -> None:
            baseline = self.model[sid][:keep] + extra
            recovery: dict[str, Any] = {"memory": {"items": baseline, "summary": None}}
            if shared is not None:  # a recovery object without one keeps the session's
                recovery["shared_state"] = shared
                self.shared[sid] = shared
            self.run_sync(self.runtime.restore(self.tenant, sid, recovery))
            self.model[sid] = list(baseline)
            self.windows.pop(sid, None)  # the recovery object carries no window

        @precondition(lambda self: len(self.model) > 1)
        @rule(sid=consumes(sessions))
        def delete(self, sid: str) -> None:
            self.run_sync(self.runtime.delete(self.tenant, sid))
            del self.model[sid]

        @rule(
            sid=sessions,
            text=st.sampled_from(["hi", '[tool:echo {"text": "t"}]', "[ask]", "[continue:1]"]),
        )
        def run_agent(self, sid: str, text: str) -> None:
            if self.run_blocked(sid):
                return
            started = self.run_sync(self.runs.start(self.tenant, sid, RunRequest(input=text)))
            self.run_sync(self.runs.wait(self.tenant, started.run_id, within_seconds=30))
            self.resync(sid)

        @rule(
            sid=sessions,
            strategy=st.sampled_from(["truncate", "summarize", "tool_results"]),
            keep=st.integers(1, 4),
        )
        def compact(self, sid: str, strategy: str, keep: int) -> None:
            self.run_sync(
                compact_session(
                    self.runtime,
                    self.tenant,
                    sid,
                    ScriptedSummarizer(),
                    strategy=strategy,
                    overrides={"keep_last": keep, "tool_output_max_chars": 16},
                )
            )
            self.resync(sid)

        @rule(sid=sessions, window=st.one_of(st.none(), st.integers(1, 5)))
        def window(self, sid: str, window: int | None) -> None:
            self.run_sync(self.runtime.change_window(self.tenant, sid, window))
            self.windows[sid] = window
            self.model[sid] = evict_to_window(self.model[sid], window)

        @rule(sid=sessions, value=shared_state)
        def set_shared_state(self, sid: str, value: dict[str, Any]) -> None:
            loaded = self.run_sync(self.runtime.set_shared_state(self.tenant, sid, value))
            assert loaded.state.shared_state == value
            self.shared[sid] = value

        @rule(sid=sessions, patch=st.lists(patch_operation(), min_size=1, max_size=3))
        def patch_shared_state(self, sid: str, patch: list[dict[str, Any]]) -> None:
            try:
                expected = apply_patch(self.shared[sid], patch)
            except InvalidPatch:
                expected = None
            if not isinstance(expected, dict):  # does not apply, or leaves no object
                with pytest.raises(InvalidPatch):
                    self.run_sync(self.runtime.patch_shared_state(self.tenant, sid, patch))
                return
            loaded = self.run_sync(self.runtime.patch_shared_state(self.tenant, sid, patch))
            assert loaded.state.shared_state == expected
            self.shared[sid] = expected

        def run_blocked(self, sid: str) -> bool:
            state = self.run_sync(self.runtime.load(self.tenant, sid)).state
            return any(c.get("decision") is None for c in state.pending.values())

        def resync(self, sid: str) -> None:
            """Runs, compactions and windows are checked by the invariants (fold == live,
            snapshot == fold), not re-predicted here; the model follows live memory."""
            self.model[sid] = list(self.run_sync(self.runtime.load(self.tenant, sid)).state.items)

        @invariant()
        def ledger_is_consistent(self) -> None:
            for sid, items in self.model.items():
                events = self.run_sync(self.store.ledger.list_events(self.tenant, sid))
                first = events[0].seq
                assert [e.seq for e in events] == list(range(first, first + len(events)))
                assert first == 1 or events[0].type == EventType.HISTORY_PRUNED
                full = self.fold_from_start(sid, events)
                projected = self.run_sync(self.runtime.projection(self.tenant, sid))[1]
                assert projected.memory_json() == full.memory_json()
                live = self.run_sync(self.runtime.load(self.tenant, sid)).state
                assert full.memory_json() == live.memory_json()
                assert full.items == items
                assert full.shared_state == live.shared_state == self.shared[sid]
                for snap in self.run_sync(self.store.ledger.list_snapshots(self.tenant, sid)):
                    upto = self.fold_from_start(sid, [e for e in events if e.seq <= snap.seq])
                    assert SessionState.from_json(snap.state) == upto

    return LedgerMachine


@pytest.mark.timeout(1500)
def test_r1_ledger_state_machine(database_url: str) -> None:
    machine = make_machine(database_url)
    machine.TestCase.settings = settings(
        max_examples=EXAMPLES,
        stateful_step_count=STEPS,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    machine.TestCase().runTest()
