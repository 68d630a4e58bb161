"""ViT, as models/vit.c builds it: a patch embedding (a convolution of stride the
patch size), a class token, learned position embeddings, a pre-norm GELU Transformer
encoder with a final LayerNorm (eps 1e-6) and a linear head on the class token.
torchvision's initialization of the class token (zeros) and positions (N(0, 0.02)),
PyTorch's defaults elsewhere; no dropout (torchvision's default).

PAPER is ViT-B/16 (12 x 768, 12 heads, MLP 3072): 86.6M parameters (Table 3: 87M).
"""
import torch
from torch import nn
import torch.nn.functional as F

CONFIGS = {
    "tiny": dict(image=32, patch=8, layers=2, d_model=32, nhead=4, mlp=64, classes=10),
    "cpu": dict(image=224, patch=16, layers=6, d_model=384, nhead=6, mlp=1536, classes=1000),
    "paper": dict(image=224, patch=16, layers=12, d_model=768, nhead=12, mlp=3072, classes=1000),
}
BATCH = {"tiny": 4, "cpu": 8, "paper": 128}
EPS = 1e-6


class ViT(nn.Module):
    def __init__(self, image, patch, layers, d_model, nhead, mlp, classes):
        super().__init__()
        patches = (image // patch) ** 2
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d_model))
        self.pos_embed = nn.Parameter(torch.empty(1, patches + 1, d_model).normal_(std=0.02))
        self.patch_embed = nn.Conv2d(3, d_model, patch, stride=patch)
        layer = nn.TransformerEncoderLayer(d_model, nhead, mlp, 0.0, "gelu", EPS, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, norm=nn.LayerNorm(d_model, eps=EPS),
                                             enable_nested_tensor=False)
        self.head = nn.Linear(d_model, classes)

    def forward(self, images):
        x = self.patch_embed(images).flatten(2).transpose(1, 2)  # [N, patches, d]
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], 1) + self.pos_embed
        return self.head(self.encoder(x)[:, 0])


def build(size):
    return ViT(**CONFIGS[size])


def make_batch(size, batch, generator=None):
    """Images N(0, 1) (normalized pixels) [N, 3, H, W] and labels uniform over the classes."""
    c = CONFIGS[size]
    images = torch.randn(batch, 3, c["image"], c["image"], generator=generator)
    labels = torch.randint(0, c["classes"], (batch,), generator=generator)
    return images, labels


def loss(model, input, target):
    return F.cross_entropy(model(input), target)
