#!/usr/bin/env python3
"""accel's speed against Python Accelerate's on the same job (train_accel.cpp and
train_accelerate.py), in one run: runs alternate between the two, so both see the same machine.

For each model and process count it prints the median step time (the median of each run's
per-step median, warm-up steps left out), the time from launch to the end of the first step, and
the peak resident memory of the largest process, each with the ratio accel/Accelerate.

    speed.py --build BUILD_DIR [--reps 3] [--work DIR]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
VENV_BIN = os.path.dirname(sys.executable)
WARMUP = 5

# name: (width, depth, training samples); batches of 64 per process, so 2 processes take half as
# many steps each.
MODELS = {
    "small (3 x 256)": (256, 3, 64 * 240),
    "large (4 x 2048)": (2048, 4, 64 * 40),
}


def launch(implementation, processes, build, data, out, width, depth):
    job = ["--data", data, "--out", out, "--width", str(width), "--depth", str(depth),
           "--batch_size", "64", "--epochs", "1", "--accumulation", "1", "--no_eval"]
    if implementation == "accel":
        command = [os.path.join(build, "launcher", "accel"), "launch", "--num_processes",
                   str(processes), os.path.join(build, "bench", "vs_accelerate", "accel_vs_train")]
    else:
        mode = ["--cpu"] if processes == 1 else ["--multi_gpu"]
        command = [os.path.join(VENV_BIN, "accelerate"), "launch", *mode, "--num_processes",
                   str(processes), "--num_machines", "1", "--mixed_precision", "no",
                   "--dynamo_backend", "no", os.path.join(HERE, "train_accelerate.py")]
    env = dict(os.environ, PYTHONPATH=HERE, PYTHONWARNINGS="ignore")
    started = time.time()
    done = subprocess.run(command + job, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stdout}{done.stderr}")
    with open(os.path.join(out, "result.json")) as f:
        result = json.load(f)
    steps = result["step_seconds"][WARMUP:]
    return {"step": statistics.median(steps), "start": result["first_step_wall"] - started,
            "rss": max(result["peak_rss_mib"])}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--build", required=True)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--work")
    args = parser.parse_args()
    build = os.path.abspath(args.build)
    work = args.work or tempfile.mkdtemp(prefix="accel-speed.")

    rows = []
    for model, (width, depth, samples) in MODELS.items():
        data = os.path.join(work, f"data_{width}x{depth}")
        subprocess.run([sys.executable, os.path.join(HERE, "make_inputs.py"), data, "--width",
                        str(width), "--depth", str(depth), "--train", str(samples), "--eval", "64"],
                       check=True, env=dict(os.environ, PYTHONPATH=HERE))
        for processes in (1, 2):
            runs = {"accel": [], "accelerate": []}
            for rep in range(args.reps):
                order = ["accel", "accelerate"] if rep % 2 == 0 else ["accelerate", "accel"]
                for implementation in order:
                    out = os.path.join(work, f"{implementation}_{width}_{processes}_{rep}")
                    runs[implementation].append(
                        launch(implementation, processes, build, data, out, width, depth))
            medians = {impl: {key: statistics.median(r[key] for r in results)
                              for key in ("step", "start", "rss")}
                       for impl, results in runs.items()}
            rows.append((model, processes, medians))
            print(f"speed: {model}, {processes} process(es) done", file=sys.stderr, flush=True)

    print(f"median of {args.reps} interleaved runs each; step = median per-step time after "
          f"{WARMUP} warm-up steps; start = launch to the end of the first step; "
          "RSS = peak of the largest process")
    header = ("model", "procs", "step accel", "step Accelerate", "ratio", "start accel",
              "start Accelerate", "ratio", "RSS accel", "RSS Accelerate", "ratio")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for model, processes, m in rows:
        a, b = m["accel"], m["accelerate"]
        print(f"| {model} | {processes} | {a['step'] * 1e3:.2f} ms | {b['step'] * 1e3:.2f} ms | "
              f"{a['step'] / b['step']:.2f} | {a['start']:.2f} s | {b['start']:.2f} s | "
              f"{a['start'] / b['start']:.2f} | {a['rss']:.0f} MiB | {b['rss']:.0f} MiB | "
              f"{a['rss'] / b['rss']:.2f} |")


if __name__ == "__main__":
    main()
