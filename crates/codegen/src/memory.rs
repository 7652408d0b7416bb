//! Loads and stores: address arithmetic, little-endian access of every element type, and the
//! half-precision conversions (`f16` and `bf16` are loaded as `f32` and stored rounded to
//! nearest-even), written with integer instructions to match the `half` crate's conversions
//! (and so the interpreter) bit for bit, NaN payloads included.
//!
//! The float8 and float4 formats are decoded inline as well (exact, NaNs canonical as
//! `kiln_runtime::minifloat::Format::decode` gives them); their stores call the runtime's
//! encoders, the same functions the interpreter uses. float8 e8m0 is a shift either way.
//! Sub-byte elements are reached by a byte address and a bit offset; a store into them is a
//! read-modify-write of the byte.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, Endianness, InstBuilder, MemFlagsData, Value};
use kiln_loops::{BufId, ElemType, Expr, ScalarType};
use kiln_runtime::minifloat::{self, Format, Specials};

use crate::expr::cl_type;
use crate::kernel::Cx;
use crate::CodegenError;

/// Flags of buffer accesses: the addresses are valid by the program's contract (lowering checks
/// data-dependent indices), but constants from a model file need not be aligned.
fn buffer_flags() -> MemFlagsData {
    MemFlagsData::new().with_notrap().with_endianness(Endianness::Little)
}

impl Cx<'_, '_> {
    /// Flags of loads from `buf`: a constant never changes during a run, so its loads may be
    /// hoisted out of loops (Cranelift's LICM moves only those) and merged.
    pub(crate) fn read_flags(&self, buf: BufId) -> MemFlagsData {
        let constant = self.program.buffers.get(buf.0 as usize).is_some_and(|b| matches!(b.kind, kiln_loops::BufferKind::Const(_)));
        if constant { buffer_flags().with_readonly().with_can_move() } else { buffer_flags() }
    }

    /// The element type of `buf`.
    fn elem(&self, buf: BufId) -> Result<ElemType, CodegenError> {
        self.program.buffers.get(buf.0 as usize).map(|b| b.elem).ok_or_else(|| self.invalid(format!("{buf:?} does not exist")))
    }

    /// The address of element `index` (an `i64` expression) of `buf`, whose elements are
    /// whole bytes.
    pub fn address(&mut self, buf: BufId, index: &Expr) -> Result<Value, CodegenError> {
        let elem = self.elem(buf)?;
        if elem.is_packed() {
            return Err(self.invalid(format!("the address of an element of {buf:?}, whose {} elements share bytes", elem.name())));
        }
        let (base, i) = self.base_and_index(buf, index)?;
        let offset = match elem.bits() / 8 {
            1 => i,
            n => self.b.ins().ishl_imm_u(i, i64::from(n.trailing_zeros())),
        };
        Ok(self.b.ins().iadd(base, offset))
    }

    fn base_and_index(&mut self, buf: BufId, index: &Expr) -> Result<(Value, Value), CodegenError> {
        let base = self.bases.get(buf.0 as usize).copied().flatten().ok_or_else(|| self.invalid(format!("{buf:?} has no base address")))?;
        let i = self.typed(index, ScalarType::I64).map_err(|e| self.invalid(format!("index into {buf:?}: {e}")))?;
        Ok((base, i))
    }

    /// The byte address of element `index` of a packed `buf` and the element's bit offset in
    /// that byte (`i64`).
    fn packed_slot(&mut self, buf: BufId, elem: ElemType, index: &Expr) -> Result<(Value, Value), CodegenError> {
        let (base, i) = self.base_and_index(buf, index)?;
        let per_byte = 8 / elem.bits();
        let byte = self.b.ins().ushr_imm_u(i, i64::from(per_byte.trailing_zeros()));
        let addr = self.b.ins().iadd(base, byte);
        let lane = self.b.ins().band_imm_u(i, i64::from(per_byte - 1));
        let shift = self.b.ins().imul_imm_u(lane, i64::from(elem.bits()));
        Ok((addr, shift))
    }

    /// Element `index` of `buf`, as a value of the buffer's value type.
    pub fn load(&mut self, buf: BufId, index: &Expr) -> Result<(Value, ScalarType), CodegenError> {
        let elem = self.elem(buf)?;
        let flags = self.read_flags(buf);
        if elem.is_packed() {
            let (addr, shift) = self.packed_slot(buf, elem, index)?;
            let byte = self.b.ins().load(types::I8, flags, addr, 0);
            let v = self.b.ins().ushr(byte, shift);
            let v = self.b.ins().band_imm_u(v, (1 << elem.bits()) - 1);
            let v = match elem {
                ElemType::I4 | ElemType::I2 => {
                    // Sign-extend from the element's width.
                    let up = i64::from(8 - elem.bits());
                    let v = self.b.ins().ishl_imm_u(v, up);
                    self.b.ins().sshr_imm_u(v, up)
                }
                ElemType::F4E2M1 => {
                    let code = self.b.ins().uextend(types::I32, v);
                    self.minifloat_to_f32(code, minifloat::E2M1)
                }
                _ => v,
            };
            return Ok((v, elem.value_type()));
        }
        let addr = self.address(buf, index)?;
        let v = match elem {
            ElemType::F16 => {
                let h = self.b.ins().load(types::I16, flags, addr, 0);
                self.f16_to_f32(h)
            }
            ElemType::BF16 => {
                let h = self.b.ins().load(types::I16, flags, addr, 0);
                self.bf16_to_f32(h)
            }
            ElemType::Scalar(ScalarType::Bool) => {
                // Any non-zero byte is true.
                let byte = self.b.ins().load(types::I8, flags, addr, 0);
                self.b.ins().icmp_imm_u(IntCC::NotEqual, byte, 0)
            }
            ElemType::Scalar(t) => self.b.ins().load(cl_type(t), flags, addr, 0),
            ElemType::F8E8M0 => {
                let byte = self.b.ins().load(types::I8, flags, addr, 0);
                let code = self.b.ins().uextend(types::I32, byte);
                self.e8m0_to_f32(code)
            }
            _ => {
                let format = minifloat_format(elem).ok_or_else(|| self.unsupported(format!("loads of {}", elem.name())))?;
                let byte = self.b.ins().load(types::I8, flags, addr, 0);
                let code = self.b.ins().uextend(types::I32, byte);
                self.minifloat_to_f32(code, format)
            }
        };
        Ok((v, elem.value_type()))
    }

    /// Stores `value` at element `index` of `buf`, converted to the element type.
    pub fn store(&mut self, buf: BufId, index: &Expr, value: &Expr) -> Result<(), CodegenError> {
        let elem = self.elem(buf)?;
        let v = self.typed(value, elem.value_type()).map_err(|e| self.invalid(format!("store into {buf:?} of {}: {e}", elem.name())))?;
        if elem.is_packed() {
            let bits = match elem {
                ElemType::F4E2M1 => {
                    let code = self.encode_minifloat(elem, v)?;
                    self.b.ins().ireduce(types::I8, code)
                }
                _ => v,
            };
            // Read-modify-write of the byte: clear the element's bits, then or in the new ones.
            let (addr, shift) = self.packed_slot(buf, elem, index)?;
            let mask = self.b.ins().iconst(types::I8, (1 << elem.bits()) - 1);
            let bits = self.b.ins().band(bits, mask);
            let bits = self.b.ins().ishl(bits, shift);
            let mask = self.b.ins().ishl(mask, shift);
            let old = self.b.ins().load(types::I8, buffer_flags(), addr, 0);
            let kept = self.b.ins().band_not(old, mask);
            let new = self.b.ins().bor(kept, bits);
            self.b.ins().store(buffer_flags(), new, addr, 0);
            return Ok(());
        }
        let addr = self.address(buf, index)?;
        let bits = match elem {
            ElemType::F16 => self.f32_to_f16(v),
            ElemType::BF16 => self.f32_to_bf16(v),
            // Bools are 0 or 1 in registers already.
            ElemType::Scalar(_) => v,
            ElemType::F8E8M0 => {
                // The exponent field (see `ElemType`).
                let x = self.b.ins().bitcast(types::I32, MemFlagsData::new(), v);
                let e = self.b.ins().ushr_imm_u(x, 23);
                self.b.ins().ireduce(types::I8, e)
            }
            _ => {
                let code = self.encode_minifloat(elem, v)?;
                self.b.ins().ireduce(types::I8, code)
            }
        };
        self.b.ins().store(buffer_flags(), bits, addr, 0);
        Ok(())
    }

    /// The code (`i32`, low bits) of a float8 or float4 format → `f32`, exactly; NaNs become
    /// the quiet NaN of their sign (the positive one for `fnuz`), as `Format::decode` gives.
    fn minifloat_to_f32(&mut self, code: Value, f: Format) -> Value {
        let width = f.exp_bits + f.man_bits;
        let exp_max = i64::from((1u32 << f.exp_bits) - 1);
        let man_max = i64::from((1u32 << f.man_bits) - 1);
        let sign = self.b.ins().band_imm_u(code, i64::from(f.sign_bit()));
        let sign = self.b.ins().ishl_imm_u(sign, i64::from(31 - width));
        let exp = self.b.ins().ushr_imm_u(code, i64::from(f.man_bits));
        let exp = self.b.ins().band_imm_u(exp, exp_max);
        let man = self.b.ins().band_imm_u(code, man_max);
        // Normal: rebias the exponent, widen the mantissa (every normal is an f32 normal).
        let e = self.b.ins().iadd_imm_s(exp, i64::from(127 - f.bias));
        let e = self.b.ins().ishl_imm_u(e, 23);
        let m = self.b.ins().ishl_imm_u(man, i64::from(23 - f.man_bits));
        let normal = self.b.ins().bor(e, m);
        // Zero and subnormal: man · 2^(1 − bias − man_bits), exact in f32.
        let mf = self.b.ins().fcvt_from_sint(types::F32, man);
        let scale = self.b.ins().f32const(2f32.powi(1 - f.bias - f.man_bits as i32));
        let small = self.b.ins().fmul(mf, scale);
        let small = self.b.ins().bitcast(types::I32, MemFlagsData::new(), small);
        let is_small = self.b.ins().icmp_imm_u(IntCC::Equal, exp, 0);
        let r = self.b.ins().select(is_small, small, normal);
        let r = self.b.ins().bor(r, sign);
        let r = match f.specials {
            Specials::Ieee => {
                let man_nonzero = self.b.ins().icmp_imm_u(IntCC::NotEqual, man, 0);
                let special = self.select_i32(man_nonzero, 0x7fc0_0000, 0x7f80_0000);
                let special = self.b.ins().bor(special, sign);
                let is_special = self.b.ins().icmp_imm_u(IntCC::Equal, exp, exp_max);
                self.b.ins().select(is_special, special, r)
            }
            Specials::FiniteNan => {
                let nan = (exp_max << f.man_bits) | man_max;
                let magnitude = self.b.ins().band_imm_u(code, nan);
                let is_nan = self.b.ins().icmp_imm_u(IntCC::Equal, magnitude, nan);
                let quiet = self.b.ins().bor_imm_u(sign, 0x7fc0_0000);
                self.b.ins().select(is_nan, quiet, r)
            }
            Specials::FiniteNanUnsignedZero => {
                let is_nan = self.b.ins().icmp_imm_u(IntCC::Equal, code, i64::from(f.sign_bit()));
                let quiet = self.b.ins().iconst(types::I32, 0x7fc0_0000);
                self.b.ins().select(is_nan, quiet, r)
            }
            Specials::FiniteOnly => r,
        };
        self.b.ins().bitcast(types::F32, MemFlagsData::new(), r)
    }

    /// A float8 e8m0 code (`i32`) → `f32`: `2^(code − 127)` (`2^−127` is the subnormal
    /// `0x0040_0000`), `0xff` a quiet NaN.
    fn e8m0_to_f32(&mut self, code: Value) -> Value {
        let r = self.b.ins().ishl_imm_u(code, 23);
        let is_zero = self.b.ins().icmp_imm_u(IntCC::Equal, code, 0);
        let tiny = self.b.ins().iconst(types::I32, 0x0040_0000);
        let r = self.b.ins().select(is_zero, tiny, r);
        let is_nan = self.b.ins().icmp_imm_u(IntCC::Equal, code, 0xff);
        let nan = self.b.ins().iconst(types::I32, 0x7fc0_0000);
        let r = self.b.ins().select(is_nan, nan, r);
        self.b.ins().bitcast(types::F32, MemFlagsData::new(), r)
    }

    /// `select(c, a, b)` on `i32` constants.
    fn select_i32(&mut self, c: Value, a: i64, b: i64) -> Value {
        let a = self.b.ins().iconst(types::I32, a);
        let b = self.b.ins().iconst(types::I32, b);
        self.b.ins().select(c, a, b)
    }

    /// binary16 bits (`i16`) → `f32`, exactly; NaNs keep their payload and become quiet.
    fn f16_to_f32(&mut self, h: Value) -> Value {
        let h = self.b.ins().uextend(types::I32, h);
        let sign = self.b.ins().band_imm_u(h, 0x8000);
        let sign = self.b.ins().ishl_imm_u(sign, 16);
        let exp = self.b.ins().ushr_imm_u(h, 10);
        let exp = self.b.ins().band_imm_u(exp, 0x1f);
        let man = self.b.ins().band_imm_u(h, 0x3ff);
        let man13 = self.b.ins().ishl_imm_u(man, 13);
        // Normal: rebias the exponent by 127 − 15.
        let e = self.b.ins().iadd_imm_u(exp, 112);
        let e = self.b.ins().ishl_imm_u(e, 23);
        let normal = self.b.ins().bor(e, man13);
        // Infinity and NaN: all-ones exponent, quiet bit set for NaN.
        let man_nonzero = self.b.ins().icmp_imm_u(IntCC::NotEqual, man, 0);
        let quiet = self.select_i32(man_nonzero, 0x40_0000, 0);
        let special = self.b.ins().bor_imm_u(man13, 0x7f80_0000);
        let special = self.b.ins().bor(special, quiet);
        // Zero and subnormal: man · 2^−24, exact in f32.
        let m = self.b.ins().fcvt_from_sint(types::F32, man);
        let scale = self.b.ins().f32const(f32::from_bits(0x3380_0000)); // 2^-24
        let small = self.b.ins().fmul(m, scale);
        let small = self.b.ins().bitcast(types::I32, MemFlagsData::new(), small);
        let is_small = self.b.ins().icmp_imm_u(IntCC::Equal, exp, 0);
        let is_special = self.b.ins().icmp_imm_u(IntCC::Equal, exp, 0x1f);
        let r = self.b.ins().select(is_small, small, normal);
        let r = self.b.ins().select(is_special, special, r);
        let r = self.b.ins().bor(r, sign);
        self.b.ins().bitcast(types::F32, MemFlagsData::new(), r)
    }

    /// `f32` → binary16 bits (`i16`), rounding to nearest-even; overflow gives infinity, NaNs
    /// keep the top of their payload and become quiet.
    fn f32_to_f16(&mut self, f: Value) -> Value {
        let x = self.b.ins().bitcast(types::I32, MemFlagsData::new(), f);
        let sign = self.b.ins().ushr_imm_u(x, 16);
        let sign = self.b.ins().band_imm_u(sign, 0x8000);
        let exp = self.b.ins().ushr_imm_u(x, 23);
        let exp = self.b.ins().band_imm_u(exp, 0xff);
        let man = self.b.ins().band_imm_u(x, 0x7f_ffff);
        let man_hi = self.b.ins().ushr_imm_u(man, 13);

        // Infinity and NaN.
        let man_nonzero = self.b.ins().icmp_imm_u(IntCC::NotEqual, man, 0);
        let quiet = self.select_i32(man_nonzero, 0x200, 0);
        let special = self.b.ins().bor_imm_u(man_hi, 0x7c00);
        let special = self.b.ins().bor(special, quiet);

        // Normal: rebias, then round half to even on the 13 dropped bits (a carry may run into
        // the exponent, up to infinity, which is the correct rounding).
        let e = self.b.ins().iadd_imm_s(exp, -112);
        let e = self.b.ins().ishl_imm_u(e, 10);
        let normal = self.b.ins().bor(e, man_hi);
        let up = self.round_up(man, 0x1000);
        let normal = self.b.ins().iadd(normal, up);

        // Subnormal (or zero): shift the significand with its hidden bit right by
        // 126 − exp ≥ 14; by 25 or more nothing is left, so the amount is capped at 31.
        let full = self.b.ins().bor_imm_u(man, 0x80_0000);
        let amount = self.b.ins().iconst(types::I32, 126);
        let amount = self.b.ins().isub(amount, exp);
        let cap = self.b.ins().iconst(types::I32, 31);
        let amount = self.b.ins().umin(amount, cap);
        let sub = self.b.ins().ushr(full, amount);
        let one = self.b.ins().iconst(types::I32, 1);
        let below = self.b.ins().iadd_imm_s(amount, -1);
        let half_bit = self.b.ins().ishl(one, below);
        let up = self.round_up_dynamic(full, half_bit);
        let sub = self.b.ins().iadd(sub, up);

        let is_special = self.b.ins().icmp_imm_u(IntCC::Equal, exp, 0xff);
        let is_overflow = self.b.ins().icmp_imm_u(IntCC::UnsignedGreaterThanOrEqual, exp, 143);
        let is_sub = self.b.ins().icmp_imm_u(IntCC::UnsignedLessThanOrEqual, exp, 112);
        let inf = self.b.ins().iconst(types::I32, 0x7c00);
        let r = self.b.ins().select(is_sub, sub, normal);
        let r = self.b.ins().select(is_overflow, inf, r);
        let r = self.b.ins().select(is_special, special, r);
        let r = self.b.ins().bor(r, sign);
        self.b.ins().ireduce(types::I16, r)
    }

    /// 1 if the bits below a truncation at `half` (a power of two: the first dropped bit)
    /// round up to nearest-even, else 0 (`i32`).
    fn round_up(&mut self, bits: Value, half: i64) -> Value {
        let h = self.b.ins().band_imm_u(bits, half);
        let h = self.b.ins().icmp_imm_u(IntCC::NotEqual, h, 0);
        // Above half, or exactly half with an odd kept bit.
        let rest = self.b.ins().band_imm_u(bits, 3 * half - 1);
        let rest = self.b.ins().icmp_imm_u(IntCC::NotEqual, rest, 0);
        let up = self.b.ins().band(h, rest);
        self.b.ins().uextend(types::I32, up)
    }

    /// [`round_up`](Self::round_up) with `half` a value.
    fn round_up_dynamic(&mut self, bits: Value, half: Value) -> Value {
        let h = self.b.ins().band(bits, half);
        let h = self.b.ins().icmp_imm_u(IntCC::NotEqual, h, 0);
        let three = self.b.ins().imul_imm_u(half, 3);
        let mask = self.b.ins().iadd_imm_s(three, -1);
        let rest = self.b.ins().band(bits, mask);
        let rest = self.b.ins().icmp_imm_u(IntCC::NotEqual, rest, 0);
        let up = self.b.ins().band(h, rest);
        self.b.ins().uextend(types::I32, up)
    }

    /// bfloat16 bits (`i16`) → `f32`: the top half of the word; NaNs become quiet.
    fn bf16_to_f32(&mut self, h: Value) -> Value {
        let h = self.b.ins().uextend(types::I32, h);
        let x = self.b.ins().ishl_imm_u(h, 16);
        let abs = self.b.ins().band_imm_u(h, 0x7fff);
        let nan = self.b.ins().icmp_imm_u(IntCC::UnsignedGreaterThan, abs, 0x7f80);
        let quiet = self.select_i32(nan, 0x40_0000, 0);
        let x = self.b.ins().bor(x, quiet);
        self.b.ins().bitcast(types::F32, MemFlagsData::new(), x)
    }

    /// `f32` → bfloat16 bits (`i16`), rounding to nearest-even; NaNs keep the top of their
    /// payload and become quiet.
    fn f32_to_bf16(&mut self, f: Value) -> Value {
        let x = self.b.ins().bitcast(types::I32, MemFlagsData::new(), f);
        let hi = self.b.ins().ushr_imm_u(x, 16);
        let up = self.round_up(x, 0x8000);
        let rounded = self.b.ins().iadd(hi, up);
        let quiet = self.b.ins().bor_imm_u(hi, 0x40);
        let abs = self.b.ins().band_imm_u(x, 0x7fff_ffff);
        let nan = self.b.ins().icmp_imm_u(IntCC::UnsignedGreaterThan, abs, 0x7f80_0000);
        let r = self.b.ins().select(nan, quiet, rounded);
        self.b.ins().ireduce(types::I16, r)
    }
}

/// The sign-exponent-mantissa format of a float8 or float4 storage type (not e8m0).
pub(crate) fn minifloat_format(elem: ElemType) -> Option<Format> {
    Some(match elem {
        ElemType::F8E4M3FN => minifloat::E4M3FN,
        ElemType::F8E4M3FNUZ => minifloat::E4M3FNUZ,
        ElemType::F8E5M2 => minifloat::E5M2,
        ElemType::F8E5M2FNUZ => minifloat::E5M2FNUZ,
        ElemType::F4E2M1 => minifloat::E2M1,
        _ => return None,
    })
}
