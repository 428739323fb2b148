"""A tiny EAGLE-style draft head: a step maps a token and its parent's hidden state to
`norm(x + mlp(norm(x)))`, `x = [embed(token), h] @ fc`, then an LM head over the full vocabulary (no
attention). Weights come from a seed; the logits behaviours (`HEAD_LOGITS`): docs/draft-loop.md."""

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
        self.config, device = config, torch.device(device)
        gen = torch.Generator(device=device).manual_seed(config.seed)
        v, h, dtype = config.vocab, config.hidden, config.torch_dtype

        def normal(*shape: int, std: float) -> torch.Tensor:
            return torch.randn(shape, generator=gen, device=device) * std

        embed, fc = normal(v, h, std=1.0), normal(2 * h, h, std=(2 * h) ** -0.5)
        mlps = [
            (normal(h, 2 * h, std=h**-0.5), normal(2 * h, h, std=0.5 * (2 * h) ** -0.5))
            for _ in range(config.layers)
        ]
        lm_head = normal(v, h, std=LOGIT_STD[config.logits] * h**-0.5)
        base, twins = lm_head[0 : v // 2 * 2 : 2], slice(1, v // 2 * 2, 2)
        if config.logits == "near_ties":
            low, high = TWIN_EPS_LOG10
            eps = 10 ** (low + (high - low) * torch.rand(v // 2, 1, generator=gen, device=device))
            lm_head[twins] = base + eps * (torch.randn(base.shape, generator=gen, device=device) * base.std())
        elif config.logits == "ties":
            lm_head[twins] = base
        self.embed, self.fc, self.lm_head = (t.to(dtype) for t in (embed, fc, lm_head))
        self.mlps = [(up.to(dtype), down.to(dtype)) for up, down in mlps]

    def step(self, tokens: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """One draft forward: tokens `[N]` and their parents' hidden states `[N, H]` -> hidden `[N, H]`."""
        x = torch.cat([self.embed[tokens], hidden], dim=-1) @ self.fc
        for up, down in self.mlps:
            x = x + torch.nn.functional.silu(_rms_norm(x) @ up) @ down
        return _rms_norm(x)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits over the full vocabulary `[N, V]`, in the head's dtype."""
        return hidden @ self.lm_head.T


def inputs_for(
    config: HeadConfig, batch: int, length: int, count: int, device: torch.device | str, seed: int = 0
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """`count` draft-extend inputs: accepted tokens `[B, L]` and the target's hidden states `[B, L, H]`."""
    gen = torch.Generator(device=torch.device(device)).manual_seed(seed + 1_000_003)
    out = []
    for _ in range(count):
        tokens = torch.randint(0, config.vocab, (batch, length), generator=gen, device=device)
        hidden = torch.randn((batch, length, config.hidden), generator=gen, device=device)
        out.append((tokens, hidden.to(config.torch_dtype)))
    return out
