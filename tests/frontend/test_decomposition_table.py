"""frontend/decompositions.py: the table AOTAutograd traces with is built once."""
import torch

from fusionstitch.frontend.decompositions import decompositions


def test_decomposition_table_is_built_once_and_handed_out_as_copies():
    """Building torch's core-aten table took 0.2-0.8 s per compiled graph; it is built once
    per process, and each caller gets its own copy (a caller that edits it changes no
    other compile)."""
    a = decompositions()
    a.clear()
    b, c = decompositions(), decompositions()
    assert b == c and b is not c and len(b) > 100
    assert torch.ops.aten._softmax.default in b       # our extra decompositions
    assert torch.ops.aten.native_layer_norm.default in b
