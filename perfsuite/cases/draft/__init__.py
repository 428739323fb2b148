"""The draft case kind (docs/draft-loop.md): a tiny draft head (`head`), the tree draft loop with any selector
(`loop`), consumer parity (`consumer`), the `[draft]` table (`draft_table`) and its rows (`draft_runner`)."""

from perfsuite.cases.draft.draft_table import expand_draft
from perfsuite.cases.draft.head import DraftHead, HeadConfig
from perfsuite.cases.draft.loop import DraftLoop, GraphCache, LoopConfig

__all__ = ["DraftHead", "DraftLoop", "GraphCache", "HeadConfig", "LoopConfig", "expand_draft"]
