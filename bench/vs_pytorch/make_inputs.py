#!/usr/bin/env python3
"""Writes what both sides of the job read, so they start alike: init.safetensors (the GPT's initial
weights, PyTorch's default initialisers from a seed) and batches.safetensors (`ids`: steps x global
batch x context+1 token ids; each step predicts ids[:, 1:] from ids[:, :-1]).

    make_inputs.py DIR [job flags of gpt.py] [--seed S]
"""
import argparse
import os

import torch
from safetensors.torch import save_file

import gpt


def main():
    parser = gpt.add_job_arguments(argparse.ArgumentParser(description=__doc__))
    parser.add_argument("dir")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    torch.manual_seed(args.seed)
    model = gpt.build(args)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()},
              os.path.join(args.dir, "init.safetensors"))
    ids = torch.randint(0, args.vocab, (args.steps, args.batch, args.context + 1))
    save_file({"ids": ids}, os.path.join(args.dir, "batches.safetensors"))


if __name__ == "__main__":
    main()
