"""Fault tests of issue #15: keyed writes happen exactly once under crashes and lost replies."""
