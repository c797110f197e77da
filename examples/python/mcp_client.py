"""Call the service's agents as MCP tools with the official `mcp` SDK (Streamable HTTP).

    pip install "mcp>=2.0"
    ASR_URL=http://127.0.0.1:8000 ASR_KEY=asr_... python examples/python/mcp_client.py

Lists the tools (one per agent blueprint, or `agent`), asks one, continues the same
conversation with the `session_id` of the first answer, and shows progress of a longer call.
"""

from __future__ import annotations

import asyncio
import os

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client


async def main() -> None:
    url = os.environ["ASR_URL"].rstrip("/") + "/mcp"
    headers = {"Authorization": f"Bearer {os.environ['ASR_KEY']}"}
    timeout = httpx2.Timeout(30, read=300)  # a call waits for its run
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as mcp,
    ):
        await mcp.initialize()
        tools = (await mcp.list_tools()).tools
        print("tools:", ", ".join(t.name for t in tools))
        tool = tools[0].name

        first = await mcp.call_tool(tool, {"input": "hello"})
        ids = first.structured_content or {}
        print("answer:", first.content[0].text if first.content else "", ids)  # type: ignore[union-attr]

        again = {"input": "and again", "session_id": ids["session_id"]}
        second = await mcp.call_tool(tool, again)
        print("continued:", second.content[0].text if second.content else "")  # type: ignore[union-attr]

        async def progress(done: float, total: float | None, message: str | None) -> None:
            print(f"  progress {done:g}: {message}")

        slow = {"input": "[sleep:1500] [words:4]", "session_id": ids["session_id"]}
        third = await mcp.call_tool(tool, slow, progress_callback=progress)
        print("slow answer:", third.content[0].text if third.content else "")  # type: ignore[union-attr]


if __name__ == "__main__":
    asyncio.run(main())
