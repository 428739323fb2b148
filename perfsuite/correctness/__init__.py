"""Correctness: output parity, the edge-case matrix and the logits' shape."""
