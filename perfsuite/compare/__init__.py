"""Comparing two runs: matching their cases, the rank-sum test, run-to-run noise."""
