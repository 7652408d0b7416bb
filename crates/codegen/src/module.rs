//! Translation of a whole program through the [`Module`] trait: kernel functions, the entry
//! function, and the target's ISA. Whatever module is passed (JIT now, object files later) gets
//! the same functions.

use std::collections::HashMap;
use std::time::Instant;

use cranelift_codegen::ir::{types, AbiParam, BlockArg, FuncRef, InstBuilder, MemFlagsData, Signature, StackSlotData, StackSlotKind, UserFuncName};
use cranelift_codegen::isa::OwnedTargetIsa;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_codegen::Context;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_module::{FuncId, Linkage, Module};
use kiln_loops::{BufId, Program};
use kiln_target::{Feature, Target};

use crate::jit::KernelStats;
use crate::kernel::{loops_to_split, outlined_signature, translate_kernel, translate_outlined, Mode};
use crate::shared::Localized;
use crate::{CodegenError, CodegenOptions};

/// The exported symbol of the function that runs every kernel in order.
pub const ENTRY_SYMBOL: &str = "kiln_entry";

/// The Cranelift ISA for `target`, optimizing for speed, with exactly the target's CPU features
/// (Cranelift's `has_*` settings). `pic` selects position-independent code (object files) or
/// absolute addressing (the JIT).
pub(crate) fn target_isa(target: &Target, pic: bool) -> Result<OwnedTargetIsa, CodegenError> {
    let isa_err = |e: &dyn std::fmt::Display| CodegenError::Isa(format!("{target}: {e}"));
    let mut flags = settings::builder();
    flags.set("opt_level", "speed").map_err(|e| isa_err(&e))?;
    flags.set("is_pic", if pic { "true" } else { "false" }).map_err(|e| isa_err(&e))?;
    // Runtime symbols can be anywhere in the address space of the process.
    flags.set("use_colocated_libcalls", "false").map_err(|e| isa_err(&e))?;
    // The IR verifier costs compile time: debug builds keep it on, and `KILN_VERIFY=1` turns it
    // on in release builds (CI's tests).
    let verify = cfg!(debug_assertions) || std::env::var_os("KILN_VERIFY").is_some_and(|v| v == "1");
    flags.set("enable_verifier", if verify { "true" } else { "false" }).map_err(|e| isa_err(&e))?;
    let mut builder = cranelift_codegen::isa::lookup(target.triple.clone()).map_err(|e| isa_err(&e))?;
    for feature in target.features.iter() {
        // Features Cranelift has no setting for only steer kiln's own choices (runtime kernels).
        if !matches!(feature, Feature::Avx512bw | Feature::Neon) {
            builder.enable(&format!("has_{}", feature.name())).map_err(|e| isa_err(&e))?;
        }
    }
    builder.finish(settings::Flags::new(flags)).map_err(|e| isa_err(&e))
}

/// The signature of kernels and of the entry function: `(table: *const *mut u8) -> u32`.
pub(crate) fn kernel_signature(module: &dyn Module) -> Signature {
    let mut sig = module.make_signature();
    sig.params.push(AbiParam::new(module.target_config().pointer_type()));
    sig.returns.push(AbiParam::new(types::I32));
    sig
}

/// The symbol of kernel `index`: unique, and made of characters every object format accepts.
fn kernel_symbol(index: usize, name: &str) -> String {
    let clean: String = name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
    format!("kiln_k{index}_{clean}")
}

/// What [`translate`] declared.
pub(crate) struct Translated {
    /// The function of each kernel, in program order (kernels with the same code share one).
    pub kernels: Vec<FuncId>,
    /// Each kernel's slots: the program's buffers its table holds, in order.
    pub slots: Vec<Vec<BufId>>,
    /// The entry function, when one was asked for.
    pub entry: Option<FuncId>,
    /// Per-kernel figures.
    pub stats: Vec<KernelStats>,
}

/// Receives each finished function with a label (its kernel, or the kernel's outlined loop):
/// defines it in the module (compiling it) or prints it. A kernel that shares an earlier
/// kernel's function comes without one.
pub(crate) type Sink<'s> = dyn FnMut(&mut dyn Module, FuncId, &str, Option<&mut Context>) -> Result<(), CodegenError> + 's;

/// Readies `ctx` for a new function with signature `sig`, named `name`.
fn begin(module: &dyn Module, ctx: &mut Context, sig: &Signature, name: &str) {
    module.clear_context(ctx);
    ctx.func.signature = sig.clone();
    ctx.func.name = UserFuncName::testcase(name);
}

/// The entry function's symbol and linkage, and where calls go.
pub(crate) struct Exports<'s> {
    /// The entry function's symbol; none for the JIT, whose runs call the kernels in turn.
    pub entry: Option<&'s str>,
    /// Its linkage: exported from the JIT's module, local to an object file (whose exported
    /// function wraps it).
    pub linkage: Linkage,
    /// Calls go to libc and libm only: no runtime symbol, no loop split over threads.
    pub libc: bool,
    /// The target runs Cranelift's 128-bit vectors with the instructions `crate::vector` uses.
    pub simd: bool,
}

/// Whether generated code for `target` may use 128-bit vectors: aarch64 always; x86-64 with
/// SSE4.1 (for `pmulld`, `pminsd` and `roundps`, which Cranelift needs for those lanes).
pub(crate) fn has_simd(target: &Target) -> bool {
    use target_lexicon::Architecture;
    match target.arch() {
        Architecture::Aarch64(_) => true,
        Architecture::X86_64 => target.has(Feature::Sse41),
        _ => false,
    }
}

impl Exports<'_> {
    /// The JIT's: no entry function, calling the runtime when `target` has it.
    pub fn jit(target: &Target) -> Exports<'static> {
        Exports { entry: None, linkage: Linkage::Export, libc: !target.has_runtime(), simd: has_simd(target) }
    }
}

/// Translates every kernel, and the entry function when `exports` names one, handing each to
/// `sink`. Kernels with the same code share one function (`crate::shared`).
pub(crate) fn translate(module: &mut dyn Module, program: &Program, options: &CodegenOptions, exports: &Exports<'_>, sink: &mut Sink<'_>) -> Result<Translated, CodegenError> {
    let cl_err = |kernel: &str, e: &dyn std::fmt::Display| CodegenError::Cranelift { kernel: kernel.to_string(), message: e.to_string() };
    let sig = kernel_signature(module);
    let mut ctx = module.make_context();
    let mut fctx = FunctionBuilderContext::new();
    let mut kernels = Vec::with_capacity(program.kernels.len());
    let mut slots = Vec::with_capacity(program.kernels.len());
    let mut stats: Vec<KernelStats> = Vec::with_capacity(program.kernels.len());
    // Compiled kernels by key: the first kernel with that code, and its localized form.
    let mut compiled: HashMap<String, Vec<(usize, Localized)>> = HashMap::new();
    let outlined_sig = outlined_signature(module);
    let mode = Mode { libc: exports.libc, simd: exports.simd && options.vectors };
    for (i, kernel) in program.kernels.iter().enumerate() {
        let start = Instant::now();
        let local = Localized::new(program, kernel)?;
        let key = local.key();
        let same = compiled.get(&key).and_then(|found| found.iter().find(|(_, other)| other.same_code(&local))).map(|&(first, _)| first);
        if let Some(first) = same {
            kernels.push(kernels[first]);
            slots.push(local.slots);
            let symbol = stats[first].symbol.clone();
            stats.push(KernelStats { name: kernel.name.clone(), symbol, clif_insts: 0, compile_time: start.elapsed(), shares: Some(first) });
            sink(module, kernels[first], &format!("{}: the code of {}", kernel.name, program.kernels[first].name), None)?;
            continue;
        }
        let symbol = kernel_symbol(i, &kernel.name);
        let in_kernel = |e| match e {
            CodegenError::Cranelift { message, .. } => CodegenError::Cranelift { kernel: kernel.name.clone(), message },
            other => other,
        };
        let (local_program, local_kernel) = (&local.program, local.kernel());
        // Loops split over the thread pool first: the kernel takes their addresses.
        let mut outlined = Vec::new();
        let mut insts = 0;
        let split = if options.parallel_loops && !exports.libc { loops_to_split(local_program, local_kernel) } else { Vec::new() };
        for lp in split {
            let name = format!("{symbol}_s{}", lp.stmt);
            let id = module.declare_function(&name, Linkage::Local, &outlined_sig).map_err(|e| cl_err(&kernel.name, &e))?;
            begin(module, &mut ctx, &outlined_sig, &name);
            translate_outlined(module, &mut ctx.func, &mut fctx, local_program, local_kernel, &lp, mode)?;
            insts += ctx.func.dfg.num_insts();
            sink(module, id, &format!("{}, statement {} in parallel", kernel.name, lp.stmt), Some(&mut ctx)).map_err(in_kernel)?;
            outlined.push((id, lp));
        }
        let id = module.declare_function(&symbol, Linkage::Local, &sig).map_err(|e| cl_err(&kernel.name, &e))?;
        begin(module, &mut ctx, &sig, &symbol);
        translate_kernel(module, &mut ctx.func, &mut fctx, local_program, local_kernel, &outlined, mode)?;
        insts += ctx.func.dfg.num_insts();
        sink(module, id, &kernel.name, Some(&mut ctx)).map_err(in_kernel)?;
        stats.push(KernelStats { name: kernel.name.clone(), symbol, clif_insts: insts, compile_time: start.elapsed(), shares: None });
        kernels.push(id);
        slots.push(local.slots.clone());
        compiled.entry(key).or_default().push((i, local));
    }
    let entry = match exports.entry {
        Some(symbol) => Some(translate_entry(module, &mut ctx, &mut fctx, program, exports.linkage, symbol, &kernels, &slots, sink)?),
        None => None,
    };
    Ok(Translated { kernels, slots, entry, stats })
}

/// The entry function `symbol`: calls every kernel in order, each with its table of slots
/// (filled from the whole program's table, in a stack slot), and returns the first failing
/// status.
#[allow(clippy::too_many_arguments)]
fn translate_entry(module: &mut dyn Module, ctx: &mut Context, fctx: &mut FunctionBuilderContext, program: &Program, linkage: Linkage, symbol: &str, kernels: &[FuncId], slots: &[Vec<BufId>], sink: &mut Sink<'_>) -> Result<FuncId, CodegenError> {
    let cl_err = |e: &dyn std::fmt::Display| CodegenError::Cranelift { kernel: symbol.to_string(), message: e.to_string() };
    let sig = kernel_signature(module);
    let entry = module.declare_function(symbol, linkage, &sig).map_err(|e| cl_err(&e))?;
    begin(module, ctx, &sig, symbol);
    let mut refs: HashMap<FuncId, FuncRef> = HashMap::new();
    for &k in kernels {
        if let std::collections::hash_map::Entry::Vacant(v) = refs.entry(k) {
            v.insert(module.declare_func_in_func(k, &mut ctx.func));
        }
    }
    let ptr = module.target_config().pointer_type();
    let bytes = |i: usize| i32::try_from(i as u64 * u64::from(ptr.bytes())).map_err(|_| CodegenError::Invalid { kernel: symbol.to_string(), message: format!("too many buffers ({})", program.buffers.len()) });
    let most = slots.iter().map(Vec::len).max().unwrap_or(0).max(1);
    let mut b = FunctionBuilder::new(&mut ctx.func, fctx);
    let local = b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, u32::try_from(bytes(most)?).unwrap_or(u32::MAX), ptr.bytes().trailing_zeros() as u8));
    let start = b.create_block();
    b.append_block_params_for_function_params(start);
    b.switch_to_block(start);
    b.seal_block(start);
    let table = b.block_params(start)[0];
    let fail = b.create_block();
    let status = b.append_block_param(fail, types::I32);
    b.set_cold_block(fail);
    let flags = MemFlagsData::trusted();
    for (k, kernel_slots) in kernels.iter().zip(slots) {
        for (s, buf) in kernel_slots.iter().enumerate() {
            let address = b.ins().load(ptr, flags, table, bytes(buf.0 as usize)?);
            b.ins().stack_store(ptr, address, local, bytes(s)?);
        }
        let at = b.ins().stack_addr(ptr, local, 0);
        let call = b.ins().call(refs[k], &[at]);
        let s = b.inst_results(call)[0];
        let next = b.create_block();
        b.ins().brif(s, fail, &[BlockArg::Value(s)], next, &[]);
        b.seal_block(next);
        b.switch_to_block(next);
    }
    let ok = b.ins().iconst(types::I32, 0);
    b.ins().return_(&[ok]);
    b.switch_to_block(fail);
    b.seal_block(fail);
    b.ins().return_(&[status]);
    b.finalize(module.target_config());
    sink(module, entry, symbol, Some(ctx)).map_err(|e| match e {
        CodegenError::Cranelift { message, .. } => CodegenError::Cranelift { kernel: symbol.into(), message },
        other => other,
    })?;
    Ok(entry)
}

/// The CLIF of every function of `program` as generated, before Cranelift optimizes it (for
/// `kiln dump --stage clif`). Each function is preceded by a comment naming its kernel (and,
/// for an outlined loop, its statement).
pub fn clif_text(program: &Program, target: &Target, options: &CodegenOptions) -> Result<String, CodegenError> {
    let mut out = String::new();
    let mut print = |_: &mut dyn Module, _, label: &str, ctx: Option<&mut Context>| {
        match ctx {
            Some(ctx) => out.push_str(&format!("; {label}\n{}\n", ctx.func.display())),
            None => out.push_str(&format!("; {label}\n\n")),
        }
        Ok(())
    };
    // Code for this process goes through the JIT's module, anything else through an object's.
    if let Ok(mut module) = crate::jit::new_module(target) {
        translate(&mut module, program, options, &Exports::jit(target), &mut print)?;
    } else {
        let mut module = crate::object::new_module(target, "clif")?;
        let exports = Exports { entry: Some(ENTRY_SYMBOL), linkage: Linkage::Local, libc: !target.has_runtime(), simd: has_simd(target) };
        let options = CodegenOptions { parallel_loops: false, ..*options };
        translate(&mut module, program, &options, &exports, &mut print)?;
    }
    Ok(out)
}
