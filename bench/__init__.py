"""Benchmarks: each command prints a table, writes JSON, and ends with one ``RESULT`` line.

Targets are ratios measured side by side in one run (this machine is shared and noisy): alternate the two
sides, repeat, report median and spread.
"""
