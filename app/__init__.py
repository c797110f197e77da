"""Agent Session Runtime."""
