"""Access: tenants, API keys, stream tokens and their revocation."""
