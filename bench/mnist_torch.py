"""The MNIST example of apps/mnist in PyTorch: the same model (the Flashlight paper's
Listing 8), initialization (PyTorch's defaults, which Flare's match), data, batch size,
optimizer and loop, for `make bench-mnist`.

    python bench/mnist_torch.py [--data DIR] [--epochs N] [--threads T] [--json FILE]

Prints one line per epoch and, with --json, writes {"epochs": [{"seconds", "train_loss",
"val_loss", "val_error"}...], "test_error": ...}.
"""

import argparse
import gzip
import json
import struct
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

VALIDATION = 5000  # the first images of the training set, held out (the paper's Listing 7)


def read_idx(path):
    path = Path(path)
    if not path.exists() and Path(str(path) + ".gz").exists():
        path = Path(str(path) + ".gz")
    data = (gzip.open if path.suffix == ".gz" else open)(path, "rb").read()
    ndim = data[3]
    shape = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def load(directory, train):
    prefix = "train" if train else "t10k"
    images = read_idx(Path(directory) / f"{prefix}-images-idx3-ubyte").astype(np.float32) / 255.0
    labels = read_idx(Path(directory) / f"{prefix}-labels-idx1-ubyte").astype(np.int64)
    return torch.from_numpy(images).reshape(-1, 1, 28, 28), torch.from_numpy(labels)


def model():
    return nn.Sequential(
        nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(7 * 7 * 64, 1024), nn.ReLU(), nn.Dropout(0.5),
        nn.Linear(1024, 10), nn.LogSoftmax(dim=1))


def evaluate(net, images, labels, batch):
    net.eval()
    loss = errors = 0.0
    with torch.no_grad():
        for i in range(0, len(images), batch):
            out = net(images[i:i + batch])
            loss += F.nll_loss(out, labels[i:i + batch], reduction="sum").item()
            errors += (out.argmax(1) != labels[i:i + batch]).sum().item()
    net.train()
    return loss / len(images), 100.0 * errors / len(images)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-eval", action="store_true", help="time training only")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    images, labels = load(args.data, True)
    val_images, val_labels = images[:VALIDATION], labels[:VALIDATION]
    train_images, train_labels = images[VALIDATION:], labels[VALIDATION:]
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=args.momentum)
    steps_per_epoch = (len(train_images) + args.batch - 1) // args.batch
    # Cosine annealing over the run's steps, as apps/mnist does.
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.epochs * steps_per_epoch)
    generator = torch.Generator().manual_seed(args.seed)
    report = {"torch_version": torch.__version__, "threads": args.threads, "batch": args.batch, "epochs": []}
    for epoch in range(args.epochs):
        order = torch.randperm(len(train_images), generator=generator)
        started = time.perf_counter()
        total = 0.0
        batches = 0
        for i in range(0, len(order), args.batch):
            index = order[i:i + args.batch]
            out = net(train_images[index])
            loss = F.nll_loss(out, train_labels[index])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            schedule.step()
            total += loss.item()
            batches += 1
        seconds = time.perf_counter() - started
        row = {"seconds": seconds, "train_loss": total / batches}
        if not args.no_eval:
            row["val_loss"], row["val_error"] = evaluate(net, val_images, val_labels, 256)
        report["epochs"].append(row)
        print(f"epoch {epoch + 1}: {seconds:.1f} s, train loss {row['train_loss']:.4f}"
              + ("" if args.no_eval else f", validation loss {row['val_loss']:.4f}, error {row['val_error']:.2f}%"),
              flush=True)
    if not args.no_eval:
        test_images, test_labels = load(args.data, False)
        report["test_loss"], report["test_error"] = evaluate(net, test_images, test_labels, 256)
        print(f"test loss {report['test_loss']:.4f}, error {report['test_error']:.2f}%")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
