"""A tiny EAGLE-style draft head: token embedding, one or two layers, an LM head over the full vocabulary.

One step maps the chosen token and its parent's hidden state to a new hidden state,
`h' = norm(x + mlp(norm(x)))` with `x = [embed(token), h] @ fc` (EAGLE feeds the token embedding and the
previous hidden state the same way); `logits(h) = h @ lm_head.T`. There is no attention: every draft
position depends only on its parent, which is all the draft loop's selection logic needs. Weights are
drawn from a seed on the target device (deterministic per device type) and cast to the head's dtype.

Logits behaviour (`HeadConfig.logits`):
- `head`: i.i.d. LM-head rows, logits of standard deviation 2.5 (a flat, uncertain draft head).
- `near_ties`: LM-head rows in twin pairs `w[2j + 1] = w[2j] + eps_j * noise`, with `eps_j` log-uniform
  over 10^-3.5..10^-1.5, and logits of standard deviation 0.1, so the top logits sit near 0.35, where the
  bf16 and fp16 logit grids are fine compared with the probability grid: the twin of a top token is then
  a few ulps away, and `softmax` in bf16/fp16 rounds some of these pairs to one probability (about one
  selection in ten at V 4096 picks another token than the logits' argmax) when the selector gets the
  head's bf16/fp16 logits; SGLang upcasts them to fp32 first, where the pairs stay apart. An adversarial
  head, not a model of a real one.
- `ties`: `head` with LM-head rows in exact twin pairs `w[2j + 1] = w[2j]`: every token has a twin of the
  same logit, so a top-k with k > 1 holds equal logits whose order is the selector's tie rule (lowest
  index, or torch's order): the tie-order side of the draft parity split.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from perfsuite.core import dtypes

HEAD_LOGITS = ("head", "near_ties", "ties")
LOGIT_STD = {"head": 2.5, "near_ties": 0.1, "ties": 2.5}
TWIN_EPS_LOG10 = (-3.5, -1.5)
NORM_EPS = 1e-6


@dataclass(frozen=True)
class HeadConfig:
    """What defines a draft head's weights."""

    vocab: int
    hidden: int
    dtype: str = "bfloat16"
    layers: int = 1
    logits: str = "head"
    seed: int = 0

    @property
    def torch_dtype(self) -> torch.dtype:
        return dtypes.dtype_of(self.dtype)


def _rms_norm(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + NORM_EPS).to(x.dtype)


class DraftHead:
    """Embedding `[V, H]`, fc `[2H, H]`, `layers` residual MLPs `[H, 2H] -> [2H, H]`, LM head `[V, H]`."""

    def __init__(self, config: HeadConfig, device: torch.device | str = "cpu"):
        if config.logits not in HEAD_LOGITS:
            raise ValueError(f"unknown logits behaviour {config.logits!r}; known: {', '.join(HEAD_LOGITS)}")
        self.config = config
        self.device = torch.device(device)
        gen = torch.Generator(device=self.device).manual_seed(config.seed)
        v, h = config.vocab, config.hidden

        def normal(*shape: int, std: float) -> torch.Tensor:
            return torch.randn(shape, generator=gen, device=self.device) * std

        self.embed = normal(v, h, std=1.0)
        self.fc = normal(2 * h, h, std=(2 * h) ** -0.5)
        self.mlps = [
            (normal(h, 2 * h, std=h**-0.5), normal(2 * h, h, std=0.5 * (2 * h) ** -0.5))
            for _ in range(config.layers)
        ]
        self.lm_head = normal(v, h, std=LOGIT_STD[config.logits] * h**-0.5)
        if config.logits == "near_ties":
            self._make_twins(gen)
        elif config.logits == "ties":
            pairs = config.vocab // 2
            self.lm_head[1 : 2 * pairs : 2] = self.lm_head[0 : 2 * pairs : 2]
        dtype = config.torch_dtype
        self.embed, self.fc, self.lm_head = (t.to(dtype) for t in (self.embed, self.fc, self.lm_head))
        self.mlps = [(up.to(dtype), down.to(dtype)) for up, down in self.mlps]

    def _make_twins(self, gen: torch.Generator) -> None:
        pairs = self.config.vocab // 2
        low, high = TWIN_EPS_LOG10
        eps = 10 ** (low + (high - low) * torch.rand(pairs, 1, generator=gen, device=self.device))
        base = self.lm_head[0 : 2 * pairs : 2]
        noise = torch.randn(base.shape, generator=gen, device=self.device) * base.std()
        self.lm_head[1 : 2 * pairs : 2] = base + eps * noise

    @property
    def hidden(self) -> int:
        return self.config.hidden

    @property
    def vocab(self) -> int:
        return self.config.vocab

    @property
    def dtype(self) -> torch.dtype:
        return self.config.torch_dtype

    def step(self, tokens: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """One draft forward: tokens `[N]` and their parents' hidden states `[N, H]` -> hidden `[N, H]`."""
        x = torch.cat([self.embed[tokens], hidden], dim=-1) @ self.fc
        for up, down in self.mlps:
            x = x + torch.nn.functional.silu(_rms_norm(x) @ up) @ down
        return _rms_norm(x)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits over the full vocabulary `[N, V]`, in the head's dtype."""
        return hidden @ self.lm_head.T

    def weight_bytes(self) -> int:
        tensors = [self.embed, self.fc, self.lm_head, *(t for pair in self.mlps for t in pair)]
        return sum(t.numel() * t.element_size() for t in tensors)


def inputs_for(
    config: HeadConfig, batch: int, length: int, count: int, device: torch.device | str, seed: int = 0
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """`count` draft-extend inputs: accepted tokens `[B, L]` and the target's hidden states `[B, L, H]`."""
    device = torch.device(device)
    gen = torch.Generator(device=device).manual_seed(seed + 1_000_003)
    out = []
    for _ in range(count):
        tokens = torch.randint(0, config.vocab, (batch, length), generator=gen, device=device)
        hidden = torch.randn((batch, length, config.hidden), generator=gen, device=device)
        out.append((tokens, hidden.to(config.torch_dtype)))
    return out
