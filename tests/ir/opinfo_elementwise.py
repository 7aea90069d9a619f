"""OpInfo-style cases for the ELEMENTWISE ops (registered into opinfo_core.CASES on import)."""
from __future__ import annotations

import math
from typing import Any, Callable  # noqa: F401

import torch
import torch.nn.functional as F

from opinfo_core import (  # noqa: F401
    Args, Bool, Cplx, F32, Fl, Halves, IF, Int, NZ, Pos, Special, _all, _uniform,
    add_case, case, grad_of)


# ===== ELEMENTWISE: unary math ===========================================================

_UNARY = [
    # op, public fn, input spec factory (shape -> Spec)
    ("abs.default", torch.abs, Fl),
    ("neg.default", torch.neg, Fl),
    ("exp.default", torch.exp, Fl),
    ("exp2.default", torch.exp2, Fl),
    ("log.default", torch.log, Pos),
    ("log2.default", torch.log2, Pos),
    ("log10.default", torch.log10, Pos),
    ("log1p.default", torch.log1p, lambda *s: Fl(*s, lo=-0.9, hi=3.0)),
    ("expm1.default", torch.expm1, Fl),
    ("sqrt.default", torch.sqrt, Pos),
    ("rsqrt.default", torch.rsqrt, Pos),
    ("sin.default", torch.sin, Fl),
    ("cos.default", torch.cos, Fl),
    ("tan.default", torch.tan, lambda *s: Fl(*s, lo=-1.2, hi=1.2)),
    ("asin.default", torch.asin, lambda *s: Fl(*s, lo=-0.99, hi=0.99)),
    ("acos.default", torch.acos, lambda *s: Fl(*s, lo=-0.99, hi=0.99)),
    ("atan.default", torch.atan, Fl),
    ("sinh.default", torch.sinh, Fl),
    ("cosh.default", torch.cosh, Fl),
    ("tanh.default", torch.tanh, Fl),
    ("asinh.default", torch.asinh, Fl),
    ("acosh.default", torch.acosh, lambda *s: Fl(*s, lo=1.01, hi=4.0)),
    ("atanh.default", torch.atanh, lambda *s: Fl(*s, lo=-0.95, hi=0.95)),
    ("sigmoid.default", torch.sigmoid, lambda *s: Fl(*s, lo=-6, hi=6)),
    ("relu.default", F.relu, Fl),
    ("silu.default", F.silu, lambda *s: Fl(*s, lo=-5, hi=5)),
    ("erf.default", torch.special.erf, Fl),
    ("erfc.default", torch.special.erfc, Fl),
    ("erfinv.default", torch.special.erfinv, lambda *s: Fl(*s, lo=-0.95, hi=0.95)),
    ("reciprocal.default", torch.reciprocal, NZ),
    ("sign.default", torch.sign, IF),
    ("sgn.default", torch.sgn, IF),
    ("floor.default", torch.floor, lambda *s: Fl(*s, lo=-4, hi=4)),
    ("ceil.default", torch.ceil, lambda *s: Fl(*s, lo=-4, hi=4)),
    ("round.default", torch.round, lambda *s: Fl(*s, lo=-4, hi=4)),
    ("trunc.default", torch.trunc, lambda *s: Fl(*s, lo=-4, hi=4)),
    ("frac.default", torch.frac, lambda *s: Fl(*s, lo=-4, hi=4)),
    ("square.default", torch.square, Fl),
    ("mish.default", F.mish, lambda *s: Fl(*s, lo=-5, hi=5)),
    ("hardsigmoid.default", F.hardsigmoid, lambda *s: Fl(*s, lo=-4, hi=4)),
    ("hardswish.default", F.hardswish, lambda *s: Fl(*s, lo=-4, hi=4)),
]
for _op, _fn, _spec in _UNARY:
    case(_op, "2d", [_spec(4, 7)], ref=_fn)
    case(_op, "0d", [_spec()], ref=_fn, dtypes=F32)

# integer / bool inputs for the unary ops that take them
for _op, _fn in [("abs.default", torch.abs), ("neg.default", torch.neg),
                 ("sign.default", torch.sign), ("square.default", torch.square),
                 ("floor.default", torch.floor), ("relu.default", torch.relu)]:
    case(_op, "int", [Int(3, 5)], ref=_fn, dtypes=("int64", "int32"))
case("sgn.default", "int", [Int(3, 5)], ref=torch.sgn, dtypes=("int64",))
case("exp.default", "int_promotes", [Int(3, 5, lo=-3, hi=4)], ref=torch.exp, dtypes=("int64",))
case("sqrt.default", "bool_promotes", [Bool(6)], ref=torch.sqrt, dtypes=("bool",))
case("round.default", "halves", [Halves(3, 6)], ref=torch.round)
case("sgn.default", "complex", [Cplx(4, 3)], ref=torch.sgn, dtypes=("complex64",))
case("abs.default", "complex", [Cplx(4, 3)], ref=torch.abs, dtypes=("complex64",))
case("exp.default", "complex", [Cplx(4, 3)], ref=torch.exp, dtypes=("complex64",))

# NaN / inf / signed zeros
for _op, _fn in [("abs.default", torch.abs), ("exp.default", torch.exp),
                 ("log.default", torch.log), ("sqrt.default", torch.sqrt),
                 ("sigmoid.default", torch.sigmoid), ("tanh.default", torch.tanh),
                 ("relu.default", torch.relu), ("floor.default", torch.floor),
                 ("sign.default", torch.sign), ("reciprocal.default", torch.reciprocal),
                 ("gelu.default", F.gelu), ("erf.default", torch.erf)]:
    case(_op, "nan_inf", [Special(4, 5)], ref=_fn)
case("abs.default", "zero_size", [Fl(0, 3)], ref=torch.abs)
case("exp.default", "zero_size", [Fl(2, 0, 4)], ref=torch.exp, dtypes=F32)

case("gelu.default", "none", [Fl(4, 7, lo=-4, hi=4)], ref=F.gelu)
case("gelu.default", "tanh", [Fl(4, 7, lo=-4, hi=4)], lambda x: Args(x, approximate="tanh"),
     lambda x: F.gelu(x, approximate="tanh"))
case("gelu.default", "0d", [Fl()], ref=F.gelu, dtypes=F32)
case("sigmoid.default", "large", [Fl(3, 5, lo=-100, hi=100)], ref=torch.sigmoid, dtypes=F32)

# ===== ELEMENTWISE: pow ==================================================================

case("pow.Tensor_Scalar", "cube", [Fl(3, 5)], lambda x: Args(x, 3), lambda x: torch.pow(x, 3))
case("pow.Tensor_Scalar", "sqrt", [Pos(3, 5)], lambda x: Args(x, 0.5), lambda x: x ** 0.5)
case("pow.Tensor_Scalar", "neg_frac", [Fl(3, 5)], lambda x: Args(x, -1.5),
     lambda x: torch.pow(x, -1.5))  # NaN for x < 0
case("pow.Tensor_Scalar", "int", [Int(3, 5)], lambda x: Args(x, 2), lambda x: torch.pow(x, 2),
     dtypes=("int64",))
case("pow.Tensor_Scalar", "int_float_exp", [Int(3, 5, lo=1)], lambda x: Args(x, 0.5),
     lambda x: torch.pow(x, 0.5), dtypes=("int64",))
case("pow.Tensor_Tensor", "bcast", [Pos(3, 4), Fl(4)], ref=torch.pow)
case("pow.Tensor_Tensor", "int", [Int(3, 4, lo=-3, hi=4), Int(3, 4, lo=0, hi=4)],
     ref=torch.pow, dtypes=("int64",))
case("pow.Scalar", "base2", [Fl(3, 5)], lambda y: Args(2.0, y), lambda y: torch.pow(2.0, y))
case("pow.Scalar", "int_exp", [Int(6, lo=0, hi=5)], lambda y: Args(3, y),
     lambda y: torch.pow(3, y), dtypes=("int64",))

# ===== ELEMENTWISE: arithmetic ===========================================================

case("add.Tensor", "alpha", [Fl(3, 4), Fl(3, 4)], lambda x, y: Args(x, y, alpha=2),
     lambda x, y: torch.add(x, y, alpha=2))
case("add.Tensor", "bcast", [Fl(3, 1, 5), Fl(4, 1)], ref=torch.add)
case("add.Tensor", "0d", [Fl(3, 4), Fl()], ref=torch.add)
case("add.Tensor", "0d_0d", [Fl(), Fl()], ref=torch.add, dtypes=F32)
case("add.Tensor", "int", [Int(3, 4), Int(4)], lambda x, y: Args(x, y, alpha=3),
     lambda x, y: torch.add(x, y, alpha=3), dtypes=("int64", "int32"))
case("add.Tensor", "bool", [Bool(3, 4), Bool(3, 4)], ref=torch.add, dtypes=("bool",))
case("add.Tensor", "promote_int", [Fl(3, 4), Int(3, 4, dtype=torch.int64)], ref=torch.add)
case("add.Tensor", "promote_0d_f64", [Fl(3, 4), Fl(dtype=torch.float64)], ref=torch.add)
case("add.Tensor", "zero_size", [Fl(0, 1), Fl(3)], ref=torch.add)
case("add.Tensor", "nan_inf", [Special(4, 5), Special(4, 5)], ref=torch.add)
case("add.Tensor", "complex", [Cplx(3, 4), Cplx(4)], ref=torch.add, dtypes=("complex64",))
case("add.Scalar", "alpha", [Fl(3, 4)], lambda x: Args(x, 2.5, 2),
     lambda x: torch.add(x, 2.5, alpha=2))
case("add.Scalar", "int", [Int(3, 4)], lambda x: Args(x, 3), lambda x: x + 3, dtypes=("int64",))
case("add.Scalar", "int_float", [Int(3, 4)], lambda x: Args(x, 0.5), lambda x: x + 0.5,
     dtypes=("int64",))
case("sub.Tensor", "alpha", [Fl(3, 4), Fl(3, 4)], lambda x, y: Args(x, y, alpha=0.5),
     lambda x, y: torch.sub(x, y, alpha=0.5))
case("sub.Tensor", "bcast", [Fl(4, 1), Fl(1, 5)], ref=torch.sub)
case("sub.Tensor", "int", [Int(3, 4), Int(3, 4)], ref=torch.sub, dtypes=("int64",))
case("sub.Scalar", "basic", [Fl(3, 4)], lambda x: Args(x, 1.5), lambda x: x - 1.5)
case("sub.Scalar", "alpha", [Fl(3, 4)], lambda x: Args(x, 1.5, 2),
     lambda x: torch.sub(x, 1.5, alpha=2))
case("rsub.Scalar", "basic", [Fl(3, 4)], lambda x: Args(x, 2.0), lambda x: 2.0 - x)
case("rsub.Scalar", "int", [Int(3, 4)], lambda x: Args(x, 7), lambda x: 7 - x, dtypes=("int64",))
case("rsub.Tensor", "alpha", [Fl(3, 4), Fl(4)], lambda x, y: Args(x, y, alpha=2),
     lambda x, y: torch.sub(y, x, alpha=2))
case("mul.Tensor", "same", [Fl(3, 4), Fl(3, 4)], ref=torch.mul)
case("mul.Tensor", "bcast", [Fl(2, 1, 4), Fl(3, 1)], ref=torch.mul)
case("mul.Tensor", "0d", [Fl(), Fl(2, 3)], ref=torch.mul)
case("mul.Tensor", "int", [Int(3, 4), Int(3, 4)], ref=torch.mul, dtypes=("int64", "int32"))
case("mul.Tensor", "bool", [Bool(3, 4), Bool(4)], ref=torch.mul, dtypes=("bool",))
case("mul.Tensor", "bool_float", [Bool(3, 4), Fl(3, 4)], ref=torch.mul)
case("mul.Tensor", "nan_inf", [Special(5, 4), Special(5, 4)], ref=torch.mul, dtypes=F32)
case("mul.Scalar", "basic", [Fl(3, 4)], lambda x: Args(x, 2.5), lambda x: x * 2.5)
case("mul.Scalar", "int", [Int(3, 4)], lambda x: Args(x, 3), lambda x: x * 3, dtypes=("int64",))
case("div.Tensor", "basic", [Fl(3, 4), NZ(3, 4)], ref=torch.div)
case("div.Tensor", "bcast", [Fl(2, 3, 4), NZ(3, 1)], ref=torch.div)
case("div.Tensor", "by_zero", [Fl(3, 4), IF(3, 4, lo=-1, hi=2)], ref=torch.div, dtypes=F32)
case("div.Tensor", "int_true_div", [Int(3, 4), Int(3, 4, nonzero=True)], ref=torch.div,
     dtypes=("int64",))
case("div.Scalar", "basic", [Fl(3, 4)], lambda x: Args(x, 3.0), lambda x: x / 3.0)
case("div.Scalar", "int", [Int(3, 4)], lambda x: Args(x, 2), lambda x: torch.div(x, 2),
     dtypes=("int64",))
for _mode in ("floor", "trunc"):
    case("div.Tensor_mode", _mode, [Fl(3, 4, lo=-6, hi=6), NZ(3, 4)],
         lambda x, y, m=_mode: Args(x, y, rounding_mode=m),
         lambda x, y, m=_mode: torch.div(x, y, rounding_mode=m))
    case("div.Tensor_mode", f"{_mode}_int", [Int(3, 4, lo=-9, hi=10), Int(4, nonzero=True)],
         lambda x, y, m=_mode: Args(x, y, rounding_mode=m),
         lambda x, y, m=_mode: torch.div(x, y, rounding_mode=m), dtypes=("int64",))
    case("div.Scalar_mode", _mode, [Fl(3, 4, lo=-6, hi=6)],
         lambda x, m=_mode: Args(x, 1.5, rounding_mode=m),
         lambda x, m=_mode: torch.div(x, 1.5, rounding_mode=m))
case("div.Tensor_mode", "none", [Fl(3, 4), NZ(3, 4)], lambda x, y: Args(x, y, rounding_mode=None),
     lambda x, y: torch.div(x, y, rounding_mode=None))
case("div.Scalar_mode", "floor_int", [Int(3, 4, lo=-9, hi=10)],
     lambda x: Args(x, 4, rounding_mode="floor"),
     lambda x: torch.div(x, 4, rounding_mode="floor"), dtypes=("int64",))

# ===== ELEMENTWISE: min/max, clamp ======================================================

for _op, _fn in [("maximum.default", torch.maximum), ("minimum.default", torch.minimum),
                 ("fmax.default", torch.fmax), ("fmin.default", torch.fmin)]:
    case(_op, "bcast", [Fl(3, 4), Fl(4)], ref=_fn)
    case(_op, "nan_inf", [Special(4, 5), Special(4, 5)], ref=_fn)
    case(_op, "int", [Int(3, 4), Int(3, 4)], ref=_fn, dtypes=("int64",))
case("maximum.default", "bool", [Bool(5), Bool(5)], ref=torch.maximum, dtypes=("bool",))

case("clamp.default", "min_max", [Fl(3, 5)], lambda x: Args(x, -0.5, 0.5),
     lambda x: torch.clamp(x, min=-0.5, max=0.5))
case("clamp.default", "min_only", [Fl(3, 5)], lambda x: Args(x, 0.25),
     lambda x: torch.clamp(x, min=0.25))
case("clamp.default", "max_only", [Fl(3, 5)], lambda x: Args(x, None, 0.25),
     lambda x: torch.clamp(x, max=0.25))
case("clamp.default", "nan", [Special(3, 5)], lambda x: Args(x, -1.0, 1.0),
     lambda x: torch.clamp(x, -1.0, 1.0))
case("clamp.default", "int", [Int(3, 5)], lambda x: Args(x, -2, 3),
     lambda x: torch.clamp(x, -2, 3), dtypes=("int64",))
case("clamp.Tensor", "bcast", [Fl(3, 5), Fl(5, lo=-2, hi=0), Fl(3, 1, lo=0, hi=2)],
     ref=lambda x, lo, hi: torch.clamp(x, min=lo, max=hi))
case("clamp.Tensor", "max_only", [Fl(3, 5), Fl(3, 5)], lambda x, hi: Args(x, None, hi),
     lambda x, hi: torch.clamp(x, max=hi))
case("clamp_min.default", "basic", [Fl(3, 5)], lambda x: Args(x, 0.1),
     lambda x: torch.clamp(x, min=0.1))
case("clamp_max.default", "basic", [Fl(3, 5)], lambda x: Args(x, 0.1),
     lambda x: torch.clamp(x, max=0.1))
case("clamp_min.Tensor", "bcast", [Fl(3, 5), Fl(5)], ref=lambda x, m: torch.clamp(x, min=m))
case("clamp_max.Tensor", "bcast", [Fl(3, 5), Fl(5)], ref=lambda x, m: torch.clamp(x, max=m))
case("clamp_min.default", "int", [Int(3, 5)], lambda x: Args(x, 0),
     lambda x: torch.clamp(x, min=0), dtypes=("int64",))

# ===== ELEMENTWISE: where, comparisons, logic ===========================================

case("where.self", "bcast", [Bool(3, 1), Fl(3, 4), Fl(4)], ref=torch.where)
case("where.self", "0d", [Bool(2, 3), Fl(), Fl(2, 3)], ref=torch.where)
case("where.self", "int", [Bool(3, 4), Int(3, 4), Int(4)], ref=torch.where, dtypes=("int64",))
case("where.self", "promote", [Bool(3, 4), Fl(3, 4), Int(3, 4, dtype=torch.int64)],
     ref=torch.where)
case("where.ScalarOther", "basic", [Bool(3, 4), Fl(3, 4)], lambda c, x: Args(c, x, 0.0),
     lambda c, x: torch.where(c, x, 0.0))
case("where.ScalarOther", "neg_inf", [Bool(3, 4), Fl(3, 4)], lambda c, x: Args(c, x, -math.inf),
     lambda c, x: torch.where(c, x, -math.inf))
case("where.ScalarSelf", "basic", [Bool(3, 4), Fl(4)], lambda c, y: Args(c, 1.5, y),
     lambda c, y: torch.where(c, 1.5, y))
case("where.Scalar", "float", [Bool(3, 4)], lambda c: Args(c, 1.0, 0.0),
     lambda c: torch.where(c, 1.0, 0.0), dtypes=("bool",))
case("where.Scalar", "int", [Bool(3, 4)], lambda c: Args(c, 1, 0),
     lambda c: torch.where(c, 1, 0), dtypes=("bool",))

for _name in ("eq", "ne", "lt", "le", "gt", "ge"):
    _fn = getattr(torch, _name)
    case(f"{_name}.Tensor", "bcast", [IF(3, 4), IF(4)], ref=_fn)
    case(f"{_name}.Scalar", "basic", [IF(3, 4)], lambda x: Args(x, 1.0),
         lambda x, f=_fn: f(x, 1.0))
    case(f"{_name}.Tensor", "int", [Int(3, 4, lo=-2, hi=3), Int(3, 4, lo=-2, hi=3)], ref=_fn,
         dtypes=("int64",))
    case(f"{_name}.Scalar", "int_float", [Int(3, 4, lo=-2, hi=3)], lambda x: Args(x, 0.5),
         lambda x, f=_fn: f(x, 0.5), dtypes=("int64",))
case("eq.Tensor", "nan", [Special(4, 5), Special(4, 5)], ref=torch.eq)
case("ne.Tensor", "nan", [Special(4, 5), Special(4, 5)], ref=torch.ne)
case("lt.Tensor", "promote", [IF(3, 4), Int(3, 4, lo=-3, hi=4, dtype=torch.int64)], ref=torch.lt)
case("eq.Tensor", "bool", [Bool(3, 4), Bool(4)], ref=torch.eq, dtypes=("bool",))
case("gt.Tensor", "0d", [Fl(), Fl(3)], ref=torch.gt, dtypes=F32)

for _name in ("logical_and", "logical_or", "logical_xor"):
    _fn = getattr(torch, _name)
    case(f"{_name}.default", "bool", [Bool(3, 4), Bool(4)], ref=_fn, dtypes=("bool",))
    case(f"{_name}.default", "float", [IF(3, 4, lo=-1, hi=2), IF(3, 4, lo=-1, hi=2)], ref=_fn)
    case(f"{_name}.default", "int", [Int(3, 4, lo=-1, hi=2), Int(4, lo=0, hi=2)], ref=_fn,
         dtypes=("int64",))
case("logical_not.default", "bool", [Bool(3, 4)], ref=torch.logical_not, dtypes=("bool",))
case("logical_not.default", "float", [IF(3, 4, lo=-1, hi=2)], ref=torch.logical_not)
case("logical_not.default", "nan", [Special(3, 4)], ref=torch.logical_not, dtypes=F32)

for _name in ("bitwise_and", "bitwise_or", "bitwise_xor"):
    _fn = getattr(torch, _name)
    case(f"{_name}.Tensor", "int", [Int(3, 4, lo=-64, hi=64), Int(4, lo=-64, hi=64)], ref=_fn,
         dtypes=("int64", "int32", "uint8"))
    case(f"{_name}.Tensor", "bool", [Bool(3, 4), Bool(3, 4)], ref=_fn, dtypes=("bool",))
for _name in ("bitwise_and", "bitwise_or"):
    case(f"{_name}.Scalar", "int", [Int(3, 4, lo=-64, hi=64)], lambda x: Args(x, 6),
         lambda x, f=getattr(torch, _name): f(x, 6), dtypes=("int64",))
case("bitwise_not.default", "int", [Int(3, 4, lo=-64, hi=64)], ref=torch.bitwise_not,
     dtypes=("int64", "int32", "uint8"))
case("bitwise_not.default", "bool", [Bool(3, 4)], ref=torch.bitwise_not, dtypes=("bool",))

for _name in ("isnan", "isinf", "isfinite"):
    _fn = getattr(torch, _name)
    case(f"{_name}.default", "nan_inf", [Special(4, 5)], ref=_fn)
    case(f"{_name}.default", "int", [Int(3, 4)], ref=_fn, dtypes=("int64",))

# ===== ELEMENTWISE: other binary/ternary math ===========================================

case("atan2.default", "bcast", [Fl(3, 4), Fl(4)], ref=torch.atan2)
case("atan2.default", "zeros", [IF(3, 4, lo=-1, hi=2), IF(3, 4, lo=-1, hi=2)], ref=torch.atan2,
     dtypes=F32)
case("fmod.Tensor", "basic", [Fl(3, 4, lo=-5, hi=5), NZ(3, 4)], ref=torch.fmod)
case("fmod.Tensor", "int", [Int(3, 4, lo=-9, hi=10), Int(4, nonzero=True)], ref=torch.fmod,
     dtypes=("int64",))
case("fmod.Scalar", "basic", [Fl(3, 4, lo=-5, hi=5)], lambda x: Args(x, 1.5),
     lambda x: torch.fmod(x, 1.5))
case("remainder.Tensor", "basic", [Fl(3, 4, lo=-5, hi=5), NZ(4)], ref=torch.remainder)
case("remainder.Tensor", "int", [Int(3, 4, lo=-9, hi=10), Int(3, 4, nonzero=True)],
     ref=torch.remainder, dtypes=("int64", "int32"))
case("remainder.Scalar", "basic", [Fl(3, 4, lo=-5, hi=5)], lambda x: Args(x, 1.5),
     lambda x: torch.remainder(x, 1.5))
case("remainder.Scalar", "int", [Int(3, 4, lo=-9, hi=10)], lambda x: Args(x, 4),
     lambda x: x % 4, dtypes=("int64",))
case("hypot.default", "bcast", [Fl(3, 4), Fl(4)], ref=torch.hypot)
case("hypot.default", "nan_inf", [Special(4, 5), Special(4, 5)], ref=torch.hypot, dtypes=F32)
case("copysign.Tensor", "bcast", [Fl(3, 4), Fl(4)], ref=torch.copysign)
case("copysign.Tensor", "signed_zero", [Fl(3, 4), Special(3, 4)], ref=torch.copysign, dtypes=F32)
case("nan_to_num.default", "args", [Special(4, 5)], lambda x: Args(x, 0.0, 10.0, -10.0),
     lambda x: torch.nan_to_num(x, nan=0.0, posinf=10.0, neginf=-10.0))
case("nan_to_num.default", "defaults", [Special(4, 5)], ref=torch.nan_to_num)
case("nan_to_num.default", "int", [Int(3, 4)], ref=torch.nan_to_num, dtypes=("int64",))
case("lerp.Scalar", "basic", [Fl(3, 4), Fl(3, 4)], lambda x, y: Args(x, y, 0.3),
     lambda x, y: torch.lerp(x, y, 0.3))
case("lerp.Scalar", "bcast_w_gt_half", [Fl(3, 4), Fl(4)], lambda x, y: Args(x, y, 0.8),
     lambda x, y: torch.lerp(x, y, 0.8))
case("lerp.Tensor", "bcast", [Fl(3, 4), Fl(3, 4), Fl(4, lo=0, hi=1)], ref=torch.lerp)
case("addcmul.default", "bcast", [Fl(3, 4), Fl(3, 1), Fl(4)],
     lambda x, a, b: Args(x, a, b, value=0.5), lambda x, a, b: torch.addcmul(x, a, b, value=0.5))
case("addcmul.default", "int", [Int(3, 4), Int(3, 4), Int(3, 4)],
     lambda x, a, b: Args(x, a, b, value=2), lambda x, a, b: torch.addcmul(x, a, b, value=2),
     dtypes=("int64",))
case("addcdiv.default", "bcast", [Fl(3, 4), Fl(3, 4), NZ(4)],
     lambda x, a, b: Args(x, a, b, value=2), lambda x, a, b: torch.addcdiv(x, a, b, value=2))
case("xlogy.Tensor", "zeros", [IF(3, 4, lo=0, hi=3), Pos(3, 4)], ref=torch.special.xlogy)
case("xlogy.Tensor", "nan", [IF(3, 4, lo=0, hi=2), Special(3, 4)], ref=torch.xlogy, dtypes=F32)
case("heaviside.default", "basic", [IF(3, 4, lo=-1, hi=2), Fl(4)], ref=torch.heaviside)
case("heaviside.default", "int", [Int(3, 4, lo=-1, hi=2), Int(3, 4)], ref=torch.heaviside,
     dtypes=("int64",))

# ===== ELEMENTWISE: activations ==========================================================

case("hardtanh.default", "basic", [Fl(3, 5)], lambda x: Args(x, -0.5, 0.5),
     lambda x: F.hardtanh(x, -0.5, 0.5))
case("hardtanh.default", "relu6", [Fl(3, 5, lo=-2, hi=8)], lambda x: Args(x, 0.0, 6.0), F.relu6)
case("hardtanh.default", "defaults", [Fl(3, 5)], ref=F.hardtanh)
case("leaky_relu.default", "slope", [Fl(3, 5)], lambda x: Args(x, 0.2),
     lambda x: F.leaky_relu(x, 0.2))
case("leaky_relu.default", "defaults", [Fl(3, 5)], ref=F.leaky_relu)
case("elu.default", "alpha", [Fl(3, 5)], lambda x: Args(x, 1.5), lambda x: F.elu(x, alpha=1.5))
case("elu.default", "selu", [Fl(3, 5)],
     lambda x: Args(x, 1.6732632423543772848170429916717, 1.0507009873554804934193349852946),
     F.selu)
case("elu.default", "celu", [Fl(3, 5)], lambda x: Args(x, 2.0, 1, 0.5),
     lambda x: F.celu(x, alpha=2.0))
case("softplus.default", "beta_threshold", [Fl(3, 5, lo=-4, hi=4)],
     lambda x: Args(x, 2, 5), lambda x: F.softplus(x, beta=2, threshold=5))
case("softplus.default", "defaults", [Fl(3, 5, lo=-30, hi=30)], ref=F.softplus)
case("logit.default", "no_eps", [Fl(3, 5, lo=0.05, hi=0.95)], ref=torch.logit)
case("logit.default", "eps", [Fl(3, 5, lo=0.0, hi=1.0)], lambda x: Args(x, 0.1),
     lambda x: torch.logit(x, eps=0.1))

# ===== ELEMENTWISE: backward ops (reference through autograd) ===========================


def _bw_case(op, variant, fn, call, ir_from, shape=(3, 5), lo=-3.0, hi=3.0, **kw):
    """grad_output and x random; IR inputs from `ir_from(grad, x)`, ref = vjp of fn at x."""
    def make(dt, g):
        x = _uniform(shape, lo, hi, g).to(dt)
        grad = _uniform(shape, -1, 1, g).to(dt)
        return ir_from(grad, x), [grad, x], call
    add_case(op, variant, make, lambda grad, x: grad_of(fn, [x], grad), **kw)


_bw_case("sigmoid_backward.default", "basic", torch.sigmoid, _all,
         lambda gr, x: [gr, torch.sigmoid(x)])
_bw_case("tanh_backward.default", "basic", torch.tanh, _all, lambda gr, x: [gr, torch.tanh(x)])
_bw_case("threshold_backward.default", "relu", torch.relu, lambda gr, y: Args(gr, y, 0),
         lambda gr, x: [gr, torch.relu(x)])
_bw_case("threshold_backward.default", "threshold", lambda x: F.threshold(x, 0.5, 0.0),
         lambda gr, x: Args(gr, x, 0.5), lambda gr, x: [gr, x])
_bw_case("gelu_backward.default", "none", F.gelu, _all, lambda gr, x: [gr, x])
_bw_case("gelu_backward.default", "tanh", lambda x: F.gelu(x, approximate="tanh"),
         lambda gr, x: Args(gr, x, approximate="tanh"), lambda gr, x: [gr, x])
_bw_case("silu_backward.default", "basic", F.silu, _all, lambda gr, x: [gr, x])

# ===== ELEMENTWISE: casts and copies =====================================================

for _to in (torch.float64, torch.float32, torch.float16, torch.int32, torch.bool):
    _n = str(_to).removeprefix("torch.")
    case("_to_copy.default", f"to_{_n}", [Fl(3, 4, lo=-5, hi=5)],
         lambda x, d=_to: Args(x, dtype=d), lambda x, d=_to: x.to(d))
    case("prims.convert_element_type.default", f"to_{_n}", [Fl(3, 4, lo=-5, hi=5)],
         lambda x, d=_to: Args(x, d), lambda x, d=_to: x.to(d))
case("_to_copy.default", "no_dtype", [Fl(3, 4)], ref=lambda x: x.to(x.dtype, copy=True))
case("_to_copy.default", "int_to_float", [Int(3, 4)], lambda x: Args(x, dtype=torch.float32),
     lambda x: x.to(torch.float32), dtypes=("int64",))
case("_to_copy.default", "bool_to_float", [Bool(3, 4)], lambda x: Args(x, dtype=torch.float16),
     lambda x: x.to(torch.float16), dtypes=("bool",))
case("_to_copy.default", "nan_to_bool", [Special(3, 4)], lambda x: Args(x, dtype=torch.bool),
     lambda x: x.to(torch.bool))
case("prims.convert_element_type.default", "int_to_bf16", [Int(3, 4, lo=-300, hi=300)],
     lambda x: Args(x, torch.bfloat16), lambda x: x.to(torch.bfloat16), dtypes=("int64",))
case("clone.default", "basic", [Fl(3, 4)], ref=torch.clone)
case("clone.default", "channels_last", [Fl(2, 3, 4, 5)],
     lambda x: Args(x, memory_format=torch.channels_last),
     lambda x: x.clone(memory_format=torch.channels_last))
case("clone.default", "int", [Int(3, 4)], ref=torch.clone, dtypes=("int64",))
case("clone.default", "0d", [Fl()], ref=torch.clone, dtypes=F32)
case("copy.default", "bcast", [Fl(3, 4), Fl(4)], ref=lambda x, s: x.clone().copy_(s))
case("copy.default", "cast", [Fl(3, 4), Int(3, 4, dtype=torch.int64)],
     ref=lambda x, s: x.clone().copy_(s))
case("alias_copy.default", "basic", [Fl(3, 4)], ref=torch.alias_copy)
case("lift_fresh_copy.default", "basic", [Fl(3, 4)], ref=torch.clone)

