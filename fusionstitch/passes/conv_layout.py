"""2-D convolutions run channels-last where the target asks for it (`Target.conv_layout`).

oneDNN, torch's CPU convolution, is faster on channels-last activations (NHWC in memory)
than on NCHW ones (measured at the sizes of bench/models.py, one thread, the six
convolutions of resnet_infer: 773 us NCHW, 640 us channels-last; mobilenet_v2's 52,
depthwise ones among them: 6.1 ms, 4.3 ms), and Inductor's CPU lowering runs every
convolution so. The IR's shapes are logical and its kernels write their outputs
contiguous, so a layout is spelled with permutes:

    conv(x, w, ...)  ->  y_cl = conv(permute(clone(permute(x, NHWC)), NCHW), w, ...)
                         y    = permute(permute(y_cl, NHWC), NCHW)

- `clone(permute(x, NHWC))` is a copy a kernel makes: fused into x's producer, that
  kernel writes x in NHWC order instead of NCHW (no extra pass over memory); its
  `permute(.., NCHW)` is a view, the channels-last NCHW tensor torch receives.
- torch's convolution returns a channels-last result for a channels-last input, so
  `permute(y_cl, NHWC)` is a contiguous NHWC tensor: the kernels that read y read it
  through `permute(.., NCHW)`, index arithmetic over a buffer with the strides they
  expect (their dense version, targets/cpp/index.py), not the CL strides of y_cl.
  A graph output that was y (saved for a backward) becomes y_cl itself.
- `detach_views` (fusion/plan.py) keeps `permute(clone(..))` out of the producer's
  kernel, which would otherwise store the NCHW permute and undo the copy.

Measured (thread time, one thread, small sizes, in one process alternating):
mobilenet_v2_infer 15.3 -> 13.3 ms; resnet_infer even, convnext_infer 4-5% slower:
their gain in the library (~0.1 ms) is about what the two views per convolution
(~4 us each on the CI machine) and the copies cost (bench/results/conv_layout_cpu_*).
The weight stays in the caller's layout (NCHW: torch reorders it inside each call); by
hand, resnet's six convolutions with weights already channels-last take 544 us against
640. A weight copied to channels-last by a kernel of ours at each call (Inductor's
choice) was tried (2026-11-27, bench.ab, one thread): the six convolutions of
resnet_infer went from 291 to 272 us, but the copies' launches, allocations and views
cost as much (step 0.519 -> 0.540 ms), and mobilenet_v2's 52 copies more (4.11 -> 4.21
ms): not taken. A copy made once per weight version (torch's `_version`) would be.
In training too (tried 2026-12-02: a weight saved for the backward copied once per step,
for the forward's convolution and the backward's; resnet_train's forward 0.656 -> 0.645
ms, backward even, but planners packed each copy into its convolution input's producer
and split that kernel from its batch statistics: resnet_bottleneck_train 4 -> 7 kernels).
Also tried (2026-12-03): a value saved for the backward that is computed elementwise from
a channels-last value saved as its channels-last copy (mobilevit_train_cl's SiLU inputs,
28 copies; kernel counts unchanged). bench.ab, 11 interleaved rounds: mobilevit_train_cl
and mobilevit_train even, resnet_train 2.10 -> 2.22 ms, mobilenet_v2_train 19.9 -> 21.8:
not taken.

2-D poolings (max pooling with indices, average pooling) are rewritten the same way,
their input through the copy and their result channels-last: torch's pooling vectorises
over the channels of a channels-last input and runs NCHW element by element (resnet's
3x3 max pooling of [4, 32, 32, 32], one thread: 825 us NCHW, 77 us channels-last).
A convolution or pooling whose input torch gets channels-last already (a channels-last
graph input, by the strides its parameter records; a convolution's or a pooling's
result) reads it as it is, without the copy.

Correctness never depends on a layout: kernels read every input through its run-time
strides and library calls take any strides, so where torch returns another layout (a
size-1 dim makes NCHW and NHWC the same memory) only the speed differs.

Two kinds of convolution are GEMMs and run as one (`mm`/`addmm`, static sizes, one
group, no padding), whose result is NHWC as the channels-last convolution's was: a 1x1
convolution over the rows of the pixels its stride picks from the NHWC input
(`_as_gemm`), and one whose stride is its kernel size and whose patches tile the image
over its patches copied into rows (`_patches_as_gemm`; where its result is a graph
output it stays a convolution). FUSIONSTITCH_CONV_GEMM=0 keeps them convolutions (the A/B).

In training too (2026-12-03), a 1x1 convolution saved for the backward is a GEMM, and
its input is saved as the NHWC rows the GEMM read (`_saved_rows`); the backward's
`convolution_backward` of such rows is GEMMs over them and over the gradient's NHWC copy
(`_backward_as_gemm`: the input gradient `g @ W`, the weight gradient `g^T @ x`, the bias
gradient a column sum), which torch would run through its im2col loops after copying the
NCHW gradient to the input's layout itself. Left a convolution through torch's loops
(`_onednn`), the 1x1 convolution's NCHW result made the batch statistics that follow it
NCHW, and so the depthwise convolution they normalise (`_stats_of_nchw`), which oneDNN
runs 2.5x slower NCHW (mobilevit_train's [4, 32, 32, 32]: 463 us against 179 us
channels-last). bench.ab, 9 rounds, one thread, small size, before -> after (Inductor):
mobilevit_train 23.6 -> 19.8 ms (19.9), mobilenet_v2_train 21.4 -> 18.5 (20.6); 21
rounds: resnet_train 3.04 -> 2.90, mobilenet_v2_train_cl 23.7 -> 23.0,
mobilevit_train_cl 22.5 -> 22.1, resnet_bottleneck_train 1.55 -> 1.57 (1.46).

Training (2026-12-02): a convolution whose result a batch norm reduces per channel runs
channels-last too (it was left NCHW while the planners found no schedule for such
statistics fused with the NHWC copy of their normalised result: the lowering now stores
that copy at the statistics' own rows, codegen/lower.py `element_index`). A value saved
for the backward that a rewritten convolution reads is saved as its channels-last copy
(the producer stores it once, and the backward gets it channels-last); so is a pooling's
input (resnet's stem: relu of batch-normalised values, which the statistics' kernel
stored NCHW across its grain besides the pooling's copy). In a backward,
`convolution_backward` of an input torch gets channels-last (such a saved copy: its
recorded strides, `channels_last_input`) takes its output gradient through the same
NHWC copy, fused into the gradient's producer (torch would copy an NCHW gradient
itself), and its input gradient, channels-last from torch, is spelled as a forward
result is (`_input_gradient`). Its weight gradient comes back channels-last (oneDNN's
choice) and AccumulateGrad copies it into the parameter's layout. Two convolutions stay
NCHW: one torch runs through its own im2col loops (`_onednn`, ATen's rule: an unstrided
1x1 convolution of a batch under 16 on one thread, where it is not a GEMM: padded or
grouped), which a channels-last input only costs a copy, and one whose input is normalised by batch statistics of an NCHW value
(`_stats_of_nchw`: the copy would be stored across the grain of the statistics' kernel),
unless torch runs them channels-last anyway: a weight torch reads as channels-last (a
model made channels-last, `_weight_channels_last`) makes torch run the convolution so on
either path and copy an NCHW input and gradient itself (mobilenet_v2_train_cl, whose 1x1
convolutions stayed NCHW: 30.6 -> 19.1 ms with the weight rule, eager 21.6). One thread,
small size, side by side with the pass before
(bench/results/models_cnn_train_2026-12-02d.md): resnet_train 3.12 -> 2.55 ms (Inductor
2.28), mobilenet_v2_train 23.0 -> 20.7 (18.6), mobilevit_train 22.8 -> 21.3 (20.9).

Graph outputs: a result the caller sees keeps eager's layout, so a convolution whose
result (or a view of it) is a graph output is rewritten only when every such output is
one whose layout nobody outside sees (`free_outputs`: a training forward's activations
saved for its backward, which reads its inputs through their strides too); the frontend
names those (frontend/torch.py). An input that is also a graph output is written twice
by its producer (once NCHW for the output, once NHWC for the convolution).

Not rewritten either: transposed and non-2-D convolutions, and dtypes other than f32
(oneDNN's channels-last path is the f32/bf16 one; f64 runs torch's reference
convolution, where the layout buys nothing; bf16 is left until measured).
"""
from __future__ import annotations

from typing import Callable

import torch

from ..config import env_flag_default
from ..ir.graph import GETITEM, PARAMETER, Graph, Node, Ref, TensorType, fresh_name
from ..ir.layout import suggests_channels_last
from ..ir.ops import Category, lookup

CONV = "convolution.default"
CONV_BACKWARD = "convolution_backward.default"
PERMUTE = "permute.default"
CLONE = "clone.default"
VIEW = "view.default"
TO_NHWC = (0, 2, 3, 1)
TO_NCHW = (0, 3, 1, 2)
LAYOUTS = ("channels_last",)
# 2-D poolings run channels-last with their input (`_pool_channels_last`)
POOLS = frozenset({"max_pool2d_with_indices.default", "avg_pool2d.default"})


def _permuted(t: TensorType, perm: tuple[int, ...]) -> TensorType:
    return TensorType(tuple(t.shape[d] for d in perm), t.dtype)


def seen_values(g: Graph, free_outputs: frozenset[int]) -> set[str]:
    """Values whose layout the caller sees: graph outputs at positions not in
    `free_outputs`, and the sources of views among them (a view's strides follow its
    source's)."""
    seen = {o.name for k, o in enumerate(g.outputs)
            if isinstance(o, Ref) and k not in free_outputs}
    for n in reversed(g.nodes):
        if n.name in seen and lookup(n.op).view and n.args and isinstance(n.args[0], Ref):
            seen.add(n.args[0].name)
    return seen


def _rewritable(n: Node, types: dict, seen: set[str]) -> bool:
    if n.op != CONV or n.kwargs or len(n.args) != 9:
        return False
    x, w = n.args[0], n.args[1]
    transposed = n.args[6]
    if not isinstance(x, Ref) or not isinstance(w, Ref) or transposed:
        return False
    tx, tw = types.get(x.name), types.get(w.name)
    if not all(isinstance(t, TensorType) and t.rank == 4 and t.dtype == "f32"
               for t in (tx, tw, n.type)):
        return False
    return n.name not in seen and n.type.numel != 0


def _across_batch(n: Node, types: dict) -> bool:
    """A reduction over dim 0 among others (batch norm's statistics in training)."""
    d = lookup(n.op)
    if d.category != Category.REDUCE or d.reduction != "dim" or len(n.args) < 2 \
            or not isinstance(n.args[1], (tuple, list)) or not isinstance(n.args[0], Ref):
        return False
    t = types.get(n.args[0].name)
    rank = t.rank if isinstance(t, TensorType) else 0
    return any(k == 0 or rank and k % rank == 0 for k in n.args[1])


def _statistics_read(g: Graph, types: dict) -> dict[str, frozenset[str]]:
    """Value -> the inputs of the batch statistics (`_across_batch`) it is computed from
    by elementwise ops and views: a batch norm's normalised result -> the convolution
    result whose statistics it used."""
    found: dict[str, frozenset[str]] = {}
    for n in g.nodes:
        d = lookup(n.op)
        if _across_batch(n, types):
            found[n.name] = frozenset({n.args[0].name})
        elif d.category in (Category.ELEMENTWISE, Category.BROADCAST, Category.TUPLE) \
                or d.view:
            srcs = frozenset().union(*(found.get(i, frozenset()) for i in n.inputs))
            if srcs:
                found[n.name] = srcs
    return found


def _stats_of_nchw(n: Node, stats_of: dict, cl: set) -> bool:
    """Whether convolution (or pooling) `n`'s input is normalised by batch statistics of a value in
    NCHW memory (a convolution torch runs through its own loops, left NCHW): its NHWC
    copy would be stored across the grain of the statistics' kernel, one scattered store
    per element (mobilevit_train's batch norms after its 1x1 convolutions: 2-6x
    Inductor's time), where the convolution gains less than that."""
    x = n.args[0].name
    return x not in cl and any(s not in cl for s in stats_of.get(x, ()))


def _onednn(n: Node, types: dict) -> bool:
    """`_onednn_runs` of convolution or convolution backward `n`."""
    if n.op == CONV_BACKWARD:   # (grad, input, weight, bias_sizes, stride, padding, dilation, ..)
        x, w, stride, dilation, groups = n.args[1], n.args[2], n.args[4], n.args[6], n.args[9]
    else:
        x, w, stride, dilation, groups = n.args[0], n.args[1], n.args[3], n.args[5], n.args[8]
    return _onednn_runs(types[x.name], types[w.name], stride, dilation, groups)


def _onednn_runs(x: TensorType, w: TensorType, stride, dilation, groups) -> bool:
    """Whether torch runs a convolution of input `x` by weight `w` through oneDNN, whose
    channels-last kernels are the gain; else through its own im2col loops, to which a
    channels-last input is a copy more. ATen's rule (`use_mkldnn` in
    aten/src/ATen/native/Convolution.cpp, f32 on the CPU): not an unstrided, undilated
    1x1 convolution of a batch under 16 on one thread, and grouped, or a kernel over
    3x3, or a batch over 1, or an input of over 20480 elements. The thread count is
    torch's when the graph is compiled; symbolic sizes count as oneDNN's.
    mobilevit_train's 21 saved 1x1 convolutions (batch 4, one thread) run through
    torch's loops: channels-last, the step took 8-15% longer."""
    sizes = tuple(x.shape) + tuple(w.shape)
    if not all(type(d) is int for d in sizes):
        return True
    batch, kh, kw = x.shape[0], w.shape[2], w.shape[3]
    pointwise_serial = (all(s == 1 for s in stride) and all(d == 1 for d in dilation)
                        and batch < 16 and (kh, kw) == (1, 1)
                        and torch.get_num_threads() == 1)
    return not pointwise_serial and (groups > 1 or (kh > 3 and kw > 3) or batch > 1
                                     or x.numel > 20480)


def _weight_channels_last(n: Node, weights_cl: set[str]) -> bool:
    """Whether convolution or convolution backward `n` reads a weight that torch takes as
    channels-last (`weights_cl`: graph inputs whose recorded strides suggest it, ir/layout.py).
    torch then runs the convolution channels-last on either path, oneDNN or its own loops,
    and copies an NCHW input and gradient itself, a transposing copy of ~3 ns per element
    on one thread (mobilenet_v2_train_cl's 1x1 convolutions of [4, 48, 32, 32]: 600 us a
    copy, two per backward); an NHWC copy fused into the producer is cheaper than that."""
    w = n.args[2] if n.op == CONV_BACKWARD else n.args[1]
    return isinstance(w, Ref) and w.name in weights_cl


def _weights_cl(g: Graph) -> set[str]:
    """Graph inputs of 4-D static shape whose recorded strides suggest channels-last to
    torch (a weight of a model made channels-last; a 1x1 one differs from row-major only
    on its size-1 dims)."""
    out = set()
    for n in g.nodes:
        strides = n.kwarg("strides") if n.op == PARAMETER else None
        if strides is not None and isinstance(n.type, TensorType) and n.type.rank == 4 \
                and all(type(d) is int for d in n.type.shape) \
                and suggests_channels_last(n.type.shape, strides):
            out.add(n.name)
    return out


def _backward_rewritable(n: Node, types: dict, cl: set[str], seen_items: set,
                         weights_cl: set[str]) -> bool:
    """A 2-D f32 convolution's backward whose input torch gets channels-last (`cl`: the
    forward saved its channels-last copy), whose input gradient the caller does not see."""
    if n.op != CONV_BACKWARD or n.kwargs or len(n.args) != 11 or n.args[7]:
        return False
    grad, x, w = n.args[:3]
    if not all(isinstance(a, Ref) for a in (grad, x, w)) or x.name not in cl:
        return False
    if not all(isinstance(types.get(a.name), TensorType) and types[a.name].rank == 4
               and types[a.name].dtype == "f32" and types[a.name].numel != 0
               for a in (grad, x, w)):
        return False
    return (n.name, 0) not in seen_items and (_onednn(n, types)
                                             or _weight_channels_last(n, weights_cl))


def _input_gradient(n: Node, taken: set, cl: set) -> list[Node]:
    """getitem(convolution_backward, 0) of a channels-last backward: torch returns it
    channels-last, spelled as the forward's result is (permute to NHWC, the order of its
    memory, and back), so that kernels read it as the dense NHWC value it is."""
    raw = Node(fresh_name(f"{n.name}_cl", taken), GETITEM, n.args, type=n.type)
    nh = Node(fresh_name(f"{n.name}_nhwc", taken), PERMUTE, (Ref(raw.name), TO_NHWC),
              type=_permuted(n.type, TO_NHWC))
    cl.add(n.name)
    return [raw, nh, Node(n.name, PERMUTE, (Ref(nh.name), TO_NCHW), type=n.type)]


def channels_last_convs(g: Graph, target=None, free_outputs: frozenset[int] = frozenset()
                        ) -> Graph:
    """Rewrite each rewritable 2-D convolution as described in the module docstring when
    `target.conv_layout` is "channels_last"; else `g` unchanged. The result keeps the
    convolution's name (its final permute), so the graph's readers are untouched.
    `free_outputs`: positions of graph outputs whose layout the caller does not see."""
    layout = getattr(target, "conv_layout", None)
    if layout is None:
        return g
    if layout not in LAYOUTS:
        raise ValueError(f"target {target}: unknown conv_layout {layout!r}; "
                         f"expected one of {LAYOUTS}")
    types = {n.name: n.type for n in g.nodes}
    seen = seen_values(g, frozenset(free_outputs))
    cl = {n.name for n in g.nodes if channels_last_input(n) or _nchw_view(g, n)}
    seen_items = {(m.args[0].name, m.args[1]) for m in g.nodes
                  if m.op == GETITEM and m.name in seen and isinstance(m.args[0], Ref)}
    weights_cl = _weights_cl(g)
    gemms = env_flag_default("FUSIONSTITCH_CONV_GEMM", True)
    if not any(_rewritable(n, types, seen) or _pool_rewritable(n, types, seen)
               or _backward_rewritable(n, types, cl, seen_items, weights_cl)
               or gemms and _backward_pointwise(n, types, cl, seen_items)
               for n in g.nodes):
        return g
    taken = set(types)
    nodes: list[Node] = []
    at_output: dict[str, Ref] = {}   # a value's name -> what free graph outputs read
    outputs_read = {o.name for o in g.outputs if isinstance(o, Ref)}
    backward_cl: set[str] = set()    # convolution backwards given channels-last values
    backward_gemm: dict[str, Callable] = {}   # ... run as GEMMs: getitem -> its nodes
    stats_of = _statistics_read(g, types)
    for n in g.nodes:
        if _pool_rewritable(n, types, seen) and not _stats_of_nchw(n, stats_of, cl):
            pooled = _pool_channels_last(n, types, taken, cl)
            if len(pooled) > 1:         # its input saved for the backward: as its copy
                at_output.setdefault(n.args[0].name, Ref(pooled[-2].name))
            nodes += pooled
            continue
        if n.op == GETITEM and isinstance(n.args[0], Ref) and n.args[0].name in backward_gemm:
            nodes += backward_gemm[n.args[0].name](n)
            continue
        if n.op == GETITEM and isinstance(n.args[0], Ref) and n.args[0].name in backward_cl:
            nodes += _input_gradient(n, taken, cl) if n.args[1] == 0 else [n]
            continue
        if gemms and _backward_pointwise(n, types, cl, seen_items):
            made, backward_gemm[n.name] = _backward_as_gemm(n, types, taken, cl)
            nodes += made
            continue
        if n.op == GETITEM and isinstance(n.args[0], Ref) and n.args[0].name in cl:
            cl.add(n.name)          # a pooling's values and indices, channels-last
        if _backward_rewritable(n, types, cl, seen_items, weights_cl):
            copied = _copy_to_nhwc(n, n.args[0], types, taken, cl)
            nodes += copied + [n.replace(args=(Ref(copied[-1].name),) + tuple(n.args[1:]))
                               if copied else n]
            backward_cl.add(n.name)
            continue
        if not _rewritable(n, types, seen):
            nodes.append(n)
            continue
        if gemms:
            if _pointwise(n, types):
                made = _as_gemm(n, types, taken)
                nodes += made
                saved = n.args[0].name in outputs_read and _saved_rows(n, made, types, taken)
                if saved:       # its input saved for the backward: as the rows it read
                    nodes.append(saved)
                    at_output.setdefault(n.args[0].name, Ref(saved.name))
                cl.add(n.name)          # NHWC rows viewed as NCHW: channels-last
                continue
            if _patchwise(n, types) and n.name not in outputs_read:
                nodes += _patches_as_gemm(n, types, taken)
                cl.add(n.name)
                continue
        if not _weight_channels_last(n, weights_cl) and (
                not _onednn(n, types) or _stats_of_nchw(n, stats_of, cl)):
            nodes.append(n)             # no layout to gain, or a transposing copy to pay
            continue
        x = n.args[0]
        copied = _copy_to_nhwc(n, x, types, taken, cl)
        if copied:
            # an input saved for the backward is saved as its channels-last copy: the
            # backward's convolution takes it as it is, and its producer stores it once
            at_output.setdefault(x.name, Ref(copied[-1].name))
        conv = Node(fresh_name(f"{n.name}_cl", taken), CONV,
                    (Ref(copied[-1].name) if copied else x,) + n.args[1:], type=n.type)
        yh = Node(fresh_name(f"{n.name}_nhwc", taken), PERMUTE, (Ref(conv.name), TO_NHWC),
                  type=_permuted(n.type, TO_NHWC))
        y = Node(n.name, PERMUTE, (Ref(yh.name), TO_NCHW), type=n.type)
        nodes += copied + [conv, yh, y]
        cl.add(y.name)                  # a view of the channels-last result
        # a graph output here is one saved for a backward (`seen` holds the others): it
        # is the convolution's own channels-last result, no view of it made per call;
        # `y`, read only inside the graph, is joined by planners into its readers' kernels
        # (a graph output would not be: the kernel would store it)
        at_output[n.name] = Ref(conv.name)
    outputs = tuple(at_output.get(o.name, o) if isinstance(o, Ref) and k in free_outputs
                    else o for k, o in enumerate(g.outputs))
    return Graph(tuple(nodes), outputs, g.name)


channels_last_convs.needs_context = True


def channels_last_input(n: Node) -> bool:
    """A graph input whose recorded strides (frontend/fx_to_ir) are channels-last."""
    strides = n.kwarg("strides") if n.op == PARAMETER else None
    if strides is None or not isinstance(n.type, TensorType) or n.type.rank != 4:
        return False
    _, c, h, w = n.type.shape
    return all(type(d) is int for d in (c, h, w)) and \
        _same(n.type.shape, tuple(strides), (h * w * c, 1, w * c, c))


def _nchw_view(g: Graph, n: Node) -> bool:
    """`permute(v, NCHW)` of a 4-D value our kernels or a GEMM store row-major (a layer
    norm over the channels of an NHWC value, convnext's, permuted back): channels-last
    memory as it is."""
    if n.op != PERMUTE or len(n.args) != 2 or tuple(n.args[1]) != TO_NCHW or \
            not isinstance(n.args[0], Ref):
        return False
    v = g[n.args[0].name]
    d = lookup(v.op)
    if v.op == PARAMETER:
        return v.kwarg("strides") is None
    return not d.view and d.category in (Category.ELEMENTWISE, Category.REDUCE,
                                         Category.DATA_MOVEMENT, Category.DOT)


def _same(shape, a, b) -> bool:
    """The same strides where they matter (a dim of size 1 has none)."""
    return all(n == 1 or x == y for n, x, y in zip(shape, a, b))


def _copy_to_nhwc(n: Node, x: Ref, types: dict, taken: set, cl: set) -> list[Node]:
    """The nodes that give op `n` its input `x` channels-last: `permute(clone(permute(x,
    NHWC)), NCHW)` (the copy fuses into x's producer), none where torch gets x
    channels-last already (`cl`: a channels-last graph input, a convolution's or a
    pooling's result)."""
    if x.name in cl:
        return []
    tx = types[x.name]
    nhwc = _permuted(tx, TO_NHWC)
    xp = Node(fresh_name(f"{n.name}_in_nhwc", taken), PERMUTE, (x, TO_NHWC), type=nhwc)
    # row-major in torch's semantics too (a plan run through torch, explain's, hands the
    # backward the layouts a compiled run does)
    xh = Node(fresh_name(f"{n.name}_in_copy", taken), CLONE, (Ref(xp.name),),
              (("memory_format", torch.contiguous_format),), type=nhwc)
    xc = Node(fresh_name(f"{n.name}_in_cl", taken), PERMUTE, (Ref(xh.name), TO_NCHW),
              type=tx)
    return [xp, xh, xc]


def _pool_rewritable(n: Node, types: dict, seen: set[str]) -> bool:
    """A 2-D pooling of an f32 4-D value, under the convolutions' conditions."""
    if n.op not in POOLS or not n.args or not isinstance(n.args[0], Ref):
        return False
    tx = types.get(n.args[0].name)
    if not isinstance(tx, TensorType) or tx.rank != 4 or tx.dtype != "f32" or \
            tx.numel == 0:
        return False
    return n.name not in seen


def _pool_channels_last(n: Node, types: dict, taken: set, cl: set) -> list[Node]:
    """Pooling `n` of a channels-last copy of its input: torch's pooling vectorises over
    the channels of a channels-last input and runs NCHW element by element (3x3 max
    pooling of [4, 32, 32, 32], one thread: 825 us NCHW, 77 us channels-last); its result
    is channels-last, which readers read through its strides and a convolution takes as
    it is. The node keeps its name and type."""
    copied = _copy_to_nhwc(n, n.args[0], types, taken, cl)
    cl.add(n.name)
    if not copied:
        return [n]
    return copied + [n.replace(args=(Ref(copied[-1].name),) + tuple(n.args[1:]))]


def _pointwise(n: Node, types: dict) -> bool:
    """A 1x1 convolution without padding, of one group and static sizes: a GEMM (of the
    input's pixels its stride picks)."""
    w = types[n.args[1].name]
    padding, groups = n.args[4], n.args[8]
    sizes = tuple(types[n.args[0].name].shape) + tuple(w.shape) + tuple(n.type.shape)
    if tuple(w.shape[2:]) != (1, 1) or list(padding) != [0, 0] or groups != 1 or \
            not all(type(d) is int for d in sizes):
        return False
    h, wd = types[n.args[0].name].shape[2:]
    return tuple(n.type.shape[2:]) == ((h - 1) // n.args[3][0] + 1, (wd - 1) // n.args[3][1] + 1)


def _as_gemm(n: Node, types: dict, taken: set) -> list[Node]:
    """A pointwise convolution (`_pointwise`) as one GEMM over the channels-last input:

        y = permute(view(addmm(b, view(clone(permute(x, NHWC)), [N*H*W, C]),
                                  permute(view(w, [O, C]), [1, 0])), [N, H, W, O]), NCHW)

    (`mm` without a bias). The GEMM's result is NHWC, as the channels-last convolution's
    is, and the copy of x fuses into x's producer as before. oneDNN runs such a
    convolution as a GEMM too, with more around it: mobilenet_v2's 1x1 convolutions,
    one thread, 724 us as channels-last convolutions, 460 us as GEMMs (resnet's
    bottleneck: 17.8 us, 6.9 us)."""
    x, stride = n.args[0], n.args[3]
    tx = types[x.name]
    batch, channels = tx.shape[:2]
    _, _, height, width = n.type.shape
    nhwc = (batch, height, width, channels)
    node = _maker(n, taken)
    picked = _picked_pixels(node, "in", x, tuple(tx.shape), stride)
    source = Ref(picked[-1].name) if picked else x
    xp, xh = _nhwc_copy(node, "in", source, nhwc)
    return picked + [xp, xh] + _gemm_of_rows(n, Ref(xh.name), channels, node)


def _picked_pixels(node: Callable, stem: str, x: Ref, shape: tuple, stride) -> list[Node]:
    """The pixels of NCHW `x` (of `shape`) a stride picks, every s-th one: a slice per
    strided dim (`<stem>_stride2`, `<stem>_stride3`), the last one the picked values
    (none where the stride is 1), read by the NHWC copy after them."""
    picked, shape = [], list(shape)
    for dim, step in ((2, stride[0]), (3, stride[1])):
        if step != 1:
            full, shape[dim] = shape[dim], (shape[dim] - 1) // step + 1
            picked.append(node(f"{stem}_stride{dim}", "slice.Tensor",
                               (Ref(picked[-1].name) if picked else x, dim, 0, full, step),
                               tuple(shape)))
    return picked


def _nhwc_copy(node: Callable, stem: str, x: Ref, nhwc: tuple) -> tuple[Node, Node]:
    """(permute(x, NHWC), its row-major copy), made by `node` (`_maker`) as
    `<stem>_nhwc` and `<stem>_copy`: the NHWC rows a GEMM reads (row-major in torch's
    semantics too, so that the view of its rows is one; the copy fuses into x's
    producer)."""
    p = node(f"{stem}_nhwc", PERMUTE, (x, TO_NHWC), nhwc)
    return p, node(f"{stem}_copy", CLONE, (Ref(p.name),), nhwc,
                   (("memory_format", torch.contiguous_format),))


def _backward_pointwise(n: Node, types: dict, cl: set, seen_items: set) -> bool:
    """The backward of an unpadded, undilated 1x1 convolution of one group and static
    sizes, whose input gradient the caller does not see: unstrided where torch gets its
    input channels-last (`cl`: the forward saved the NHWC rows its GEMM read,
    `_as_gemm`), or strided, of any input (`_backward_as_gemm` copies the pixels the
    stride picks; torch 2.13's own backward of a strided 1x1 convolution of a
    channels-last input corrupts the heap for some channel counts, tests/fuzz/cnn.py)."""
    if n.op != CONV_BACKWARD or n.kwargs or len(n.args) != 11 or n.args[7]:
        return False
    grad, x, w = n.args[:3]
    if not all(isinstance(a, Ref) for a in (grad, x, w)):
        return False
    tg, tx, tw = (types.get(a.name) for a in (grad, x, w))
    if not all(isinstance(t, TensorType) and t.rank == 4 and t.dtype == "f32"
               and t.numel != 0 and all(type(d) is int for d in t.shape)
               for t in (tg, tx, tw)):
        return False
    stride, padding, dilation, groups = n.args[4], n.args[5], n.args[6], n.args[9]
    if len(stride) != 2 or not all(type(s) is int and s >= 1 for s in stride) or \
            (list(stride) == [1, 1] and x.name not in cl):
        return False
    picked = tuple((d - 1) // s + 1 for d, s in zip(tx.shape[2:], stride))
    return tuple(tw.shape[2:]) == (1, 1) \
        and list(padding) == [0, 0] and list(dilation) == [1, 1] and groups == 1 \
        and tuple(tg.shape[2:]) == picked and (n.name, 0) not in seen_items


def _backward_as_gemm(n: Node, types: dict, taken: set, cl: set
                      ) -> tuple[list[Node], Callable]:
    """A pointwise convolution's backward (`_backward_pointwise`) as GEMMs over NHWC
    rows, the forward's `_as_gemm` transposed:

        g    = view(clone(permute(grad, NHWC)), [N*H*W, O])    (fused into grad's producer)
        x    = view(permute(input, NHWC), [N*H*W, C])          (the saved rows: a view)
        grad_input  = permute(view(mm(g, view(w, [O, C])), [N, H, W, C]), NCHW)
        grad_weight = view(mm(permute(g, [1, 0]), x), [O, C, 1, 1])
        grad_bias   = sum(g, [0])

    torch would run it through its im2col loops, which copy an NCHW gradient to the
    channels-last input's layout (~3 ns an element on one thread). A strided convolution
    (stride s) reads every s-th pixel: its input's rows are a copy of those pixels, and
    grad_input is the GEMM's rows at those pixels and zeros elsewhere (two slice_scatters
    into zeros, NHWC, elementwise in one kernel). Returns the nodes made at the
    backward's place and `getitem -> its nodes` for the three results (each named as
    the getitem it replaces)."""
    grad, x, w = n.args[:3]
    batch, out, height, width = types[grad.name].shape
    channels, full_h, full_w = (types[x.name].shape[d] for d in (1, 2, 3))
    stride = tuple(n.args[4])
    rows = batch * height * width
    node = _maker(n, taken, types[grad.name].dtype)
    gp, gc = _nhwc_copy(node, "grad", grad, (batch, height, width, out))
    g2 = node("grad_rows", VIEW, (Ref(gc.name), (rows, out)), (rows, out))
    made = [gp, gc, g2]

    def scattered(nh: Node) -> list[Node]:
        """The NHWC rows of the picked pixels `nh` placed at their pixels of the full
        (N, H, W, C) input, zeros elsewhere."""
        made, src, shape = [], nh, [batch, height, width, channels]
        for dim, step, size in ((2, stride[1], full_w), (1, stride[0], full_h)):
            if step == 1:
                continue
            shape[dim] = size
            base = node(f"grad_input_zeros{dim}", "new_zeros.default",
                        (Ref(src.name), tuple(shape)), tuple(shape))
            src = node(f"grad_input_scatter{dim}", "slice_scatter.default",
                       (Ref(base.name), Ref(src.name), dim, 0, size, step), tuple(shape))
            made += [base, src]
        return made

    def results(item: Node) -> list[Node]:
        k = item.args[1]
        if k == 0:
            w2 = node("weight_2d", VIEW, (w, (out, channels)), (out, channels))
            mm = node("grad_input_gemm", "mm.default", (Ref(g2.name), Ref(w2.name)),
                      (rows, channels))
            nh = node("grad_input_nhwc", VIEW, (Ref(mm.name), (batch, height, width, channels)),
                      (batch, height, width, channels))
            placed = scattered(nh)
            cl.add(item.name)
            return [w2, mm, nh] + placed + [
                Node(item.name, PERMUTE, (Ref((placed or [nh])[-1].name), TO_NCHW),
                     type=item.type)]
        if k == 1:
            if stride == (1, 1):   # the saved rows, NHWC (`_saved_rows`): a view
                xp = node("input_nhwc", PERMUTE, (x, TO_NHWC),
                          (batch, height, width, channels))
                lead = [xp]
            else:                  # the pixels the stride picks, copied NHWC
                lead = _picked_pixels(node, "input", x, tuple(types[x.name].shape), stride)
                lead += _nhwc_copy(node, "input", Ref(lead[-1].name),
                                   (batch, height, width, channels))
                xp = lead[-1]
            x2 = node("input_rows", VIEW, (Ref(xp.name), (rows, channels)), (rows, channels))
            gt = node("grad_rows_t", PERMUTE, (Ref(g2.name), (1, 0)), (out, rows))
            mm = node("grad_weight_gemm", "mm.default", (Ref(gt.name), Ref(x2.name)),
                      (out, channels))
            return lead + [x2, gt, mm, Node(item.name, VIEW,
                                            (Ref(mm.name), (out, channels, 1, 1)),
                                            type=item.type)]
        return [Node(item.name, "sum.dim_IntList", (Ref(g2.name), (0,)), type=item.type)]
    return made, results


def _saved_rows(n: Node, made: list[Node], types: dict, taken: set) -> Node | None:
    """For pointwise convolution `n` made a GEMM (`made`, `_as_gemm`): the NCHW view of
    the NHWC rows it reads, `permute(copy, NCHW)`, channels-last memory, for a backward
    that reads its input (a graph output of x is given it instead: the copy's producer
    stores x once, and the backward's GEMMs read the rows as they are,
    `_backward_as_gemm`); None where the GEMM reads every s-th pixel (its rows are not x)."""
    if any(m.op == "slice.Tensor" for m in made):
        return None
    copy = next(m for m in made if m.op == CLONE)
    return Node(fresh_name(f"{n.name}_in_cl", taken), PERMUTE, (Ref(copy.name), TO_NCHW),
                type=types[n.args[0].name])


def _patchwise(n: Node, types: dict) -> bool:
    """A convolution whose stride is its kernel's size (k > 1), without padding or
    dilation, of one group and static sizes that the patches tile exactly (a ViT's patch
    embedding, convnext's stem and downsampling): each output pixel reads a patch of its
    own, so it is a GEMM of the patches by the weight."""
    tx, tw = types[n.args[0].name], types[n.args[1].name]
    kernel = tuple(tw.shape[2:])
    sizes = tuple(tx.shape) + tuple(tw.shape)
    return kernel != (1, 1) and tuple(n.args[3]) == kernel and list(n.args[4]) == [0, 0] \
        and list(n.args[5]) == [1, 1] and n.args[8] == 1 \
        and all(type(d) is int for d in sizes) \
        and tx.shape[2] % kernel[0] == 0 and tx.shape[3] % kernel[1] == 0


def _patches_as_gemm(n: Node, types: dict, taken: set) -> list[Node]:
    """A patch-wise convolution (`_patchwise`) as one GEMM: the input's patches copied
    into rows (N*Ho*Wo, C*kh*kw), in the weight's (C, kh, kw) order, times the weight:

        rows = view(clone(permute(view(x, [N, C, Ho, kh, Wo, kw]), [0, 2, 4, 1, 3, 5])))
        y    = permute(view(addmm(b, rows, permute(view(w, [O, C*kh*kw]), [1, 0])),
                            [N, Ho, Wo, O]), NCHW)

    The copy fuses into the input's producer (a kernel) or is one of its own (a graph
    input). One thread: ViT's 8x8 patch embedding 49.5 us as a channels-last convolution,
    19.8 us as such a GEMM with torch's copy; convnext's 2x2 downsampling 43.6, 34.7."""
    x, w = n.args[0], n.args[1]
    tx, tw = types[x.name], types[w.name]
    batch, channels = tx.shape[:2]
    _, _, height, width = n.type.shape
    kh, kw = tw.shape[2:]
    node = _maker(n, taken)
    split = node("patches", VIEW, (x, (batch, channels, height, kh, width, kw)),
                 (batch, channels, height, kh, width, kw))
    order = node("patch_rows", PERMUTE, (Ref(split.name), (0, 2, 4, 1, 3, 5)),
                 (batch, height, width, channels, kh, kw))
    copy = node("in_copy", CLONE, (Ref(order.name),), (batch, height, width, channels, kh, kw),
                (("memory_format", torch.contiguous_format),))
    return [split, order, copy] + _gemm_of_rows(n, Ref(copy.name), channels * kh * kw, node)


def _maker(n: Node, taken: set, dtype: str | None = None) -> Callable:
    """`node(stem, op, args, shape, kwargs=())`: a new node named after convolution `n`,
    of `n`'s dtype (`dtype` where `n` is a tuple)."""
    def node(stem, op, args, shape, kwargs=()):
        return Node(fresh_name(f"{n.name}_{stem}", taken), op, args, kwargs,
                    type=TensorType(tuple(shape), dtype or n.type.dtype))
    return node


def _gemm_of_rows(n: Node, rows_of: Ref, depth: int, node: Callable) -> list[Node]:
    """Convolution `n` as the GEMM of `rows_of` (a row-major (N, Ho, Wo, ...) copy of
    the input, `depth` values a pixel, in the weight's order) by its weight: the rows
    view, the weight as (depth, O), `addmm` (`mm` without a bias), the NHWC view of the
    result and the NCHW permute named as `n` was."""
    w, bias = n.args[1], n.args[2]
    batch, out, height, width = n.type.shape
    rows = batch * height * width
    x2 = node("in_rows", VIEW, (rows_of, (rows, depth)), (rows, depth))
    w2 = node("weight_2d", VIEW, (w, (out, depth)), (out, depth))
    wt = node("weight_t", PERMUTE, (Ref(w2.name), (1, 0)), (depth, out))
    if isinstance(bias, Ref):
        y2 = node("gemm", "addmm.default", (bias, Ref(x2.name), Ref(wt.name)), (rows, out))
    else:
        y2 = node("gemm", "mm.default", (Ref(x2.name), Ref(wt.name)), (rows, out))
    yh = node("nhwc", VIEW, (Ref(y2.name), (batch, height, width, out)),
              (batch, height, width, out))
    y = Node(n.name, PERMUTE, (Ref(yh.name), TO_NCHW), type=n.type)
    return [x2, w2, wt, y2, yh, y]
