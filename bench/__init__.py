"""Benchmarks: every figure next to its raw baseline, measured in the same run."""
