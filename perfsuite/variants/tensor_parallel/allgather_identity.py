"""`allgather_identity`: all-gather the logits, then the exact identity selection (torch ops).

Exact `topk_p` and lowest index first on ties, as `identity`.
"""

from perfsuite.variants.tensor_parallel.allgather import allgather_variant

VARIANT = allgather_variant(
    "identity", "all-gather [B, V] logits, then max/topk and exp(v - max) / sum(exp(x - max)) in fp32"
)
