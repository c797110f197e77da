"""Model clients behind one async interface: `scripted` (offline, deterministic) and `openai`."""
