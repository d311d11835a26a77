#!/usr/bin/env python3
"""The job, written with Python Accelerate: an MLP regression trained with AdamW, an LR schedule,
gradient clipping and gradient accumulation, then evaluated with gather_for_metrics. Its twin is
train_accel.cpp; compare_runs.py checks that the two agree.

    accelerate launch [--cpu | --multi_gpu --num_processes N] train_accelerate.py --data D --out O
"""
import json
import os
import resource
import time

import torch
from accelerate import Accelerator
from accelerate.utils import DataLoaderConfiguration
from safetensors.torch import load_file
from torch.utils.data import DataLoader, TensorDataset

from job import build_mlp, lr_factor, parse_args


def loader(path, batch_size):
    tensors = load_file(path)
    return DataLoader(TensorDataset(tensors["x"], tensors["y"]), batch_size=batch_size)


def main():
    args = parse_args(__doc__)
    accelerator = Accelerator(
        cpu=True,
        gradient_accumulation_steps=args.accumulation,
        dataloader_config=DataLoaderConfiguration(split_batches=args.split_batches,
                                                  even_batches=not args.uneven))
    model = build_mlp(args.width, args.depth)
    model.load_state_dict(load_file(os.path.join(args.data, "init.safetensors")))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)
    train = loader(os.path.join(args.data, "train.safetensors"), args.batch_size)
    evaluation = loader(os.path.join(args.data, "eval.safetensors"), args.batch_size)
    model, optimizer, scheduler, train, evaluation = accelerator.prepare(
        model, optimizer, scheduler, train, evaluation)

    losses, step_seconds, first_step_wall = [], [], None
    for _ in range(args.epochs):
        last = time.perf_counter()
        for x, y in train:
            with accelerator.accumulate(model):
                loss = torch.nn.functional.mse_loss(model(x), y)
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(model.parameters(), args.max_grad_norm)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            losses.append(accelerator.reduce(loss.detach(), reduction="mean").item())
            now = time.perf_counter()
            step_seconds.append(now - last)
            last = now
            if first_step_wall is None:
                first_step_wall = time.time()

    result = {"num_processes": accelerator.num_processes, "losses": losses, "step_seconds": step_seconds, "first_step_wall": first_step_wall,
              "lr": scheduler.get_last_lr()[0]}
    if not args.no_eval:
        model.eval()
        count, sse, squared_errors = 0, 0.0, []
        with torch.no_grad():
            for x, y in evaluation:
                prediction = model(x)
                if args.uneven:
                    # Processes hold different numbers of batches: gather once, after the loop.
                    squared_errors += (prediction - y).pow(2).flatten().tolist()
                else:
                    prediction, y = accelerator.gather_for_metrics((prediction, y))
                    count += y.shape[0]
                    sse += (prediction - y).pow(2).sum().item()
        if args.uneven:
            squared_errors = accelerator.gather_for_metrics(squared_errors, use_gather_object=True)
            count, sse = len(squared_errors), sum(squared_errors)
        result.update(eval_count=count, eval_sse=sse)
    peak_rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result["peak_rss_mib"] = [v / 1024 for v in accelerator.gather_for_metrics(
        [peak_rss_kib], use_gather_object=True)]

    accelerator.save_model(model, os.path.join(args.out, "model"))
    if accelerator.is_main_process:
        with open(os.path.join(args.out, "result.json"), "w") as f:
            json.dump(result, f)
    accelerator.end_training()


if __name__ == "__main__":
    main()
