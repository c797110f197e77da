"""Call an agent of this service over A2A with the official Python client (`a2a-sdk`).

    pip install "a2a-sdk[http-server]==1.3.0"
    ASR_URL=http://127.0.0.1:8000 ASR_KEY=asr_... python examples/python/a2a_client.py

It resolves the agent's card from the base URL, sends a message and prints the answer,
streams a second message in the same context, and reads the task back.
"""

from __future__ import annotations

import asyncio
import os
import uuid

import httpx
from a2a.client import ClientConfig, create_client
from a2a.types.a2a_pb2 import GetTaskRequest, Message, Part, Role, SendMessageRequest


def message(text: str, context_id: str = "") -> SendMessageRequest:
    return SendMessageRequest(
        message=Message(
            message_id=uuid.uuid4().hex,
            context_id=context_id,
            role=Role.ROLE_USER,
            parts=[Part(text=text)],
        )
    )


async def main(base_url: str, key: str) -> None:
    # The key goes on every call; the card itself is public.
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
        waiting = await create_client(base_url, ClientConfig(httpx_client=http, streaming=False))
        async for reply in waiting.send_message(message("hello")):
            task = reply.task
            answer = "".join(p.text for a in task.artifacts for p in a.parts)
            print(f"task {task.id} in context {task.context_id}: {answer}")

        streaming = await create_client(base_url, ClientConfig(httpx_client=http, streaming=True))
        async for event in streaming.send_message(message("[words:5]", task.context_id)):
            kind = event.WhichOneof("payload")
            if kind == "artifact_update":
                print("artifact:", "".join(p.text for p in event.artifact_update.artifact.parts))
            elif kind == "status_update":
                print("status:", event.status_update.status.state)

        again = await waiting.get_task(GetTaskRequest(id=task.id, history_length=2))
        print(f"history of {again.id}: {len(again.history)} messages")


if __name__ == "__main__":
    asyncio.run(main(os.environ.get("ASR_URL", "http://127.0.0.1:8000"), os.environ["ASR_KEY"]))
