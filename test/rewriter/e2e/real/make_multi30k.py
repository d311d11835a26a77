#!/usr/bin/env python3
"""Synthetic Multi30k for madcato/libtorch-lm, in the files it reads (src.pt, tgt.pt,
test_src.pt, test_tgt.pt: int64 tensors of [sequence, sentences], saved by torch.save, which its
MULTI30K data set reads with torch::pickle_load and transposes).

A copy task a small transformer learns in a few epochs: each target is its source reversed,
tokens 4..63 between BOS (2) and EOS (3), padded with PAD (1) to 12; the same bytes on every run.

    make_multi30k.py FOLDER
"""
import os
import sys

import torch

LENGTH, PAD, BOS, EOS = 12, 1, 2, 3


def sentences(count, generator):
    sources = torch.full((count, LENGTH), PAD, dtype=torch.int64)
    targets = torch.full((count, LENGTH), PAD, dtype=torch.int64)
    for i in range(count):
        n = int(torch.randint(3, LENGTH - 1, (1,), generator=generator))
        words = torch.randint(4, 64, (n,), generator=generator)
        sources[i, :n + 2] = torch.cat([torch.tensor([BOS]), words, torch.tensor([EOS])])
        targets[i, :n + 2] = torch.cat([torch.tensor([BOS]), words.flip(0), torch.tensor([EOS])])
    return sources.t().contiguous(), targets.t().contiguous()


def main():
    folder = sys.argv[1]
    os.makedirs(folder, exist_ok=True)
    generator = torch.Generator().manual_seed(30)
    for prefix, count in (("", 1024), ("test_", 256)):
        sources, targets = sentences(count, generator)
        torch.save(sources, os.path.join(folder, f"{prefix}src.pt"))
        torch.save(targets, os.path.join(folder, f"{prefix}tgt.pt"))


if __name__ == "__main__":
    main()
