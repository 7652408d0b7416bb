//! Relocatable object files: [`compile_object`] and the C ABI of what it writes.
//!
//! The object holds the kernels and their entry function (local symbols), the constants in
//! read-only data, and two exported functions, for a model named `NAME`:
//!
//! - `int32_t NAME_run(void *arena, const void *const *inputs, void *const *outputs)`: runs the
//!   model (with [`Weights::External`], `NAME_run(const void *weights, void *arena, ...)`, the
//!   weights being the bytes of [`ObjectCode::weights`], aligned to [`ARENA_ALIGN`]). `arena` is caller memory of [`ObjectCode::arena_bytes`] bytes, aligned to
//!   [`ARENA_ALIGN`]; `inputs[i]` and `outputs[i]` point to the `i`-th graph input and output,
//!   each aligned to [`BUFFER_ALIGN`]. Outputs are zeroed before the kernels run. The status is
//!   0 on success, `k + 1` when the model's check `k` fails (an index out of range, a stop), and
//!   [`STATUS_BAD_ARENA`] or [`STATUS_BAD_BUFFER`] for arguments that break the contract.
//! - `const char *NAME_error_string(int32_t status)`: a sentence for any status.
//!
//! Nothing is written outside the arena and the outputs, and nothing global is: two threads
//! with two arenas may run one model at once. The kernels' buffer table is kept at the start
//! of the arena, not on the stack, so a model with thousands of buffers runs on a small stack.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, AbiParam, InstBuilder, MemFlagsData, UserFuncName};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_module::{default_libcall_names, DataDescription, DataId, FuncId, Linkage, Module};
use cranelift_object::{ObjectBuilder, ObjectModule};
use kiln_loops::{BufferKind, Program};
use kiln_target::Target;

use crate::jit::KernelStats;
use crate::module::{target_isa, translate, Exports};
use crate::{CodegenError, CodegenOptions};

/// The alignment the arena must have.
pub const ARENA_ALIGN: u64 = 64;
/// The alignment every input and output buffer must have.
pub const BUFFER_ALIGN: u64 = 16;
/// `NAME_run`'s status for a null or misaligned arena.
pub const STATUS_BAD_ARENA: i32 = -1;
/// `NAME_run`'s status for a null or misaligned input or output, or array of them.
pub const STATUS_BAD_BUFFER: i32 = -2;
/// `NAME_run`'s status for weights that are null, misaligned or another object's.
pub const STATUS_BAD_WEIGHTS: i32 = -3;

/// Where an object's constants live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Weights {
    /// In the object's read-only data.
    Embedded,
    /// In a separate file ([`ObjectCode::weights`]) the caller loads and passes to `NAME_run`.
    External,
}

/// The weights file's first bytes; then a little-endian `u32` version (1), four zero bytes, the
/// fingerprint (FNV-1a over everything after the 64-byte header) and the file's length, as the
/// target's `u64`s, and zeros up to byte 64, where the first constant starts. Every constant
/// starts at a multiple of 64.
pub const WEIGHTS_MAGIC: [u8; 8] = *b"KILNWTS\0";
const WEIGHTS_HEADER: u64 = 64;

/// The alignment of constants in read-only data: a cache line, as the runtime's packed panels
/// like.
const CONST_ALIGN: u64 = 64;

/// A compiled object file and what its C ABI needs.
#[derive(Clone, Debug)]
pub struct ObjectCode {
    /// The object file's bytes (ELF, Mach-O or COFF, as the triple says).
    pub bytes: Vec<u8>,
    /// The arena `NAME_run` needs: the buffer table, then the memory plan's intermediates.
    pub arena_bytes: u64,
    /// The exported run function.
    pub run_symbol: String,
    /// The exported error-string function.
    pub error_symbol: String,
    /// The symbols the object needs from outside (runtime, libc, libm), sorted.
    pub imports: Vec<String>,
    /// With [`Weights::External`], the weights file's bytes.
    pub weights: Option<Vec<u8>>,
    /// Per-kernel compile figures, in program order.
    pub stats: Vec<KernelStats>,
}

/// Where the memory plan put the intermediates.
#[derive(Clone, Copy, Debug)]
pub struct ArenaPlan<'p> {
    /// Arena byte offset of each temp buffer (`None` for the others and unused temps).
    pub offsets: &'p [Option<u64>],
    /// The plan's arena size in bytes.
    pub bytes: u64,
}

/// Whether `name` can prefix C symbols: an identifier of ASCII letters, digits and `_`.
pub fn is_c_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_') && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Compiles `program` for `target` into an object file whose exported functions are named
/// `{name}_run` and `{name}_error_string`. Calls go to `kiln_runtime`'s symbols when the
/// target has the runtime (linked from its static library), else to libc and libm only, and
/// then the program must have no runtime call but copies (`kiln_lower::plain`).
pub fn compile_object(program: &Program, arena: ArenaPlan<'_>, target: &Target, options: &CodegenOptions, name: &str, weights: Weights) -> Result<ObjectCode, CodegenError> {
    if !is_c_identifier(name) {
        return Err(CodegenError::Invalid { kernel: "(object)".into(), message: format!("the name {name:?} is not a C identifier") });
    }
    let cl_err = |what: &str, e: &dyn std::fmt::Display| CodegenError::Cranelift { kernel: what.to_string(), message: e.to_string() };
    let mut module = new_module(target, name)?;
    let libc = !target.has_runtime();
    let entry_symbol = format!("{name}_entry");
    let exports = Exports { entry: Some(&entry_symbol), linkage: Linkage::Local, libc, simd: crate::module::has_simd(target) };
    // Loops split over threads need the runtime's pool, which an object does not start.
    let mut options = *options;
    options.parallel_loops = false;
    let translated = translate(&mut module, program, &options, &exports, &mut |module, id, _, ctx| match ctx {
        Some(ctx) => module.define_function(id, ctx).map_err(|e| CodegenError::Cranelift { kernel: String::new(), message: format!("{e:?}") }),
        None => Ok(()),
    })?;
    let entry = translated.entry.ok_or_else(|| CodegenError::Invalid { kernel: "(object)".into(), message: "no entry function was made".into() })?;

    // Constants no kernel reads (weights that were packed into new buffers) are left out.
    let used = crate::kernel::used_buffers(program);
    let (consts, file) = match weights {
        Weights::Embedded => (define_constants(&mut module, program, &used, name)?, None),
        Weights::External => {
            let (places, file) = weights_file(program, &used, module.isa().endianness() == cranelift_codegen::ir::Endianness::Big)?;
            (places, Some(file))
        }
    };
    let ptr_bytes = u64::from(module.target_config().pointer_type().bytes());
    let table_bytes = (program.buffers.len() as u64 * ptr_bytes).div_ceil(ARENA_ALIGN) * ARENA_ALIGN;
    let arena_bytes = table_bytes.checked_add(arena.bytes).ok_or_else(|| CodegenError::Invalid { kernel: "(object)".into(), message: "the arena size overflows".into() })?;
    let run_symbol = format!("{name}_run");
    define_run(&mut module, program, arena, table_bytes, entry, &consts, file.as_deref(), &run_symbol)?;
    let error_symbol = format!("{name}_error_string");
    define_error_string(&mut module, program, name, &error_symbol)?;

    let mut imports: Vec<String> = module
        .declarations()
        .get_functions()
        .filter(|(_, f)| f.linkage == Linkage::Import)
        .map(|(id, f)| f.linkage_name(id).into_owned())
        .collect();
    imports.sort();
    imports.dedup();
    let product = module.finish();
    let bytes = product.emit().map_err(|e| cl_err("(object)", &e))?;
    Ok(ObjectCode { bytes, arena_bytes, run_symbol, error_symbol, imports, weights: file, stats: translated.stats })
}

/// An object-file module for `target` (position-independent code), named `{name}.o`.
pub(crate) fn new_module(target: &Target, name: &str) -> Result<ObjectModule, CodegenError> {
    let isa = target_isa(target, true)?;
    let builder = ObjectBuilder::new(isa, format!("{name}.o"), default_libcall_names()).map_err(|e| CodegenError::Cranelift { kernel: "(object)".into(), message: e.to_string() })?;
    Ok(ObjectModule::new(builder))
}

/// Where `NAME_run` finds a constant buffer.
#[derive(Clone, Copy, Debug)]
enum Place {
    /// A read-only data object of the object file.
    Data(DataId),
    /// This many bytes past the start of the weights.
    Offset(u64),
}

/// The bytes of constant buffer `buffer`.
fn const_bytes(buffer: &kiln_loops::Buffer) -> Result<&[u8], CodegenError> {
    let BufferKind::Const(t) = &buffer.kind else { return Ok(&[]) };
    t.raw().ok_or_else(|| CodegenError::Unsupported { kernel: "(object)".into(), what: format!("constant {:?} has no raw bytes", buffer.name) })
}

/// The weights file of `program` and each constant's offset in it.
fn weights_file(program: &Program, used: &[bool], big_endian: bool) -> Result<(Vec<Option<Place>>, Vec<u8>), CodegenError> {
    let mut file = vec![0u8; WEIGHTS_HEADER as usize];
    let mut places = vec![None; program.buffers.len()];
    for (i, buffer) in program.buffers.iter().enumerate() {
        if !matches!(buffer.kind, BufferKind::Const(_)) || !used[i] {
            continue;
        }
        let at = file.len().div_ceil(CONST_ALIGN as usize) * CONST_ALIGN as usize;
        file.resize(at, 0);
        file.extend_from_slice(const_bytes(buffer)?);
        places[i] = Some(Place::Offset(at as u64));
    }
    let fingerprint = fnv1a(&file[WEIGHTS_HEADER as usize..]);
    let word = |v: u64| if big_endian { v.to_be_bytes() } else { v.to_le_bytes() };
    let len = file.len() as u64;
    file[..8].copy_from_slice(&WEIGHTS_MAGIC);
    file[8..12].copy_from_slice(&1u32.to_le_bytes());
    file[16..24].copy_from_slice(&word(fingerprint));
    file[24..32].copy_from_slice(&word(len));
    Ok((places, file))
}

/// 64-bit FNV-1a.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// One read-only data object per constant buffer a kernel reads, by buffer index.
fn define_constants(module: &mut ObjectModule, program: &Program, used: &[bool], name: &str) -> Result<Vec<Option<Place>>, CodegenError> {
    let mut ids = vec![None; program.buffers.len()];
    for (i, buffer) in program.buffers.iter().enumerate() {
        if !matches!(buffer.kind, BufferKind::Const(_)) || !used[i] {
            continue;
        }
        let bytes = const_bytes(buffer)?;
        let symbol = format!("{name}_c{i}");
        let id = module.declare_data(&symbol, Linkage::Local, false, false).map_err(|e| CodegenError::Cranelift { kernel: symbol.clone(), message: e.to_string() })?;
        let mut desc = DataDescription::new();
        // An empty constant still needs an address; one zero byte gives it one.
        desc.define(if bytes.is_empty() { vec![0u8].into_boxed_slice() } else { bytes.to_vec().into_boxed_slice() });
        desc.set_align(CONST_ALIGN);
        module.define_data(id, &desc).map_err(|e| CodegenError::Cranelift { kernel: symbol.clone(), message: e.to_string() })?;
        ids[i] = Some(Place::Data(id));
    }
    Ok(ids)
}

/// `NAME_run([weights,] arena, inputs, outputs) -> status`: checks the arguments, fills the
/// buffer table at the start of the arena, zeroes the outputs and calls the entry function.
/// `file` is the weights file when the constants are external.
#[allow(clippy::too_many_arguments)]
fn define_run(module: &mut ObjectModule, program: &Program, arena: ArenaPlan<'_>, table_bytes: u64, entry: FuncId, consts: &[Option<Place>], file: Option<&[u8]>, symbol: &str) -> Result<(), CodegenError> {
    let cl_err = |e: &dyn std::fmt::Display| CodegenError::Cranelift { kernel: symbol.to_string(), message: e.to_string() };
    let ptr = module.target_config().pointer_type();
    let mut sig = module.make_signature();
    sig.params.extend(vec![AbiParam::new(ptr); if file.is_some() { 4 } else { 3 }]);
    sig.returns.push(AbiParam::new(types::I32));
    let id = module.declare_function(symbol, Linkage::Export, &sig).map_err(|e| cl_err(&e))?;
    let mut memset_sig = module.make_signature();
    memset_sig.params.extend([AbiParam::new(ptr), AbiParam::new(types::I32), AbiParam::new(ptr)]);
    memset_sig.returns.push(AbiParam::new(ptr));
    let memset = module.declare_function("memset", Linkage::Import, &memset_sig).map_err(|e| cl_err(&e))?;

    let mut ctx = module.make_context();
    ctx.func.signature = sig;
    ctx.func.name = UserFuncName::testcase(symbol);
    let entry_ref = module.declare_func_in_func(entry, &mut ctx.func);
    let memset_ref = module.declare_func_in_func(memset, &mut ctx.func);
    let const_gvs: Vec<_> = consts.iter().map(|c| if let Some(Place::Data(id)) = c { Some(module.declare_data_in_func(*id, &mut ctx.func)) } else { None }).collect();
    let mut fctx = FunctionBuilderContext::new();
    let mut b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
    let start = b.create_block();
    b.append_block_params_for_function_params(start);
    b.switch_to_block(start);
    b.seal_block(start);
    let params = b.block_params(start).to_vec();
    let (weights, [base, inputs, outputs]) = match params[..] {
        [w, a, i, o] => (Some(w), [a, i, o]),
        [a, i, o] => (None, [a, i, o]),
        _ => unreachable!("three or four parameters were declared"),
    };
    let fail = b.create_block();
    let status = b.append_block_param(fail, types::I32);
    b.set_cold_block(fail);

    // Branches to `fail` with `code` unless `p` is non-null and a multiple of `align`.
    let check = |b: &mut FunctionBuilder<'_>, p, align: u64, code: i32| {
        let low = b.ins().band_imm_s(p, (align - 1) as i64);
        let null = b.ins().icmp_imm_s(IntCC::Equal, p, 0);
        let null = b.ins().uextend(ptr, null);
        let bad = b.ins().bor(low, null);
        let s = b.ins().iconst(types::I32, i64::from(code));
        let next = b.create_block();
        b.ins().brif(bad, fail, &[cranelift_codegen::ir::BlockArg::Value(s)], next, &[]);
        b.seal_block(next);
        b.switch_to_block(next);
    };
    check(&mut b, base, ARENA_ALIGN, STATUS_BAD_ARENA);
    // The arrays of pointers themselves, before any element is read.
    let has = |kind: fn(&BufferKind) -> bool| program.buffers.iter().any(|buf| kind(&buf.kind));
    if has(|k| matches!(k, BufferKind::Input(_))) {
        check(&mut b, inputs, u64::from(ptr.bytes()), STATUS_BAD_BUFFER);
    }
    if has(|k| matches!(k, BufferKind::Output(_))) {
        check(&mut b, outputs, u64::from(ptr.bytes()), STATUS_BAD_BUFFER);
    }
    let flags = MemFlagsData::trusted();
    if let (Some(w), Some(file)) = (weights, file) {
        // The weights must be this object's: its magic, and its fingerprint where it says.
        check(&mut b, w, CONST_ALIGN, STATUS_BAD_WEIGHTS);
        let stored = [(0, &file[..8]), (16, &file[16..24])];
        for (offset, bytes) in stored {
            // The word as the target reads it from the file's bytes.
            let bytes: [u8; 8] = bytes.try_into().expect("eight bytes");
            let word = if module.isa().endianness() == cranelift_codegen::ir::Endianness::Big { i64::from_be_bytes(bytes) } else { i64::from_le_bytes(bytes) };
            let want = b.ins().iconst(types::I64, word);
            let got = b.ins().load(types::I64, MemFlagsData::trusted().with_readonly(), w, offset);
            let differs = b.ins().icmp(IntCC::NotEqual, got, want);
            let s = b.ins().iconst(types::I32, i64::from(STATUS_BAD_WEIGHTS));
            let next = b.create_block();
            b.ins().brif(differs, fail, &[cranelift_codegen::ir::BlockArg::Value(s)], next, &[]);
            b.seal_block(next);
            b.switch_to_block(next);
        }
    }
    let slot = |i: usize| i32::try_from(i as u64 * u64::from(ptr.bytes())).map_err(|_| CodegenError::Invalid { kernel: symbol.to_string(), message: "too many buffers".into() });
    for (i, buffer) in program.buffers.iter().enumerate() {
        let value = match &buffer.kind {
            BufferKind::Input(n) | BufferKind::Output(n) => {
                let list = if matches!(buffer.kind, BufferKind::Input(_)) { inputs } else { outputs };
                let p = b.ins().load(ptr, flags, list, slot(*n)?);
                check(&mut b, p, BUFFER_ALIGN, STATUS_BAD_BUFFER);
                if matches!(buffer.kind, BufferKind::Output(_)) {
                    let zero = b.ins().iconst(types::I32, 0);
                    let len = b.ins().iconst(ptr, buffer.bytes() as i64);
                    b.ins().call(memset_ref, &[p, zero, len]);
                }
                p
            }
            BufferKind::Const(_) => match (const_gvs[i], consts[i], weights) {
                (Some(gv), _, _) => b.ins().symbol_value(ptr, gv),
                (None, Some(Place::Offset(off)), Some(w)) => b.ins().iadd_imm_s(w, off as i64),
                _ => b.ins().iconst(ptr, 0),
            },
            BufferKind::Temp => match arena.offsets.get(i).copied().flatten() {
                Some(off) if off.checked_add(buffer.bytes()).is_some_and(|end| end <= arena.bytes) => b.ins().iadd_imm_s(base, (table_bytes + off) as i64),
                Some(off) => return Err(CodegenError::Invalid { kernel: symbol.to_string(), message: format!("buffer {i} at arena offset {off} does not fit the plan's {} bytes", arena.bytes) }),
                None => b.ins().iconst(ptr, 0),
            },
        };
        b.ins().store(flags, value, base, slot(i)?);
    }
    let call = b.ins().call(entry_ref, &[base]);
    let s = b.inst_results(call)[0];
    b.ins().return_(&[s]);
    b.switch_to_block(fail);
    b.seal_block(fail);
    b.ins().return_(&[status]);
    b.finalize(module.target_config());
    module.define_function(id, &mut ctx).map_err(|e| cl_err(&format!("{e:?}")))?;
    Ok(())
}

/// The sentences for every status, in the order `NAME_error_string` indexes them: success,
/// the argument errors (−1, −2, −3), the model's checks, and a last one for any other status.
fn messages(program: &Program) -> Vec<String> {
    let mut m = vec![
        "success".to_string(),
        format!("the arena is null or not aligned to {ARENA_ALIGN} bytes"),
        format!("an input or output pointer is null or not aligned to {BUFFER_ALIGN} bytes"),
        format!("the weights are null, not aligned to {CONST_ALIGN} bytes, or not the file written with this object"),
    ];
    m.extend(program.errors.iter().cloned());
    m.push("unknown status".to_string());
    m
}

/// `NAME_error_string(status) -> const char *`: a table of offsets into one block of
/// NUL-terminated sentences, indexed from the status by branch-free selects.
fn define_error_string(module: &mut ObjectModule, program: &Program, name: &str, symbol: &str) -> Result<(), CodegenError> {
    let cl_err = |e: &dyn std::fmt::Display| CodegenError::Cranelift { kernel: symbol.to_string(), message: e.to_string() };
    let messages = messages(program);
    let mut text = Vec::new();
    let mut offsets = Vec::with_capacity(messages.len() * 4);
    for m in &messages {
        let off = u32::try_from(text.len()).map_err(|_| CodegenError::Invalid { kernel: symbol.to_string(), message: "the error messages exceed 4 GiB".into() })?;
        offsets.extend_from_slice(&off.to_le_bytes());
        // A NUL inside a message would end it early in C; none comes from kiln's own text.
        text.extend(m.bytes().map(|c| if c == 0 { b' ' } else { c }));
        text.push(0);
    }
    if module.isa().endianness() == cranelift_codegen::ir::Endianness::Big {
        for chunk in offsets.chunks_mut(4) {
            chunk.reverse();
        }
    }
    let mut data = |suffix: &str, bytes: Vec<u8>, align: u64| -> Result<DataId, CodegenError> {
        let id = module.declare_data(&format!("{name}_{suffix}"), Linkage::Local, false, false).map_err(|e| cl_err(&e))?;
        let mut desc = DataDescription::new();
        desc.define(bytes.into_boxed_slice());
        desc.set_align(align);
        module.define_data(id, &desc).map_err(|e| cl_err(&e))?;
        Ok(id)
    };
    let text_id = data("messages", text, 1)?;
    let offsets_id = data("message_offsets", offsets, 4)?;

    let ptr = module.target_config().pointer_type();
    let mut sig = module.make_signature();
    sig.params.push(AbiParam::new(types::I32));
    sig.returns.push(AbiParam::new(ptr));
    let id = module.declare_function(symbol, Linkage::Export, &sig).map_err(|e| cl_err(&e))?;
    let mut ctx = module.make_context();
    ctx.func.signature = sig;
    ctx.func.name = UserFuncName::testcase(symbol);
    let text_gv = module.declare_data_in_func(text_id, &mut ctx.func);
    let offsets_gv = module.declare_data_in_func(offsets_id, &mut ctx.func);
    let mut fctx = FunctionBuilderContext::new();
    let mut b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
    let start = b.create_block();
    b.append_block_params_for_function_params(start);
    b.switch_to_block(start);
    b.seal_block(start);
    let status = b.block_params(start)[0];
    let s = b.ins().sextend(types::I64, status);
    let last = messages.len() as i64 - 1;
    // status > 0: the model's check status − 1, at index status + 3; 0, −1, −2, −3 at 0..=3.
    let positive = b.ins().iadd_imm_s(s, 3);
    let negated = b.ins().ineg(s);
    let is_positive = b.ins().icmp_imm_s(IntCC::SignedGreaterThan, s, 0);
    let index = b.ins().select(is_positive, positive, negated);
    // Anything else (below −3, or past the model's checks) is the last sentence.
    let last_v = b.ins().iconst(types::I64, last);
    let too_far = b.ins().icmp(IntCC::SignedGreaterThan, index, last_v);
    let index = b.ins().select(too_far, last_v, index);
    let too_low = b.ins().icmp_imm_s(IntCC::SignedLessThan, s, -3);
    let index = b.ins().select(too_low, last_v, index);
    let table = b.ins().symbol_value(ptr, offsets_gv);
    let byte = b.ins().imul_imm_s(index, 4);
    let byte = if ptr == types::I64 { byte } else { b.ins().ireduce(ptr, byte) };
    let at = b.ins().iadd(table, byte);
    let off = b.ins().load(types::I32, MemFlagsData::trusted().with_readonly(), at, 0);
    let off = b.ins().uextend(ptr, off);
    let base = b.ins().symbol_value(ptr, text_gv);
    let message = b.ins().iadd(base, off);
    b.ins().return_(&[message]);
    b.finalize(module.target_config());
    module.define_function(id, &mut ctx).map_err(|e| cl_err(&format!("{e:?}")))?;
    Ok(())
}
