//! FusedConv lowered, run in the interpreter and compared with the reference evaluator (which
//! computes it as Conv, Add and the activation): every activation, with and without the bias
//! and the residual addend, in `f32` (im2col, the runtime's over two spatial dims, and
//! `sgemm`, or the runtime's `dwconv2d` when depthwise over two spatial dims, then the
//! runtime's `epilogue`; the direct nest when depthwise over one) and `f64` (the direct nest),
//! over grouped, strided, padded, dilated and 1×1 convolutions.

use kiln_loops::ir::RuntimeFn;
use crate::linalg::tests::{ACTIVATIONS, DTYPES, calls, check, fused_graph};

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

#[test]
fn f32_convolutions_call_the_runtime_with_their_epilogue() {
    use RuntimeFn::{Conv2d, Epilogue, Sgemm};
    // (case, dtype, bias, residual addend, activation index, the calls)
    let cases = [
        (&CONV_CASES[2], "f32", true, true, 1, vec![Conv2d]),
        (&CONV_CASES[3], "f32", true, false, 0, vec![Conv2d]),
        (&CONV_CASES[3], "f32", false, false, 0, vec![Conv2d]),
        (&CONV_CASES[3], "f64", true, true, 1, vec![]),
        (&CONV_CASES[4], "f32", true, true, 1, vec![]),
        // Over two spatial dims, one fused call whatever the groups (depthwise too), padding and
        // epilogue; over one, an im2col nest and sgemm per image and group, then one epilogue
        // over the output, or for a depthwise one the direct nest.
        (&CONV_CASES[5], "f32", false, true, 0, vec![Conv2d]),
        (&CONV_CASES[0], "f32", false, false, 7, vec![Conv2d]),
        (&CONV_CASES[1], "f32", false, false, 0, vec![Conv2d]),
        (&CONV_CASES[6], "f32", true, false, 0, vec![Sgemm, Epilogue]),
    ];
    for (c, dt, with_bias, z, act, want) in cases {
        let bias = [c.w[0]];
        let attrs = format!("{}, {}", ACTIVATIONS[act], c.attrs());
        let (src, _) = fused_graph(
            "fused_conv",
            dt,
            [c.x, c.w],
            with_bias.then_some(&bias[..]),
            z,
            &c.y(),
            &attrs,
        );
        // The sgemm calls sit in a loop over images and groups: one in the body.
        assert_eq!(calls(&src), want, "{src}");
    }
}

/// MaxPool in `f32` over two spatial dims calls the runtime's `maxpool2d` (other ranks, types
/// and the Indices output keep the loop nest), and matches the reference evaluator: strides,
/// dilations, asymmetric padding, `ceil_mode`, a global pool, and NaN in the input.
#[test]
fn max_pool_calls_maxpool2d_and_matches_the_evaluator() {
    use crate::linalg::tests::{tensor, ty};
    // (X dims, attributes, Y dims)
    let cases: [(&[u64], &str, &[u64]); 6] = [
        (&[2, 3, 9, 9], "kernel_shape = [3, 3], pads = [1, 1, 1, 1], strides = [2, 2]", &[2, 3, 5, 5]),
        (&[1, 2, 7, 30], "kernel_shape = [2, 3], strides = [1, 1]", &[1, 2, 6, 28]),
        (&[1, 2, 8, 37], "dilations = [2, 1], kernel_shape = [2, 2], pads = [0, 2, 1, 0], strides = [1, 2]", &[1, 2, 7, 19]),
        (&[1, 1, 6, 6], "ceil_mode = 1, kernel_shape = [3, 3], strides = [2, 2]", &[1, 1, 3, 3]),
        (&[1, 3, 5, 33], "kernel_shape = [5, 33]", &[1, 3, 1, 1]),
        (&[2, 2, 4, 21], "kernel_shape = [3, 3], pads = [2, 2, 2, 2], strides = [3, 3]", &[2, 2, 2, 8]),
    ];
    for dt in DTYPES {
        for (x, attrs, y) in cases {
            let src = format!("graph @main(%0: {}) -> ({yt}) {{\n  %1 = tensor.max_pool(%0) {{{attrs}}} : {yt}\n  return %1\n}}", ty(dt, x), yt = ty(dt, y));
            let want = if dt == "f32" { vec![RuntimeFn::MaxPool2d] } else { vec![] };
            assert_eq!(calls(&src), want, "{src}");
            check(&src, &[tensor(dt, x, 7, true)]);
        }
    }
    // One spatial dim keeps the nest.
    let src = "graph @main(%0: f32[1, 2, 9]) -> (f32[1, 2, 4]) {\n  %1 = tensor.max_pool(%0) {kernel_shape = [3], strides = [2]} : f32[1, 2, 4]\n  return %1\n}";
    assert_eq!(calls(src), vec![], "{src}");
    check(src, &[tensor("f32", &[1, 2, 9], 7, true)]);
}
