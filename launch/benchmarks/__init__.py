"""Benchmarks run by `python -m launch.benchmark <name>`; each prints a table and writes JSON."""
