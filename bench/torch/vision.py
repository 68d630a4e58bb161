"""What the image classifiers of the benchmark share (as models/image.c in Flare):
random images with class targets and the cross-entropy loss."""
import torch
import torch.nn.functional as F


def image_batch(batch, channels, side, classes, generator):
    images = torch.randn(batch, channels, side, side, generator=generator)
    targets = torch.randint(0, classes, (batch,), generator=generator)
    return images, targets


def classifier_loss(model, images, targets):
    return F.cross_entropy(model(images), targets)
