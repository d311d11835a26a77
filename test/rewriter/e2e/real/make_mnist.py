#!/usr/bin/env python3
"""Synthetic MNIST in its own file format, for the public programs that read MNIST with
torch::data::datasets::MNIST (which insists on 60000 training and 10000 test images of 28 x 28).

Digit c is a bright 8 x 8 square at one of ten places, over noise: learnable in one epoch, so
the programs' accuracies mean something, and the same bytes on every run (a fixed seed).

    make_mnist.py FOLDER
"""
import os
import struct
import sys

import torch


def write(folder, prefix, count, seed):
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (count,), generator=generator, dtype=torch.uint8)
    images = (torch.rand(count, 28, 28, generator=generator) * 60).to(torch.uint8)
    for digit in range(10):
        row, col = 2 + (digit // 5) * 14, 1 + (digit % 5) * 5
        chosen = labels == digit
        images[chosen, row:row + 8, col:col + 5] = 250
    with open(os.path.join(folder, f"{prefix}-images-idx3-ubyte"), "wb") as f:
        f.write(struct.pack(">IIII", 2051, count, 28, 28))
        f.write(images.numpy().tobytes() if hasattr(images, "numpy") else bytes(images.flatten().tolist()))
    with open(os.path.join(folder, f"{prefix}-labels-idx1-ubyte"), "wb") as f:
        f.write(struct.pack(">II", 2049, count))
        f.write(bytes(labels.tolist()))


def main():
    folder = sys.argv[1]
    os.makedirs(folder, exist_ok=True)
    write(folder, "train", 60000, 1)
    write(folder, "t10k", 10000, 2)


if __name__ == "__main__":
    main()
