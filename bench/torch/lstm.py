"""The LSTM language model, as models/lstm.c builds it: an embedding, a 2-layer
LSTM (batch first, no dropout) and a linear head over the vocabulary, trained with
cross-entropy on the next token of random token sequences. PyTorch's default
initialization, as Flare's modules use.

CPU is a small word-level model of PTB's shape (35 steps, batch 20); PAPER is the
"medium" model of Zaremba et al. (650 units, 10000 words) without its dropout.
"""
import torch
from torch import nn
import torch.nn.functional as F

CONFIGS = {
    "tiny": dict(vocab=50, embed=16, hidden=32, layers=2, steps=12),
    "cpu": dict(vocab=2000, embed=256, hidden=256, layers=2, steps=35),
    "paper": dict(vocab=10000, embed=650, hidden=650, layers=2, steps=35),
}
BATCH = {"tiny": 4, "cpu": 20, "paper": 20}


class LstmLanguageModel(nn.Module):
    def __init__(self, vocab, embed, hidden, layers, **_):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, layers, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, tokens):
        """tokens [N, T] -> logits [N, T, vocab]."""
        return self.head(self.lstm(self.embed(tokens))[0])


def build(size):
    return LstmLanguageModel(**CONFIGS[size])


def make_batch(size, batch, generator=None):
    """Token ids uniform over the vocabulary [N, T + 1]: the input is the first T, the
    target the last T."""
    c = CONFIGS[size]
    tokens = torch.randint(0, c["vocab"], (batch, c["steps"] + 1), generator=generator)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def loss(model, input, target):
    logits = model(input)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))
