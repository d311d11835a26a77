#!/usr/bin/env python3
"""Checkpoints cross over between accel and Python Accelerate, both ways:

  - a model saved by Accelerate's save_model (sharded, with its index) loads with accel's
    load_checkpoint_and_dispatch, all on the CPU, partly on disk and with an automatic map under
    a CPU budget (part of it on disk), and gives the logits Python gives;
  - accel's save_model output, one file or sharded, loads with safetensors.torch and with
    Accelerate's load_checkpoint_and_dispatch into tensors equal to the ones saved, in the same
    shards Accelerate itself would write.

    crossover.py --bin build/bench/vs_accelerate/accel_vs_checkpoint --work DIR
Exits 1 naming every disagreement.
"""
import argparse
import json
import os
import subprocess
import sys

import torch
from accelerate import Accelerator, init_empty_weights, load_checkpoint_and_dispatch
from safetensors.torch import load_file

from compare_runs import load_weights
from job import build_mlp

WIDTH, DEPTH, SHARD = 64, 3, "20KB"


def run(command):
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bin", required=True, help="accel_vs_checkpoint")
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    work = args.work
    here = os.path.dirname(os.path.abspath(__file__))
    run([sys.executable, os.path.join(here, "make_inputs.py"), work, "--width", str(WIDTH),
         "--depth", str(DEPTH), "--train", "8", "--eval", "32"])
    shape = ["--width", str(WIDTH), "--depth", str(DEPTH)]
    problems = []

    def expect(condition, message):
        if not condition:
            problems.append(message)
        return condition

    model = build_mlp(WIDTH, DEPTH)
    init = load_file(os.path.join(work, "init.safetensors"))
    model.load_state_dict(init)
    x = load_file(os.path.join(work, "eval.safetensors"))["x"]
    with torch.no_grad():
        reference = model(x)

    # Accelerate -> accel.
    by_accelerate = os.path.join(work, "saved_by_accelerate")
    Accelerator(cpu=True).save_model(model, by_accelerate, max_shard_size=SHARD)
    index = os.path.join(by_accelerate, "model.safetensors.index.json")
    expect(os.path.exists(index), f"Accelerate wrote no index in {by_accelerate}")
    placements = {
        "all on the CPU": [],
        "layers 2 and 4 on disk": ["--device_map", "0=cpu,2=disk,4=disk,6=cpu"],
        "an automatic map under a 40KB CPU budget": ["--max_memory", "cpu=40KB"],
    }
    for number, (label, placement) in enumerate(placements.items()):
        out = os.path.join(work, f"logits_{number}.safetensors")
        printed = run([args.bin, "logits", "--checkpoint", index, *shape, "--input",
                       os.path.join(work, "eval.safetensors"), "--out", out, *placement])
        logits = load_file(out)["logits"]
        difference = (logits - reference).abs().max().item()
        if expect(difference <= 1e-6, f"accel's logits from Accelerate's checkpoint, {label}, "
                                      f"differ from Python's by {difference:.3g}"):
            print(f"crossover: Accelerate's sharded checkpoint in accel, {label}: logits equal "
                  f"({printed.strip().split(': ')[-1]})")

    # accel -> Python and Accelerate.
    for label, shard_size in (("one file", "10GB"), ("sharded", SHARD)):
        by_accel = os.path.join(work, f"saved_by_accel_{shard_size}")
        run([args.bin, "save", "--init", os.path.join(work, "init.safetensors"), *shape,
             "--out", by_accel, "--max_shard_size", shard_size])
        loaded = load_weights(by_accel)
        equal = sorted(loaded) == sorted(init) and all(
            torch.equal(loaded[name], init[name]) for name in init)
        expect(equal, f"accel's save_model ({label}) read with safetensors.torch differs from "
                      "the weights saved")
        with init_empty_weights():
            empty = build_mlp(WIDTH, DEPTH)
        dispatched = load_checkpoint_and_dispatch(empty, by_accel, device_map={"": "cpu"})
        state = dispatched.state_dict()
        equal = all(torch.equal(state[name], init[name]) for name in init)
        expect(equal, f"accel's save_model ({label}) loaded with Accelerate's "
                      "load_checkpoint_and_dispatch differs from the weights saved")
        if shard_size == SHARD:
            with open(index) as f:
                theirs = json.load(f)
            with open(os.path.join(by_accel, "model.safetensors.index.json")) as f:
                ours = json.load(f)
            expect(theirs["weight_map"] == ours["weight_map"],
                   f"accel shards differently from Accelerate: {ours['weight_map']} against "
                   f"{theirs['weight_map']}")
            expect(theirs["metadata"]["total_size"] == ours["metadata"]["total_size"],
                   f"total_size {ours['metadata']['total_size']} against "
                   f"{theirs['metadata']['total_size']}")
            files = sorted(set(ours["weight_map"].values()))
            print(f"crossover: accel's save_model, sharded ({len(files)} files, the weight map "
                  "Accelerate writes), loads in Python and in Accelerate with equal tensors")
        else:
            print(f"crossover: accel's save_model, {label}, loads in Python and in Accelerate "
                  "with equal tensors")

    for problem in problems:
        print(f"crossover: {problem}")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
