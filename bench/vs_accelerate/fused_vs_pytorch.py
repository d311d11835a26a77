#!/usr/bin/env python3
"""accel's fused optimizer steps on the CPU against LibTorch's own step and PyTorch's `fused=True`
optimizers: the same parameters and the same 20 gradients go through torch.optim (fused=True),
through a prepared LibTorch optimizer and through LibTorch's own (fused_accel.cpp). accel's final
parameters must be bitwise LibTorch's (its promise: one process is the plain program); how far
PyTorch's fused=True, which rounds otherwise, is from both is reported.

    fused_vs_pytorch.py --bin build/bench/vs_accelerate/accel_vs_fused --work DIR
"""
import argparse
import json
import os
import subprocess
import sys

import torch
from safetensors.torch import load_file, save_file

STEPS = 20
CASES = [
    {"optimizer": "AdamW", "lr": 1e-2, "weight_decay": 0.01},
    {"optimizer": "AdamW", "lr": 3e-3, "weight_decay": 0.1, "amsgrad": True},
    {"optimizer": "AdamW", "lr": 1e-2, "weight_decay": 0.0, "betas": [0.8, 0.99], "eps": 1e-6},
    {"optimizer": "Adam", "lr": 1e-2, "weight_decay": 0.05},
    {"optimizer": "SGD", "lr": 0.1},
    {"optimizer": "SGD", "lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01},
    {"optimizer": "SGD", "lr": 0.05, "momentum": 0.9, "dampening": 0.2},
]


def python_optimizer(params, case):
    kwargs = {k: v for k, v in case.items() if k != "optimizer"}
    if "betas" in kwargs:
        kwargs["betas"] = tuple(kwargs["betas"])
    return getattr(torch.optim, case["optimizer"])(params, fused=True, **kwargs)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bin", required=True, help="accel_vs_fused")
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    generator = torch.Generator().manual_seed(0)
    shapes = [(33, 17), (17,), (2048,)]
    for number, case in enumerate(CASES):
        inputs = {}
        params = []
        for i, shape in enumerate(shapes):
            inputs[f"param{i}"] = torch.randn(shape, generator=generator)
            params.append(inputs[f"param{i}"].clone().requires_grad_(True))
        for step in range(STEPS):
            for i, shape in enumerate(shapes):
                inputs[f"grad{step}_{i}"] = torch.randn(shape, generator=generator)
        save_file(inputs, os.path.join(args.work, f"case{number}_inputs.safetensors"))
        optimizer = python_optimizer(params, case)
        for step in range(STEPS):
            for i, p in enumerate(params):
                p.grad = inputs[f"grad{step}_{i}"].clone()
            optimizer.step()
        save_file({f"param{i}": p.detach() for i, p in enumerate(params)},
                  os.path.join(args.work, f"case{number}_pytorch.safetensors"))
    cases_path = os.path.join(args.work, "cases.json")
    with open(cases_path, "w") as f:
        json.dump({"steps": STEPS, "parameters": len(shapes), "cases": CASES}, f)
    subprocess.run([args.bin, cases_path, args.work], check=True)

    failures, pytorch_equal, pytorch_worst = 0, 0, 0.0
    for number, case in enumerate(CASES):
        pytorch = load_file(os.path.join(args.work, f"case{number}_pytorch.safetensors"))
        ours = load_file(os.path.join(args.work, f"case{number}_accel.safetensors"))
        libtorch = load_file(os.path.join(args.work, f"case{number}_libtorch.safetensors"))
        unequal = [name for name in libtorch if not torch.equal(libtorch[name], ours[name])]
        if unequal:
            failures += 1
            worst = max((libtorch[n] - ours[n]).abs().max().item() for n in unequal)
            print(f"fused: {case}: {unequal} differ from LibTorch's own step (by up to {worst:.3g})")
        apart = max((pytorch[n] - ours[n]).abs().max().item() for n in pytorch)
        pytorch_equal += apart == 0
        pytorch_worst = max(pytorch_worst, apart)
    print(f"fused: {len(CASES)} optimizers, {STEPS} steps each: "
          f"{len(CASES) - failures} bitwise equal to LibTorch's own step; PyTorch's fused=True "
          f"equal in {pytorch_equal}, at most {pytorch_worst:.3g} apart")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
