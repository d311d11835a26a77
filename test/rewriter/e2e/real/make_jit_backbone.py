#!/usr/bin/env python3
"""A TorchScript feature extractor standing in for the ResNet-18 that Abhiswain97's MNIST program
loads with torch::jit::load: one 28 x 28 convolution from 1 channel to 512, so that the program's
output.view({N, -1}) gives the 512 features its Linear(512, 10) head takes. Fixed weights (seeded).

    make_jit_backbone.py FILE
"""
import sys

import torch


class Backbone(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.features = torch.nn.Conv2d(1, 512, kernel_size=28)

    def forward(self, x):
        return torch.relu(self.features(x))


def main():
    torch.manual_seed(18)
    torch.jit.script(Backbone()).save(sys.argv[1])


if __name__ == "__main__":
    main()
