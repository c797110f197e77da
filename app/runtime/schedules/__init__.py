"""Schedules: cadences, the schedule verbs, and the ticks that start runs."""
