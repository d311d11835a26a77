"""The reference for bench/grad_sync.cpp: the same measurement on PyTorch's own DistributedDataParallel.

Two processes over Gloo on this machine, the same model (8 x Linear(1024, 1024) with ReLU), batch
32, one thread per process. Prints, as grad_sync.cpp does, the flat all-reduce of the gradients'
bytes over the time DDP's sync adds to backward (DDP step - no_sync step), median over interleaved
repetitions, with gradient_as_bucket_view True and False, and the minor page faults per step of the
two steps the headline subtracts.

glibc's allocator in these workers is told to keep freed memory (MALLOC_TRIM_THRESHOLD_ and
MALLOC_MMAP_THRESHOLD_, set before the workers start): left to itself it gave the gradients' 33.6 MB
back to the system after the copying model's step, and each no_sync step then faulted all of it in
again (about 8,200 minor faults, some 10 ms), which made the synchronised step look 10 ms cheaper
than it is. The accel process does not fault there (bench/grad_sync.cpp prints its count).
  Run: $ACCEL_VENV/bin/python bench/grad_sync_ddp.py [reps] (the venv scripts/install-deps.sh made)
"""
import os
import resource
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


def minor_faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def timed(fn, faults_per_step=None):
    dist.barrier()
    faults = minor_faults()
    start = time.perf_counter()
    for _ in range(STEPS):
        fn()
    seconds = time.perf_counter() - start
    if faults_per_step is not None:
        faults_per_step.append((minor_faults() - faults) / STEPS)
    return seconds / STEPS


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
    ratio_views, ratio_copies, times, faults_views, faults_unsynced = [], [], [], [], []
    for _ in range(reps):
        v = timed(lambda: step(views), faults_views)
        c = timed(lambda: step(copies))
        u = timed(unsynced, faults_unsynced)
        f = timed(allreduce)
        times.append((v, c, u, f))
        ratio_views.append(f / max(v - u, 1e-9))
        ratio_copies.append(f / max(c - u, 1e-9))
    if rank == 0:
        print(f"torch DDP {torch.__version__}: flat all-reduce / (DDP step - no_sync step), median: "
              f"gradient_as_bucket_view=True {statistics.median(ratio_views):.3f}, "
              f"False {statistics.median(ratio_copies):.3f}")
        v, c, u, f = (statistics.median(t[i] for t in times) * 1e3 for i in range(4))
        print(f"  step: DDP {v:.1f} ms (copies {c:.1f} ms), no_sync {u:.1f} ms; flat all-reduce {f:.1f} ms")
        print(f"  minor page faults per step: DDP {statistics.median(faults_views):.0f}, "
              f"no_sync {statistics.median(faults_unsynced):.0f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    # Read by glibc when each spawned worker starts (see the top of this file).
    os.environ.setdefault("MALLOC_TRIM_THRESHOLD_", str(1 << 30))
    os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", str(64 << 20))
    mp.spawn(worker, args=(reps, 29000 + os.getpid() % 1000), nprocs=2)
