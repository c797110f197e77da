"""MCP tools: operator-registered MCP servers whose tools agents may call.

`config.py` reads the servers from the models file (`mcp_servers:`) or `ASR_MCP_SERVERS`;
`connection.py` keeps one connection to a server through the official `mcp` SDK (stdio or
Streamable HTTP), with timeouts and reconnection; `catalog.py` lists their tools, offers
them to the registry as `server__tool`, and turns a call's result into a tool output.
"""
