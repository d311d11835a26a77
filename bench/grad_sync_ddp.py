"""The reference for bench/grad_sync.cpp: the same measurement on PyTorch's own DistributedDataParallel.

Two processes over Gloo on this machine, the same model (8 x Linear(1024, 1024) with ReLU), batch
32, one thread per process. Prints, as grad_sync.cpp does, the flat all-reduce of the gradients'
bytes over the time DDP's sync adds to backward (DDP step - no_sync step), median over interleaved
repetitions, with gradient_as_bucket_view True and False.
  Run: $ACCEL_VENV/bin/python bench/grad_sync_ddp.py [reps] (the venv scripts/install-deps.sh made)
"""
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

WIDTH, LAYERS, STEPS = 1024, 8, 3


def model():
    torch.manual_seed(0)
    layers = []
    for _ in range(LAYERS):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers)


def timed(fn):
    dist.barrier()
    start = time.perf_counter()
    for _ in range(STEPS):
        fn()
    return (time.perf_counter() - start) / STEPS


def worker(rank, reps, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    x = torch.randn(32, WIDTH)
    views = DDP(model(), gradient_as_bucket_view=True)
    copies = DDP(model(), gradient_as_bucket_view=False)
    flat = torch.ones(sum(p.numel() for p in views.parameters()))

    def step(ddp):
        ddp.zero_grad(set_to_none=True)
        ddp(x).sum().backward()

    def unsynced():
        with views.no_sync():
            step(views)

    def allreduce():
        dist.all_reduce(flat)

    for _ in range(2):
        step(views), step(copies), unsynced(), allreduce()
    ratio_views, ratio_copies, times = [], [], []
    for _ in range(reps):
        v, c, u, f = timed(lambda: step(views)), timed(lambda: step(copies)), timed(unsynced), timed(allreduce)
        times.append((v, c, u, f))
        ratio_views.append(f / max(v - u, 1e-9))
        ratio_copies.append(f / max(c - u, 1e-9))
    if rank == 0:
        print(f"torch DDP {torch.__version__}: flat all-reduce / (DDP step - no_sync step), median: "
              f"gradient_as_bucket_view=True {statistics.median(ratio_views):.3f}, "
              f"False {statistics.median(ratio_copies):.3f}")
        v, c, u, f = (statistics.median(t[i] for t in times) * 1e3 for i in range(4))
        print(f"  step: DDP {v:.1f} ms (copies {c:.1f} ms), no_sync {u:.1f} ms; flat all-reduce {f:.1f} ms")
    dist.destroy_process_group()


if __name__ == "__main__":
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    mp.spawn(worker, args=(reps, 29000 + os.getpid() % 1000), nprocs=2)
