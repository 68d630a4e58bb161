"""The CNN of the Flashlight paper's Listing 8 (models/mnist.c and apps/mnist in
Flare; bench/mnist_torch.py trains the same on the dataset)."""
import torch.nn.functional as F
from torch import nn

from vision import image_batch

BATCH = {"tiny": 8, "cpu": 64, "paper": 64}


def build(size):
    return nn.Sequential(
        nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2, 2),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2, 2),
        nn.Flatten(), nn.Linear(7 * 7 * 64, 1024), nn.ReLU(), nn.Dropout(0.5),
        nn.Linear(1024, 10), nn.LogSoftmax(1))


def make_batch(size, batch, generator):
    return image_batch(batch, 1, 28, 10, generator)


def loss(model, images, targets):
    return F.nll_loss(model(images), targets)
