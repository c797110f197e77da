"""Quick start with the Python client: a session, a run, a streamed run, the timeline.

    pip install ./clients/python
    ASR_URL=http://127.0.0.1:8000 ASR_KEY=asr_... python examples/python/quickstart.py
"""

from __future__ import annotations

import os

from asr_client import SessionClient


def main() -> None:
    with SessionClient(os.environ["ASR_URL"], api_key=os.environ["ASR_KEY"]) as asr:
        session = asr.create_session(metadata={"example": "quickstart"})
        sid = session.session_id
        run = asr.run(sid, "hello")
        print("run:", run.stop_reason, run.output)

        text = ""
        for frame in asr.stream_run(sid, "[words:5]"):
            if frame.event == "delta":
                text += str(frame.data.get("text", ""))
        print("streamed:", text)

        last = asr.get_session(sid).last_seq
        for frame in asr.stream_events(sid, after_seq=0):
            print(frame.id, frame.event)
            if frame.id == str(last):
                break
        asr.delete_session(sid)


if __name__ == "__main__":
    main()
