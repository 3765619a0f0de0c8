"""Converts the UCI optical-recognition handwritten digits (1,797 8x8 images, 10 classes;
CC BY 4.0, shipped inside scikit-learn) into Tessera's HDF5 dataset layout:

    /inputs  [1797, 64] float32   pixel intensities scaled to [0, 1]
    /labels  [1797]     int64     the digit, 0-9

Usage: /usr/bin/python3 docs/examples/digits_to_hdf5.py digits.h5
Needs Debian's python3-sklearn and python3-h5py.
"""
import os
import sys

import h5py
import numpy as np
from sklearn.datasets import load_digits

if len(sys.argv) != 2:
    sys.exit("usage: digits_to_hdf5.py OUTPUT.h5")
digits = load_digits()
inputs = (digits.data / 16.0).astype(np.float32)
labels = digits.target.astype(np.int64)
folder = os.path.dirname(sys.argv[1]) or "."
if not os.path.isdir(folder):
    sys.exit(f"digits_to_hdf5.py: the folder '{folder}' of {sys.argv[1]} does not exist; create it first")
try:
    with h5py.File(sys.argv[1], "w") as f:
        f.create_dataset("inputs", data=inputs)
        f.create_dataset("labels", data=labels)
        f.attrs["source"] = "UCI ML optical recognition of handwritten digits (via scikit-learn), CC BY 4.0"
except OSError as e:  # a file that cannot be written
    sys.exit(f"digits_to_hdf5.py: cannot write {sys.argv[1]}: {e}")
print(f"wrote {sys.argv[1]}: inputs {inputs.shape} float32, labels {labels.shape} int64, "
      f"{len(np.unique(labels))} classes")
