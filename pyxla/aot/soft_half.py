"""IEEE half <-> float conversions for targets without F16C, defined in the object itself.

On such a CPU LLVM lowers `fpext half` and `fptrunc float to half` to calls of
`__extendhfsf2` and `__truncsfhf2`, which live in libgcc / compiler-rt, not in libc or libm.
An AOT object for such a target defines them (internal, kept by llvm.compiler.used) by
integer arithmetic: exact widening, and narrowing rounded to nearest even with NaNs quiet
(F. Giesen's float_to_half_fast3_rtne). The host's own conversions are exact the same way.
"""

SOFT_HALF_IR = r"""
define internal float @__extendhfsf2(half %h) {
start:
  %bits = bitcast half %h to i16
  %u = zext i16 %bits to i32
  %sign = shl i32 %u, 16
  %s = and i32 %sign, 2147483648
  %e = lshr i32 %u, 10
  %exp = and i32 %e, 31
  %mant = and i32 %u, 1023
  %is_special = icmp eq i32 %exp, 31
  %is_small = icmp eq i32 %exp, 0
  %m13 = shl i32 %mant, 13
  %rebias = add i32 %exp, 112
  %ebits = shl i32 %rebias, 23
  %normal = or i32 %ebits, %m13
  %special = or i32 %m13, 2139095040
  %mf = uitofp i32 %mant to float
  %sub = fmul float %mf, 0x3E70000000000000
  %subbits = bitcast float %sub to i32
  %a = select i1 %is_special, i32 %special, i32 %normal
  %b = select i1 %is_small, i32 %subbits, i32 %a
  %r = or i32 %b, %s
  %f = bitcast i32 %r to float
  ret float %f
}

define internal half @__truncsfhf2(float %f) {
start:
  %u = bitcast float %f to i32
  %sign32 = lshr i32 %u, 16
  %sign = and i32 %sign32, 32768
  %abs = and i32 %u, 2147483647
  %is_nan = icmp ugt i32 %abs, 2139095040
  %too_big = icmp uge i32 %abs, 1199570944
  %is_small = icmp ult i32 %abs, 947912704
  %absf = bitcast i32 %abs to float
  %dn = fadd float %absf, 5.000000e-01
  %dnbits = bitcast float %dn to i32
  %small = sub i32 %dnbits, 1056964608
  %odd13 = lshr i32 %abs, 13
  %odd = and i32 %odd13, 1
  %n1 = add i32 %abs, -939520001
  %n2 = add i32 %n1, %odd
  %normal = lshr i32 %n2, 13
  %big = select i1 %is_nan, i32 32256, i32 31744
  %a = select i1 %is_small, i32 %small, i32 %normal
  %b = select i1 %too_big, i32 %big, i32 %a
  %r = or i32 %b, %sign
  %t = trunc i32 %r to i16
  %h = bitcast i16 %t to half
  ret half %h
}

@llvm.compiler.used = appending global [2 x ptr] [ptr @__extendhfsf2, ptr @__truncsfhf2], section "llvm.metadata"
"""
