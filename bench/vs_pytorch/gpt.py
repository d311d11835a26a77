"""The parallelism guide's GPT (examples/gpt/gpt.h) in PyTorch, with the same module names, so that
one safetensors file of initial weights loads into both, and the job both sides run."""
import argparse
import math

import torch
import torch.nn.functional as F
from torch import nn


class CausalSelfAttention(nn.Module):
    def __init__(self, width, heads, context):
        super().__init__()
        self.head_dim = width // heads
        self.q = nn.Linear(width, width)
        self.k = nn.Linear(width, width)
        self.v = nn.Linear(width, width)
        self.proj = nn.Linear(width, width)
        self.register_buffer("mask", torch.ones(context, context).tril())

    def forward(self, x):
        # -1 heads and shapes from q, k, v, as gpt.h: parallelize_module's colwise q, k, v then
        # hold whole heads, and under sequence parallelism the whole sequence.
        def heads_of(projection):
            t = projection(x)
            return t.view(t.size(0), t.size(1), -1, self.head_dim).transpose(1, 2)

        q, k, v = heads_of(self.q), heads_of(self.k), heads_of(self.v)
        time = q.size(2)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(self.mask[:time, :time] == 0, float("-inf"))
        y = torch.matmul(torch.softmax(scores, -1), v).transpose(1, 2)
        return self.proj(y.reshape(y.size(0), y.size(1), -1))


class Block(nn.Module):
    def __init__(self, width, heads, context):
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.attention = CausalSelfAttention(width, heads, context)
        self.norm2 = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x):
        x = x + self.attention(self.norm1(x))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class Gpt(nn.Module):
    def __init__(self, vocab, context, width, heads, layers):
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads, context) for _ in range(layers))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, ids):
        x = self.tokens(ids) + self.positions(torch.arange(ids.size(1)).expand_as(ids))
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def add_job_arguments(parser):
    """The job's shape, the same flags on both sides (train_accel.cpp reads them too)."""
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=8, help="global batch, split over the data ranks")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--optimizer", default="adamw", choices=["adamw", "sgd"],
                        help="sgd (momentum 0.9, weight decay) moves each weight by its gradient, "
                        "not by the gradient's sign as AdamW does where the gradient is rounding "
                        "noise, so the final weights can be compared to 1e-5")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--weight_decay", type=float, default=0.1)
    parser.add_argument("--max_grad_norm", type=float, default=0.5)
    return parser


def build(args):
    return Gpt(args.vocab, args.context, args.width, args.heads, args.layers)
