"""Fusion, scheduling and buffer assignment: the global decisions after optimisation."""
