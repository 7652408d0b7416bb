//! Control flow the node suite barely reaches: carried values that swap, conditions that stop
//! a loop, nesting in both directions, scan axes and directions. Each graph is lowered, run in
//! the interpreter and compared with the reference evaluator.

use kiln_tir::text::parse;
use kiln_tir::{DType, Tensor, TensorData};

use kiln_loops::interp;
use kiln_loops::ir::*;
use crate::lower;
use kiln_schedule::plan::plan;

/// Lowers `src`, runs it on `inputs` and checks every output against `kiln_eval`.
fn check(src: &str, inputs: &[Tensor]) {
    let g = parse(src).expect("the test graph parses");
    let program = lower(&g).expect("the test graph lowers");
    kiln_loops::verify::verify(&program).expect("the lowered program verifies");
    let mut memory: Vec<Vec<u8>> = program
        .buffers
        .iter()
        .map(|b| match &b.kind {
            BufferKind::Input(i) => inputs[*i].raw().expect("input bytes").to_vec(),
            BufferKind::Const(t) => t.raw().expect("constant bytes").to_vec(),
            _ => vec![0u8; b.bytes() as usize],
        })
        .collect();
    interp::run(&program, &mut memory).expect("the program runs");
    let want = kiln_eval::eval_graph(&g, inputs).expect("the reference evaluates the graph");
    for (i, (&v, w)) in g.outputs().iter().zip(&want).enumerate() {
        let b = program.buffers.iter().position(|b| b.kind == BufferKind::Output(i)).expect("output buffer");
        let ty = g.ty(v);
        let got = Tensor { dtype: ty.dtype, shape: ty.known_dims().expect("static output"), data: TensorData::Raw(std::mem::take(&mut memory[b]).into()) };
        if let Err(e) = kiln_eval::compare::compare(&got, w) {
            panic!("output {i}: {e}");
        }
    }
}

fn f32s(shape: &[u64], v: &[f32]) -> Tensor {
    Tensor::from_f32s(shape, v)
}

fn flag(b: bool) -> Tensor {
    Tensor { dtype: DType::Bool, shape: vec![], data: TensorData::Raw(vec![u8::from(b)].into()) }
}

#[test]
fn loop_swaps_carried_values_simultaneously() {
    // (a, b, s) -> (b, a, s + a): the results alias the parameters crosswise.
    let src = "graph @main(%0: f32[2] \"a\", %1: f32[2] \"b\", %2: f32[2] \"s\") -> (f32[2] \"af\", f32[2] \"bf\", f32[2] \"sf\", f32[3, 2] \"as\") {
  %3 = const dense<i64[]: [3]>
  %4, %5, %6, %7 = tensor.loop(%3, _, %0, %1, %2) : f32[2], f32[2], f32[2], f32[3, 2] {
    body(%8: i64[], %9: bool[], %10: f32[2], %11: f32[2], %12: f32[2]) {
      %13 = tensor.identity(%9) : bool[]
      %14 = tensor.add(%12, %10) : f32[2]
      yield %13, %11, %10, %14, %10
    }
  }
  return %4, %5, %6, %7
}";
    check(src, &[f32s(&[2], &[1.0, 2.0]), f32s(&[2], &[10.0, 20.0]), f32s(&[2], &[0.5, 0.25])]);
}

#[test]
fn loop_condition_stops_it_early() {
    // s doubles while its sum stays below 20; the condition comes from an If in the body.
    let src = "graph @main(%0: bool[] \"c\", %1: f32[2] \"s\") -> (f32[2] \"sf\") {
  %2 = const dense<i64[]: [10]>
  %3 = tensor.loop(%2, %0, %1) : f32[2] {
    body(%4: i64[], %5: bool[], %6: f32[2]) {
      %7 = const dense<f32[]: [2.0]>
      %8 = const dense<f32[]: [20.0]>
      %9 = tensor.mul(%6, %7) : f32[2]
      %10 = tensor.reduce_sum(%9) {keepdims = 0} : f32[]
      %11 = tensor.if(%5) : bool[] {
        then_branch() {
          %12 = tensor.less(%10, %8) : bool[]
          yield %12
        }
        else_branch() {
          yield %5
        }
      }
      yield %11, %9
    }
  }
  return %3
}";
    check(src, &[flag(true), f32s(&[2], &[0.3, 0.4])]);
    check(src, &[flag(false), f32s(&[2], &[0.3, 0.4])]);
}

#[test]
fn if_with_a_run_time_condition_holds_a_loop_and_a_scan() {
    let src = "graph @main(%0: bool[] \"c\", %1: f32[3] \"x\", %2: f32[4, 3] \"m\") -> (f32[3] \"y\") {
  %3 = tensor.if(%0) : f32[3] {
    then_branch() {
      %4 = const dense<i64[]: [3]>
      %5 = tensor.loop(%4, _, %1) : f32[3] {
        body(%6: i64[], %7: bool[], %8: f32[3]) {
          %9 = tensor.add(%8, %1) : f32[3]
          yield %7, %9
        }
      }
      yield %5
    }
    else_branch() {
      %10 = tensor.scan(%1, %2) {num_scan_inputs = 1, scan_input_directions = [1]} : f32[3] {
        body(%11: f32[3], %12: f32[3]) {
          %13 = tensor.mul(%11, %12) : f32[3]
          yield %13
        }
      }
      yield %10
    }
  }
  return %3
}";
    let (x, m) = (f32s(&[3], &[1.0, -2.0, 0.5]), f32s(&[4, 3], &[1.0, 2.0, 3.0, 0.5, 0.5, 0.5, -1.0, 1.0, 2.0, 3.0, 1.0, 0.0]));
    check(src, &[flag(true), x.clone(), m.clone()]);
    check(src, &[flag(false), x, m]);
}

#[test]
fn scan_reads_and_writes_along_any_axis_in_either_direction() {
    let src = "graph @main(%0: f32[2] \"a\", %1: f32[2, 3] \"p\", %2: f32[3, 2] \"q\") -> (f32[2] \"af\", f32[2, 3] \"o1\", f32[2, 3] \"o2\") {
  %3, %4, %5 = tensor.scan(%0, %1, %2) {num_scan_inputs = 2, scan_input_axes = [1, 0], scan_input_directions = [1, 0], scan_output_axes = [1, -1], scan_output_directions = [1, 0]} : f32[2], f32[2, 3], f32[2, 3] {
    body(%6: f32[2], %7: f32[2], %8: f32[2]) {
      %9 = tensor.add(%6, %7) : f32[2]
      %10 = tensor.mul(%9, %8) : f32[2]
      yield %9, %10, %9
    }
  }
  return %3, %4, %5
}";
    check(src, &[f32s(&[2], &[1.0, 2.0]), f32s(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]), f32s(&[3, 2], &[0.5, 1.0, 1.5, 2.0, 2.5, 3.0])]);
}

#[test]
fn a_value_computed_but_unused_in_a_loop_body_keeps_its_own_memory() {
    // %9 is dead; were it planned in place of %3, every later iteration would read the
    // overwritten %3 (the planner's single-pass rule prevents it).
    let src = "graph @main(%0: f32[1] \"x\", %1: f32[1] \"s\") -> (f32[1] \"sf\") {
  %2 = const dense<i64[]: [3]>
  %3 = tensor.neg(%0) : f32[1]
  %4 = tensor.loop(%2, _, %1) : f32[1] {
    body(%5: i64[], %6: bool[], %7: f32[1]) {
      %9 = tensor.abs(%3) : f32[1]
      %10 = tensor.add(%7, %3) : f32[1]
      yield %6, %10
    }
  }
  return %4
}";
    let g = parse(src).expect("parses");
    let program = lower(&g).expect("lowers");
    let memory = plan(&program);
    let temps: Vec<usize> = program.buffers.iter().enumerate().filter(|(_, b)| b.kind == BufferKind::Temp).map(|(i, _)| i).collect();
    for (x, &a) in temps.iter().enumerate() {
        for &b in &temps[x + 1..] {
            let (Some((fa, la)), Some((fb, lb))) = (memory.lifetimes[a], memory.lifetimes[b]) else { continue };
            if fa <= lb && fb <= la {
                assert_ne!(memory.offsets[a], memory.offsets[b], "@{a} and @{b} are live together but share memory");
            }
        }
    }
    check(src, &[f32s(&[1], &[2.0]), f32s(&[1], &[0.5])]);
}
