"""The demo model and data for ``python -m aot``: a tiny GPT-style language model.

Everything here is deterministic: parameters come from ``torch.manual_seed`` and
the batches from a seeded ``torch.Generator``; there is no dropout. Attention is
written with plain matmuls and softmax so that every op shows up in the traced
ATen graphs.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["Block", "CausalSelfAttention", "GPTConfig", "TinyGPT", "make_batches", "make_model"]


@dataclass(frozen=True)
class GPTConfig:
    """Sizes of the demo model and its batches."""

    vocab_size: int = 64
    seq_len: int = 16
    d_model: int = 32
    n_heads: int = 4
    n_layers: int = 2
    batch_size: int = 4
    tied_head: bool = True

    def describe(self) -> str:
        head = "tied" if self.tied_head else "untied"
        return (
            f"TinyGPT: {self.n_layers} blocks, {self.n_heads} heads, d_model {self.d_model}, "
            f"vocab {self.vocab_size}, seq {self.seq_len}, batch {self.batch_size}, {head} LM head"
        )


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention with a causal mask, from matmuls and softmax."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        assert config.d_model % config.n_heads == 0
        self.n_heads = config.n_heads
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model)
        self.proj = nn.Linear(config.d_model, config.d_model)
        mask = torch.tril(torch.ones(config.seq_len, config.seq_len, dtype=torch.bool))
        self.register_buffer("mask", mask.view(1, 1, config.seq_len, config.seq_len))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, dim = x.shape
        head_dim = dim // self.n_heads
        q, k, v = self.qkv(x).split(dim, dim=2)
        q = q.view(batch, seq, self.n_heads, head_dim).transpose(1, 2)
        k = k.view(batch, seq, self.n_heads, head_dim).transpose(1, 2)
        v = v.view(batch, seq, self.n_heads, head_dim).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(head_dim))
        mask: torch.Tensor = self.mask  # type: ignore[assignment]
        scores = scores.masked_fill(~mask[:, :, :seq, :seq], float("-inf"))
        attn = F.softmax(scores, dim=-1)
        y = (attn @ v).transpose(1, 2).contiguous().view(batch, seq, dim)
        out: torch.Tensor = self.proj(y)
        return out


class Block(nn.Module):
    """Pre-norm transformer block: attention then a GELU MLP, each with a residual."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(config.d_model)
        self.attn = CausalSelfAttention(config)
        self.ln2 = nn.LayerNorm(config.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(config.d_model, 4 * config.d_model),
            nn.GELU(),
            nn.Linear(4 * config.d_model, config.d_model),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        out: torch.Tensor = x + self.mlp(self.ln2(x))
        return out


class TinyGPT(nn.Module):
    """Token + position embeddings, transformer blocks, final LayerNorm, LM head.

    ``forward(idx)`` returns logits ``[batch, seq, vocab]``; ``forward(idx, targets)``
    returns the mean next-token cross-entropy loss (a scalar).
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        self.pos_emb = nn.Embedding(config.seq_len, config.d_model)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.ln_f = nn.LayerNorm(config.d_model)
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.tied_head:
            self.head.weight = self.tok_emb.weight
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        """GPT-2 style: normal(0, 0.02) weights, zero biases; keeps the initial loss near ln(vocab)."""
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok_emb(idx) + self.pos_emb(positions)
        for block in self.blocks:
            x = block(x)
        logits: torch.Tensor = self.head(self.ln_f(x))
        if targets is None:
            return logits
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def make_model(config: GPTConfig, seed: int) -> TinyGPT:
    """A freshly initialised model; the same seed gives the same parameters."""
    torch.manual_seed(seed)
    return TinyGPT(config)


def make_batches(config: GPTConfig, seed: int, count: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """``count`` learnable batches ``(inputs, targets)`` of arithmetic token sequences.

    Each row is ``start + stride * t (mod vocab)`` with a random start and stride,
    so the next token is predictable from the context; targets are inputs shifted by one.
    """
    generator = torch.Generator().manual_seed(seed)
    steps = torch.arange(config.seq_len + 1)
    for _ in range(count):
        start = torch.randint(0, config.vocab_size, (config.batch_size, 1), generator=generator)
        stride = torch.randint(1, 8, (config.batch_size, 1), generator=generator)
        tokens = (start + stride * steps) % config.vocab_size
        yield tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
