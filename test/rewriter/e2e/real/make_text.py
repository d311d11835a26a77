#!/usr/bin/env python3
"""A synthetic Penn Treebank train.txt for pytorch-cpp's language model: 1500 lines of words from
a 300-word vocabulary, each word most often followed by the next one in the list (a Markov chain
an LSTM learns), the same bytes on every run.

    make_text.py FILE
"""
import os
import random
import sys


def main():
    path = sys.argv[1]
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    rng = random.Random(1929)
    vocabulary = [f"w{i}" for i in range(300)]
    with open(path, "w") as f:
        for _ in range(1500):
            word = rng.randrange(len(vocabulary))
            line = []
            for _ in range(rng.randrange(5, 20)):
                line.append(vocabulary[word])
                word = (word + 1) % len(vocabulary) if rng.random() < 0.8 else rng.randrange(300)
            f.write(" ".join(line) + "\n")


if __name__ == "__main__":
    main()
