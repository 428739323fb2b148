"""`allgather_full_softmax`: the baseline, all-gather the logits, then the engines' softmax + max / top-k.

Rounded probabilities and torch's order among ties, as `full_softmax`.
"""

from perfsuite.variants.tensor_parallel.allgather import allgather_variant

VARIANT = allgather_variant(
    "full_softmax",
    "all-gather [B, V] logits, then softmax in the input dtype and max/topk: the engines' baseline",
)
