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
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.register_buffer("mask", torch.ones(context, context).tril())

    def forward(self, x):
        batch, time, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=2)

        def heads_of(t):
            return t.view(batch, time, self.heads, width // self.heads).transpose(1, 2)

        q, k, v = heads_of(q), heads_of(k), heads_of(v)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(width // self.heads)
        scores = scores.masked_fill(self.mask[:time, :time] == 0, float("-inf"))
        y = torch.matmul(torch.softmax(scores, -1), v)
        return self.proj(y.transpose(1, 2).contiguous().view(batch, time, width))


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
        x = self.tokens(ids) + self.positions(torch.arange(ids.size(1)))
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
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--weight_decay", type=float, default=0.1)
    parser.add_argument("--max_grad_norm", type=float, default=0.5)
    return parser


def build(args):
    return Gpt(args.vocab, args.context, args.width, args.heads, args.layers)
