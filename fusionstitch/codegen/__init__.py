"""Code generation, target-neutral: kernel IR (kernel.py), lowering of fusion groups
(lower.py, lowerings.py, batch.py), kernel-IR rewrites a printer may use (persist.py).

Each target prints the same `Kernel` from its own package under `fusionstitch/targets/`:
`targets/triton/` (GPU, and Triton's interpreter on CPU tensors) and `targets/cpp/` (C++
with OpenMP, one shared library per graph). Nothing here imports a target.
A compiled kernel is a callable `run(buffers, syms)`: `buffers` are the tensors
of `Kernel.buffers` in order (outputs already allocated, contiguous), `syms`
the integer values of `Kernel.syms` in order.
"""
