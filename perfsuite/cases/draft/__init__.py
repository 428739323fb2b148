"""The draft case kind: a tiny EAGLE/MTP-style draft head (`head`), the multi-step tree draft loop with any
selector plugged in (`loop`) on the eager, graph (`graph`) and compile paths, checked for parity where the
engine consumes `topk_p` (`consumer`); the `[draft]` table (`draft_table`) and its rows, timed and counted
per cycle (`draft_runner`). docs/draft-loop.md tells the whole story.
"""

from perfsuite.cases.draft.draft_table import expand_draft
from perfsuite.cases.draft.graph import GraphCache
from perfsuite.cases.draft.head import DraftHead, HeadConfig
from perfsuite.cases.draft.loop import DraftLoop, LoopConfig

__all__ = ["DraftHead", "DraftLoop", "GraphCache", "HeadConfig", "LoopConfig", "expand_draft"]
