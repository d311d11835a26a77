#!/usr/bin/env python3
"""Writes the inputs both versions of the job read, so they start from the same state:
init.safetensors (the MLP's initial weights), train.safetensors and eval.safetensors (x, y).

    make_inputs.py DIR [--width W] [--depth D] [--train N] [--eval N] [--seed S]
"""
import argparse
import os

import torch
from safetensors.torch import save_file

from job import build_mlp


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("dir")
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--train", type=int, default=160)
    parser.add_argument("--eval", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)

    generator = torch.Generator().manual_seed(args.seed)
    torch.manual_seed(args.seed)
    model = build_mlp(args.width, args.depth)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()},
              os.path.join(args.dir, "init.safetensors"))

    # A smooth target the MLP can fit, plus noise.
    teacher = torch.randn(args.width, 1, generator=generator) / args.width**0.5
    for name, count in (("train", args.train), ("eval", args.eval)):
        x = torch.randn(count, args.width, generator=generator)
        y = torch.tanh(x @ teacher) + 0.05 * torch.randn(count, 1, generator=generator)
        save_file({"x": x, "y": y}, os.path.join(args.dir, f"{name}.safetensors"))


if __name__ == "__main__":
    main()
