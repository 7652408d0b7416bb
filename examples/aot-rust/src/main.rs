//! Runs the model `build.rs` compiled and linked, on a fixed input, and prints its f32 outputs'
//! first values: the whole of kiln this program needs is one object file.

use std::ffi::{CStr, c_char, c_void};

mod model {
    include!(concat!(env!("OUT_DIR"), "/model.rs"));
}

unsafe extern "C" {
    fn model_run(arena: *mut c_void, inputs: *const *const c_void, outputs: *const *mut c_void) -> i32;
    fn model_error_string(status: i32) -> *const c_char;
}

/// Zeroed memory of `bytes` bytes (at least one) aligned to 64.
fn buffer(bytes: usize) -> Vec<u128> {
    // 16-byte words; the arena's 64-byte alignment comes from an offset into a larger buffer.
    vec![0u128; bytes.div_ceil(16) + 4]
}

fn aligned64(words: &mut [u128]) -> *mut c_void {
    let p = words.as_mut_ptr().cast::<u8>();
    p.wrapping_add(p.align_offset(64)).cast()
}

fn main() {
    let mut arena = buffer(model::ARENA_BYTES);
    let mut inputs: Vec<Vec<u128>> = model::INPUT_BYTES.iter().map(|&b| buffer(b)).collect();
    let mut outputs: Vec<Vec<u128>> = model::OUTPUT_BYTES.iter().map(|&b| buffer(b)).collect();
    // A fixed ramp in [-1, 1) for every f32 input element.
    for (input, &bytes) in inputs.iter_mut().zip(model::INPUT_BYTES) {
        let floats = input.as_mut_ptr().cast::<f32>();
        for i in 0..bytes / 4 {
            // SAFETY: the buffer holds at least `bytes` bytes.
            unsafe { *floats.add(i) = (i % 200) as f32 / 100.0 - 1.0 };
        }
    }
    let input_ptrs: Vec<*const c_void> = inputs.iter_mut().map(|b| b.as_mut_ptr().cast_const().cast()).collect();
    let output_ptrs: Vec<*mut c_void> = outputs.iter_mut().map(|b| b.as_mut_ptr().cast()).collect();
    // SAFETY: the arena and every buffer are as large as model.h says and aligned (16-byte
    // words; the arena at a 64-byte boundary); nothing else touches them during the call.
    let status = unsafe { model_run(aligned64(&mut arena), input_ptrs.as_ptr(), output_ptrs.as_ptr()) };
    if status != 0 {
        // SAFETY: the object returns a static NUL-terminated string for any status.
        let why = unsafe { CStr::from_ptr(model_error_string(status)) };
        eprintln!("error: {}", why.to_string_lossy());
        std::process::exit(1);
    }
    for (k, (out, &bytes)) in outputs.iter().zip(model::OUTPUT_BYTES).enumerate() {
        // SAFETY: the output buffer holds `bytes` bytes the run wrote.
        let floats = unsafe { std::slice::from_raw_parts(out.as_ptr().cast::<f32>(), bytes / 4) };
        let first: Vec<String> = floats.iter().take(5).map(|x| format!("{x:.6}")).collect();
        let sum: f32 = floats.iter().sum();
        println!("output {k}: {} values, sum {sum:.6}, first {}", floats.len(), first.join(" "));
    }
}
