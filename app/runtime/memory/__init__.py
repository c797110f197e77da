"""Memory: the items, what fits a model's window, and compaction."""
