#!/usr/bin/env python3
"""Sets one layout's two runs side by side: every step's loss and gradient norm, and every final
weight, as the largest relative difference; the step-time ratio (accel / PyTorch, medians over the
runs given) and each side's peak resident memory. Exits 1 when a loss, a norm or a weight differs
by more than --tolerance (relative), naming the first step or tensor that does.

    compare.py --accel DIR [DIR...] --pytorch DIR [DIR...] [--reference DIR] [--layout NAME]
               [--tolerance 1e-5]

AdamW divides each update by the root of its second moment, so where a gradient is near zero a
difference in the last bits of the reductions' order (a reduce-scatter's sum against an
all-reduce's) moves the weight by a good part of the learning rate: after a few steps the two
peers' weights part by more than their losses do. With --reference (the same job on one process,
no parallelism) the weights pass when accel is no farther from the one-process run than twice
PyTorch's own distance from it: the gap is then what both peers' reduction orders make.
"""
import argparse
import json
import os
import statistics
import sys

import torch
from safetensors.torch import load_file


def relative(a, b):
    return abs(a - b) / max(abs(a), abs(b), 1e-12)


def weights_apart(a, b):
    """The largest difference of two sets of weights, each tensor's relative to its largest
    element, and the tensor where it is."""
    largest, where = 0.0, ""
    for name in sorted(set(a) & set(b)):
        x, y = a[name].double(), b[name].double()
        difference = ((x - y).abs().max() / y.abs().max().clamp_min(1e-12)).item()
        if difference > largest:
            largest, where = difference, name
    return largest, where


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--accel", nargs="+", required=True)
    parser.add_argument("--pytorch", nargs="+", required=True)
    parser.add_argument("--layout", default="")
    parser.add_argument("--tolerance", type=float, default=1e-5)
    parser.add_argument("--reference", help="the one-process run (train_pytorch.py --layout plain)")
    args = parser.parse_args()
    ours = [json.load(open(os.path.join(d, "result.json"))) for d in args.accel]
    theirs = [json.load(open(os.path.join(d, "result.json"))) for d in args.pytorch]

    problems = []
    for key in ("losses", "grad_norms"):
        for step, (a, b) in enumerate(zip(ours[0][key], theirs[0][key])):
            if relative(a, b) > args.tolerance:
                problems.append(f"{key} part at step {step}: accel {a!r}, PyTorch {b!r}")
                break
    loss_difference = max(relative(a, b) for a, b in zip(ours[0]["losses"], theirs[0]["losses"]))
    norm_difference = max(relative(a, b)
                          for a, b in zip(ours[0]["grad_norms"], theirs[0]["grad_norms"]))
    a_weights = load_file(os.path.join(args.accel[0], "weights.safetensors"))
    b_weights = load_file(os.path.join(args.pytorch[0], "weights.safetensors"))
    if sorted(a_weights) != sorted(b_weights):
        problems.append(f"the weights' names differ: {sorted(set(a_weights) ^ set(b_weights))}")
    weight_difference, worst = weights_apart(a_weights, b_weights)
    reference_note = ""
    if args.reference:
        plain = load_file(os.path.join(args.reference, "weights.safetensors"))
        ours_apart, _ = weights_apart(a_weights, plain)
        theirs_apart, _ = weights_apart(b_weights, plain)
        reference_note = (f"; from one process's weights: accel {ours_apart:.2g}, PyTorch "
                          f"{theirs_apart:.2g}")
        weights_pass = weight_difference <= args.tolerance or ours_apart <= 2 * theirs_apart
    else:
        weights_pass = weight_difference <= args.tolerance
    if not weights_pass:
        problems.append(f"weights part at {worst}: relative {weight_difference:.3g}")

    step_ratio = statistics.median(o["step_ms"] / t["step_ms"] for o, t in zip(ours, theirs))
    print(f"{args.layout or 'layout'}: losses within {loss_difference:.2g}, grad norms within "
          f"{norm_difference:.2g}, weights within {weight_difference:.2g} (relative{reference_note}); step "
          f"{statistics.median(o['step_ms'] for o in ours):.1f} ms vs "
          f"{statistics.median(t['step_ms'] for t in theirs):.1f} ms: accel/PyTorch "
          f"{step_ratio:.2f}; peak RSS per process {max(ours[0]['peak_rss_mb']):.0f} MB vs "
          f"{max(theirs[0]['peak_rss_mb']):.0f} MB")
    for problem in problems:
        print(f"  differs: {problem}")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
