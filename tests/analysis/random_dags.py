"""A hypothesis strategy for random dataflow DAGs, shared by the analysis tests."""
from hypothesis import strategies as st

from fusionstitch.ir.graph import PARAMETER, Graph, Node, Ref, TensorType

T = TensorType((4,), "f32")
_OPS = {1: "neg.default", 2: "add.Tensor", 3: "addcmul.default"}


@st.composite
def dags(draw, max_nodes=20, last_is_output=False):
    """Each node reads 0-3 earlier nodes (0: a parameter). Outputs: up to three random
    nodes, or only the last node with `last_is_output`."""
    n = draw(st.integers(1, max_nodes))
    nodes = []
    for i in range(n):
        k = draw(st.integers(0, min(i, 3)))
        ins = draw(st.lists(st.integers(0, i - 1), min_size=k, max_size=k)) if k else []
        if ins:
            nodes.append(Node(f"n{i}", _OPS[k], tuple(Ref(f"n{j}") for j in ins), type=T))
        else:
            nodes.append(Node(f"n{i}", PARAMETER, type=T))
    if last_is_output:
        return Graph(tuple(nodes), (Ref(f"n{n - 1}"),))
    outs = draw(st.lists(st.integers(0, n - 1), max_size=3, unique=True))
    return Graph(tuple(nodes), tuple(Ref(f"n{j}") for j in outs))
