"""Benchmarks: `python -m bench.run` (or `make bench`) measures and writes the results.

Every figure is a ratio against a baseline measured in the same run, with the raw numbers
beside it: the machine is shared and noisy, so nothing here asserts a timing.
"""
