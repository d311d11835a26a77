#!/usr/bin/env python3
"""Checks that two runs of the job (train_accelerate.py and train_accel.cpp, on the same inputs
and settings) agree: the loss of every step, the evaluation's sample count and error, the final
learning rate and the final weights, read with safetensors.torch as any Python user would.

    compare_runs.py ACCELERATE_OUT ACCEL_OUT [--tolerance 1e-5]
Exits 1 naming every disagreement.
"""
import argparse
import json
import os
import sys

from safetensors.torch import load_file


def load_weights(folder):
    """A save_model folder: model.safetensors, or the shards its index names."""
    index = os.path.join(folder, "model.safetensors.index.json")
    if not os.path.exists(index):
        return load_file(os.path.join(folder, "model.safetensors"))
    with open(index) as f:
        weight_map = json.load(f)["weight_map"]
    tensors = {}
    for shard in sorted(set(weight_map.values())):
        tensors.update(load_file(os.path.join(folder, shard)))
    if sorted(tensors) != sorted(weight_map):
        raise ValueError(f"{index}: the weight map and the shards name different tensors")
    return tensors


def compare(reference_dir, candidate_dir, tolerance):
    problems = []
    with open(os.path.join(reference_dir, "result.json")) as f:
        reference = json.load(f)
    with open(os.path.join(candidate_dir, "result.json")) as f:
        candidate = json.load(f)

    if reference["num_processes"] != candidate["num_processes"]:
        problems.append(f"{reference['num_processes']} processes against "
                        f"{candidate['num_processes']}")
    ref_losses, losses = reference["losses"], candidate["losses"]
    largest = 0.0
    if len(ref_losses) != len(losses):
        problems.append(f"{len(ref_losses)} steps against {len(losses)}")
    else:
        worst = max((abs(a - b), i) for i, (a, b) in enumerate(zip(ref_losses, losses)))
        largest = worst[0]
        if worst[0] > tolerance:
            problems.append(f"loss of step {worst[1]} differs by {worst[0]:.3g}")
    if abs(reference["lr"] - candidate["lr"]) > 1e-12:
        problems.append(f"final learning rate {reference['lr']} against {candidate['lr']}")
    if "eval_count" in reference:
        if reference["eval_count"] != candidate.get("eval_count"):
            problems.append(f"evaluation counted {reference['eval_count']} samples against "
                            f"{candidate.get('eval_count')}")
        ref_sse, sse = reference["eval_sse"], candidate.get("eval_sse", float("nan"))
        if not abs(ref_sse - sse) <= tolerance * max(1.0, abs(ref_sse)):
            problems.append(f"evaluation error {ref_sse} against {sse}")

    ref_weights = load_weights(os.path.join(reference_dir, "model"))
    weights = load_weights(os.path.join(candidate_dir, "model"))
    if sorted(ref_weights) != sorted(weights):
        problems.append(f"weights named {sorted(ref_weights)} against {sorted(weights)}")
    else:
        for name, tensor in ref_weights.items():
            if tensor.shape != weights[name].shape:
                problems.append(f"{name}: shape {list(tensor.shape)} against "
                                f"{list(weights[name].shape)}")
                continue
            difference = (tensor - weights[name]).abs().max().item()
            largest = max(largest, difference)
            if difference > tolerance:
                problems.append(f"{name} differs by {difference:.3g}")
    summary = (f"{candidate['num_processes']} processes, {len(losses)} steps, final loss "
               f"{losses[-1]:.6f}, {candidate.get('eval_count', '-')} evaluation samples, "
               f"largest difference {largest:.3g}")
    return problems, summary


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("reference")
    parser.add_argument("candidate")
    parser.add_argument("--tolerance", type=float, default=1e-5)
    args = parser.parse_args()
    problems, summary = compare(args.reference, args.candidate, args.tolerance)
    for problem in problems:
        print(f"compare_runs: {args.candidate} against {args.reference}: {problem}")
    if problems:
        sys.exit(1)
    print(f"compare_runs: agree within {args.tolerance:g} ({summary})")


if __name__ == "__main__":
    main()
