"""The tour of the Python client from docs/how-to/clients.md, as a file.

    ASR_URL=http://127.0.0.1:8000 ASR_KEY=asr_... python examples/python/tour.py
"""

import os

from asr_client import NotFoundError, SessionClient

with SessionClient(os.environ["ASR_URL"], api_key=os.environ["ASR_KEY"]) as asr:
    sid = asr.create_session(metadata={"user": "alice"}).session_id
    run = asr.run(sid, "hello")  # the scripted model: offline, deterministic
    print(run.stop_reason, run.output)  # COMPLETED echo: hello

    # A client-side tool: the run stops with the pending call; answer it and the run goes on.
    run = asr.run(sid, '[tool:lookup {"q": "x"}]', client_tools=[{"name": "lookup"}])
    call = run.pending[0]
    print(run.stop_reason, call.name)  # NEEDS_USER_INPUT lookup
    run = asr.submit_tool_outputs(sid, [{"call_id": call.call_id, "output": "found it"}])
    print(run.stop_reason)  # COMPLETED

    # The timeline: replayed from the start, then live (it would follow on forever).
    for frame in asr.stream_events(sid, after_seq=0):
        print(frame.id, frame.event)  # 1 SESSION_CREATED, 2 RUN_STARTED, ...
        if frame.id == str(run.last_seq):
            break

    try:
        asr.get_session("no-such-session")
    except NotFoundError as error:
        print(error.code)  # session_not_found
