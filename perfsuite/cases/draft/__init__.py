"""The draft step as engines run it: a tiny EAGLE/MTP-style draft head, the multi-step tree draft loop
(draft extend + draft decode + the engine organisation) with any `perfsuite.variants` selector plugged in,
on the eager, graph (one CUDA/HIP graph per cycle) and compile paths, measured per cycle and checked for
parity where the engine consumes `topk_p`: draft tokens, parent lists and tree scores.

    from perfsuite.cases.draft import run_draft
    for row in run_draft(scenario, info, env, progress=False): ...
"""

from __future__ import annotations

from perfsuite.cases.draft.draft_runner import DraftRunner, run_draft
from perfsuite.cases.draft.draft_table import DraftCase, DraftSweep, draft_sweeps, expand_draft, parse_draft
from perfsuite.cases.draft.graph import DraftGraph, GraphCache, timing_unroll
from perfsuite.cases.draft.head import HEAD_LOGITS, DraftHead, HeadConfig, inputs_for
from perfsuite.cases.draft.loop import DraftLoop, DraftTree, LoopConfig, constant_select, reference_select

__all__ = [
    "HEAD_LOGITS",
    "DraftCase",
    "DraftGraph",
    "DraftHead",
    "DraftLoop",
    "DraftRunner",
    "DraftSweep",
    "DraftTree",
    "GraphCache",
    "HeadConfig",
    "LoopConfig",
    "constant_select",
    "draft_sweeps",
    "expand_draft",
    "inputs_for",
    "parse_draft",
    "reference_select",
    "run_draft",
    "timing_unroll",
]
