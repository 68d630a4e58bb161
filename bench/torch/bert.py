"""The BERT-like encoder with a masked-LM head, as models/bert.c builds it.

Post-norm Transformer encoder (BERT's), GELU, LayerNorm eps 1e-12, learned token and
position embeddings, and an MLM head (dense, GELU, LayerNorm, decoder) whose decoder
is untied from the token embedding. Attribute names are the Flare module's children,
so state_dicts load into each other. Initialization is PyTorch's defaults on both
sides (not BERT's N(0, 0.02)).

PAPER is RoBERTa-large's shape (24 x 1024, 16 heads, FFN 4096, 50265 tokens, 512
positions) with the untied decoder: 406.9M parameters, Table 3's 406M.
"""
import torch
from torch import nn
import torch.nn.functional as F

CONFIGS = {
    "tiny": dict(vocab=96, d_model=32, nhead=4, dim_ff=64, layers=2, seq=16, max_positions=16, dropout=0.1),
    "cpu": dict(vocab=30000, d_model=512, nhead=8, dim_ff=2048, layers=6, seq=128, max_positions=512, dropout=0.1),
    "paper": dict(vocab=50265, d_model=1024, nhead=16, dim_ff=4096, layers=24, seq=128, max_positions=512,
                  dropout=0.1),
}
BATCH = {"tiny": 4, "cpu": 8, "paper": 128}

EPS = 1e-12
MASK_ID = 1      # token ids 0 (padding) and 1 ([MASK]) are reserved; text uses 2..vocab-1
MASK_RATE = 0.15
IGNORE = -100


class MaskedLMHead(nn.Module):
    def __init__(self, d_model, vocab):
        super().__init__()
        self.dense = nn.Linear(d_model, d_model)
        self.norm = nn.LayerNorm(d_model, eps=EPS)
        self.decoder = nn.Linear(d_model, vocab)

    def forward(self, x):
        return self.decoder(self.norm(F.gelu(self.dense(x))))


class BertLike(nn.Module):
    def __init__(self, vocab, d_model, nhead, dim_ff, layers, max_positions, dropout, **_):
        super().__init__()
        self.tok_embed = nn.Embedding(vocab, d_model)
        self.pos_embed = nn.Embedding(max_positions, d_model)
        self.embed_norm = nn.LayerNorm(d_model, eps=EPS)
        self.embed_dropout = nn.Dropout(dropout)
        layer = nn.TransformerEncoderLayer(d_model, nhead, dim_ff, dropout, "gelu", EPS, batch_first=True,
                                           norm_first=False)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.mlm = MaskedLMHead(d_model, vocab)

    def forward(self, tokens):
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        h = self.embed_dropout(self.embed_norm(self.tok_embed(tokens) + self.pos_embed(positions)))
        return self.mlm(self.encoder(h))


def build(size):
    return BertLike(**CONFIGS[size])


def make_batch(size, batch, generator=None):
    """Random text, 15% of positions chosen for prediction (80% of them replaced by
    [MASK], 10% by a random token, 10% kept, as BERT does); targets hold the original
    token there and -100 elsewhere."""
    c = CONFIGS[size]
    tokens = torch.randint(2, c["vocab"], (batch, c["seq"]), generator=generator)
    chosen = torch.rand(batch, c["seq"], generator=generator) < MASK_RATE
    how = torch.rand(batch, c["seq"], generator=generator)
    random_tokens = torch.randint(2, c["vocab"], (batch, c["seq"]), generator=generator)
    inputs = torch.where(chosen & (how < 0.8), torch.full_like(tokens, MASK_ID), tokens)
    inputs = torch.where(chosen & (how >= 0.8) & (how < 0.9), random_tokens, inputs)
    targets = torch.where(chosen, tokens, torch.full_like(tokens, IGNORE))
    return inputs, targets


def loss(model, input, target):
    logits = model(input)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=IGNORE)
