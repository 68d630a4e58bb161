"""ResNet-50 in torchvision's layout (Bottleneck, stride on the 3x3 convolution) and
initialization (models/resnet50.c in Flare), so state_dicts move between the two."""
import torch
from torch import nn

from vision import classifier_loss, image_batch

EXPANSION = 4
# blocks per stage, first-stage width, classes, image side
CONFIGS = {
    "tiny": ((2, 1, 1, 1), 4, 10, 32),
    "cpu": ((3, 4, 6, 3), 64, 1000, 224),
    "paper": ((3, 4, 6, 3), 64, 1000, 224),
}
BATCH = {"tiny": 4, "cpu": 8, "paper": 32}


class Bottleneck(nn.Module):
    def __init__(self, cin, width, stride):
        super().__init__()
        cout = width * EXPANSION
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return self.relu(y + (self.downsample(x) if self.downsample is not None else x))


class ResNet(nn.Module):
    def __init__(self, blocks, width, classes):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        cin = width
        for stage, count in enumerate(blocks):
            layer = []
            for b in range(count):
                layer.append(Bottleneck(cin, width << stage, 2 if b == 0 and stage > 0 else 1))
                cin = (width << stage) * EXPANSION
            setattr(self, f"layer{stage + 1}", nn.Sequential(*layer))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(cin, classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def build(size):
    blocks, width, classes, _ = CONFIGS[size]
    return ResNet(blocks, width, classes)


def make_batch(size, batch, generator):
    _, _, classes, side = CONFIGS[size]
    return image_batch(batch, 3, side, classes, generator)


loss = classifier_loss
