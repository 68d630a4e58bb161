"""VGG16 (configuration D, no batch norm) in torchvision's layout and initialization
(models/vgg16.c in Flare)."""
import torch
from torch import nn

from vision import classifier_loss, image_batch

# first-stage width, hidden width, classes, image side
CONFIGS = {"tiny": (4, 64, 10, 32), "cpu": (64, 4096, 1000, 224), "paper": (64, 4096, 1000, 224)}
BATCH = {"tiny": 4, "cpu": 4, "paper": 32}
STAGES = ((2, 1), (2, 2), (3, 4), (3, 8), (3, 8))  # convolutions, width multiple


class VGG(nn.Module):
    def __init__(self, width, hidden, classes):
        super().__init__()
        layers, cin = [], 3
        for convs, multiple in STAGES:
            for _ in range(convs):
                layers += [nn.Conv2d(cin, width * multiple, 3, padding=1), nn.ReLU(inplace=True)]
                cin = width * multiple
            layers.append(nn.MaxPool2d(2, 2))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(
            nn.Linear(cin * 49, hidden), nn.ReLU(True), nn.Dropout(0.5), nn.Linear(hidden, hidden), nn.ReLU(True),
            nn.Dropout(0.5), nn.Linear(hidden, classes))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                nn.init.constant_(m.bias, 0)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.constant_(m.bias, 0)

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def build(size):
    width, hidden, classes, _ = CONFIGS[size]
    return VGG(width, hidden, classes)


def make_batch(size, batch, generator):
    _, _, classes, side = CONFIGS[size]
    return image_batch(batch, 3, side, classes, generator)


loss = classifier_loss
