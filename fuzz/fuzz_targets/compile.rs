//! Differential: a small graph built from the bytes (elementwise arithmetic and activations,
//! comparisons and Where, reductions, Softmax, MatMul and Transpose over `[r, c]`, `[1, c]`
//! and `[r, 1]` values) is compiled and run, and its outputs must equal the reference
//! evaluator's (rtol 1e-3, atol 1e-4; NaN where the evaluator has NaN).
#![no_main]

use kiln::{CompileOptions, Model, Tensor};
use kiln_onnx::proto::NodeProto;
use kiln_testkit::onnx::*;
use libfuzzer_sys::fuzz_target;

/// The bytes, consumed one at a time (zeros once they run out).
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn next(&mut self) -> u8 {
        let Some((&b, rest)) = self.0.split_first() else { return 0 };
        self.0 = rest;
        b
    }

    fn below(&mut self, n: usize) -> usize {
        self.next() as usize % n
    }
}

/// Which of the three shapes a value has.
#[derive(Clone, Copy, PartialEq)]
enum Form {
    Full,
    Row,
    Col,
}

fn dims(f: Form, r: i64, c: i64) -> [i64; 2] {
    match f {
        Form::Full => [r, c],
        Form::Row => [1, c],
        Form::Col => [r, 1],
    }
}

fn broadcast(a: Form, b: Form) -> Form {
    match (a, b) {
        (x, y) if x == y => x,
        _ => Form::Full,
    }
}

const UNARY: &[&str] = &["Relu", "Sigmoid", "Tanh", "Neg", "Abs", "Exp", "Floor", "Ceil", "Sin", "Erf", "Softsign", "Softplus", "HardSwish", "Reciprocal"];
const BINARY: &[&str] = &["Add", "Sub", "Mul", "Div", "Max", "Min", "PRelu"];

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes(data);
    let (r, c) = (1 + b.below(6) as i64, 1 + b.below(6) as i64);
    let mut values: Vec<(String, Form)> = vec![("x0".into(), Form::Full), ("x1".into(), Form::Full)];
    let mut nodes: Vec<NodeProto> = Vec::new();
    let mut inits = Vec::new();
    for i in 0..1 + b.below(10) {
        let out = format!("v{i}");
        let (a, fa) = values[b.below(values.len())].clone();
        let (o, fo) = values[b.below(values.len())].clone();
        let form = match b.below(8) {
            0..=2 => {
                nodes.push(node(UNARY[b.below(UNARY.len())], &[&a], &[&out]));
                fa
            }
            3 | 4 => {
                let op = BINARY[b.below(BINARY.len())];
                // PRelu's slope broadcasts to the input only.
                if op == "PRelu" && broadcast(fa, fo) != fa {
                    continue;
                }
                nodes.push(node(op, &[&a, &o], &[&out]));
                broadcast(fa, fo)
            }
            5 => {
                let cmp = format!("{out}_cond");
                nodes.push(node(["Greater", "Less", "Equal"][b.below(3)], &[&a, &o], &[&cmp]));
                nodes.push(node("Where", &[&cmp, &a, &o], &[&out]));
                broadcast(fa, fo)
            }
            6 if fa == Form::Full => {
                let axis = b.below(2) as i64;
                let op = ["ReduceSum", "ReduceMax", "ReduceMean", "Softmax"][b.below(4)];
                if op == "Softmax" {
                    let mut n = node(op, &[&a], &[&out]);
                    n.attribute.push(kiln_onnx::proto::AttributeProto { name: Some("axis".into()), r#type: Some(2), i: Some(axis), ..Default::default() });
                    nodes.push(n);
                    Form::Full
                } else {
                    let axes = format!("{out}_axes");
                    inits.push(ints(&axes, &[1], &[axis]));
                    nodes.push(node(op, &[&a, &axes], &[&out]));
                    if axis == 0 { Form::Row } else { Form::Col }
                }
            }
            _ if r == c && fa == Form::Full && fo == Form::Full => {
                if b.below(2) == 0 {
                    nodes.push(node("MatMul", &[&a, &o], &[&out]));
                } else {
                    nodes.push(with_ints(node("Transpose", &[&a], &[&out]), "perm", &[1, 0]));
                }
                Form::Full
            }
            _ => continue,
        };
        values.push((out, form));
    }
    let outputs: Vec<_> = values[2..].iter().map(|(n, _)| value(n, FLOAT, None)).collect();
    if outputs.is_empty() {
        return;
    }
    let g = graph(nodes, vec![value("x0", FLOAT, Some(&[r, c])), value("x1", FLOAT, Some(&[r, c]))], outputs, inits);
    let model = Model::from_bytes(model(g, vec![opset("", 18)], vec![])).expect("the generated model imports");
    let n = (r * c) as usize;
    let input = |b: &mut Bytes| Tensor::from_f32s(&[r as u64, c as u64], &(0..n).map(|_| (b.next() as f32 - 128.0) / 32.0).collect::<Vec<_>>());
    let inputs = [input(&mut b), input(&mut b)];
    let want = kiln_eval::eval_graph(model.graph(), &inputs).expect("the evaluator runs the generated model");
    let options = CompileOptions { threads: 1, ..CompileOptions::default() };
    let got = model.compile(&options).expect("the generated model compiles").run(&inputs).expect("the compiled model runs");
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g.shape, w.shape, "output {k}");
        let (g, w) = (f32s(g), f32s(w));
        for (i, (&x, &y)) in g.iter().zip(&w).enumerate() {
            let close = (x.is_nan() && y.is_nan()) || x == y || (x - y).abs() <= 1e-4 + 1e-3 * y.abs();
            assert!(close, "output {k} element {i}: compiled {x}, evaluator {y}");
        }
    }
});

fn f32s(t: &Tensor) -> Vec<f32> {
    t.raw().expect("bytes").chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}
