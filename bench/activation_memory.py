#!/usr/bin/env python3
"""Activation memory, accel against PyTorch, on the same model in the same run.

    activation_memory.py BENCH [--width W --depth D --batch B --repeats N]

BENCH is build/bench/accel_bench_activation_memory. For each mode (plain, every block
checkpointed, every 2nd block, every block keeping its matmuls' outputs, every block with its
kept input offloaded) it runs accel's bench and PyTorch's equivalent (torch.utils.checkpoint,
non-reentrant; op: its selective checkpoint contexts saving mm/addmm/bmm; offload: save_on_cpu
around the checkpointed blocks) in fresh processes, N times each, and prints the medians: peak resident
growth of one forward+backward (what a user runs out of), its ratio to the same library's plain
run, accel's counted allocator peak, and the step time. On the CPU, offload moves nothing (the
inputs are in host memory already): its row shows the mode costs nothing there.
"""

import argparse
import statistics
import subprocess
import sys

PYTORCH_RUN = r'''
import functools, sys, time, torch
from torch.utils.checkpoint import (checkpoint, create_selective_checkpoint_contexts,
                                    CheckpointPolicy)
mode, width, depth, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(torch.get_num_threads())

class DropBlock(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.up = torch.nn.Linear(width, 2 * width)
        self.down = torch.nn.Linear(2 * width, width)
        self.dropout = torch.nn.Dropout(0.1)
    def forward(self, x):
        return x + self.down(self.dropout(torch.nn.functional.gelu(self.up(x))))

def status_kib(field):
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(field)

torch.manual_seed(0)
model = torch.nn.Sequential(*[DropBlock(width) for _ in range(depth)])
x = torch.randn(batch, width)
for p in model.parameters():
    p.grad = torch.zeros_like(p)
every = {"plain": 0, "checkpoint": 1, "offload": 1, "every2": 2, "op": 1}[mode]
matmuls = (torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default)
def keep_matmuls(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_SAVE if op in matmuls else CheckpointPolicy.PREFER_RECOMPUTE
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
before = status_kib("VmRSS")
start = time.perf_counter()
h = x
for i, block in enumerate(model):
    if every and i % every == 0:
        if mode == "offload":
            with torch.autograd.graph.save_on_cpu(pin_memory=False):
                h = checkpoint(block, h, use_reentrant=False)
        elif mode == "op":
            h = checkpoint(block, h, use_reentrant=False, context_fn=functools.partial(
                create_selective_checkpoint_contexts, keep_matmuls))
        else:
            h = checkpoint(block, h, use_reentrant=False)
    else:
        h = block(h)
h.pow(2).mean().backward()
seconds = time.perf_counter() - start
growth = (status_kib("VmHWM") - before) / 1024
print(f"pytorch {mode} counted_peak_mib nan resident_growth_mib {growth:.1f} seconds {seconds:.3f}")
'''


def parse(line):
    fields = line.split()
    values = dict(zip(fields[2::2], fields[3::2]))
    return {key: float(value) for key, value in values.items()}


def run(command):
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return parse(out.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("bench")
    parser.add_argument("--width", default="1024")
    parser.add_argument("--depth", default="24")
    parser.add_argument("--batch", default="512")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    shape = [args.width, args.depth, args.batch]
    modes = ["plain", "checkpoint", "every2", "op", "offload"]
    results = {}
    for _ in range(args.repeats):  # interleaved, so the machine's noise moves both alike
        for mode in modes:
            for library, command in (
                ("accel", [args.bench, mode] + shape),
                ("pytorch", [sys.executable, "-c", PYTORCH_RUN, mode] + shape),
            ):
                results.setdefault((library, mode), []).append(run(command))

    def median(library, mode, key):
        return statistics.median(r[key] for r in results[(library, mode)])

    print(f"residual MLP with dropout, width {args.width}, depth {args.depth}, batch {args.batch};"
          f" medians of {args.repeats} fresh processes")
    print("| mode | accel growth | accel / plain | PyTorch growth | PyTorch / plain "
          "| accel counted peak | accel step | PyTorch step |")
    print("|---|---|---|---|---|---|---|---|")
    for mode in modes:
        accel_growth = median("accel", mode, "resident_growth_mib")
        torch_growth = median("pytorch", mode, "resident_growth_mib")
        accel_plain = median("accel", "plain", "resident_growth_mib")
        torch_plain = median("pytorch", "plain", "resident_growth_mib")
        print(f"| {mode} | {accel_growth:.0f} MiB | {accel_growth / accel_plain:.3f} "
              f"| {torch_growth:.0f} MiB | {torch_growth / torch_plain:.3f} "
              f"| {median('accel', mode, 'counted_peak_mib'):.0f} MiB "
              f"| {median('accel', mode, 'seconds'):.2f} s "
              f"| {median('pytorch', mode, 'seconds'):.2f} s |")


if __name__ == "__main__":
    main()
