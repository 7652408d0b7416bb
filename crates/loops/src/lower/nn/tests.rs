//! FusedConv lowered, run in the interpreter and compared with the reference evaluator (which
//! computes it as Conv, Add and the activation): every activation, with and without the bias
//! and the residual addend, in `f32` (im2col and `sgemm`; the runtime's `dwconv2d` when
//! depthwise over two spatial dims, the direct nest over one) and `f64` (the direct nest),
//! over grouped, strided, padded, dilated and 1×1 convolutions.

use kiln_tir::text::parse;

use crate::ir::{RuntimeFn, Stmt};
use crate::lower::linalg::tests::{ACTIVATIONS, DTYPES, check, fused_graph};
use crate::lower::lower;

/// A convolution: X dims, W dims, group, strides, dilations, pads (begins then ends).
struct ConvCase {
    x: &'static [u64],
    w: &'static [u64],
    group: u64,
    strides: &'static [u64],
    dilations: &'static [u64],
    pads: &'static [u64],
}

impl ConvCase {
    /// The output dims: `⌊(in + pads − ((k − 1)·d + 1)) / s⌋ + 1` per spatial dim.
    fn y(&self) -> Vec<u64> {
        let r = self.x.len() - 2;
        let mut y = vec![self.x[0], self.w[0]];
        for i in 0..r {
            let span = (self.w[i + 2] - 1) * self.dilations[i] + 1;
            y.push((self.x[i + 2] + self.pads[i] + self.pads[r + i] - span) / self.strides[i] + 1);
        }
        y
    }

    fn attrs(&self) -> String {
        format!(
            "dilations = {:?}, group = {}, pads = {:?}, strides = {:?}",
            self.dilations, self.group, self.pads, self.strides
        )
    }
}

const CONV_CASES: [ConvCase; 7] = [
    // Two groups, strided, asymmetric padding: im2col into a scratch matrix.
    ConvCase {
        x: &[2, 4, 5, 5],
        w: &[6, 2, 3, 3],
        group: 2,
        strides: &[2, 1],
        dilations: &[1, 1],
        pads: &[1, 0, 1, 1],
    },
    // 1×1 without stride or padding: sgemm on the input itself.
    ConvCase {
        x: &[2, 3, 3, 4],
        w: &[4, 3, 1, 1],
        group: 1,
        strides: &[1, 1],
        dilations: &[1, 1],
        pads: &[0, 0, 0, 0],
    },
    // Depthwise: dwconv2d in f32.
    ConvCase {
        x: &[1, 3, 5, 5],
        w: &[3, 1, 3, 3],
        group: 3,
        strides: &[1, 2],
        dilations: &[1, 1],
        pads: &[1, 1, 1, 1],
    },
    // Depthwise over two images, dilated, asymmetric padding, wider than a vector.
    ConvCase {
        x: &[2, 2, 6, 37],
        w: &[2, 1, 2, 3],
        group: 2,
        strides: &[2, 1],
        dilations: &[2, 2],
        pads: &[0, 2, 1, 0],
    },
    // Depthwise over one spatial dim: the direct nest in f32 too.
    ConvCase {
        x: &[2, 3, 9],
        w: &[3, 1, 3],
        group: 3,
        strides: &[2],
        dilations: &[1],
        pads: &[1, 1],
    },
    // A channel multiplier (two output channels per group) is not depthwise: im2col.
    ConvCase {
        x: &[1, 2, 4, 4],
        w: &[4, 1, 3, 3],
        group: 2,
        strides: &[1, 1],
        dilations: &[1, 1],
        pads: &[1, 1, 1, 1],
    },
    // One spatial dim, dilated.
    ConvCase {
        x: &[1, 2, 7],
        w: &[3, 2, 3],
        group: 1,
        strides: &[1],
        dilations: &[2],
        pads: &[2, 1],
    },
];

#[test]
fn fused_conv_matches_the_unfused_ops() {
    for dt in DTYPES {
        for c in &CONV_CASES {
            let y = c.y();
            for act in ACTIVATIONS {
                for (with_bias, z) in [(false, false), (true, false), (false, true), (true, true)] {
                    let bias = [c.w[0]];
                    let attrs = format!("{act}, {}", c.attrs());
                    let (src, inputs) = fused_graph(
                        "fused_conv",
                        dt,
                        [c.x, c.w],
                        with_bias.then_some(&bias[..]),
                        z,
                        &y,
                        &attrs,
                    );
                    check(&src, &inputs);
                }
            }
        }
    }
}

/// The runtime routines a lowered graph calls, in order.
fn calls(src: &str) -> Vec<RuntimeFn> {
    fn walk(stmts: &[Stmt], out: &mut Vec<RuntimeFn>) {
        for s in stmts {
            match s {
                Stmt::Call(f, _) => out.push(*f),
                Stmt::For { body, .. } => walk(body, out),
                Stmt::If {
                    then, otherwise, ..
                } => {
                    walk(then, out);
                    walk(otherwise, out);
                }
                _ => {}
            }
        }
    }
    let g = parse(src).unwrap_or_else(|e| panic!("{e}\n{src}"));
    let program = lower(&g).unwrap_or_else(|e| panic!("{e}\n{src}"));
    let mut out = Vec::new();
    for k in &program.kernels {
        walk(&k.body, &mut out);
    }
    out
}

#[test]
fn depthwise_f32_in_two_dims_calls_dwconv2d() {
    for (c, dt, want) in [
        (&CONV_CASES[2], "f32", vec![RuntimeFn::DwConv2d]),
        (&CONV_CASES[3], "f32", vec![RuntimeFn::DwConv2d]),
        (&CONV_CASES[3], "f64", vec![]),
        (&CONV_CASES[4], "f32", vec![]),
        (&CONV_CASES[5], "f32", vec![RuntimeFn::Sgemm]),
    ] {
        let bias = [c.w[0]];
        let attrs = format!("{}, {}", ACTIVATIONS[1], c.attrs());
        let (src, _) = fused_graph(
            "fused_conv",
            dt,
            [c.x, c.w],
            Some(&bias[..]),
            true,
            &c.y(),
            &attrs,
        );
        assert_eq!(calls(&src), want, "{src}");
    }
}
