#!/usr/bin/env python3
"""Big-model planning, accel against Accelerate: compute_module_sizes, get_balanced_memory and
infer_auto_device_map on the same models (tied parameters included), with no_split_module_classes,
with a dtype, and with budgets that include and omit "cpu". plan_accel.cpp builds the same models
under the same names.

    plan.py --bin build/bench/vs_accelerate/accel_vs_plan --work DIR
Exits 1 naming every case where the two disagree.
"""
import argparse
import json
import logging
import os
import subprocess
import sys

import torch
from accelerate.utils import compute_module_sizes, get_balanced_memory, infer_auto_device_map
from torch import nn

from job import build_mlp


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.linear1 = nn.Linear(width, width)
        self.linear2 = nn.Linear(width, width)


class Model(nn.Module):
    pass


def build(name):
    if name == "mlp":
        return build_mlp(64, 3)
    model = Model()
    if name in ("blocks", "tied_blocks"):
        model.layer1, model.layer2, model.layer3 = Block(32), Block(32), Block(32)
        if name == "tied_blocks":
            model.layer3.linear2.weight = model.layer1.linear2.weight
        return model
    if name == "gpt_tied":
        model.wte = nn.Embedding(100, 32)
        model.h0, model.h1 = Block(32), Block(32)
        model.ln_f = nn.LayerNorm(32)
        model.lm_head = nn.Linear(32, 100, bias=False)
        model.lm_head.weight = model.wte.weight
        return model
    raise ValueError(name)


def cases():
    """Budgets as fractions of each model's size, so every case has to split somewhere."""
    out = []
    for model in ("mlp", "blocks", "tied_blocks", "gpt_tied"):
        total = compute_module_sizes(build(model))[""]
        budgets = {
            "two GPUs and the CPU": {"cuda:0": 0.4, "cuda:1": 0.4, "cpu": 0.3},
            "two GPUs, no CPU": {"cuda:0": 0.4, "cuda:1": 0.4},
            "small GPUs, the rest on disk": {"cuda:0": 0.3, "cuda:1": 0.3, "cpu": 0.25},
            "CPU and disk": {"cpu": 0.5},
        }
        for label, fractions in budgets.items():
            max_memory = {device: int(total * f) for device, f in fractions.items()}
            for no_split in ([], ["Block"]) if "block" in model or "gpt" in model else ([],):
                for dtype in (None, "float16"):
                    out.append(dict(model=model, budget=label, max_memory=max_memory,
                                    no_split=no_split, dtype=dtype, balanced=False,
                                    low_zero=False))
        roomy = {"cuda:0": total, "cuda:1": total, "cuda:2": total, "cpu": total}
        for low_zero in (False, True):
            for no_split in ([], ["Block"]):
                out.append(dict(model=model, budget="balanced over three GPUs",
                                max_memory=roomy, no_split=no_split, dtype=None, balanced=True,
                                low_zero=low_zero))
    for c in out:
        c["name"] = (f"{c['model']}, {c['budget']}"
                     + (f", no_split {c['no_split']}" if c["no_split"] else "")
                     + (f", dtype {c['dtype']}" if c["dtype"] else "")
                     + (", low_zero" if c["low_zero"] else ""))
    return out


def to_accelerate(max_memory):
    return {int(k.split(":")[1]) if k.startswith("cuda:") else k: v for k, v in max_memory.items()}


def cuda_name(device):
    return f"cuda:{device}" if isinstance(device, int) else device


def from_accelerate(mapping, values=False):
    """Accelerate names GPU N by the integer N; accel, as LibTorch does, by "cuda:N"."""
    return {cuda_name(k): cuda_name(v) if values else v for k, v in mapping.items()}


def accelerate_answer(c):
    model = build(c["model"])
    dtype = getattr(torch, c["dtype"]) if c["dtype"] else None
    max_memory = to_accelerate(c["max_memory"])
    result = {"sizes": dict(compute_module_sizes(model, dtype=dtype))}
    if c["balanced"]:
        max_memory = get_balanced_memory(model, max_memory=max_memory,
                                         no_split_module_classes=c["no_split"], dtype=dtype,
                                         low_zero=c["low_zero"])
        result["balanced"] = from_accelerate(max_memory)
    device_map = infer_auto_device_map(model, max_memory=max_memory,
                                       no_split_module_classes=c["no_split"], dtype=dtype)
    result["device_map"] = from_accelerate(dict(device_map), values=True)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bin", required=True, help="accel_vs_plan")
    parser.add_argument("--work", required=True)
    parser.add_argument("--verbose", action="store_true", help="print every case's device map")
    args = parser.parse_args()
    # Accelerate warns that cuda:N is missing on a machine without GPUs; the plan does not need it.
    logging.getLogger("accelerate").setLevel(logging.ERROR)
    os.makedirs(args.work, exist_ok=True)
    all_cases = cases()
    cases_path = os.path.join(args.work, "plan_cases.json")
    results_path = os.path.join(args.work, "plan_accel.json")
    with open(cases_path, "w") as f:
        json.dump(all_cases, f, indent=1)
    subprocess.run([args.bin, cases_path, results_path], check=True)
    with open(results_path) as f:
        ours = json.load(f)

    disagreements = 0
    for c in all_cases:
        theirs = accelerate_answer(c)
        mine = ours[c["name"]]
        for part in theirs:
            # Sizes: Accelerate's defaultdict also lists the second names of tied weights as 0.
            expected = {k: v for k, v in theirs[part].items() if not (part == "sizes" and v == 0)}
            if expected != mine.get(part):
                disagreements += 1
                print(f"plan: {c['name']}: {part} differs\n  Accelerate {expected}\n"
                      f"  accel      {mine.get(part)}")
        if args.verbose:
            print(f"plan: {c['name']}: {theirs['device_map']}")
    print(f"plan: {len(all_cases)} cases, {disagreements} disagreements")
    sys.exit(1 if disagreements else 0)


if __name__ == "__main__":
    main()
