"""AlexNet in torchvision's layout and initialization (models/alexnet.c in Flare)."""
import torch
from torch import nn

from vision import classifier_loss, image_batch

# channels of the five convolutions, hidden width, classes, image side
CONFIGS = {
    "tiny": ((8, 24, 48, 32, 32), 64, 10, 64),
    "cpu": ((64, 192, 384, 256, 256), 4096, 1000, 224),
    "paper": ((64, 192, 384, 256, 256), 4096, 1000, 224),
}
BATCH = {"tiny": 4, "cpu": 8, "paper": 32}
CONVS = ((11, 4, 2, True), (5, 1, 2, True), (3, 1, 1, False), (3, 1, 1, False), (3, 1, 1, True))


class AlexNet(nn.Module):
    def __init__(self, channels, hidden, classes):
        super().__init__()
        layers, cin = [], 3
        for cout, (kernel, stride, padding, pool) in zip(channels, CONVS):
            layers += [nn.Conv2d(cin, cout, kernel, stride, padding), nn.ReLU(inplace=True)]
            if pool:
                layers.append(nn.MaxPool2d(3, 2))
            cin = cout
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((6, 6))
        self.classifier = nn.Sequential(
            nn.Dropout(0.5), nn.Linear(cin * 36, hidden), nn.ReLU(inplace=True), nn.Dropout(0.5),
            nn.Linear(hidden, hidden), nn.ReLU(inplace=True), nn.Linear(hidden, classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def build(size):
    channels, hidden, classes, _ = CONFIGS[size]
    return AlexNet(channels, hidden, classes)


def make_batch(size, batch, generator):
    _, _, classes, side = CONFIGS[size]
    return image_batch(batch, 3, side, classes, generator)


loss = classifier_loss
