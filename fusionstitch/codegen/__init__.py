"""Code generation: kernel IR (kernel.py), lowering of fusion groups (lower.py), targets.

Targets print the same `Kernel`: `triton.py` (GPU, and Triton's interpreter on CPU
tensors) and `cpu.py` (C++ with OpenMP, one shared library per graph).
A compiled kernel is a callable `run(buffers, syms)`: `buffers` are the tensors
of `Kernel.buffers` in order (outputs already allocated, contiguous), `syms`
the integer values of `Kernel.syms` in order.
"""
