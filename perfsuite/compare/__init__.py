"""Comparing two runs: matching their cases, one witness and its shift per case, the decision table."""
