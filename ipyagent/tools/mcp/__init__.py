"""MCP servers' tools: configuration files, one session per server, and the trust list
that a directory's ``mcp.json`` must be on before its commands start.

Imported only when MCP is configured: the SDK is an optional extra.
"""
