"""Tools: the server-side registry, MCP servers, and session processes."""
