"""Strategy `xla`: the rule-based XLA GPU fusion pipeline, as an honest baseline.

After the XLA fusion analysis (§III-B) and XLA's GPU passes: instruction fusion,
fusion merger, multi-output fusion (sibling, then producer-consumer) and
horizontal loop fusion, each a small pass over a partition (node -> group),
listed in order in `plan_xla`. CSE and DCE already ran in canonicalisation
(passes/pipeline.py) before any planner, as XLA runs HloCSE/HloDCE around fusion.

XLA's rules kept: only fusible ops, and every group is legal (`Partition.legality`:
the legality seam, fusion/legality.py, with no target: XLA's rules do not depend on
it, and the target's code generator is asked after planning, by `legalize`);
reductions are fusion roots (elementwise producers fuse into them, "input
fusion"; their results are never read in the same kernel, so softmax takes
three kernels, XLA's known limit); expensive ops are never duplicated; an
operand-and-output limit per fusion; the merger never grows modelled bytes;
siblings need an equal loop shape or an equal reduction (XLA's hero shapes)
and go before producer-consumer fusion, which prefers reduction consumers;
horizontal fusion packs small loop fusions within XLA's batch and size limits.

Differences from XLA, on purpose:
- No code duplication. XLA copies a cheap producer (an add, a broadcast, a
  full_like) into each consumer; a FusionPlan puts each node in exactly one
  group. So a producer with several consumers joins a consumer kernel only when
  all its consumers are in that one kernel; else it stays apart, and
  multi-output fusion may fold it into one consumer (still writing its value).
  The merger merges into one consumer, never into several. The expensive-op
  rule therefore only changes the reason logged.
- Instruction fusion decides per producer once all its users are placed
  (reverse post-order), not per consumer operand: without duplication this is
  where XLA ends after re-visiting a fusion's operands. Joins follow XLA's local
  rules, then each group passes the legality check once; a group that fails is
  rebuilt join by join, each join checked.
- A producer that is a graph output is left to producer-consumer multi-output
  fusion, as in XLA, where the ROOT tuple is one more user.
- Horizontal candidates are, as in XLA, the small loop fusions that feed one
  consumer (an op, or the graph's outputs standing for XLA's ROOT tuple), further
  split by span layer so that no path joins them; they may differ in dtype and op
  count: `packing` runs each component in its own block range, so XLA's
  same-type/same-count rule (a concatenate artefact) does not apply.
"""
from __future__ import annotations

import functools
import heapq
import logging

from ..analysis.cost import group_bytes
from ..ir.graph import CONSTANT, Graph, TensorType, TupleType
from ..ir.ops import Category, category, ops_where
from ..schedule.compose import composition
from ..schedule.propagate import Inconsistent, Space, escaping_values, group_spaces
from .gc_pause import gc_paused
from .legality import Decision, Legality
from .plan import KERNEL, FusionPlan, is_input, node_kind, plan_from_groups

log = logging.getLogger("fusionstitch.fusion")

# XLA's ops too costly to recompute: a flag of the op table (ir/ops.py)
EXPENSIVE_OPS = ops_where("expensive")
# XLA GPU kMaxOperandsAndOutputsPerFusion (gpu_fusible.h): a kernel with more
# parameters than this spends registers and occupancy on addresses.
MAX_OPERANDS_AND_OUTPUTS = 64
# XLA horizontal fusion kMaxFusionBatchSize for differently shaped (sliced) kernels:
# past 32 fused kernels the launch saving is small next to the code-size cost.
HORIZONTAL_MAX_KERNELS = 32
# XLA kShapeThreshold for sliced horizontal fusion: a kernel writing more elements
# than this is bandwidth-bound, not launch-bound, so packing it buys nothing.
HORIZONTAL_MAX_OUTPUT_ELEMENTS = 128 * 2048
# XLA kInstrCountThreshold for sliced horizontal fusion: longer kernels are
# compute-bound rather than launch-bound.
HORIZONTAL_MAX_OPS = 30
# XLA kMaxCudaParamSize: 4000 bytes of CUDA kernel parameters, 8 bytes a pointer.
HORIZONTAL_MAX_PARAMS = 4000 // 8


@gc_paused
def plan_xla(graph: Graph, target, traced: bool = True,
             fuel: int | None = None) -> FusionPlan:
    """Plan `graph` with XLA's GPU fusion passes (whose limits do not depend on `target`,
    a Target or its name). `traced=False`: no plan trace, no schedules and no
    composition labels: the stitch planner's baseline reads only the groups, and tracing
    every declined pair costs seconds on long graphs. `fuel`: at most this many
    fusions (None: no limit)."""
    from .trace import PlanTrace
    part = Partition(graph, fuel=fuel,
                     trace=PlanTrace("xla", str(target)) if traced else None)
    instruction_fusion(part)   # vertical: each producer into the one kernel of all its users
    fusion_merger(part)        # producer kernels into their only consumer, if bytes don't grow
    multi_output_fusion(part)  # siblings share input reads; producers fold into a consumer
    horizontal_fusion(part)    # small independent kernels share one launch
    return plan_from_groups(graph, part.groups(), "xla", trace=part.trace,
                            compose=composition, scheduled=traced)


def _numel(t: TensorType | TupleType) -> int:
    return t.numel if isinstance(t, TensorType) else max(
        (e.numel for e in t.elements if e is not None), default=0)


def _reject(part: "Partition", pass_name: str, nodes, what, d: Decision) -> None:
    """Record a rejected fusion of `nodes` in the plan trace and log it with its reason;
    `what` is a string or a callable making one. (Declined sibling pairs, by far the
    most numerous, are recorded by `_fuse_siblings` itself.)"""
    if part.trace is not None:
        part.trace.record(f"xla:{pass_name}", nodes,
                          f"xla's {pass_name.replace('_', ' ')} declined: {d.reason}")
    if log.isEnabledFor(logging.DEBUG):
        log.debug("xla %s: %s not fused: %s", pass_name, what() if callable(what) else what,
                  d.reason)


class Partition:
    """Disjoint groups of a graph's ops (parameters and constants are in none). A group's
    id is one member's position; iteration is over lists or sorted ids: deterministic."""

    def __init__(self, graph: Graph, fuel: int | None = None, trace=None):
        self.graph = graph
        self.trace = trace   # a trace.PlanTrace: rejections are recorded there
        # XLA's legality: ops, cycle, schedule (no GEMM in a kernel, no staged program)
        self.legality = Legality(graph, by_structure=False)
        self.reach = self.legality.reach
        self.index = self.reach.index
        self.users = graph.users
        self.outputs = {r.name for r in graph.output_refs}
        self.reductions = {n.name for n in graph.nodes if category(n.op) == Category.REDUCE}
        self.group_of: dict[str, int] = {}
        self.members: dict[int, list[str]] = {}
        self.root: dict[int, int] = {}  # position of a group's last node (XLA: its root)
        for n in graph.nodes:
            if not is_input(n):
                self._single(n.name)
        self.fuel = fuel
        self._kernel: dict[int, bool] = {}
        self._hero: dict[int, Space | None] = {}
        self._succ: dict[int, list[int]] = {}
        self._frozen: dict[int, tuple[int, frozenset]] = {}

    def frozen(self, gid: int) -> frozenset:
        """The group's members as a frozenset, shared until the group grows (members
        only grow, by merges, so their count tells a stale copy)."""
        members = self.members[gid]
        got = self._frozen.get(gid)
        if got is None or got[0] != len(members):
            got = self._frozen[gid] = (len(members), frozenset(members))
        return got[1]

    def _single(self, name: str) -> None:
        i = self.index[name]
        self.group_of[name], self.members[i], self.root[i] = i, [name], i

    def groups(self) -> list[list[str]]:
        return [self.members[g] for g in sorted(self.members)]

    def root_name(self, gid: int) -> str:
        return self.graph.nodes[self.root[gid]].name

    def user_groups(self, gid: int) -> list[int]:
        """Groups reading a value of `gid`, in order of first use (cached until a merge)."""
        if gid not in self._succ:
            seen = dict.fromkeys(self.group_of[u] for n in self.members[gid]
                                 for u in self.users[n])
            seen.pop(gid, None)
            self._succ[gid] = list(seen)
        return self._succ[gid]

    def is_kernel(self, gid: int) -> bool:
        """A generated kernel: every member fusible, at least one not free."""
        if gid not in self._kernel:
            names, fusible = self.members[gid], self.legality.fusible
            self._kernel[gid] = (all(n in fusible for n in names)
                                 and any(node_kind(self.graph[n]) == KERNEL for n in names))
        return self._kernel[gid]

    def hero(self, gid: int) -> Space | None:
        """The space standing for the group in sibling fusion (its reduction's if it has
        one), or None when its components do not share one."""
        if gid not in self._hero:
            try:
                spaces = group_spaces(self.graph, self.members[gid])
            except Inconsistent:
                spaces = []
            hero = next((s for s in spaces if s.kind != "flat"), spaces[0] if spaces else None)
            self._hero[gid] = hero if all(_compatible(hero, s) for s in spaces) else None
        return self._hero[gid]

    def io(self, names: list[str]) -> tuple[set[str], int]:
        """(values read from outside, number of values written) of a group of nodes."""
        inside = set(names)
        reads = {i for n in names for i in self.graph[n].inputs if i not in inside}
        return reads, len(escaping_values(self.graph, names))

    def legal(self, names: list[str]) -> Decision:
        """XLA's fusion rules for one group, then legality's (`Legality.group`)."""
        inside = set(names)
        for n in names:
            if n in self.reductions and any(u in inside for u in self.users[n]):
                return Decision.forbid(f"the result of reduction %{n} would be read inside its "
                                       "own kernel; XLA keeps reductions as fusion roots")
        d = _operand_limit(*self.io(names))
        return d and self.legality.group(names)

    def spend(self, d: Decision) -> Decision:
        """A legal fusion goes ahead while fuel lasts (one unit per fusion)."""
        if d and self.fuel is not None:
            if self.fuel <= 0:
                return Decision.forbid("out of fuel")
            self.fuel -= 1
        return d

    def merge(self, a: int, b: int) -> int:
        """Union of groups a and b; returns the id that survives."""
        if (len(self.members[a]), b) < (len(self.members[b]), a):
            a, b = b, a
        for n in self.members[b]:
            self.group_of[n] = a
        self.members[a].extend(self.members.pop(b))
        self.root[a] = max(self.root[a], self.root.pop(b))
        self._forget(a, b)
        return a

    def split(self, gid: int) -> list[str]:
        """Undo a group into singletons (fuel spent on it comes back); returns its nodes."""
        names = self.members.pop(gid)
        del self.root[gid]
        for n in names:
            self._single(n)
        self.fuel = None if self.fuel is None else self.fuel + len(names) - 1
        self._forget(gid, *(self.index[n] for n in names))
        return names

    def _forget(self, *gids: int) -> None:
        for g in gids:  # the group's caches, and its producers' lists of user groups
            for cache in (self._kernel, self._hero, self._succ):
                cache.pop(g, None)
            for n in self.members.get(g, ()):
                for i in self.graph[n].inputs:
                    self._succ.pop(self.group_of.get(i), None)


# --- 1. instruction fusion --------------------------------------------------------------

def instruction_fusion(part: Partition) -> None:
    """Reverse post-order: a producer joins the group that holds all of its users.

    Visiting producers after all their users means those users' groups are final,
    and a join adds a node before every member, so no cycle can form. Joins use
    XLA's local rules; each group then passes `Partition.legal` once, and a group that
    does not is rebuilt join by join with every join checked.
    """
    graph = part.graph
    _join_producers(part, graph.nodes, checked=False)
    for gid in sorted(g for g, names in part.members.items() if len(names) > 1):
        d = part.legal(part.members[gid])
        if not d:
            _reject(part, "instruction_fusion", part.members[gid],
                    lambda: f"group of %{part.root_name(gid)}", d)
            names = sorted(part.split(gid), key=part.index.__getitem__)
            _join_producers(part, [graph[n] for n in names], checked=True)


def _join_producers(part: Partition, nodes, checked: bool) -> None:
    graph = part.graph
    io: dict[int, tuple[set[str], int]] = {}  # a group's outside reads and its writes
    for node in reversed(nodes):
        name = node.name
        if is_input(node) or not part.users[name]:
            continue
        d = _producer_decision(part, name)
        if d:
            target = part.group_of[part.users[name][0]]
            if checked:
                d = part.legal(part.members[target] + [name])
            else:
                d = part.legality.op(name) and part.legality.op(part.root_name(target))
                if d:  # the producer reads nothing inside and writes nothing outside
                    reads, writes = io.get(target) or part.io(part.members[target])
                    reads = (reads - {name}) | set(node.inputs)
                    d = _operand_limit(reads, writes)
            d = part.spend(d)
            if d:
                io.pop(target, None)
                survivor = part.merge(target, part.group_of[name])
                if not checked:
                    io[survivor] = (reads, writes)
                continue
        _reject(part, "instruction_fusion", [name, *part.users[name]],
                lambda: f"%{name} ({node.op}) into its consumers", d)


def _operand_limit(reads: set[str], writes: int) -> Decision:
    if len(reads) + writes > MAX_OPERANDS_AND_OUTPUTS:
        return Decision.forbid(f"{len(reads)} operands + {writes} outputs exceed XLA's limit "
                               f"of {MAX_OPERANDS_AND_OUTPUTS} per fusion")
    return Decision.allow()


def _producer_decision(part: Partition, name: str) -> Decision:
    if name in part.outputs:
        return Decision.forbid("it is a graph output; left to multi-output fusion")
    if name in part.reductions:
        return Decision.forbid("a reduction's result is not consumed inside the same loop "
                               "fusion (reductions are fusion roots)")
    groups = dict.fromkeys(part.group_of[u] for u in part.users[name])
    if len(groups) > 1 and part.graph[name].op in EXPENSIVE_OPS:
        return Decision.forbid(f"expensive op read by {len(groups)} kernels: not duplicated")
    if len(groups) > 1:
        return Decision.forbid(f"read by {len(groups)} kernels: XLA would duplicate this "
                               "cheap op into each; a plan puts a node in one kernel")
    return Decision.allow()


# --- 2. fusion merger -------------------------------------------------------------------

def fusion_merger(part: Partition) -> None:
    """Post-order: merge a producer group into its only consumer group if bytes don't grow."""
    graph = part.graph
    for gid in sorted(part.members, key=part.root.__getitem__):
        names = part.members.get(gid, ())
        consumers = part.user_groups(gid) if names else ()
        if len(consumers) != 1 or any(n in part.outputs for n in names):
            continue  # XLA would merge into every consumer, duplicating it; outputs: MOF's
        into = part.members[consumers[0]]
        d = part.legal(into + names)
        if d and group_bytes(graph, into + names) > (group_bytes(graph, names)
                                                     + group_bytes(graph, into)):
            d = Decision.forbid("merging would increase the bytes moved")
        d = part.spend(d)
        if d:
            part.merge(consumers[0], gid)
        else:
            _reject(part, "fusion_merger", into + names,
                    lambda: f"group of %{part.root_name(gid)} into its consumer", d)


# --- 3. multi-output fusion -------------------------------------------------------------

class GroupOrder:
    """A topological order of the groups, kept valid across merges: merging a and b
    (a first, no path a -> x -> ... -> b through another group) moves the groups a
    reaches before b after the merged one (Pearce-Kelly), so searches stay bounded."""

    def __init__(self, part: Partition):
        self.part = part
        first = {g: min(part.index[n] for n in names) for g, names in part.members.items()}
        indeg = dict.fromkeys(sorted(first), 0)
        for g in indeg:
            for s in part.user_groups(g):
                indeg[s] += 1
        ready = [(first[g], g) for g, k in indeg.items() if k == 0]
        heapq.heapify(ready)
        self.order: list[int | None] = []
        while ready:  # Kahn's algorithm, smallest first node first
            _, g = heapq.heappop(ready)
            self.order.append(g)
            for s in part.user_groups(g):
                indeg[s] -= 1
                if indeg[s] == 0:
                    heapq.heappush(ready, (first[s], s))
        if len(self.order) != len(indeg):
            raise AssertionError("xla: groups form a cycle before multi-output fusion")
        self.pos = {g: i for i, g in enumerate(self.order)}

    def path_through_others(self, a: int, b: int) -> tuple[bool, set[int]]:
        """(a path a -> x -> ... -> b exists, the groups a reaches before b); best-first
        towards b (latest position first), so a path is found without a full sweep."""
        limit = self.pos[b]
        seen = {s for s in self.part.user_groups(a) if s != b and self.pos[s] < limit}
        heap = [(-self.pos[s], s) for s in seen]
        heapq.heapify(heap)
        while heap:
            _, x = heapq.heappop(heap)
            for s in self.part.user_groups(x):
                if s == b:
                    return True, seen
                if self.pos[s] < limit and s not in seen:
                    seen.add(s)
                    heapq.heappush(heap, (-self.pos[s], s))
        return False, seen

    def merge(self, a: int, b: int) -> int:
        """Merge groups a and b, which must have no path between them through others."""
        if self.pos[a] > self.pos[b]:
            a, b = b, a
        _, reached = self.path_through_others(a, b)
        lo, hi = self.pos.pop(a), self.pos.pop(b)
        survivor = self.part.merge(a, b)
        if not reached:  # nothing in between depends on a: take b's place
            self.order[lo], self.order[hi], self.pos[survivor] = None, survivor, hi
            return survivor
        window = [x for x in self.order[lo:hi + 1] if x not in (None, a, b)]
        new = [x for x in window if x not in reached] + [survivor]
        new += [x for x in window if x in reached] + [None] * (hi - lo - len(window))
        self.order[lo:hi + 1] = new
        self.pos.update((x, i) for i, x in enumerate(new, lo) if x is not None)
        return survivor

    def sibling_reach(self, sibs: list[int]) -> list[int]:
        """For each sibling, a bitset of the siblings it reaches (one sweep of their window)."""
        bit = {g: 1 << k for k, g in enumerate(sibs)}
        hi = max(self.pos[g] for g in sibs)
        reach: dict[int, int] = {}
        for x in reversed(self.order[min(self.pos[g] for g in sibs):hi + 1]):
            if x is not None:
                r = 0
                for s in self.part.user_groups(x):
                    if self.pos[s] <= hi:
                        r |= reach[s] | bit.get(s, 0)
                reach[x] = r
        return [reach[g] for g in sibs]


def multi_output_fusion(part: Partition) -> None:
    """Reverse post-order over values: sibling fusion of their readers, then the value's
    group as producer into one consumer (XLA's order)."""
    order = GroupOrder(part)
    for node in reversed(part.graph.nodes):
        _fuse_siblings(part, order, node.name)
        if not is_input(node) and part.root[part.group_of[node.name]] == part.index[node.name]:
            _fuse_producer_consumer(part, order, part.group_of[node.name])


def _compatible(a: Space | None, b: Space | None) -> bool:
    """XLA's ShapesCompatibleForMultiOutputFusion: equal loop shape or equal reduction, or
    a loop fusion over a reduction's input shape."""
    return a is not None and b is not None and (
        a == b or ("flat" in (a.kind, b.kind) and a.numel == b.numel))


def _fuse_siblings(part: Partition, order: GroupOrder, parent: str) -> None:
    if len(part.users[parent]) < 2:
        return
    node = part.graph[parent]
    if node.op == CONSTANT and _numel(node.type) <= 1:
        return  # XLA's IsProfitableOperand: a scalar constant costs no memory read
    own = part.group_of.get(parent)
    sibs = [g for g in dict.fromkeys(part.group_of[u] for u in part.users[parent])
            if g != own and part.is_kernel(g)]
    if len(sibs) < 2:
        return
    sibs.sort(key=lambda g: len(part.members[g]) == 1)  # XLA: fusions before single ops
    if len(sibs) == 2:  # one question: a targeted search beats sweeping the window
        a, b = sorted(sibs, key=order.pos.__getitem__)
        reach = [(b in part.user_groups(a) or order.path_through_others(a, b)[0]) << 1, 0]
    else:
        reach = order.sibling_reach(sibs)
    alive = [True] * len(sibs)
    # ~10^5 pairs are declined on a long LSTM: a declined pair costs a tuple in the
    # trace (its reason made when read) and nothing when untraced
    trace = part.trace
    debug = log.isEnabledFor(logging.DEBUG)
    frozen = [None] * len(sibs)    # sibs[k]'s members, frozen while it does not grow
    for i in range(len(sibs)):
        for j in range(i + 1, len(sibs)):
            if not (alive[i] and alive[j]):
                continue
            a, b = sibs[i], sibs[j]
            if (reach[i] >> j | reach[j] >> i) & 1:
                d = _SIBLING_PATH
            elif not _compatible(part.hero(a), part.hero(b)):
                d = None   # the reason names both heroes: made only when read
            else:
                d = part.spend(part.legal(part.members[a] + part.members[b]))
                if d:
                    sibs[i] = order.merge(a, b)
                    frozen[i] = None
                    alive[j] = False
                    # i stands for both now: whoever reached j reaches i and all i reaches
                    reach[i] |= reach[j]
                    for k in range(len(sibs)):
                        if alive[k] and k != i and (reach[k] >> i | reach[k] >> j) & 1:
                            reach[k] |= reach[i] | (1 << i)
                    continue
            if trace is None and not debug:
                continue
            why = d.reason if d is not None else _hero_reason(part.hero(a), part.hero(b))
            if trace is not None:
                if frozen[i] is None:
                    frozen[i] = part.frozen(a)
                if frozen[j] is None:
                    frozen[j] = part.frozen(b)
                trace.record_parts("xla:multi_output_fusion", (frozen[i], frozen[j]),
                                   _MOF_DECLINED + why if d is not None else
                                   functools.partial(_declined_heroes, why))
            if debug:
                log.debug("xla multi_output_fusion: siblings %%%s and %%%s (readers of %%%s) "
                          "not fused: %s", part.root_name(a), part.root_name(b), parent,
                          why() if callable(why) else why)


_MOF_DECLINED = "xla's multi output fusion declined: "
_SIBLING_PATH = Decision.forbid("a path runs from one sibling to the other (a cycle, or "
                                "producer-consumer fusion)")


def _hero_reason(ha: Space | None, hb: Space | None):
    """The reason two siblings' heroes are not compatible (a callable: formatting spaces
    costs, and most declined pairs are never read)."""
    return functools.partial(_format_heroes, ha, hb)


def _format_heroes(ha, hb) -> str:
    return (f"hero spaces differ ({ha} vs {hb}): XLA needs equal loop shapes or equal "
            "reductions")


def _declined_heroes(why) -> str:
    return _MOF_DECLINED + why()


def _fuse_producer_consumer(part: Partition, order: GroupOrder, producer: int) -> None:
    if not part.is_kernel(producer):
        return
    consumers = [c for c in part.user_groups(producer) if part.is_kernel(c)]
    # XLA's SelectPreferredFusionCandidate: reductions first, then the first user
    consumers.sort(key=lambda c: not any(n in part.reductions for n in part.members[c]))
    for c in consumers:
        if order.path_through_others(producer, c)[0]:
            d = Decision.forbid("another path runs from the producer to the consumer "
                                "(fusing would create a cycle)")
        else:
            d = part.spend(part.legal(part.members[c] + part.members[producer]))
        if d:
            order.merge(producer, c)
            return
        _reject(part, "multi_output_fusion", part.members[c] + part.members[producer],
                lambda: f"producer %{part.root_name(producer)} into "
                f"consumer %{part.root_name(c)}", d)


# --- 4. horizontal fusion ---------------------------------------------------------------

def horizontal_fusion(part: Partition) -> None:
    """XLA's horizontal loop fusion: small loop fusions feeding one consumer (an op, or
    the graph's outputs: XLA's ROOT tuple) share a launch. A consumer's candidates are
    split by span layer of the kernel graph, so no path joins the kernels packed."""
    order = [g for g in GroupOrder(part).order if g is not None]
    span: dict[int, int] = {}
    for g in reversed(order):
        span[g] = 1 + max((span[s] for s in part.user_groups(g)), default=-1)
    ok: set[int] = set()
    for g in sorted(order):  # ids are node positions: graph order
        d = _horizontal_candidate(part, g)
        if d:
            ok.add(g)
        elif part.is_kernel(g):
            _reject(part, "horizontal_fusion", part.members[g],
                    lambda: f"kernel of %{part.root_name(g)}", d)
    consumers = [node.inputs for node in part.graph.nodes if not is_input(node)]
    consumers.append(tuple(r.name for r in part.graph.output_refs))  # the ROOT tuple
    for operands in consumers:
        # groups may have merged since the ids were taken: read current owners
        feeding = sorted({part.group_of[i] for i in operands if i in part.group_of} & ok)
        if len(feeding) < 2:
            continue
        layers: dict[int, list[int]] = {}
        for g in feeding:
            layers.setdefault(span[g], []).append(g)
        for layer in sorted(layers, reverse=True):
            batch, params = [], 0
            for g in layers[layer]:
                reads, writes = part.io(part.members[g])
                if batch and (len(batch) == HORIZONTAL_MAX_KERNELS
                              or params + len(reads) + writes > HORIZONTAL_MAX_PARAMS):
                    _pack_once(part, batch, ok)
                    batch, params = [], 0
                batch.append(g)
                params += len(reads) + writes
            _pack_once(part, batch, ok)


def _pack_once(part: Partition, batch: list[int], ok: set[int]) -> None:
    """Pack a batch of two or more; XLA fuses each kernel horizontally once."""
    if len(batch) > 1:
        ok.difference_update(batch)
        _pack(part, batch)


def _horizontal_candidate(part: Partition, g: int) -> Decision:
    names = part.members[g]
    if not part.is_kernel(g):
        return Decision.forbid("not a generated kernel")
    if any(n in part.reductions for n in names):
        return Decision.forbid("horizontal loop fusion takes loop fusions, not reductions")
    if len(names) > HORIZONTAL_MAX_OPS:
        return Decision.forbid(f"{len(names)} ops > {HORIZONTAL_MAX_OPS}: not launch-bound")
    out = max((_numel(part.graph[n].type) for n in escaping_values(part.graph, names)),
              default=0)
    if out > HORIZONTAL_MAX_OUTPUT_ELEMENTS:
        return Decision.forbid(f"writes {out} elements > {HORIZONTAL_MAX_OUTPUT_ELEMENTS}: "
                               "bandwidth-bound, not launch-bound")
    return Decision.allow()


def _pack(part: Partition, batch: list[int]) -> None:
    if len(batch) < 2:
        return
    # no path joins kernels of one span layer (an edge lowers the span), so no cycle can
    # close: a graph-wide search for one would cost O(n)
    d = part.spend(part.legality.group([n for g in batch for n in part.members[g]],
                                       acyclic=True))
    if not d:
        _reject(part, "horizontal_fusion", [n for g in batch for n in part.members[g]],
                f"{len(batch)} kernels of one span layer", d)
        return
    survivor = batch[0]
    for g in batch[1:]:
        survivor = part.merge(survivor, g)
