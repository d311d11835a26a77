"""What both versions of the job share on the Python side: the model, and how a run is described."""
import argparse

from torch import nn


def build_mlp(width, depth):
    """depth hidden layers of width x width with ReLU, then one output: the same module names
    ("0.weight", "2.weight", ...) as the torch::nn::Sequential of train_accel.cpp."""
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    layers.append(nn.Linear(width, 1))
    return nn.Sequential(*layers)


def lr_factor(step):
    """The learning-rate schedule: inverse-time decay, a factor of the base rate after `step`
    scheduler steps. Written out in both languages because LibTorch's StepLR changes the rate one
    step later than PyTorch's (see README.md)."""
    return 1.0 / (1.0 + 0.1 * step)


def parse_args(description):
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--data", required=True, help="folder written by make_inputs.py")
    parser.add_argument("--out", required=True, help="folder for result.json and model/")
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--accumulation", type=int, default=2)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--max_grad_norm", type=float, default=0.5)
    parser.add_argument("--split_batches", action="store_true")
    parser.add_argument("--uneven", action="store_true", help="even_batches=False")
    parser.add_argument("--no_eval", action="store_true")
    return parser.parse_args()
