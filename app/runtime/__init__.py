"""The session runtime: pure Python, no HTTP and no SQL."""
