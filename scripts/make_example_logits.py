"""Write the example logits file, `scenarios/data/draft_head_logits.pt`, from the draft loop's own head.

The rows are the logits the draft loop hands its selector (perfsuite.cases.draft): a tiny EAGLE-style head
(V 16384, H 256, bf16, random weights from seed 0), one draft cycle over 8 sequences on the topk-1 chain
(draft extend, then 3 decode steps): 4 selections x 8 rows = `[32, 16384]` bf16, 1 MiB. The head's weights
are random, so this is the draft loop's distribution, not a trained model's: an example of the format and
of the figures, and a file to test the loader on.

    .venv/bin/python scripts/make_example_logits.py [OUT]
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from perfsuite.cases.draft.head import DraftHead, HeadConfig, inputs_for
from perfsuite.cases.draft.loop import DraftLoop, LoopConfig

OUT = Path(__file__).resolve().parents[1] / "scenarios" / "data" / "draft_head_logits.pt"
HEAD = HeadConfig(vocab=16384, hidden=256, dtype="bfloat16", layers=1, logits="head", seed=0)
LOOP = LoopConfig(topk=1, num_steps=4, num_draft_tokens=5)  # SGLang's topk-1 chain
SEQUENCES = 8


def example_logits() -> torch.Tensor:
    """The selector's inputs over one draft cycle, `[SEQUENCES * num_steps, V]` in the head's dtype."""
    torch.manual_seed(0)
    seen: list[torch.Tensor] = []

    def recording(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        seen.append(logits.detach().to(HEAD.torch_dtype))  # the head's values (an fp32 upcast is exact)
        values, index = torch.topk(logits.float().softmax(-1), k, dim=-1)
        return values, index

    head = DraftHead(HEAD, "cpu")
    loop = DraftLoop(head, recording, LOOP)
    ((tokens, hidden),) = inputs_for(HEAD, SEQUENCES, LOOP.extend_tokens, 1, "cpu", seed=0)
    loop.cycle(tokens, hidden)
    return torch.cat(seen).contiguous()


def main(argv: list[str]) -> None:
    out = Path(argv[0]) if argv else OUT
    out.parent.mkdir(parents=True, exist_ok=True)
    logits = example_logits()
    torch.save(logits, out)
    dtype = str(logits.dtype).removeprefix("torch.")
    print(f"{out}: {list(logits.shape)} {dtype}, {out.stat().st_size} bytes")


if __name__ == "__main__":
    main(sys.argv[1:])
