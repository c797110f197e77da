"""A2A (Agent2Agent): the official SDK's JSON-RPC binding over our sessions and runs
(`routes`), tasks read from runs and the ledger (`tasks`, `fold`), push notification configs
as webhooks (`push`)."""
