#!/usr/bin/env python3
"""A synthetic CIFAR-100 in its binary format (train.bin, test.bin: per image a coarse label
byte, a fine label byte and 3 x 32 x 32 pixel bytes) with the two label-name files, for the
public programs that read it with a reader of their own. Fine class c is a bright 6 x 6 square
in one of its colour channels at one of 36 places over noise, coarse class c // 5 as CIFAR-100
groups them: learnable, and the same bytes on every run (a fixed seed).

    make_cifar100.py FOLDER TRAIN_COUNT TEST_COUNT
"""
import os
import sys

import torch


def write(path, count, seed):
    generator = torch.Generator().manual_seed(seed)
    fine = torch.randint(0, 100, (count,), generator=generator)
    images = (torch.rand(count, 3, 32, 32, generator=generator) * 80).to(torch.uint8)
    for c in range(100):
        chosen = fine == c
        place = c % 36
        row, col = (place // 6) * 5 + 1, (place % 6) * 5 + 1
        images[chosen, c % 3, row:row + 6, col:col + 6] = 240
    records = torch.cat([(fine // 5).to(torch.uint8).unsqueeze(1), fine.to(torch.uint8).unsqueeze(1),
                         images.reshape(count, -1)], dim=1)
    with open(path, "wb") as f:
        f.write(records.numpy().tobytes())


def main():
    folder, train_count, test_count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    os.makedirs(folder, exist_ok=True)
    write(os.path.join(folder, "train.bin"), train_count, 100)
    write(os.path.join(folder, "test.bin"), test_count, 101)
    with open(os.path.join(folder, "coarse_label_names.txt"), "w") as f:
        f.write("".join(f"superclass_{i}\n" for i in range(20)))
    with open(os.path.join(folder, "fine_label_names.txt"), "w") as f:
        f.write("".join(f"class_{i}\n" for i in range(100)))


if __name__ == "__main__":
    main()
