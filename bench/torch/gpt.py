"""The GPT-style causal language model, as models/gpt.c builds it.

Token embedding plus a learned position embedding, dropout, pre-norm causal GELU
TransformerEncoderLayers (MLP of 4 x embed, LayerNorm eps 1e-5), a final LayerNorm and
an output head tied to the token embedding (F.linear with tok_embed.weight, one
parameter). Both embeddings start as N(0, 0.02), as GPT-2's; the rest is PyTorch's
defaults on both sides. Attribute names are the Flare module's children, so
state_dicts load into each other. Trained on next-token prediction over random text.

PAPER is GPT-2 small's shape (12 x 768, 12 heads, 50257 tokens, 1024 positions):
124.4M parameters with the tied head.
"""
import torch
from torch import nn
import torch.nn.functional as F

CONFIGS = {
    "tiny": dict(vocab=96, context=16, layers=2, heads=4, embed=32, dropout=0.1, seq=16),
    "cpu": dict(vocab=30000, context=512, layers=6, heads=8, embed=512, dropout=0.1, seq=128),
    "paper": dict(vocab=50257, context=1024, layers=12, heads=12, embed=768, dropout=0.1, seq=1024),
}
BATCH = {"tiny": 4, "cpu": 8, "paper": 8}

EPS = 1e-5


class LearnedPositionalEmbedding(nn.Module):
    """Flare's fl_nn_learned_positional_embedding: x + weight[:L], weight [max_len, E]."""

    def __init__(self, max_len, embed):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(max_len, embed))

    def forward(self, x):
        return x + self.weight[: x.shape[1]]


class GPT(nn.Module):
    def __init__(self, vocab, context, layers, heads, embed, dropout, **_):
        super().__init__()
        self.tok_embed = nn.Embedding(vocab, embed)
        self.pos_embed = LearnedPositionalEmbedding(context, embed)
        self.drop = nn.Dropout(dropout)
        layer = nn.TransformerEncoderLayer(embed, heads, 4 * embed, dropout, "gelu", EPS, batch_first=True,
                                           norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.ln_f = nn.LayerNorm(embed, eps=EPS)
        nn.init.normal_(self.tok_embed.weight, 0, 0.02)
        nn.init.normal_(self.pos_embed.weight, 0, 0.02)

    def forward(self, tokens):
        length = tokens.shape[1]
        h = self.drop(self.pos_embed(self.tok_embed(tokens)))
        mask = nn.Transformer.generate_square_subsequent_mask(length, device=tokens.device)
        h = self.blocks(h, mask=mask, is_causal=True)
        return F.linear(self.ln_f(h), self.tok_embed.weight)


def build(size):
    return GPT(**CONFIGS[size])


def make_batch(size, batch, generator=None):
    """Random text [batch, seq + 1]: the input is the first seq tokens, the target the
    last seq (each position predicts the next token)."""
    c = CONFIGS[size]
    text = torch.randint(0, c["vocab"], (batch, c["seq"] + 1), generator=generator)
    return text[:, :-1], text[:, 1:]


def loss(model, input, target):
    logits = model(input)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))
