"""localspec: lossless speculative decoding for local GGUF models."""

# llama.cpp's libraries load before NumPy's, whichever module a program imports first: with NumPy
# (and its bundled OpenBLAS, gfortran and quadmath) loaded first, every model load of a CUDA build
# segfaulted on an H200 host, and loaded with llama_cpp imported first (benchmarks/RESULTS.md,
# "On a GPU").
import llama_cpp  # noqa: F401

__version__ = "0.1.0"
