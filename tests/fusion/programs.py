"""Programs the fusion tests measure, written as JAX emits them (HLO text)."""

REDUCERS = """
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT sum = f32[] add(a, b)
}
max {
  mc = f32[] parameter(0)
  md = f32[] parameter(1)
  ROOT mm = f32[] maximum(mc, md)
}
"""

# argmax as JAX emits it: (value, index) pairs, ties to the lower index
ARGMAX_REDUCER = """
argmax {
  v0 = f32[] parameter(0)
  i0 = s32[] parameter(1)
  v1 = f32[] parameter(2)
  i1 = s32[] parameter(3)
  gt = pred[] compare(v0, v1), direction=GT
  eq = pred[] compare(v0, v1), direction=EQ
  lt = pred[] compare(i0, i1), direction=LT
  tie = pred[] and(eq, lt)
  keep = pred[] or(gt, tie)
  v = f32[] select(keep, v0, v1)
  i = s32[] select(keep, i0, i1)
  ROOT t = (f32[], s32[]) tuple(v, i)
}
"""

SUM_OF_FMA = f"""
HloModule sum_fma
{REDUCERS}
ENTRY main {{
  x = f32[4096] parameter(0)
  y = f32[4096] parameter(1)
  z = f32[4096] parameter(2)
  yz = f32[4096] multiply(y, z)
  s = f32[4096] add(x, yz)
  zero = f32[] constant(0)
  ROOT total = f32[] reduce(s, zero), dimensions={{0}}, to_apply=add
}}
"""

# 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))
GELU_TANH = """
HloModule gelu
ENTRY main {
  x = f32[64,128] parameter(0)
  x2 = f32[64,128] multiply(x, x)
  x3 = f32[64,128] multiply(x2, x)
  c1 = f32[] constant(0.044715)
  c1b = f32[64,128] broadcast(c1), dimensions={}
  t1 = f32[64,128] multiply(c1b, x3)
  inner = f32[64,128] add(x, t1)
  c2 = f32[] constant(0.797884583)
  c2b = f32[64,128] broadcast(c2), dimensions={}
  scaled = f32[64,128] multiply(c2b, inner)
  th = f32[64,128] tanh(scaled)
  one = f32[] constant(1)
  oneb = f32[64,128] broadcast(one), dimensions={}
  onep = f32[64,128] add(oneb, th)
  half = f32[] constant(0.5)
  halfb = f32[64,128] broadcast(half), dimensions={}
  hx = f32[64,128] multiply(halfb, x)
  ROOT out = f32[64,128] multiply(hx, onep)
}
"""

SOFTMAX = f"""
HloModule softmax
{REDUCERS}
ENTRY main {{
  x = f32[32,100] parameter(0)
  ninf = f32[] constant(-inf)
  mx = f32[32] reduce(x, ninf), dimensions={{1}}, to_apply=max
  mxs = f32[32] maximum(mx, mx)
  mxb = f32[32,100] broadcast(mxs), dimensions={{0}}
  sh = f32[32,100] subtract(x, mxb)
  e = f32[32,100] exponential(sh)
  zero = f32[] constant(0)
  s = f32[32] reduce(e, zero), dimensions={{1}}, to_apply=add
  sb = f32[32,100] broadcast(s), dimensions={{0}}
  ROOT out = f32[32,100] divide(e, sb)
}}
"""

LAYER_NORM = f"""
HloModule layer_norm
{REDUCERS}
ENTRY main {{
  x = f32[16,64] parameter(0)
  scale = f32[64] parameter(1)
  bias = f32[64] parameter(2)
  zero = f32[] constant(0)
  s = f32[16] reduce(x, zero), dimensions={{1}}, to_apply=add
  n = f32[] constant(64)
  nb = f32[16] broadcast(n), dimensions={{}}
  mean = f32[16] divide(s, nb)
  meanb = f32[16,64] broadcast(mean), dimensions={{0}}
  c = f32[16,64] subtract(x, meanb)
  sq = f32[16,64] multiply(c, c)
  ss = f32[16] reduce(sq, zero), dimensions={{1}}, to_apply=add
  var = f32[16] divide(ss, nb)
  eps = f32[] constant(1e-05)
  epsb = f32[16] broadcast(eps), dimensions={{}}
  ve = f32[16] add(var, epsb)
  r = f32[16] rsqrt(ve)
  rb = f32[16,64] broadcast(r), dimensions={{0}}
  normed = f32[16,64] multiply(c, rb)
  scb = f32[16,64] broadcast(scale), dimensions={{1}}
  bb = f32[16,64] broadcast(bias), dimensions={{1}}
  scaled = f32[16,64] multiply(normed, scb)
  ROOT out = f32[16,64] add(scaled, bb)
}}
"""

DENSE_RELU = """
HloModule dense
ENTRY main {
  x = f32[32,64] parameter(0)
  w = f32[64,48] parameter(1)
  b = f32[48] parameter(2)
  d = f32[32,48] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  bb = f32[32,48] broadcast(b), dimensions={1}
  h = f32[32,48] add(d, bb)
  zero = f32[] constant(0)
  zb = f32[32,48] broadcast(zero), dimensions={}
  ROOT r = f32[32,48] maximum(h, zb)
}
"""
