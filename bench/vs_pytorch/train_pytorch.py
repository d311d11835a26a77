#!/usr/bin/env python3
"""The job with PyTorch's own parallelism, started by torchrun on Gloo: the GPT of gpt.py from
init.safetensors, AdamW with weight decay, clipping every step, the global batches of
batches.safetensors split over the data ranks. Writes result.json (every step's loss, averaged
over the processes, and gradient norm; the median step time; peak resident memory of each
process) and weights.safetensors (the whole model after the last step) into --out.

    torchrun --nproc_per_node 2 train_pytorch.py --layout fsdp --data DIR --out DIR [job flags]

Layouts: plain (no parallelism: the reference on one process), fsdp (FSDP2's fully_shard on each
block, then the root), tp (parallelize_module over every process: q, k, v and up colwise, proj and
down rowwise, the token table rowwise, the head colwise gathering its output), tp_sp (tp with
sequence parallelism: the LayerNorms SequenceParallel, the activations between the split layers
sharded on the sequence, the position table's lookups reduce-scattered onto it), fsdp_tp (a 2-D
mesh, dp_shard x tp of 2 x 2: the tp plan inside each dp_shard group, then fully_shard over it),
pp (torch.distributed.pipelining's Schedule1F1B over every process, --microbatches of the batch:
the blocks cut in equal runs, the embeddings with the first, the final norm and head with the last).
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
from torch import nn
from safetensors.torch import load_file, save_file
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.pipelining import PipelineStage, Schedule1F1B
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                               SequenceParallel, parallelize_module)

import gpt


def as_number(value):
    """A norm FSDP2 returns as a DTensor, or a tensor, as a float."""
    return float(value.full_tensor() if hasattr(value, "full_tensor") else value)


def tensor_parallel_plan(sequence_parallel):
    """The model's plan and each block's, as train_accel.cpp's TensorParallelPlan (torchtitan's
    shape). With sequence parallelism the activations between the split layers hold a shard of
    the sequence (dimension 1): the LayerNorms run on it, attention and up all-gather it, proj
    and down reduce-scatter onto it, and so do the token and position tables' lookups."""
    if not sequence_parallel:
        model = {"tokens": RowwiseParallel(input_layouts=Replicate()),
                 "head": ColwiseParallel(output_layouts=Replicate())}
        block = {"attention.q": ColwiseParallel(), "attention.k": ColwiseParallel(),
                 "attention.v": ColwiseParallel(), "attention.proj": RowwiseParallel(),
                 "up": ColwiseParallel(), "down": RowwiseParallel()}
        return model, block
    model = {"tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
             "positions": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
             "norm": SequenceParallel(),
             "head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate())}
    block = {"norm1": SequenceParallel(),
             "attention": PrepareModuleInput(input_layouts=(Shard(1),),
                                             desired_input_layouts=(Replicate(),),
                                             use_local_output=True),
             "attention.q": ColwiseParallel(), "attention.k": ColwiseParallel(),
             "attention.v": ColwiseParallel(),
             "attention.proj": RowwiseParallel(output_layouts=Shard(1)),
             "norm2": SequenceParallel(),
             "up": ColwiseParallel(input_layouts=Shard(1)),
             "down": RowwiseParallel(output_layouts=Shard(1))}
    return model, block


class Stage(nn.Module):
    """One pipeline stage of the GPT: the blocks `first`..`last` (their names as in the whole
    model), with the embeddings on the first stage and the final norm and head on the last."""

    def __init__(self, model, first, last):
        super().__init__()
        whole = len(model.blocks)
        self.tokens = model.tokens if first == 0 else None
        self.positions = model.positions if first == 0 else None
        self.blocks = nn.ModuleDict({str(i): model.blocks[i] for i in range(first, last)})
        self.norm = model.norm if last == whole else None
        self.head = model.head if last == whole else None

    def forward(self, x):
        if self.tokens is not None:
            x = self.tokens(x) + self.positions(torch.arange(x.size(1)).expand_as(x))
        for block in self.blocks.values():
            x = block(x)
        return self.head(self.norm(x)) if self.head is not None else x


def parallelize(model, layout):
    """Applies the layout; returns the rank of this process's data shard and their number."""
    rank, world = dist.get_rank(), dist.get_world_size()
    if layout == "plain":
        return rank, world
    if layout == "fsdp":
        for block in model.blocks:
            fully_shard(block)
        fully_shard(model)
        return rank, world
    if layout in ("tp", "tp_sp"):
        tp, shard = init_device_mesh("cpu", (world,), mesh_dim_names=("tp",)), None
    else:  # fsdp_tp: tp innermost, as accel's mesh orders its dimensions
        mesh = init_device_mesh("cpu", (world // 2, 2), mesh_dim_names=("dp_shard", "tp"))
        tp, shard = mesh["tp"], mesh["dp_shard"]
    model_plan, block_plan = tensor_parallel_plan(layout == "tp_sp")
    parallelize_module(model, tp, model_plan)
    for block in model.blocks:
        parallelize_module(block, tp, block_plan)
    if shard is None:
        return 0, 1
    for block in model.blocks:
        fully_shard(block, mesh=shard)
    fully_shard(model, mesh=shard)
    return shard.get_local_rank(), shard.size()


def clip_grad_norm_(parameters, max_norm, stages=None):
    """clip_grad_norm_ over gradients on different meshes (FSDP2 + TP: the plan's layers on the
    2-D mesh, the rest on dp_shard's) or none (TP alone leaves some whole), which torch's own
    refuses to mix: the norm of each mesh's, combined, and over the pipeline's stages when
    `stages` is the group of them (torchtitan's pipeline-aware clipping); every gradient scaled as
    torch's does. Returns the norm as a float."""
    grads = [p.grad for p in parameters if p.grad is not None]
    by_mesh = {}
    for g in grads:
        by_mesh.setdefault(g.device_mesh if isinstance(g, DTensor) else None, []).append(g)
    squares = torch.zeros((), dtype=torch.float64)
    for kind in by_mesh.values():
        squares += as_number(torch.nn.utils.get_total_norm(kind)) ** 2
    if stages is not None:
        dist.all_reduce(squares, group=stages)
    norm = squares.sqrt().item()
    coefficient = min(max_norm / (norm + 1e-6), 1.0)
    for g in grads:
        g.mul_(coefficient)
    return norm


def cross_entropy(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


class Whole:
    """Every layout but pp: each process runs the whole (sharded) model on its data rank's rows.
    step() returns the loss averaged over the processes."""

    def __init__(self, model):
        self.model = model

    def step(self, tokens, targets):
        loss = cross_entropy(self.model(tokens), targets)
        loss.backward()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        return mean.item() / dist.get_world_size()

    def state_dict(self):
        return get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True,
                                                                          cpu_offload=True))


class Pipelined:
    """pp: this process's Stage under Schedule1F1B; step() returns the microbatches' mean loss,
    which the last stage computes, on every process."""

    def __init__(self, model, microbatches):
        rank, world = dist.get_rank(), dist.get_world_size()
        per_stage = len(model.blocks) // world
        last = len(model.blocks) if rank == world - 1 else (rank + 1) * per_stage
        self.model = Stage(model, rank * per_stage, last)
        self.schedule = Schedule1F1B(PipelineStage(self.model, rank, world, torch.device("cpu")),
                                     microbatches, loss_fn=cross_entropy)

    def step(self, tokens, targets):
        rank, world = dist.get_rank(), dist.get_world_size()
        tokens, targets = tokens.contiguous(), targets.contiguous()  # microbatches' strides
        losses = []
        if rank == 0:
            self.schedule.step(tokens)
        elif rank == world - 1:
            self.schedule.step(target=targets, losses=losses)
        else:
            self.schedule.step()
        mean = torch.stack(losses).mean() if losses else torch.zeros(())
        dist.broadcast(mean, src=world - 1)
        return mean.item()

    def state_dict(self):
        """The whole model's: each stage's part, under the whole model's names."""
        parts = [None] * dist.get_world_size()
        dist.all_gather_object(parts, {k: v.detach().clone() for k, v in
                                       self.model.state_dict().items()})
        return {k: v for part in parts for k, v in part.items()}


def main():
    parser = gpt.add_job_arguments(argparse.ArgumentParser(description=__doc__))
    parser.add_argument("--layout", required=True,
                        choices=["plain", "fsdp", "tp", "tp_sp", "fsdp_tp", "pp"])
    parser.add_argument("--microbatches", type=int, default=4, help="pp: the batch's microbatches")
    parser.add_argument("--data", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)  # as the C++ side: one core per process
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    model = gpt.build(args)
    model.load_state_dict(load_file(os.path.join(args.data, "init.safetensors")))
    if args.layout == "pp":
        job, data_rank, data_ranks = Pipelined(model, args.microbatches), 0, 1
    else:
        data_rank, data_ranks = parallelize(model, args.layout)
        job = Whole(model)
    parameters = list(job.model.parameters())
    optimizer = (torch.optim.AdamW(parameters, lr=args.lr, weight_decay=args.weight_decay)
                 if args.optimizer == "adamw" else
                 torch.optim.SGD(parameters, lr=args.lr, momentum=0.9,
                                 weight_decay=args.weight_decay))
    ids = load_file(os.path.join(args.data, "batches.safetensors"))["ids"]
    per_rank = args.batch // data_ranks
    stages = dist.group.WORLD if args.layout == "pp" else None

    losses, norms, seconds = [], [], []
    for step in range(args.steps):
        batch = ids[step, data_rank * per_rank:(data_rank + 1) * per_rank]
        start = time.perf_counter()
        loss = job.step(batch[:, :-1], batch[:, 1:])
        norm = clip_grad_norm_(parameters, args.max_grad_norm, stages)
        optimizer.step()
        optimizer.zero_grad()
        seconds.append(time.perf_counter() - start)
        losses.append(loss)
        norms.append(norm)

    state = job.state_dict()
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
