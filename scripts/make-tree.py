#!/usr/bin/env python3
"""Write N files of ~10 KB (random, incompressible) under DIR, 1000 per
subdirectory, for the snapshot benchmarks. Usage: make-tree.py DIR N"""
import os
import sys

root, n = sys.argv[1], int(sys.argv[2])
block = os.urandom(10240)
for i in range(n):
    d = os.path.join(root, f"d{i // 1000:03d}")
    if i % 1000 == 0:
        os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i:06d}.txt"), "wb") as f:
        f.write(block[: 9000 + i % 1000])
