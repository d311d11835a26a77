#!/usr/bin/env python3
"""The GPU twin of accel_bench_optimizer_step's tables, for PyTorch and Accelerate on the same
card: kernels one optimizer step launches (torch.profiler's count) and its time, for AdamW's
fused=True, foreach=True and foreach=False (the per-parameter loop); then the whole training step
of the same MLPs at batch 64, a plain PyTorch loop (torch.optim.AdamW's default: foreach on CUDA)
against Accelerate 1.15 with each of the three steps, fp32 and bf16. Rounds alternate between the
contenders; figures are medians.

    gpu_step.py [--rounds 15] [--device cuda]
"""
import argparse
import statistics
import time

import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState

from job import build_mlp

DEVICE = torch.device("cuda", 0)  # --device
MODELS = (("4 x 2048", 2048, 4), ("3 x 256", 256, 3))
STEPS = {"fused": {"fused": True}, "foreach": {"foreach": True},
         "per-parameter loop": {"foreach": False}}
STEPS_PER_ROUND = 50


def synchronize():
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()


def timed(fn):
    synchronize()
    start = time.perf_counter()
    fn()
    synchronize()
    return time.perf_counter() - start


def mlp_parameters(width, depth):
    """The parameters of accel_bench_optimizer_step's MLP, each with a gradient."""
    shapes = [s for _ in range(depth) for s in ((width, width), (width,))] + [(1, width), (1,)]
    params = []
    for shape in shapes:
        p = (torch.randn(shape, device=DEVICE) * 0.02).requires_grad_(True)
        p.grad = torch.randn_like(p) * 1e-3
        params.append(p)
    return params


def kernels(call):
    if DEVICE.type != "cuda":
        return "-"
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profile:
        call()
        torch.cuda.synchronize()
    names = [e.name for e in profile.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return sum(1 for n in names if not n.startswith(("Memcpy", "Memset")))


def optimizer_steps(rounds):
    print("| model | AdamW step | time | kernels |")
    print("|---|---|---|---|")
    for model, width, depth in MODELS:
        optimizers = {name: torch.optim.AdamW(mlp_parameters(width, depth), lr=1e-3, **kwargs)
                      for name, kwargs in STEPS.items()}
        times = {name: [] for name in optimizers}
        for round_ in range(rounds + 2):
            for name, optimizer in optimizers.items():
                seconds = timed(lambda: [optimizer.step() for _ in range(STEPS_PER_ROUND)])
                if round_ >= 2:
                    times[name].append(seconds / STEPS_PER_ROUND)
        for name, optimizer in optimizers.items():
            print(f"| {model} | {name} | {statistics.median(times[name]) * 1e3:.3f} ms | "
                  f"{kernels(optimizer.step)} |")


def fresh_accelerator(precision):
    # Accelerate keeps one state per process; each contender gets its own mixed precision.
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    return Accelerator(mixed_precision=precision, cpu=DEVICE.type == "cpu")


def whole_steps(rounds):
    print("\n| model | precision | Accelerate's optimizer | plain PyTorch loop | Accelerate | "
          "Accelerate / plain |")
    print("|---|---|---|---|---|---|")
    for precision in ("no", "bf16"):
        for step_name, kwargs in STEPS.items():
            for model_name, width, depth in MODELS:
                x = torch.randn(64, width, device=DEVICE)
                y = torch.randn(64, 1, device=DEVICE)
                torch.manual_seed(0)
                plain_model = build_mlp(width, depth).to(DEVICE)
                plain_optimizer = torch.optim.AdamW(plain_model.parameters(), lr=1e-3)
                accelerator = fresh_accelerator(precision)
                torch.manual_seed(0)
                model = build_mlp(width, depth)
                optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, **kwargs)
                model, optimizer = accelerator.prepare(model, optimizer)

                def plain_steps():
                    for _ in range(STEPS_PER_ROUND):
                        plain_optimizer.zero_grad()
                        with torch.autocast(DEVICE.type, dtype=torch.bfloat16,
                                            enabled=precision == "bf16"):
                            loss = torch.nn.functional.mse_loss(plain_model(x), y)
                        loss.backward()
                        plain_optimizer.step()

                def accelerate_steps():
                    for _ in range(STEPS_PER_ROUND):
                        with accelerator.accumulate(model):
                            optimizer.zero_grad()
                            accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
                            optimizer.step()

                plain, accelerated = [], []
                for round_ in range(rounds + 2):
                    a, b = timed(plain_steps), timed(accelerate_steps)
                    if round_ >= 2:
                        plain.append(a / STEPS_PER_ROUND)
                        accelerated.append(b / STEPS_PER_ROUND)
                plain_ms = statistics.median(plain) * 1e3
                accelerate_ms = statistics.median(accelerated) * 1e3
                print(f"| {model_name} | {'fp32' if precision == 'no' else precision} | "
                      f"{step_name} | {plain_ms:.3f} ms | {accelerate_ms:.3f} ms | "
                      f"{accelerate_ms / plain_ms:.2f} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--device", default="cuda:0", help="cpu: a dry run of the script")
    args = parser.parse_args()
    global DEVICE
    DEVICE = torch.device(args.device)
    import accelerate
    name = torch.cuda.get_device_name(DEVICE) if DEVICE.type == "cuda" else "the CPU"
    print(f"on {name}: PyTorch {torch.__version__}, "
          f"Accelerate {accelerate.__version__}, median of {args.rounds} rounds")
    optimizer_steps(args.rounds)
    whole_steps(args.rounds)


if __name__ == "__main__":
    main()
