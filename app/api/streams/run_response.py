"""A stream-mode run as Server-Sent Events: the run's timeline (`app.live.run_follow`) as
frames, in the service's streaming response."""

from __future__ import annotations

import contextlib

from app.api.streams.frames import session_frames
from app.live.run_follow import RunStreams
from app.live.stream_response import StreamResponse
from app.runtime.ports import RunRecord


def run_stream_response(
    streams: RunStreams, tenant_id: str, run: RunRecord, *, deltas: bool, instance: str
) -> StreamResponse:
    """The run as Server-Sent Events: its events (id = seq) and delta frames (no id),
    ending with RUN_FINISHED (or `shutdown`/`overflow`: follow the session after it)."""
    follow = streams.follow(tenant_id, run, deltas=deltas)
    try:
        frames = session_frames(
            follow.items,
            retry_ms=streams.settings.sse_retry_ms,
            instance=instance,
            first_ready=follow.first_ready,
        )
        return StreamResponse(
            frames, slot=None, stop=follow.stop, settings=streams.settings, cleanup=follow.close
        )
    except BaseException:
        with contextlib.suppress(Exception):
            follow.close()
        raise
