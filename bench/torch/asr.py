"""The ASR Transformer trained with CTC, as models/asr.c builds it (Flashlight's
benchmark AsrTransformer in PyTorch's modules).

A 1-D convolution over the log-mel channels (kernel 7, "same" padding, a stride that
subsamples time) to 2 d_model channels, a GLU over channels, fixed sinusoidal
positions, dropout, a post-norm ReLU Transformer encoder and a linear layer to the
tokens; CTC with blank 0. Every input is full length (no padding mask). Targets are
[N, S] token ids in 1..tokens-1 padded with the blank 0; a target's length is its
count of non-blank ids.

PAPER is Flashlight's benchmark model (36 layers of 768, 4 heads, FFN 3072, stride 3,
dropout 0.4, 1500 frames) over RASR's 10000 word pieces: 263.7M parameters (Table 3:
263M, batch 10).
"""
import math

import torch
from torch import nn
import torch.nn.functional as F

CONFIGS = {
    "tiny": dict(features=16, frames=48, d_model=32, nhead=4, dim_ff=64, layers=2, tokens=10, kernel=7, stride=2,
                 dropout=0.1),
    "cpu": dict(features=80, frames=400, d_model=512, nhead=8, dim_ff=2048, layers=6, tokens=30, kernel=7, stride=2,
                dropout=0.1),
    "paper": dict(features=80, frames=1500, d_model=768, nhead=4, dim_ff=3072, layers=36, tokens=10000, kernel=7,
                  stride=3, dropout=0.4),
}
BATCH = {"tiny": 4, "cpu": 4, "paper": 10}


def output_frames(c):
    return (c["frames"] + 2 * (c["kernel"] // 2) - c["kernel"]) // c["stride"] + 1


def sinusoids(length, dim):
    """pe[t, 2i] = sin(t w_i), pe[t, 2i + 1] = cos(t w_i), w_i = 10000^(-2i / dim)."""
    inv_freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    angles = torch.arange(length, dtype=torch.float32)[:, None] * inv_freq[None, :]
    return torch.stack([torch.sin(angles), torch.cos(angles)], -1).reshape(length, dim)


class AsrTransformer(nn.Module):
    def __init__(self, features, d_model, nhead, dim_ff, layers, tokens, kernel, stride, dropout, **_):
        super().__init__()
        self.frontend = nn.Conv1d(features, 2 * d_model, kernel, stride=stride, padding=kernel // 2)
        self.dropout = nn.Dropout(dropout)
        layer = nn.TransformerEncoderLayer(d_model, nhead, dim_ff, dropout, "relu", 1e-5, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.output = nn.Linear(d_model, tokens)

    def forward(self, features):
        """features [N, F, T] -> logits [N, T', tokens]."""
        h = F.glu(self.frontend(features), dim=1).transpose(1, 2)
        h = self.dropout(h + sinusoids(h.shape[1], h.shape[2]).to(h.device))
        return self.output(self.encoder(h))


def build(size):
    return AsrTransformer(**CONFIGS[size])


def make_batch(size, batch, generator=None):
    """Normalized log-mel-like features N(0, 1) [N, F, T] and targets of lengths
    uniform in [T'/8, T'/4] (about 12 to 25 tokens a second of speech at T' = 100/s)."""
    c = CONFIGS[size]
    features = torch.randn(batch, c["features"], c["frames"], generator=generator)
    t = output_frames(c)
    low, high = max(1, t // 8), max(1, t // 4)
    lengths = torch.randint(low, high + 1, (batch,), generator=generator)
    tokens = torch.randint(1, c["tokens"], (batch, high), generator=generator)
    targets = torch.where(torch.arange(high)[None, :] < lengths[:, None], tokens, torch.zeros_like(tokens))
    return features, targets


def loss(model, input, target):
    log_probs = F.log_softmax(model(input), dim=2).transpose(0, 1)  # [T', N, C]
    input_lengths = torch.full((input.shape[0],), log_probs.shape[0], dtype=torch.long)
    target_lengths = (target != 0).sum(1)
    return F.ctc_loss(log_probs, target, input_lengths, target_lengths, blank=0, reduction="mean")
