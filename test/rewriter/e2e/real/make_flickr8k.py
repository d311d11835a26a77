#!/usr/bin/env python3
"""Synthetic Flickr8k for prabhuomkar/pytorch-cpp's image captioning, laid out as its program reads
it: Flickr8k_text/Flickr8k.token.txt (`NAME.jpg#K<TAB>caption`), the train/dev/test image lists,
and the images (binary PPM under the .jpg names; stb_image reads them by content) in
Flickr8k_Dataset/Flicker8k_Dataset. Captions of 3 to 9 words from a 24-word vocabulary, so that
the batches' padded lengths differ; the training and validation set sizes are even multiples of
the batch the entry runs (8), so that two processes repeat no sample. Also writes the encoder's
TorchScript backbone (a frozen 8 x 8 stride-8 convolution with the `out_channels` buffer the
program reads) standing in for the ResNet-50 its Python script exports.

    make_flickr8k.py DATA_DIR BACKBONE_FILE
"""
import os
import random
import sys

import torch

WORDS = ("dog cat runs sits red blue grass water ball child plays jumps over under white black "
         "small large tree road man woman rides bike").split()


def write_ppm(path, rng, size):
    pixels = bytes(rng.randrange(256) for _ in range(size * size * 3))
    with open(path, "wb") as f:
        f.write(b"P6\n%d %d\n255\n" % (size, size) + pixels)


class Backbone(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.features = torch.nn.Conv2d(3, 8, kernel_size=8, stride=8)
        self.register_buffer("out_channels", torch.tensor(8))

    def forward(self, x):
        return torch.relu(self.features(x))


def main():
    data, backbone_file = sys.argv[1], sys.argv[2]
    rng = random.Random(8)
    text = os.path.join(data, "Flickr8k_text")
    images = os.path.join(data, "Flickr8k_Dataset", "Flicker8k_Dataset")
    os.makedirs(text, exist_ok=True)
    os.makedirs(images, exist_ok=True)
    # Two captions per image: 16 training images (32 samples), 8 validation, 8 test.
    splits = {"trainImages": 16, "devImages": 8, "testImages": 8}
    lines = []
    index = 0
    for split, count in splits.items():
        names = []
        for _ in range(count):
            name = "img%03d.jpg" % index
            index += 1
            names.append(name)
            write_ppm(os.path.join(images, name), rng, 256)
            for k in range(2):
                words = [rng.choice(WORDS) for _ in range(rng.randint(3, 9))]
                lines.append("%s#%d\t%s .\n" % (name, k, " ".join(words).capitalize()))
        with open(os.path.join(text, "Flickr_8k.%s.txt" % split), "w") as f:
            f.write("".join(n + "\n" for n in names))
    with open(os.path.join(text, "Flickr8k.token.txt"), "w") as f:
        f.write("".join(lines))
    torch.manual_seed(50)
    backbone = Backbone()
    for parameter in backbone.parameters():
        parameter.requires_grad = False
    os.makedirs(os.path.dirname(backbone_file), exist_ok=True)
    torch.jit.script(backbone.eval()).save(backbone_file)


if __name__ == "__main__":
    main()
