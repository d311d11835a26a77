#!/usr/bin/env python3
"""The job with PyTorch's own parallelism, started by torchrun on Gloo: the GPT of gpt.py from
init.safetensors, AdamW with weight decay, clipping every step, the global batches of
batches.safetensors split over the data ranks. Writes result.json (every step's loss, averaged
over the processes, and gradient norm; the median step time; peak resident memory of each
process) and weights.safetensors (the whole model after the last step) into --out.

    torchrun --nproc_per_node 2 train_pytorch.py --layout fsdp --data DIR --out DIR [job flags]

Layouts: plain (no parallelism: the reference on one process), fsdp (FSDP2's fully_shard on each
block, then the root).
"""
import argparse
import json
import os
import resource
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import fully_shard

import gpt


def as_number(value):
    """A norm FSDP2 returns as a DTensor, or a tensor, as a float."""
    return float(value.full_tensor() if hasattr(value, "full_tensor") else value)


def main():
    parser = gpt.add_job_arguments(argparse.ArgumentParser(description=__doc__))
    parser.add_argument("--layout", required=True, choices=["plain", "fsdp"])
    parser.add_argument("--data", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)  # as the C++ side: one core per process
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    model = gpt.build(args)
    model.load_state_dict(load_file(os.path.join(args.data, "init.safetensors")))
    if args.layout == "fsdp":
        for block in model.blocks:
            fully_shard(block)
        fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    ids = load_file(os.path.join(args.data, "batches.safetensors"))["ids"]
    per_rank = args.batch // world

    losses, norms, seconds = [], [], []
    for step in range(args.steps):
        batch = ids[step, rank * per_rank:(rank + 1) * per_rank]
        start = time.perf_counter()
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, args.vocab), batch[:, 1:].reshape(-1))
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad()
        seconds.append(time.perf_counter() - start)
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / world)
        norms.append(as_number(norm))

    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True,
                                                                 cpu_offload=True))
    peak = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss], dtype=torch.float64)
    peaks = [torch.zeros_like(peak) for _ in range(world)]
    dist.all_gather(peaks, peak)
    if rank == 0:
        os.makedirs(args.out, exist_ok=True)
        save_file({k: v.contiguous() for k, v in state.items()},
                  os.path.join(args.out, "weights.safetensors"))
        with open(os.path.join(args.out, "result.json"), "w") as out:
            json.dump({"losses": losses, "grad_norms": norms,
                       "step_ms": 1e3 * statistics.median(seconds[1:] or seconds),
                       "peak_rss_mb": [p.item() / 1024 for p in peaks]}, out)
    # Every process past its last collective, then out without tearing the group down: about one
    # run in five, torch 2.11's Gloo teardown after FSDP2 aborts a process ("terminate called
    # without an active exception"), after the results are written.
    dist.barrier()
    os._exit(0)


if __name__ == "__main__":
    main()
