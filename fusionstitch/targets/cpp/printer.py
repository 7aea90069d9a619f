"""The C++ (OpenMP) target: prints a `Kernel` as an extern "C" function; library.py
compiles all kernels of one graph into one shared library.

    cpp_source(kernel)      readable C++ of one kernel (the function only)
    library.compile_cpu(kernels)  one g++ run per graph (cached on disk), one callable
                            per kernel

The helpers every library starts with are `preamble.PREAMBLE`; compiling, the
disk cache and loading are `build.py`; the loops of flat components `flat.py`,
of reduce components `reduce.py` (mixins of the printer here).

A compiled callable `run(buffers, syms)` takes the tensors of `Kernel.buffers` in
order and the integer values of `Kernel.syms` in order; it calls the C function
`fs_<digest>(in0, ..., out0, ..., sym0, ...)` through ctypes, by way of
`fs_<digest>_packed(args)`, which reads them from one int64 array (pointers from
`Tensor.data_ptr()`, then the syms): ctypes converts each argument of a call in
Python. Every component runs in turn; the x-loop of
each is `#pragma omp parallel for` (serial below PARALLEL_GRAIN iterations, or
iterations times rnumel, where waking the threads costs more than it saves). The
OpenMP runtime is the one torch loaded (same soname), so `torch.set_num_threads`
applies to these kernels too.

How the loops are laid out (all of it follows from the IR):

* Constant sizes: a sym whose binding is a constant (`kernel.constant_syms`: the sizes
  of a graph of static shapes; not strides, not a symbolic program's sizes) keeps its
  place in the signature, unnamed (`int64_t /* ks1 = 16 */`), and the body declares
  it `constexpr int64_t ks1 = 16;`: the index arithmetic is printed over the sym as
  for any other, and the compiler folds it (a 64-bit division by a run-time size
  costs tens of cycles per element, by a constant a multiplication; a batch-norm
  kernel ran 1.7x faster). Sources then differ per shape: kernels of one structure at
  two shapes are two functions.

* Dense versions: when some load/store index would be simpler for the expected
  strides (a stride sym that `Kernel.bindings` binds to a buffer dimension is
  expected row-major for the buffer's shape, another sym its `Sym.value`): a
  complete unravelling `sum_k Digit(b, S, k) * stride_k` with row-major strides
  becomes `b`, and a coefficient expected to be 1 disappears, the component is
  printed twice:
  `if (<those strides hold at launch>) { simple version } else { general version }`.
  So contiguous inputs read `in0[x]` instead of a division and a modulo per
  dimension, and reduction loops over r read unit strides and vectorise.
* Merged digits (`index.merge_plan`): adjacent dims of an unravelled x or r that every
  index of a component version reads as one (row-major in each, or in none: a [A, 1, 1]
  operand against [A, B, C] ones) are one dim of their product, proven symbolically
  (no run-time test): rows of B * C below, not of C with a division per row.
* One unravelling of x (`refine.py`): a component that reads x over several static
  unravellings nested in one another (a view after a transposition: digits of x over
  (8, 64, 512) and (512, 8, 64)) reads it over their common refinement (8, 64, 8, 64),
  so that its rows run along the contiguous dim without a division per element.
* Flat components whose x is unravelled over sizes S (S[-1] expected >= MIN_ROW, or
  MIN_COSTLY_ROW when the loop calls a math function)
  loop over `x = xo * S[-1] + xi`: the last digit of x is `xi` itself and the others
  digits of xo, so broadcast operands (`in1[xi]`) cost no division, and the inner
  loop is `#pragma omp simd`; the parallel loop runs over blocks of at most
  ROW_BLOCK elements of a row.
* Flat loops in rows where a load or store runs across the rows (unit stride along
  xo's last digit, a larger one along xi: an NHWC value read as NCHW, a matrix read
  transposed) run in tiles of TILE_ROWS rows by TILE_COLS elements (`flat.tiled`): the
  cache lines such an access touches are read again by the tile's next rows while in
  L1, where a whole row went by first (3.6x Inductor's time on a batch norm of an
  NHWC convolution's output, 1.0x tiled). An input that is a view of a graph input
  (`Buffer.expected`, codegen/view_strides.py) has the view's strides expected.
* Reduction loops over r get `#pragma omp simd reduction(...)` when that is legal
  (below); flat loops get `simd` when their stores are (index moves with x, reads
  no loaded value).

Choices this target makes (where the IR leaves room):

* Index arithmetic is int64_t whatever `Kernel.index_dtype` says; `Index` values
  are int64_t variables, and `Value` leaves narrower than i64 are widened first.
* Half types (f16, bf16): buffers are `uint16_t` bit patterns. A `Load` of a half
  buffer yields a `float` at once; a variable of half dtype is a `float` whose value
  is representable in that half type. So `cast` half -> f32 is a no-op, `cast` to a
  half type rounds (round to nearest even, through float as c10 does; NaN, Inf and
  subnormals handled: the FP16-library algorithm that c10::Half uses), and a `Store`
  to a half buffer writes the bits (exact, the value being representable already).
  An op other than `cast` whose dtype is a half type (the IR should not produce one)
  computes in float and rounds its result; a half `Reduce` accumulates in float.
  bf16: float -> bf16 rounds to nearest even, NaN becomes 0x7FC0 (c10's scalar path).
* Integer add/sub/mul/neg/sum/prod wrap around (computed in unsigned types) as
  torch's do; signed overflow is never undefined behaviour here.
* Integer floordiv/remainder/fmod by zero record the error in the kernel's last
  argument, `int64_t* fs_error` (only kernels that divide integers or check indices
  have it), give 0 and go on (a kernel must not trap with SIGFPE); the runner then
  raises eager's RuntimeError("ZeroDivisionError"). x // -1 of the most negative value
  wraps. `check_index` out of range records its own code there and gives index 0; the
  runner raises IndexError naming the kernel's `checks`.
* floordiv of floats is c10's `div_floor_floating` (so 1.0 // 0.1 == 9, as torch);
  remainder of floats is fmod corrected to the sign of the divisor.
* float -> u8/i8/i16 casts go through int64 (torch: 300.7 -> u8 gives 44).
* lshift/rshift by a negative amount or >= the bit width follow torch (0, or the
  sign fill for rshift).
* Math functions (exp, log, sin, erf, pow, ...) call glibc's libmvec where it has
  them (`vecmath.py`: within 4 ulp; every call, vector or scalar, through one variant,
  so a value computed twice has the same bits).
  Without libmvec, `exp`, `tanh` and `erf` of f32 (and half) values are branch-free
  functions of the preamble so that loops calling them vectorise: exp is Sleef's
  expf_u10 algorithm (~1 ulp, like torch's vectorised exp), tanh Cephes' tanhf
  (~2 ulp), erf a polynomial / Numerical-Recipes-style erfc form fitted for float
  (~2.5 ulp); other functions are the C library's (GCC builtins; scalar calls).
  `sigmoid` is 1 / (1 + exp(-x)). The source includes no <cmath>: it would double
  the compile time.
* `maximum`/`minimum` and max/min reductions propagate NaN. A reduction loop is
  `omp simd` when every reduction is sum, prod, max or min over a non-bool type
  (max/min reduce the non-NaN values and a separate "saw a NaN" flag, so reordering
  keeps NaN semantics) and every store in the loop writes an index that moves with r
  and reads no loaded value. Float sums are then summed in SIMD lanes (a different
  order than a serial loop, as torch's vectorised sums).
* Reductions of b8 values: sum/max are `or`, prod/min are `and`.
* Kernels assume their output buffers overlap neither the inputs nor each other
  (pointers are `__restrict__`), except the buffers in `Kernel.may_alias` (an output
  stored into the input it updates; each element is read before it is written).
* In a library, a kernel's C function is `fs_<digest of its source>`: kernels with
  the same source (an unrolled RNN's steps) share one function, and the prefix keeps
  them apart from C library symbols such as `exp`; `cpp_source` alone names it
  `fs_<k.name>`. A variable,
  buffer or sym name that is not a C identifier (or clashes with a keyword or a name
  the printer uses) is renamed in the source.

Compiler: `g++`, or the command in the environment variable FUSIONSTITCH_CXX
(split like a shell would, e.g. "ccache g++" or "clang++"). Flags: FLAGS, i.e.
`-O3 -march=native -fopenmp -shared -fPIC -std=c++17 -ffp-contract=off
-fno-trapping-math -fno-math-errno`. No -ffast-math: NaN, Inf and signed zeros keep
their IEEE semantics. -fno-trapping-math only lets GCC if-convert floating-point
selects (it assumes nobody reads the FP exception flags), without which loops
calling exp do not vectorise; -fno-math-errno lets sqrt be an instruction (nobody
reads errno). -march=native doubles the speed of vectorised loops (AVX2 against
SSE2, measured on softmax, mean and exp*mul kernels); the cache key holds what it
resolves to (`-Q --help=target`), so a cache folder shared by different machines
gives each its own library. The library is cached under `cache_dir("cpu")` as
`<digest>.so` (and the source next to it as `<digest>.cpp`), the digest covering
the source, the flags, the compiler's version line and that -march value; it is
written to a temporary file and renamed into place, so parallel processes share
the cache, and sealed with a checksum that is checked before it is loaded
(`build.py`). A failure raises a `KernelBuildError` naming its cause:
`CompilerUnavailable` (no working compiler), `CompileFailed` (the compiler rejected
the source) or `CannotPrint` (an IR the printer does not know); the caller runs the
kernel groups through torch and counts them as fallbacks. Counters: `kernels_compiled`
(kernels in libraries actually compiled) and `cache_hits` (kernels found in the
in-process table or on disk).
"""
from __future__ import annotations

import re

from . import vecmath
from ...codegen import expr as E
# (the build's errors named here too: cpu.CannotPrint, cpu.KernelBuildError, ...)
from .build import (ERROR_ARG, CannotPrint, CompileFailed,  # noqa: F401
                    CompilerUnavailable, KernelBuildError, clear_memory_cache)
from .refine import refine_digits, refine_plan
from .index import (expected_values, fixed_strides, merge_digits, merge_plan, rename_expr,
                    specialize, split_rows, static_value)
from .dtypes import (CTYPE, FLOATS, HALVES, INTS, STORAGE, WIDE_UNSIGNED, ctype,
                     reduce_step)
from ...codegen.kernel import (
    BINARY,
    COMPARISONS,
    TERNARY,
    UNARY,
    Component,
    Constant,
    Index,
    Kernel,
    Load,
    Op,
    Reduce,
    Stmt,
    Store,
    bodies,
    constant_syms,
)
# the flat loops' thresholds, named here too (cpu.ROW_BLOCK)
from .flat import (COSTLY_OPS, MIN_COSTLY_ROW, MIN_ROW, OMP_THREADS,  # noqa: F401
                   PARALLEL_GRAIN, ROW_BLOCK, FlatLoops, serial_pragma)
from .columns import COLUMN_BLOCK
from .reduce import ReduceLoops
from .scatter import ScatterLoops
from .rowbuf import RowPlan
from .names import Names, literal


def _is_float(dtype: str) -> bool:
    return dtype in FLOATS


# Kernels computing &, | or selects of bools are compiled without GCC's partial
# redundancy elimination and dominator optimisations: both turn `alive & (x <= c)`
# after a `where(alive, ...)` into selects between comparison masks of different
# widths, which the vectoriser rejects ("relevant stmt not supported"), and the whole
# loop stays scalar (cartpole: 54 -> 20 ms single-threaded with them off); nor with
# code sinking, which moves a libmvec call feeding only one side of a select into a
# branch, where if-conversion cannot follow (so also for kernels with a select and a
# libmvec call); nor with jump threading, which duplicates the blocks of the selects
# until the loop has no form the vectoriser takes ("number of iterations cannot be
# computed": a batched simulation's step over 65536 environments ran scalar, 18.5 ->
# 1.3 ms; tests/codegen/test_cpu_loops_vectorise.py). Off for every kernel they cost up
# to 2x elsewhere (transformer_encoder's kernels 4.1 -> 8.2 ms); jump threading alone
# off for every kernel measured no different on the zoo and the models.
BOOL_LOGIC_ATTRIBUTE = ('__attribute__((optimize("no-tree-pre", "no-tree-dominator-opts", '
                        '"no-tree-sink", "no-thread-jumps")))')

# a kernel that checks indices keeps "some index was out of range" in one variable,
# `fs_bad`, that every parallel region and SIMD loop reduces with | (a worksharing loop
# inside a region shares the region's copy), and records the error once at its end
BAD_INDEX = "fs_bad"
_BAD_INDEX_CLAUSE = f"reduction(|:{BAD_INDEX})"
_BAD_INDEX_PRAGMAS = ("#pragma omp simd", "#pragma omp parallel")

# unary float ops that are C library functions (GCC builtins: `__builtin_<name>[f]`)
_UNARY_FLOAT = {"exp": "exp", "exp2": "exp2", "log": "log", "log2": "log2", "log1p": "log1p",
                "expm1": "expm1", "sqrt": "sqrt", "sin": "sin", "cos": "cos", "tan": "tan",
                "tanh": "tanh", "erf": "erf", "floor": "floor", "ceil": "ceil",
                "round": "nearbyint", "trunc": "trunc", "abs": "fabs", "asin": "asin",
                "acos": "acos", "atan": "atan", "sinh": "sinh", "cosh": "cosh",
                "asinh": "asinh", "acosh": "acosh", "atanh": "atanh", "erfc": "erfc",
                "log10": "log10"}
_CMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def _libm(name: str, dtype: str) -> str:
    """The C library function `name` for a float dtype: libmvec's when it has one
    (`fs_mv_expf`, see vecmath.py), else __builtin_exp / __builtin_expf."""
    return vecmath.function(name, dtype) or \
        (f"__builtin_{name}" if dtype == "f64" else f"__builtin_{name}f")


def _exp_like(op: str, dtype: str) -> str:
    """exp, tanh or erf: libmvec's (not for exp), else the preamble's branch-free float
    versions (the C library's for f64)."""
    if dtype == "f64":
        return _libm(op, dtype)
    return vecmath.function(op, dtype) or f"fs::{op}_f32"


class _Printer(FlatLoops, ReduceLoops, ScatterLoops):
    def __init__(self, kernel: Kernel, fname: str):
        self.k = kernel
        self.fname = fname
        self.names = Names()
        self.lines: list[str] = []
        self.buffers = {b.name: b for b in kernel.buffers}
        for b in kernel.buffers:            # parameters keep their names first
            self.names.get("buffer", b.name)
        for s in kernel.syms:
            self.names.get("sym", s.name)
        self.index_dtype = kernel.index_dtype if kernel.index_dtype in INTS else "i64"
        self.int64_vars: set[str] = set()     # Index results: int64_t whatever their dtype
        self.fast = False                      # printing the dense version of a component
        self.rows: tuple[E.Expr, ...] | None = None   # printing a flat loop split in rows
        # a transposed flat loop (FlatLoops.flat_transposed): the sizes xo is unravelled
        # over, each digit its own loop variable xa<k>
        self.xo_digits: tuple[E.Expr, ...] | None = None
        # loads and stores through a transposed tile (FlatLoops.staged_accesses): a
        # load's var, a store's id -> C reference
        self.staged: dict[str, str] = {}
        # the component version's unravellings with dims merged (index.merge_plan)
        self.merges: dict = {}
        # x's unravellings united in one finer one (refine.refine_plan)
        self.refined: dict = {}
        self.bool_logic = False                # printed &, | or a select between bools
        self.selects = False                   # printed a select (`where`)
        self.divides_ints = False              # printed an integer division: `fs_error`
        self.truncated: dict[str, tuple[str, str]] = {}  # int32 var -> (float var, dtype)
        # checks indices: every loop reduces `fs_bad` (fs::check_index)
        self.checks_index = any(isinstance(st, Op) and st.op == "check_index"
                                for c in kernel.components for body in bodies(c)
                                for st in body)
        self.rrows: tuple[E.Expr, ...] | None = None  # printing a loop over r split in rows
        self.acc_names: dict[str, tuple[str, str | None]] = {}
        self.expected = expected_values(kernel)
        self.fixed = fixed_strides(kernel, self.expected)
        # syms printed as compile-time constants: those of constant binding
        self.constants = constant_syms(kernel)
        self.rowplan = RowPlan()                # row buffers of the reduce component printed
        self.stashes: dict = {}                 # ... kept in outputs (ColumnOrder.output_stash)
        self.parallel_r = False                 # printing the loops of a one-row component
        self.serial = False                     # the component printed runs on one thread
        self.r_inside = False                   # columns: the loop over r inside the lanes'
        self.r_simd = False                     # ... and run as SIMD lanes along r (rows)
        self.rn_known = None                    # ... over rows of this (constant) length
        # the kernel's Constant statements' values, by variable
        self.constant_of = {st.var: st.value for c in kernel.components
                            for body in bodies(c) for st in body if isinstance(st, Constant)}
        self.block = COLUMN_BLOCK               # columns: lanes (x) of a block
        # inside `hoisting`: the index terms computed once before the loop (text -> name)
        # and the variables they may read
        self.hoisted: dict[str, str] | None = None
        self.hoist_vars: frozenset[str] = frozenset()

    # -- helpers
    def emit(self, depth: int, text: str) -> None:
        if self.serial and text.startswith(OMP_THREADS):
            text = serial_pragma(text)
            if text is None:
                return
        if self.checks_index and text.startswith(_BAD_INDEX_PRAGMAS) and \
                _BAD_INDEX_CLAUSE not in text:
            text += " " + _BAD_INDEX_CLAUSE
        self.lines.append("    " * depth + text)

    def var(self, name: str) -> str:
        return self.names.get("var", name)

    def buf(self, name: str) -> str:
        return self.names.get("buffer", name)

    def sym(self, name: str) -> str:
        return self.names.get("sym", name)

    def dtype_of(self, env: dict[str, str], name: str) -> str:
        if name in ("xmask", "rmask"):
            return "b8"
        try:
            return env[name]
        except KeyError:
            raise CannotPrint(
                f"cpu backend: kernel {self.k.name}: variable {name!r} used before it is "
                f"defined") from None

    def form(self, e: E.Expr, access: bool = False) -> E.Expr:
        """An index expression as this version of the component prints it (`access`: of
        a load/store, specialised in the dense version), its digits merged where every
        index of the version allows (`self.merges`). Every decision on the loops reads
        indices through this, so that it sees what is printed."""
        if access and self.fast:
            e = specialize(e, self.expected, self.fixed)[0]
        return merge_digits(refine_digits(e, self.refined), self.merges)

    def plan_merges(self, c: Component) -> None:
        """`self.refined` and `self.merges` for the version of `c` about to be printed
        (`self.fast`): x's unravellings united (refine.py), then digits merged."""
        self.merges, self.refined = {}, {}

        def indices():
            return [self.form(s.index, isinstance(s, (Load, Store)))
                    for body in [c.body] + [loop.body for loop in c.loops] for s in body
                    if isinstance(s, (Load, Store, Index))]
        self.refined = refine_plan(indices(), self.constants)
        self.merges = merge_plan(indices())

    def index(self, e: E.Expr, env: dict[str, str], access: bool = False) -> str:
        """C text of an index expression (`access`: of a load/store, specialised in the
        dense version of a component), its digits merged (`form`)."""
        e = self.form(e, access)
        if self.rows is not None:
            e = split_rows(e, self.rows)
            if self.xo_digits is not None:
                e = E.rewrite(e, self.xo_digit_var)
        if self.rrows is not None:
            e = split_rows(e, self.rrows, "r")

        def value_name(v: str) -> str:
            c = self.var(v)
            return c if env.get(v, "i64") == "i64" or v in self.int64_vars else f"(int64_t){c}"

        def text(e: E.Expr) -> str:
            return E.to_source(rename_expr(e, value_name, self.sym), floordiv_op="/")
        if access and self.hoisted is not None:
            terms = e.terms if isinstance(e, E.Add) else (e,)
            per_x = [t for t in terms if not isinstance(t, (E.Var, E.Const, E.Sym))
                     and E.free_vars(t) <= self.hoist_vars]
            if per_x:
                base = text(E.add(*per_x))
                name = self.hoisted.get(base)
                if name is None:
                    name = self.hoisted[base] = self.names.fresh("xoff")
                rest = [t for t in terms if t not in per_x]
                return name if not rest else f"{name} + {text(E.add(*rest))}"
        return text(e)

    # -- the function
    def function(self) -> str:
        k = self.k
        params = []
        for b in k.buffers:
            const = "" if b.is_output else "const "
            if b.dtype not in STORAGE:
                raise CannotPrint(f"cpu backend: unsupported dtype {b.dtype!r}")
            restrict = "" if b.name in k.may_alias else "__restrict__ "
            params.append(f"{const}{STORAGE[b.dtype]}* {restrict}{self.buf(b.name)}")
        # a sym of constant binding keeps its place in the signature (the runner and the
        # launch path pass every sym) but is unnamed there: the body declares it
        # constexpr, so that the compiler folds the index arithmetic over it (a division
        # by a size becomes a multiplication; 1.7x on a batch-norm kernel)
        params += [f"int64_t /* {self.sym(s.name)} = {self.constants[s.name]} */"
                   if s.name in self.constants else f"int64_t {self.sym(s.name)}"
                   for s in k.syms]
        constants = [f"constexpr int64_t {self.sym(s.name)} = {self.constants[s.name]};"
                     for s in k.syms if s.name in self.constants]
        self.emit(0, f"// kernel {k.name}: {len(k.buffers)} buffers, {len(k.syms)} syms, "
                     f"{len(k.components)} component(s)")
        self.emit(0, "FS_FUNCTION_HEAD")
        head = len(self.lines) - 1
        for p in params:
            self.emit(1, p + ",")
        last = len(self.lines) - 1
        for i, c in enumerate(k.components):
            self.component(i, c)
        if self.checks_index:
            self.emit(1, f"if ({BAD_INDEX}) fs::index_error({ERROR_ARG});")
            constants = constants + [f"int64_t {BAD_INDEX} = 0;"]
        self.emit(0, "}")
        # a kernel that divides integers records a zero divisor through one more argument
        # (the error cell of `build.runner`); the others keep their signature
        if self.divides_ints:
            self.lines.insert(last + 1, f"    int64_t* __restrict__ {ERROR_ARG}) {{")
            last += 1
        elif params:
            self.lines[last] = self.lines[last][:-1] + ") {"
        else:
            self.lines[head] += ") {"
        self.lines[last + 1:last + 1] = ["    " + c for c in constants]
        selects_calls = self.selects and any("fs_mv_" in line for line in self.lines)
        attribute = f"{BOOL_LOGIC_ATTRIBUTE} " if self.bool_logic or selects_calls else ""
        self.lines[head] = f'extern "C" {attribute}void {self.fname}('
        return "\n".join(self.lines) + "\n"

    def component(self, i: int, c: Component) -> None:
        env0: dict[str, str] = {}
        xn = self.index(c.xnumel, env0)
        if c.kind == "scatter":
            self.scatter_component(i, c, xn)
            return
        # sizes known here (static) too small for any parallel region: no OpenMP call at
        # all (a region whose `if` is false still costs 0.3 us to enter and leave)
        work = static_value(c.xnumel, self.constants)
        if c.kind == "reduce" and work is not None:
            r = static_value(c.rnumel, self.constants)
            work = None if r is None else work * max(r, 1)
        self.serial = work is not None and work < PARALLEL_GRAIN
        if c.kind == "flat":
            self.emit(1, f"// component {i}: flat, x < {xn}")
        elif c.kind == "reduce":
            rn = self.index(c.rnumel, env0)
            self.emit(1, f"// component {i}: reduce, x < {xn}, r < {rn}, "
                         f"{len(c.loops)} loop(s) over r")
        else:
            raise CannotPrint(f"cpu backend: unknown component kind {c.kind!r}")
        self.emit(1, "{")
        self.emit(2, f"const int64_t xnumel = {xn};")
        if c.kind == "reduce":
            self.emit(2, f"const int64_t rnumel = {rn};")
        conds = self.dense_conditions(c)
        if conds:
            self.emit(2, f"if ({' && '.join(conds)}) {{  // dense: the expected strides")
            self.fast = True
            self.plan_merges(c)
            self.component_loop(3, c)
            self.fast = False
            self.plan_merges(c)
            self.emit(2, "} else {")
            self.component_loop(3, c)
            self.emit(2, "}")
        else:
            self.plan_merges(c)
            self.component_loop(2, c)
        self.merges, self.refined = {}, {}
        self.emit(1, "}")

    def dense_conditions(self, c: Component) -> list[str]:
        """Run-time tests under which `specialize` holds for every access of `c`."""
        found: list[tuple[E.Expr, E.Expr]] = []
        for body in [c.body] + [loop.body for loop in c.loops]:
            for s in body:
                if isinstance(s, (Load, Store)):
                    found += specialize(s.index, self.expected, self.fixed)[1]
        out = []
        for a, b in found:
            text = f"{self.index(a, {})} == {self.index(b, {})}"
            if text not in out:
                out.append(text)
        return out

    def component_loop(self, depth: int, c: Component) -> None:
        """The parallel loop over x of a component (with `self.fast`: the dense version)."""
        if c.kind == "flat":
            self.flat_loop(depth, c)
            return
        self.reduce_component(depth, c)

    def masks(self, depth: int, stmts, mask: str) -> None:
        used = False
        for s in stmts:
            if isinstance(s, (Load, Store)) and s.mask == mask:
                used = True
            elif isinstance(s, Op) and mask in s.args:
                used = True
            elif isinstance(s, Reduce) and s.value == mask:
                used = True
        if used:
            self.emit(depth, f"const bool {mask} = true;")

    # -- statements
    def stmts(self, depth: int, body, env: dict[str, str], accs) -> None:
        for s in body:
            self.stmt(depth, s, env, accs)

    def stmt(self, depth: int, s: Stmt, env: dict[str, str], accs) -> None:
        if isinstance(s, Load):
            b = self.buffers.get(s.buffer)
            if b is None:
                raise CannotPrint(f"cpu backend: unknown buffer {s.buffer!r}")
            ref = self.staged.get(s.var) or \
                f"{self.buf(b.name)}[{self.index(s.index, env, access=True)}]"
            if b.dtype in HALVES:
                ref = f"fs::{b.dtype}_to_f32({ref})"
            elif b.dtype == "b8":
                ref = f"fs::load_bool(&{ref})"
            dt = s.dtype if s.dtype in CTYPE else b.dtype
            ct = ctype(dt)
            if s.mask:
                zero = literal(0, dt)
                text = f"{self.mask(s.mask, env)} ? {ref} : {zero}"
            else:
                text = ref
            self.emit(depth, f"const {ct} {self.var(s.var)} = {text};")
            env[s.var] = dt
        elif isinstance(s, Index):
            self.emit(depth, f"const int64_t {self.var(s.var)} = {self.index(s.index, env)};")
            env[s.var] = self.index_dtype
            self.int64_vars.add(s.var)
        elif isinstance(s, Constant):
            self.emit(depth, f"const {ctype(s.dtype)} {self.var(s.var)} = "
                             f"{literal(s.value, s.dtype)};")
            env[s.var] = s.dtype
        elif isinstance(s, Op):
            text = self.op(s, env)
            self.emit(depth, f"const {ctype(s.dtype)} {self.var(s.var)} = {text};")
            env[s.var] = s.dtype
        elif isinstance(s, Store):
            b = self.buffers.get(s.buffer)
            if b is None:
                raise CannotPrint(f"cpu backend: unknown buffer {s.buffer!r}")
            v = self.var(s.value) if s.value not in ("xmask", "rmask") else "true"
            self.dtype_of(env, s.value)
            ref = self.staged.get(id(s)) or \
                f"{self.buf(b.name)}[{self.index(s.index, env, access=True)}]"
            if s.accumulate:   # a scatter's: the element's sum so far, plus v
                if b.dtype in HALVES:
                    v = f"fs::{b.dtype}_to_f32({ref}) + {v}"
                elif b.dtype in INTS:      # wraps, as eager's integer sums do
                    v = f"({ctype(b.dtype)})(({WIDE_UNSIGNED[b.dtype]}){ref} + " \
                        f"({WIDE_UNSIGNED[b.dtype]}){v})"
                elif b.dtype in FLOATS:
                    v = f"{ref} + {v}"
                else:
                    raise CannotPrint(f"cpu backend: accumulating stores of {b.dtype}")
            if b.dtype in HALVES:
                v = f"fs::f32_to_{b.dtype}({v})"
            text = f"{ref} = {v};"
            if s.mask:
                text = f"if ({self.mask(s.mask, env)}) {text}"
            self.emit(depth, text)
        elif isinstance(s, Reduce):
            if accs is None or s.var not in accs:
                raise CannotPrint("cpu backend: Reduce outside a loop over r")
            acc, nan = accs[s.var]
            v = self.arg(s.value, env)[0]
            dt = s.dtype
            if dt in INTS and s.kind in ("sum", "prod"):
                v = f"({WIDE_UNSIGNED[dt]}){v}"
            self.emit(depth, reduce_step(s.kind, dt, acc, v))
            if nan and dt != "b8" and s.kind in ("max", "min"):
                self.emit(depth, f"{nan} |= {v} != {v};")
        else:
            raise CannotPrint(f"cpu backend: unknown statement {s!r}")

    def mask(self, name: str, env) -> str:
        if name in ("xmask", "rmask"):
            return name
        self.dtype_of(env, name)
        return self.var(name)

    def arg(self, name: str, env) -> tuple[str, str]:
        return (name if name in ("xmask", "rmask") else self.var(name)), self.dtype_of(env, name)

    def op(self, s: Op, env) -> str:
        n = len(s.args)
        want = 1 if s.op in UNARY else 2 if s.op in BINARY else 3 if s.op in TERNARY else None
        if want is None:
            raise CannotPrint(f"cpu backend: unknown op {s.op!r}")
        if n != want:
            raise CannotPrint(f"cpu backend: {s.op} takes {want} argument(s), got {n}")
        args = [self.arg(a, env) for a in s.args]
        dt = s.dtype
        if s.op == "cast":
            if dt == "i32" and args[0][1] in FLOATS:
                self.truncated[self.var(s.var)] = args[0]
            return self.cast(args[0][0], args[0][1], dt)
        if s.op in ("maximum", "minimum") and dt in FLOATS and \
                self._not_nan(s.args[1]):
            # a bound that is no NaN (a clamp's): one compare and one select, a NaN `a`
            # comes through by itself; fs::maximum tests both for NaN first (4-6 mask
            # compares a vector: clamp over 1M floats 1.3x Inductor's time)
            a, b = args[0][0], args[1][0]
            text = f"{a} < {b} ? {b} : {a}" if s.op == "maximum" else f"{b} < {a} ? {b} : {a}"
            return f"fs::{dt}_round({text})" if dt in HALVES else text
        text = self.compute(s.op, args, dt)
        if dt in HALVES and s.op not in COMPARISONS:
            text = f"fs::{dt}_round({text})"
        return text

    def _not_nan(self, var: str) -> bool:
        """Whether variable `var` is a Constant that is a number (no NaN)."""
        v = self.constant_of.get(var)
        return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v

    def cast(self, a: str, src: str, dst: str) -> str:
        if src == dst or (src in HALVES and dst == "f32"):
            return a
        if dst == "b8":
            return f"{a} != 0"
        if src == "b8":
            # a select, not a conversion: GCC does not vectorise loops converting a
            # comparison's mask to a number ("mixed mask and nonmask vector types")
            one, zero = ("1.0f", "0.0f") if dst in HALVES else (f"({ctype(dst)})1", f"({ctype(dst)})0")
            return f"({a} ? {one} : {zero})"
        if src == "i64" and dst in FLOATS:
            a = f"fs::i64_to_f64({a})" if dst == "f64" else f"fs::i64_to_f32({a})"
            return f"fs::{dst}_round({a})" if dst in HALVES else a
        if src == "i32" and dst in FLOATS and a in self.truncated:
            # an int32 of a float back to a float: under -fno-trapping-math GCC compiles
            # (float)(int32_t)x as trunc(x), whose -0.0 (of -0.5) torch's integer makes
            # +0.0 (copysign and division see it). Printed as that trunc with a zero added
            # (-0.0 + 0.0 is +0.0, every other value stays), which GCC cannot drop since
            # trunc may give -0.0; an int-to-float cast it knows is no -0.0 it would
            f, fdt = self.truncated[a]
            t = f"(__builtin_trunc({f}) + 0.0)" if fdt == "f64" else \
                f"(__builtin_truncf({f}) + 0.0f)"
            wide = "f64" if dst == "f64" else "f32"
            text = t if wide == ("f64" if fdt == "f64" else "f32") else f"({ctype(wide)}){t}"
            return f"fs::{dst}_round({text})" if dst in HALVES else text
        if dst in HALVES:
            return f"fs::{dst}_round((float){a})" if src != "f32" and src not in HALVES \
                else f"fs::{dst}_round({a})"
        ct = ctype(dst)
        if src in FLOATS and dst in ("u8", "i8", "i16"):
            return f"({ct})(int64_t){a}"
        return f"({ct}){a}"

    def compute(self, op: str, args, dt: str) -> str:
        ct = ctype(dt)
        fl = dt in FLOATS
        b8 = dt == "b8"
        a = args[0][0]
        b = args[1][0] if len(args) > 1 else None
        one = "1.0" if dt == "f64" else "1.0f"
        if op == "where":
            if b8:      # on bools too: `?:` would select between masks, which GCC does not vectorise
                self.bool_logic = True
                return f"({a} & {b}) | (!{a} & {args[2][0]})"
            self.selects = True
            return f"{a} ? {b} : {args[2][0]}"
        if op in COMPARISONS:
            return f"{a} {_CMP[op]} {b}"
        # unary
        if op == "neg":
            return f"-{a}" if fl else f"fs::neg<{ct}>({a})"
        if op == "abs":
            if fl:
                return f"{_libm('fabs', dt)}({a})"
            return a if b8 or dt == "u8" else f"fs::abs_int<{ct}>({a})"
        if op in ("floor", "ceil", "round", "trunc") and not fl:
            return a
        if op in ("exp", "tanh", "erf"):
            self.need_float(op, dt)
            return f"{_exp_like(op, dt)}({a})"
        if op in _UNARY_FLOAT:
            self.need_float(op, dt)
            return f"{_libm(_UNARY_FLOAT[op], dt)}({a})"
        if op == "rsqrt":
            self.need_float(op, dt)
            return f"{one} / {_libm('sqrt', dt)}({a})"
        if op == "sigmoid":
            self.need_float(op, dt)
            return f"{one} / ({one} + {_exp_like('exp', dt)}(-{a}))"
        if op == "reciprocal":
            self.need_float(op, dt)
            return f"{one} / {a}"
        if op == "sign":
            return a if b8 else f"fs::sign<{ct}>({a})"
        if op == "not":
            return f"!{a}"
        if op == "bitwise_not":
            return f"!{a}" if b8 else f"({ct})~{a}"
        if op in ("isnan", "isinf"):
            return f"__builtin_{op}({a})" if args[0][1] in FLOATS else "false"
        # binary
        if op in ("add", "sub", "mul"):
            if fl:
                return f"{a} { {'add': '+', 'sub': '-', 'mul': '*'}[op]} {b}"
            if b8:
                if op == "sub":
                    raise CannotPrint("cpu backend: sub of bools")
                return f"{a} | {b}" if op == "add" else f"{a} & {b}"
            return f"fs::{op}<{ct}>({a}, {b})"
        if op == "truediv":
            self.need_float(op, dt)
            return f"{a} / {b}"
        if op in ("floordiv", "remainder", "fmod") and not fl:
            self.divides_ints = True
            return f"fs::{op}_int<{ct}>({a}, {b}, {ERROR_ARG})"
        if op == "check_index":
            self.divides_ints = True        # (it records errors in the same cell)
            return f"fs::check_index({a}, {b}, {BAD_INDEX})"
        if op == "floordiv":
            return f"fs::floordiv_float<{ct}>({a}, {b})"
        if op == "remainder":
            return f"fs::remainder_float<{ct}>({a}, {b})"
        if op == "fmod":
            return f"{_libm('fmod', dt)}({a}, {b})"
        if op == "pow":
            return f"{_libm('pow', dt)}({a}, {b})" if fl else f"fs::pow_int<{ct}>({a}, {b})"
        if op in ("atan2", "hypot", "copysign"):
            self.need_float(op, dt)
            return f"{_libm(op, dt)}({a}, {b})"
        if op in ("maximum", "minimum"):
            if b8:
                return f"{a} | {b}" if op == "maximum" else f"{a} & {b}"
            return f"fs::{op}<{ct}>({a}, {b})"
        if op in ("and", "or"):
            self.bool_logic = True
            return f"{a} {'&' if op == 'and' else '|'} {b}"
        if op == "xor":
            return f"(bool){a} != (bool){b}"
        if op in ("bitwise_and", "bitwise_or", "bitwise_xor"):
            c = {"bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^"}[op]
            return f"{a} {c} {b}" if b8 else f"({ct})({a} {c} {b})"
        if op in ("lshift", "rshift"):
            return f"fs::{op}<{ct}>({a}, {b})"
        raise CannotPrint(f"cpu backend: op {op!r} on {dt} is not supported")

    def need_float(self, op: str, dt: str) -> None:
        if dt not in FLOATS:
            raise CannotPrint(f"cpu backend: {op} computes in floats, not {dt}")


def _function_name(kernel: Kernel) -> str:
    """`fs_<kernel name>`: the prefix keeps kernels apart from C library symbols (exp, ...)."""
    return "fs_" + (re.sub(r"[^A-Za-z0-9_]", "_", kernel.name) or "kernel")


def cpp_source(kernel: Kernel, name: str | None = None) -> str:
    """Readable C++ of one kernel: `extern "C" void fs_<kernel.name>(buffers..., syms...)`.

    The function uses the helpers of `PREAMBLE` (namespace `fs`); `library.compile_cpu` puts
    them and every distinct kernel into one translation unit.
    """
    return _Printer(kernel, name or _function_name(kernel)).function()
