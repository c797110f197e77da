"""The MCP server (Model Context Protocol, Streamable HTTP at `/mcp`): each agent blueprint
is a tool that any MCP client (Claude Desktop, IDEs, the official SDKs) can call.

A thin translation over the run service and the ledger, like the AG-UI room, keeping no
state of its own, so any replica answers any call: the tools and their schemas
(`catalog.py`), a call as a run in wait mode with progress, cancellation and approvals
(`calls.py`), the retry key of a call (`keys.py`), and the endpoint that mounts the
official SDK's stateless Streamable HTTP transport behind our bearer keys (`endpoint.py`).
"""
