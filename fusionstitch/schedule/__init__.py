"""Schedules: which kernel schedule covers a group (consistency), and its composition."""
