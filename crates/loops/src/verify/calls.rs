//! The verifier's checks of runtime calls: every operand against its routine's signature
//! (`crate::call`'s table), then the routine's constant codes and the extent each buffer
//! address spans from its base (`extents.rs`).

use super::{Cx, Range};
use crate::call::{Elems, Operand, OperandKind};
use crate::ir::*;

impl<'a> Cx<'a> {
    /// Checks a runtime call's operands, constant codes and the extent each address spans
    /// (invariants 9, 11 and 12 of the module doc).
    pub(super) fn call(&mut self, call: &'a Call) {
        let f = call.kind();
        let name = f.name();
        // Each address by operand name, with its buffer and the interval of its index.
        let mut addrs: Vec<(&'static str, BufId, &'a Buffer, Range)> = Vec::new();
        let mut complete = true;
        // The first operand of any whole-byte type, whose type the others share.
        let mut first_bytes: Option<(BufId, &Buffer)> = None;
        for (spec, operand) in f.signature().iter().zip(call.operands()) {
            // The table gives each operand the field type of its kind: an address has an address
            // kind, a value a value kind.
            match operand {
                Operand::Addr(a) => {
                    let OperandKind::Addr(_, elems) = spec.kind else { continue };
                    let r = self.index(&a.index, &format!("{name} address"));
                    let Some(b) = self.buffer(a.buf) else {
                        complete = false;
                        continue;
                    };
                    match elems {
                        // Any element type with whole bytes, the same for every such operand.
                        Elems::Bytes => {
                            if b.elem.is_packed() {
                                self.err(format!("{name} operand `{}` is @{} of packed {} elements", spec.name, a.buf.0, b.elem.name()));
                            }
                            match first_bytes {
                                Some((first, fb)) if fb.elem != b.elem => {
                                    self.err(format!("{name} from @{} of {} elements into @{} of {}", a.buf.0, b.elem.name(), first.0, fb.elem.name()));
                                }
                                Some(_) => {}
                                None => first_bytes = Some((a.buf, b)),
                            }
                        }
                        Elems::Int8 => {
                            if !matches!(b.elem, ElemType::Scalar(ScalarType::I8 | ScalarType::U8)) {
                                self.err(format!("{name} operand `{}` is @{} of {} elements, not i8 or u8", spec.name, a.buf.0, b.elem.name()));
                            }
                        }
                        Elems::I32 => {
                            if b.elem != ElemType::Scalar(ScalarType::I32) {
                                self.err(format!("{name} operand `{}` is @{} of {} elements, not i32", spec.name, a.buf.0, b.elem.name()));
                            }
                        }
                        Elems::F32 => {
                            if b.elem != ElemType::Scalar(ScalarType::F32) {
                                self.err(format!("{name} operand `{}` is @{} of {} elements, not f32", spec.name, a.buf.0, b.elem.name()));
                            }
                        }
                    }
                    if spec.kind.writes() {
                        self.writable(a.buf, b);
                    }
                    addrs.push((spec.name, a.buf, b, r));
                }
                Operand::Value(e) => {
                    let want = if spec.kind == OperandKind::F32 { ScalarType::F32 } else { ScalarType::I64 };
                    if let Some(got) = self.expr(e)
                        && got != want
                    {
                        self.err(format!("{name} operand `{}` is {}, not {}", spec.name, got.name(), want.name()));
                    }
                }
            }
        }
        if !complete {
            return;
        }
        for (operand, span, what) in self.extents(call) {
            if span < 0 {
                continue;
            }
            let Some((_, id, buf, r)) = addrs.iter().find(|a| a.0 == operand) else { continue };
            let widened = if r.known() { Range::make(r.lo, r.hi + span, r.exact, r.vars.clone()) } else { Range::TOP };
            self.bounds(what, *id, buf, &widened);
        }
    }
}
