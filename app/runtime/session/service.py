"""`SessionRuntime`: the verbs of the service, and the only caller of the ledger and run
stores (its ports `LedgerPort`, `RunPort`, `IdempotencyPort`, `MaintenancePort`).

State is never stored as such: it is the fold of the ledger, loaded as the newest snapshot
plus the events after it, and kept in a small in-process cache keyed by the session's
identity (tenant, id, created_at) so that a session deleted and re-created under the same id
can never be served from a stale entry.
"""

from __future__ import annotations

import builtins
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, TypeVar

from app.runtime.errors import (
    BindingMismatch,
    HistoryPrunedError,
    IdempotencyKeyReused,
    InvalidForkPoint,
    InvalidItems,
    InvalidRequest,
    SeqConflict,
    SessionNotFound,
    StaleSession,
    TooManyRequests,
    VersionConflict,
)
from app.runtime.memory.items import normalize_items
from app.runtime.observer import NullObserver, Observer
from app.runtime.ports import (
    AppendResult,
    IdempotencyPort,
    IdempotencyRecord,
    IdempotencyToken,
    LedgerPort,
    LiveFrames,
    MaintenancePort,
    NewRun,
    NewSession,
    NoLiveFrames,
    PruneOutcome,
    RunFinish,
    RunPort,
    RunRecord,
    SessionLoad,
    SessionRecord,
    SessionWriter,
    SnapshotRecord,
    TenantCursor,
    TenantPage,
)
from app.runtime.session import event_payloads as ev
from app.runtime.session.events import Event, EventType, NewEvent
from app.runtime.session.metadata import check_metadata_size
from app.runtime.session.projector import apply_event, fold
from app.runtime.session.pruning import BUSY, cut_point, history_pruned, pruned_at
from app.runtime.session.quota import SessionQuota
from app.runtime.session.shared_state import check_state_size, patch_events, set_events
from app.runtime.session.state import SessionState, validate_recovery_object
from app.runtime.session.store_writer import StoreWriter

_CACHE_MAX = 1024
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Limits:
    max_items_per_request: int = 256
    max_inline_bytes: int = 262_144
    max_metadata_bytes: int = 16_384
    max_state_bytes: int = 65_536
    snapshot_every: int = 200
    max_sessions_per_tenant: int = 100_000


@dataclass(frozen=True, slots=True)
class Loaded:
    """A session row and the fold of its ledger at the row's last seq."""

    session: SessionRecord
    state: SessionState


class SessionRuntime:
    def __init__(
        self,
        ledger: LedgerPort,
        runs: RunPort,
        idempotency: IdempotencyPort,
        maintenance: MaintenancePort,
        *,
        limits: Limits | None = None,
        live: LiveFrames | None = None,
        observer: Observer | None = None,
    ) -> None:
        self.ledger = ledger
        self.runs = runs
        self.idempotency = idempotency
        self.maintenance = maintenance
        self._writer = StoreWriter(ledger, runs)
        self.limits = limits or Limits()
        self._quota = SessionQuota(ledger.count_sessions, self.limits.max_sessions_per_tenant)
        self.live: LiveFrames = live or NoLiveFrames()
        # Runs report their stop reason, latency and model calls here (metrics).
        self.observer: Observer = observer or NullObserver()
        # (tenant, session) -> (created_at of that incarnation, its newest folded state).
        self._cache: OrderedDict[tuple[str, str], tuple[SessionRecord, SessionState]] = (
            OrderedDict()
        )

    # ------------------------------------------------------------------ reading

    async def get(self, tenant_id: str, session_id: str) -> SessionRecord:
        record = await self.find(tenant_id, session_id)
        if record is None:
            raise SessionNotFound(session_id)
        return record

    async def find(self, tenant_id: str, session_id: str) -> SessionRecord | None:
        """The session's row, or None when there is none (an erased parent, say)."""
        return await self.ledger.get_session(tenant_id, session_id)

    async def list(
        self,
        tenant_id: str,
        *,
        limit: int,
        after: tuple[datetime, str] | None = None,
        status: str | None = None,
        metadata: dict[str, str] | None = None,
    ) -> list[SessionRecord]:
        """Sessions newest first; `after` is the (created_at, session_id) of the last seen."""
        return await self.ledger.list_sessions(
            tenant_id, limit=limit, after=after, status=status, metadata=metadata
        )

    async def load(self, tenant_id: str, session_id: str, *, display: bool = False) -> Loaded:
        """The session and its current state: cache or snapshot, plus the tail of events.

        `display`: for showing only (a GET), never to decide a write on: a cold load may
        then be served by a read replica that has applied what this process knows of the
        session (the store's fence)."""
        cached = self._cache.get((tenant_id, session_id))
        found = await self.ledger.load_session(
            tenant_id, session_id, base=_base_of(cached), lagging=display
        )
        if found is None:
            raise SessionNotFound(session_id)
        state = self._state_of(found, cached)
        if len(found.tail) >= self.limits.snapshot_every:
            # Long tails are folded once and kept: resume stays O(events since snapshot).
            await self.ledger.save_snapshot(
                tenant_id, session_id, seq=state.seq, kind="auto", state=state.to_json()
            )
        self.remember(found.session, state)
        return Loaded(session=found.session, state=state.copy())

    def _state_of(
        self, found: SessionLoad, cached: tuple[SessionRecord, SessionState] | None
    ) -> SessionState:
        """The fold of what `load_session` found, on the cached state when it is the base."""
        record, tail = found.session, found.tail
        base: SessionState | None
        if found.from_base and cached is not None:
            base = cached[1]
        else:
            base = SessionState.from_json(found.snapshot.state) if found.snapshot else None
        state = fold(base, tail)
        if state.seq != record.last_seq:
            raise RuntimeError(
                f"ledger of {record.session_id} ends at {state.seq}, row says {record.last_seq}"
            )
        return state

    @property
    def writer(self) -> SessionWriter:
        """The store's writes decided on a session's state, for a caller that decides on a
        view of its own (a cached one) and falls back to `decided`."""
        return self._writer

    async def decided(
        self,
        tenant_id: str,
        session_id: str,
        write: Callable[[Loaded, SessionWriter], Awaitable[T]],
    ) -> T:
        """`write(loaded, writer)`: a write decided on the session's current state, which
        never fails because another writer got in between.

        It is tried first on the state as read, conditional on it (`expected_seq` or the
        version: SeqConflict or StaleSession when it lost); a write that lost is decided
        again while the ledger holds the session (`LedgerPort.hold`), where no other
        writer can change it. A precondition of the caller's own (If-Match) still fails.
        """
        loaded = await self.load(tenant_id, session_id)
        try:
            return await write(loaded, self._writer)
        except (SeqConflict, StaleSession):
            pass
        key = (tenant_id, session_id)
        async with self.ledger.hold(tenant_id, session_id) as held:
            cached = self._cache.get(key)
            found = await held.load(base=_base_of(cached))
            state = self._state_of(found, cached)
            return await write(Loaded(session=found.session, state=state), held)

    def cached(self, tenant_id: str, session_id: str) -> Loaded | None:
        """The session as this process last wrote or read it, without asking the store; it
        may be stale, so only for a caller whose write checks it (`expected` version)."""
        kept = self._cache.get((tenant_id, session_id))
        return Loaded(session=kept[0], state=kept[1].copy()) if kept else None

    async def state_at(
        self, tenant_id: str, session_id: str, seq: int, *, record: SessionRecord | None = None
    ) -> SessionState:
        """The fold of the ledger up to `seq` (newest snapshot at or below it, plus events).

        With the session's `record` as just read, a cached state of that incarnation at most
        `snapshot_every` events before `seq` is folded forward instead: a fork at the latest
        seq of a session this process serves then reads no snapshot at all.
        """
        kept = self._cache.get((tenant_id, session_id)) if record is not None else None
        if (
            kept is not None
            and record is not None
            and kept[0].created_at == record.created_at
            and 0 <= seq - kept[1].seq < self.limits.snapshot_every
        ):
            if kept[1].seq == seq:  # nothing to read: the cached state is the fold at seq
                return kept[1].copy()
            tail = await self.ledger.list_events(
                tenant_id, session_id, after_seq=kept[1].seq, until_seq=seq
            )
            if pruned_at(tail) is None:  # else the cached state predates a prune: below
                return fold(kept[1], tail)
        snap = await self.ledger.get_snapshot(tenant_id, session_id, at_or_below=seq)
        base = SessionState.from_json(snap.state) if snap is not None else None
        if base is None and (start := await self.history_start(tenant_id, session_id)) > seq:
            raise HistoryPrunedError(start)  # its fold needs events that were pruned
        after = base.seq if base is not None else 0
        events = await self.ledger.list_events(
            tenant_id, session_id, after_seq=after, until_seq=seq
        )
        return fold(base, events)

    async def list_events(
        self,
        tenant_id: str,
        session_id: str,
        *,
        after_seq: int = 0,
        until_seq: int | None = None,
        types: builtins.list[str] | None = None,
        run_id: str | None = None,
        limit: int | None = None,
    ) -> builtins.list[Event]:
        """Events of the session in seq order; SessionNotFound if there is no such session.
        Events found prove the session exists (in this tenant), so the session row is read
        only when none are: a full read is one round trip, like the bare driver's."""
        events = await self.ledger.list_events(
            tenant_id,
            session_id,
            after_seq=after_seq,
            until_seq=until_seq,
            types=types,
            run_id=run_id,
            limit=limit,
        )
        if not events:
            await self.get(tenant_id, session_id)
        return events

    async def list_tenant_events(
        self,
        tenant_id: str,
        *,
        after: TenantCursor,
        types: builtins.list[str] | None = None,
        limit: int = 500,
    ) -> TenantPage:
        """Events of every session of the tenant after a timeline cursor, never skipping one
        that commits late (see `TenantCursor`)."""
        return await self.ledger.list_tenant_events(
            tenant_id, after=after, types=types, limit=limit
        )

    async def projection(self, tenant_id: str, session_id: str) -> tuple[Loaded, SessionState]:
        """(live state, fold of the whole ledger from seq 1 to the same seq).

        A pruned ledger starts with its marker: the fold starts from the snapshot kept at
        the marker's seq (the state the pruned prefix folded to) instead of from nothing."""
        loaded = await self.load(tenant_id, session_id)
        events = await self.ledger.list_events(tenant_id, session_id, until_seq=loaded.state.seq)
        return loaded, await self._fold_ledger(tenant_id, session_id, events)

    async def _fold_ledger(
        self, tenant_id: str, session_id: str, events: builtins.list[Event]
    ) -> SessionState:
        """The fold of a ledger read from its start (which a prune's marker may begin)."""
        cut = pruned_at(events)
        if cut is None:
            return fold(None, events)
        base = await self._pruned_base(tenant_id, session_id, cut)
        return fold(SessionState.from_json(base.state), [e for e in events if e.seq > base.seq])

    async def _pruned_base(self, tenant_id: str, session_id: str, cut: int) -> SnapshotRecord:
        """The snapshot a fold of a ledger pruned at `cut` starts from: the one kept at the
        marker, or else (a fork of a pruned session copies a later snapshot only) the
        oldest one after it, as good a base, being the fold of the ledger up to it."""
        snap = await self.ledger.get_snapshot(tenant_id, session_id, at_or_below=cut)
        if snap is not None and snap.seq == cut:
            return snap
        later = [s for s in await self.ledger.list_snapshots(tenant_id, session_id) if s.seq > cut]
        if not later:
            raise HistoryPrunedError(cut)
        return later[0]

    async def history_start(self, tenant_id: str, session_id: str) -> int:
        """The least seq the ledger can be folded to: 1, or once pruned the seq of the
        snapshot its fold starts from (the marker's own seq, but for some forks)."""
        first = await self.ledger.list_events(tenant_id, session_id, limit=1)
        cut = pruned_at(first)
        if cut is None:
            return 1
        return (await self._pruned_base(tenant_id, session_id, cut)).seq

    async def prune(
        self, tenant_id: str, session_id: str, *, min_events: int = 1, dry_run: bool = False
    ) -> PruneOutcome:
        """Prune the session's ledger up to its newest snapshot that nothing pending needs
        (`app.runtime.session.pruning`); state, `last_seq` and version are unchanged, so a
        cached state stays good.

        Raises:
            SessionNotFound.
        """
        outcome = await self.ledger.prune_session(
            tenant_id,
            session_id,
            decide=lambda facts: cut_point(facts, min_events=min_events),
            mark=history_pruned,
            dry_run=dry_run,
        )
        if outcome is None:
            await self.get(tenant_id, session_id)
            return PruneOutcome(session_id, None, 0, 0, BUSY, dry_run)
        return outcome

    async def history(
        self, tenant_id: str, session_id: str, *, after_seq: int = 0, limit: int = 500
    ) -> tuple[builtins.list[dict[str, Any]], int | None]:
        """Every item ever added to memory, rebuilt from the ledger, one page at a time.

        Returns (items each with the `seq` that added it, next after_seq or None at the end).
        """
        await self.get(tenant_id, session_id)
        types: list[str]
        types = [EventType.USER_INPUT, EventType.MEMORY_ITEMS_APPENDED, EventType.TOOL_RESULT]
        events = await self.ledger.list_events(
            tenant_id, session_id, after_seq=after_seq, types=types, limit=limit
        )
        items: list[dict[str, Any]] = []
        for event in events:
            added = event.payload.get("items") or [event.payload.get("item")]
            items.extend({"seq": event.seq, "item": i} for i in added if i is not None)
        next_after = events[-1].seq if len(events) == limit else None
        return items, next_after

    # ------------------------------------------------------------------ writing

    async def create(
        self,
        tenant_id: str,
        *,
        session_id: str | None,
        metadata: dict[str, Any],
        agent: dict[str, Any],
        binding: dict[str, Any],
        max_items: int | None = None,
        parent: SessionRecord | None = None,
        idempotency: IdempotencyToken | None = None,
    ) -> Loaded:
        """A new session; with `parent`, a child in the parent's tree (delegation).

        A child keeps the parent's root id, so a whole tree of delegated work can be found
        from its root; its timeline is its own ledger, starting empty.
        """
        check_metadata_size(metadata, limit=self.limits.max_metadata_bytes)
        if not await self._quota.admits(tenant_id):
            raise TooManyRequests(
                f"a tenant may hold at most {self.limits.max_sessions_per_tenant} sessions",
                retry_after=60,
                code="too_many_sessions",
            )
        new = NewSession(
            session_id=session_id or str(uuid.uuid4()),
            metadata=metadata,
            agent=agent,
            binding=binding,
            root_session_id=parent.root_session_id if parent is not None else None,
            parent_session_id=parent.session_id if parent is not None else None,
        )
        created = ev.SessionCreated(
            metadata=metadata,
            agent=agent,
            binding=binding,
            parent_session_id=parent.session_id if parent is not None else None,
            root_session_id=parent.root_session_id if parent is not None else None,
        )
        events = [created.event()]
        if max_items is not None:
            events.append(ev.WindowChanged(max_items=max_items).event())
        result = await self.ledger.create_session(
            tenant_id, session=new, events=events, idempotency=idempotency
        )
        self._quota.created(tenant_id)
        return self._after_write(result, fold(None, result.events))

    async def create_imported(
        self, tenant_id: str, session: NewSession, events: builtins.list[NewEvent]
    ) -> Loaded:
        """A new session (its own root) holding exactly `events` (an import), in one
        transaction; its state is then loaded like any other's."""
        await self.ledger.create_session(tenant_id, session=session, events=events)
        return await self.load(tenant_id, session.session_id)

    async def delete(self, tenant_id: str, session_id: str) -> None:
        if not await self.ledger.delete_session(tenant_id, session_id):
            raise SessionNotFound(session_id)
        self._cache.pop((tenant_id, session_id), None)

    def forget(self, tenant_id: str, session_id: str | None = None) -> None:
        """Drop the cached state of a session (None: of every session of the tenant), once
        its rows are erased here or on another replica."""
        if session_id is not None:
            self._cache.pop((tenant_id, session_id), None)
            return
        for key in [key for key in self._cache if key[0] == tenant_id]:
            del self._cache[key]

    async def patch(
        self,
        tenant_id: str,
        session_id: str,
        *,
        metadata: dict[str, Any] | None = None,
        window: tuple[int | None] | None = None,
        idempotency: IdempotencyToken | None = None,
    ) -> AppendResult:
        """Merge a metadata patch (METADATA_UPDATED) and/or set the memory window
        (`window=(max_items,)`, None inside to remove it: WINDOW_CHANGED), in one write."""
        events: list[NewEvent] = []
        if metadata is not None:
            check_metadata_size(metadata, limit=self.limits.max_metadata_bytes)
            events.append(ev.MetadataUpdated(patch=metadata).event())
        if window is not None:
            events.append(ev.WindowChanged(max_items=window[0]).event())
        if not events:
            raise InvalidRequest("nothing to change: give metadata, max_items or clear_window")
        return await self.ledger.append_events(
            tenant_id,
            session_id,
            events=events,
            metadata_patch=metadata,
            idempotency=idempotency,
        )

    async def set_shared_state(
        self,
        tenant_id: str,
        session_id: str,
        value: Any,
        *,
        if_match: int | None = None,
        run_id: str | None = None,
        idempotency: IdempotencyToken | None = None,
    ) -> Loaded:
        """Replace the shared state whole (STATE_SET); nothing is written when it already is
        `value`. With `if_match`, only at that session version.

        Raises:
            InvalidPatch (not an object), PayloadTooLarge, VersionConflict.
        """

        def events(loaded: Loaded) -> builtins.list[NewEvent]:
            return set_events(
                loaded.state.shared_state, value, limit=self.limits.max_state_bytes, run_id=run_id
            )

        return await self._state_write(tenant_id, session_id, events, if_match, idempotency)

    async def patch_shared_state(
        self,
        tenant_id: str,
        session_id: str,
        patch: Any,
        *,
        if_match: int | None = None,
        run_id: str | None = None,
        turn_id: str | None = None,
        idempotency: IdempotencyToken | None = None,
    ) -> Loaded:
        """Apply a JSON Patch (RFC 6902) to the shared state (STATE_PATCHED), decided on the
        state as it is when written: concurrent patches never fail for contention, only
        for their own content (a `test` that no longer holds).

        Raises:
            InvalidPatch, PayloadTooLarge, VersionConflict.
        """

        def events(loaded: Loaded) -> builtins.list[NewEvent]:
            return patch_events(
                loaded.state.shared_state,
                patch,
                limit=self.limits.max_state_bytes,
                run_id=run_id,
                turn_id=turn_id,
            )

        return await self._state_write(tenant_id, session_id, events, if_match, idempotency)

    async def _state_write(
        self,
        tenant_id: str,
        session_id: str,
        make_events: Callable[[Loaded], builtins.list[NewEvent]],
        if_match: int | None,
        idempotency: IdempotencyToken | None,
    ) -> Loaded:
        async def write(loaded: Loaded, writer: SessionWriter) -> Loaded:
            if if_match is not None and loaded.session.version != if_match:
                raise VersionConflict(if_match, loaded.session.version)
            events = make_events(loaded)
            if not events:
                return loaded
            result = await writer.append_events(
                tenant_id,
                session_id,
                events=events,
                expected_seq=loaded.session.last_seq,
                expected_version=if_match,
                idempotency=idempotency,
            )
            return self._after_write(result, fold(loaded.state, result.events))

        return await self.decided(tenant_id, session_id, write)

    async def append(
        self,
        tenant_id: str,
        session_id: str,
        events: builtins.list[NewEvent],
        *,
        expected_seq: int | None = None,
        idempotency: IdempotencyToken | None = None,
    ) -> AppendResult:
        """Append events as they are. Without `expected_seq` for events that change no memory
        (process lifecycle); with it, for events decided on the session as read at that seq
        (answers, compaction), which a write in between makes stale (SeqConflict)."""
        return await self.ledger.append_events(
            tenant_id,
            session_id,
            events=events,
            expected_seq=expected_seq,
            idempotency=idempotency,
        )

    async def change_window(
        self, tenant_id: str, session_id: str, max_items: int | None
    ) -> AppendResult:
        """Set (or, with None, remove) the memory window: WINDOW_CHANGED."""
        return await self.ledger.append_events(
            tenant_id,
            session_id,
            events=[ev.WindowChanged(max_items=max_items).event()],
        )

    async def append_items(
        self,
        tenant_id: str,
        session_id: str,
        items: builtins.list[Any],
        *,
        expected_seq: int | None = None,
        idempotency: IdempotencyToken | None = None,
    ) -> AppendResult:
        """Add memory items without running a model (one MEMORY_ITEMS_APPENDED event)."""
        if not items:
            raise InvalidItems("items must not be empty")
        if len(items) > self.limits.max_items_per_request:
            raise InvalidItems(f"at most {self.limits.max_items_per_request} items per request")
        clean = normalize_items(items, max_inline_bytes=self.limits.max_inline_bytes)
        return await self.ledger.append_events(
            tenant_id,
            session_id,
            events=[ev.MemoryItemsAppended(items=clean).event()],
            expected_seq=expected_seq,
            idempotency=idempotency,
        )

    async def save(
        self,
        tenant_id: str,
        session_id: str,
        *,
        if_match: int | None = None,
        idempotency: IdempotencyToken | None = None,
    ) -> Loaded:
        """Write a `save` snapshot row and SESSION_SAVED (412 semantics via `if_match`)."""

        def events(loaded: Loaded) -> list[NewEvent]:
            return [ev.SessionSaved(snapshot_seq=loaded.session.last_seq + 1).event()]

        return await self._append_with_snapshot(
            tenant_id, session_id, "save", events, if_match=if_match, idempotency=idempotency
        )

    async def restore(
        self,
        tenant_id: str,
        session_id: str,
        recovery: dict[str, Any],
        *,
        if_match: int | None = None,
        idempotency: IdempotencyToken | None = None,
    ) -> Loaded:
        """Install a recovery object (from GET state) as the memory baseline."""
        clean = validate_recovery_object(recovery, max_inline_bytes=self.limits.max_inline_bytes)
        if "shared_state" in clean:
            check_state_size(clean["shared_state"], limit=self.limits.max_state_bytes)

        def events(_: Loaded) -> list[NewEvent]:
            return [ev.SessionRestored(state=clean).event()]

        return await self._append_with_snapshot(
            tenant_id, session_id, "restore", events, if_match=if_match, idempotency=idempotency
        )

    async def resume(
        self,
        tenant_id: str,
        session_id: str,
        *,
        binding: dict[str, Any] | None = None,
        idempotency: IdempotencyToken | None = None,
    ) -> Loaded:
        """Load snapshot + tail, check the binding, and record SESSION_RESUMED."""

        async def write(loaded: Loaded, writer: SessionWriter) -> Loaded:
            if binding is not None and binding != loaded.session.binding:
                raise BindingMismatch(
                    "the session is bound elsewhere", stored_binding=loaded.session.binding
                )
            resumed = ev.SessionResumed(
                resumed_at_seq=loaded.session.last_seq, binding=loaded.session.binding
            )
            result = await writer.append_events(
                tenant_id,
                session_id,
                events=[resumed.event()],
                expected_seq=loaded.session.last_seq,
                idempotency=idempotency,
            )
            return self._after_write(result, fold(loaded.state, result.events))

        return await self.decided(tenant_id, session_id, write)

    async def fork(
        self,
        tenant_id: str,
        session_id: str,
        *,
        at_seq: int | None = None,
        new_session_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        binding: dict[str, Any] | None = None,
        rebind: bool = False,
        idempotency: IdempotencyToken | None = None,
    ) -> SessionRecord:
        """A new session whose state is the source's fold at `at_seq`; the source is untouched.

        The child keeps the source's binding. A `binding` that differs from it is accepted only
        with `rebind=True`: a fork is a cheap way to continue work elsewhere, and moving it to
        another workspace by accident (a stale client value) would act on the wrong files.

        Returns the child's row as the fork committed it. Its state is not read: the store
        copies the prefix and the source's nearest snapshot inside the database, so nothing
        needs decoding or folding here, and a caller that shows the state reads it
        (`as_loaded`). Only when this process holds the source's state at `at_seq` itself is
        the child's state (that one plus SESSION_FORKED) kept for it, as after any write.

        Raises:
            SessionNotFound, InvalidForkPoint, BindingMismatch (a different binding without
            `rebind`), InvalidRequest (`rebind` without a binding).
        """
        source = await self.get(tenant_id, session_id)
        if rebind and binding is None:
            raise InvalidRequest("rebind needs the new binding")
        if binding is not None and binding != source.binding and not rebind:
            raise BindingMismatch(
                "the fork's binding differs from the source's; send rebind: true to rebind",
                stored_binding=source.binding,
            )
        at = source.last_seq if at_seq is None else at_seq
        if not 1 <= at <= source.last_seq:
            raise InvalidForkPoint(
                f"at_seq must be between 1 and {source.last_seq}", last_seq=source.last_seq
            )
        # A prune never cuts past the last seq, so only an earlier fork point is checked.
        if at < source.last_seq and at < (start := await self.history_start(tenant_id, session_id)):
            raise InvalidForkPoint(
                f"history before seq {start} was pruned: at_seq must be between {start}"
                f" and {source.last_seq}",
                last_seq=source.last_seq,
            )
        if metadata is not None:
            check_metadata_size(metadata, limit=self.limits.max_metadata_bytes)
        child_id = new_session_id or str(uuid.uuid4())
        forked = ev.SessionForked(
            parent_session_id=session_id,
            forked_from_seq=at,
            root_session_id=source.root_session_id,
            # the ledger says where the child was moved
            rebound_to=binding if rebind and binding != source.binding else None,
        ).event()
        kept = self._kept_at(source, at)
        result = await self._fork_rows(
            tenant_id, session_id, at, source, child_id, metadata, binding, forked, idempotency
        )
        if kept is not None:
            self.remember(result.session, fold(kept, result.events))
        return result.session

    def _kept_at(self, record: SessionRecord, seq: int) -> SessionState | None:
        """The cached state of `record`'s incarnation if it is the fold at exactly `seq`."""
        kept = self._cache.get((record.tenant_id, record.session_id))
        if kept is None or kept[0].created_at != record.created_at or kept[1].seq != seq:
            return None
        return kept[1].copy()

    async def as_loaded(self, tenant_id: str, record: SessionRecord) -> Loaded:
        """`record` (a row a write returned, a fork's) with the fold of its ledger up to the
        row's last seq: from the cache when it holds that fold, else read (the nearest
        snapshot and the events after it) and kept. For showing what a write whose answer
        folds nothing (`fork`) left, so that only a caller who shows it pays for it.

        Raises:
            HistoryPrunedError: the fold needs events pruned since (a child pruned at once).
        """
        state = await self.state_at(tenant_id, record.session_id, record.last_seq, record=record)
        self.remember(record, state)
        return Loaded(session=record, state=state)

    async def _fork_rows(
        self,
        tenant_id: str,
        session_id: str,
        at: int,
        source: SessionRecord,
        child_id: str,
        metadata: dict[str, Any] | None,
        binding: dict[str, Any] | None,
        forked: NewEvent,
        idempotency: IdempotencyToken | None,
    ) -> AppendResult:
        """The store's fork: the child's row, its copy of the source up to `at`, `forked`."""
        return await self.ledger.fork_session(
            tenant_id,
            session_id,
            at_seq=at,
            session=NewSession(
                session_id=child_id,
                metadata=source.metadata if metadata is None else metadata,
                agent=source.agent,
                binding=source.binding if binding is None else binding,
            ),
            events=[forked],
            idempotency=idempotency,
        )

    # -------------------------------------------------------------- idempotency

    async def find_idempotent(
        self, tenant_id: str, token: IdempotencyToken
    ) -> IdempotencyRecord | None:
        """The committed outcome of an earlier request with this key (None: there is none).

        Raises:
            IdempotencyKeyReused: the key was used with a different request.
        """
        found = await self.idempotency.get_idempotency_key(tenant_id, token.key)
        if found is not None and found.request_hash != token.request_hash:
            raise IdempotencyKeyReused()
        return found

    async def keep_idempotent_response(
        self,
        tenant_id: str,
        token: IdempotencyToken,
        *,
        status_code: int,
        response: bytes,
        headers: dict[str, str],
    ) -> None:
        await self.idempotency.store_idempotent_response(
            tenant_id, token, status_code=status_code, response=response, headers=headers
        )

    async def as_committed(self, tenant_id: str, result: dict[str, Any]) -> Loaded:
        """The session as a recorded write left it: its row with that write's last seq and
        version, and the fold of its ledger up to that seq (for answering a replay whose
        rendered response was never stored).

        Raises:
            SessionNotFound: the session was deleted since.
        """
        session_id = result["session_id"]
        record = await self.get(tenant_id, session_id)
        state = await self.state_at(tenant_id, session_id, result["last_seq"])
        committed = replace(record, last_seq=result["last_seq"], version=result["version"])
        return Loaded(session=committed, state=state)

    async def committed_events(self, tenant_id: str, result: dict[str, Any]) -> AppendResult:
        """A recorded write's AppendResult, read back from the ledger (events are immutable)."""
        loaded = await self.as_committed(tenant_id, result)
        events = await self.ledger.list_events(
            tenant_id,
            result["session_id"],
            after_seq=result["first_seq"] - 1,
            until_seq=result["last_seq"],
        )
        return AppendResult(session=loaded.session, events=events)

    # --------------------------------------------------------------------- runs
    # The run rows are written here too, so that the store has one caller and
    # the state cache one owner; `app.runtime.runs` decides what to write and when.

    async def start_run(
        self,
        tenant_id: str,
        session_id: str,
        *,
        run: NewRun,
        start_events: builtins.list[NewEvent],
        max_live_runs: int | None = None,
        expected: tuple[int, datetime] | None = None,
        idempotency: IdempotencyToken | None = None,
    ) -> tuple[RunRecord, AppendResult]:
        return await self.runs.start_run(
            tenant_id, session_id, run=run, start_events=start_events,
            max_live_runs=max_live_runs, expected=expected, idempotency=idempotency,
        )  # fmt: skip

    async def enqueue_run(
        self,
        tenant_id: str,
        session_id: str,
        *,
        run: NewRun,
        max_live_runs: int | None = None,
        idempotency: IdempotencyToken | None = None,
    ) -> RunRecord:
        return await self.runs.enqueue_run(
            tenant_id, session_id, run=run, max_live_runs=max_live_runs, idempotency=idempotency
        )

    async def claim_run(
        self,
        tenant_id: str,
        run_id: str,
        *,
        owner: str,
        lease_until: datetime,
        events: builtins.list[NewEvent],
        oldest_only: bool = False,
    ) -> tuple[RunRecord, AppendResult]:
        return await self.runs.claim_run(
            tenant_id, run_id, owner=owner, lease_until=lease_until, events=events,
            oldest_only=oldest_only,
        )  # fmt: skip

    async def append_run_events(
        self,
        tenant_id: str,
        run_id: str,
        *,
        session_id: str,
        epoch: int,
        events: builtins.list[NewEvent],
        lease_until: datetime,
        progress: dict[str, Any] | None = None,
        finish: RunFinish | None = None,
    ) -> AppendResult:
        return await self.runs.append_run_events(
            tenant_id, run_id, session_id=session_id, epoch=epoch, events=events,
            lease_until=lease_until, progress=progress, finish=finish,
        )  # fmt: skip

    async def renew_lease(
        self, tenant_id: str, run_id: str, *, epoch: int, lease_until: datetime
    ) -> bool:
        return await self.runs.renew_lease(tenant_id, run_id, epoch=epoch, lease_until=lease_until)

    async def fence_run(
        self, tenant_id: str, run_id: str, *, stop_reason: str, only_expired: bool = False
    ) -> RunRecord | None:
        return await self.runs.fence_run(
            tenant_id, run_id, stop_reason=stop_reason, only_expired=only_expired
        )

    async def close_fenced_run(
        self, tenant_id: str, run_id: str, *, events: builtins.list[NewEvent]
    ) -> AppendResult | None:
        return await self.runs.close_fenced_run(tenant_id, run_id, events=events)

    async def find_run(self, tenant_id: str, run_id: str) -> RunRecord | None:
        return await self.runs.get_run(tenant_id, run_id)

    async def list_runs(self, tenant_id: str, session_id: str) -> builtins.list[RunRecord]:
        """The session's runs, newest first."""
        return await self.runs.list_runs(tenant_id, session_id)

    async def list_stale_runs(self) -> builtins.list[RunRecord]:
        """Runs whose lease expired, and fenced runs not closed yet (any tenant)."""
        return await self.maintenance.list_stale_runs()

    async def delete_expired_idempotency_keys(self) -> int:
        return await self.maintenance.delete_expired_idempotency_keys()

    async def schema_revision(self) -> str | None:
        """The database's migration revision (readiness checks compare it to the code's)."""
        return await self.maintenance.get_schema_revision()

    # ----------------------------------------------------------------- plumbing

    async def _append_with_snapshot(
        self,
        tenant_id: str,
        session_id: str,
        kind: str,
        make_events: Callable[[Loaded], builtins.list[NewEvent]],
        *,
        if_match: int | None,
        idempotency: IdempotencyToken | None = None,
    ) -> Loaded:
        """Append events and a snapshot of the resulting fold, in one transaction: decided
        on the state at the session's last seq (`decided`)."""

        async def write(loaded: Loaded, writer: SessionWriter) -> Loaded:
            if if_match is not None and loaded.session.version != if_match:
                raise VersionConflict(if_match, loaded.session.version)
            events = make_events(loaded)
            after = _fold_new(loaded.state, events, session_id=session_id)
            result = await writer.append_events(
                tenant_id,
                session_id,
                events=events,
                expected_seq=loaded.session.last_seq,
                expected_version=if_match,
                snapshot=(kind, after.to_json()),
                idempotency=idempotency,
            )
            return self._after_write(result, fold(loaded.state, result.events))

        return await self.decided(tenant_id, session_id, write)

    def _after_write(self, result: AppendResult, state: SessionState) -> Loaded:
        self.remember(result.session, state)
        return Loaded(session=result.session, state=state.copy())

    def remember(self, record: SessionRecord, state: SessionState) -> None:
        """Keep `state`, the fold of `record`'s ledger up to `state.seq`, and `record` as the
        session's cached view, unless a newer state of the same incarnation is kept."""
        key = (record.tenant_id, record.session_id)
        current = self._cache.get(key)
        if (
            current is not None
            and current[0].created_at == record.created_at
            and current[1].seq > state.seq
        ):
            return
        self._cache[key] = (record, state.copy())
        self._cache.move_to_end(key)
        while len(self._cache) > _CACHE_MAX:
            self._cache.popitem(last=False)


def _base_of(cached: tuple[SessionRecord, SessionState] | None) -> tuple[datetime, int] | None:
    """The (created_at, seq) a load may start from: the cached state's."""
    return (cached[0].created_at, cached[1].seq) if cached is not None else None


def _fold_new(state: SessionState, events: list[NewEvent], *, session_id: str) -> SessionState:
    """The fold of events not yet written, numbered after `state.seq` as the store will."""
    out = state.copy()
    for i, new in enumerate(events, start=state.seq + 1):
        apply_event(
            out,
            Event(
                event_id="",
                session_id=session_id,
                seq=i,
                type=str(new.type),
                payload=new.payload,
                created_at=datetime.min,
                run_id=new.run_id,
                turn_id=new.turn_id,
            ),
        )
    return out
