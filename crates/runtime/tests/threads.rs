//! Every kernel that splits over the thread pool gives bit-identical results on 1, 2 and 3
//! threads, for shapes large enough to split (and with odd sizes, so parts are uneven).

use kiln_runtime::dwconv::DwConv2d;
use kiln_runtime::epilogue::{Activation, Bias, Epilogue};
use kiln_runtime::im2col::Im2col;
use kiln_runtime::maxpool::MaxPool2d;
use kiln_runtime::pool::Pool;
use kiln_runtime::softmax::Softmax;
use kiln_runtime::window::Window;

/// Reproducible data in [-1, 1] with a few exact zeros.
fn data(len: usize, seed: u64) -> Vec<f32> {
    kiln_testkit::Rng::new(seed | 1).unit_f32s(len)
}

/// Runs `f` alone and inside pools of 2 and 3 threads and checks the outputs match bitwise.
fn same_on_any_team(what: &str, f: impl Fn() -> Vec<f32>) {
    let alone = f();
    for threads in [2, 3] {
        let pool = Pool::new(threads).unwrap();
        let split = pool.enter(&f);
        assert_eq!(alone.len(), split.len());
        let differ = alone.iter().zip(&split).position(|(a, b)| a.to_bits() != b.to_bits());
        assert_eq!(differ, None, "{what} on {threads} threads differs at that element");
    }
}

#[test]
fn depthwise_convolutions() {
    for (planes, h, s, k) in [(96, 56, 1, 3), (77, 57, 2, 3), (33, 30, 1, 5)] {
        let d = DwConv2d { planes, channels: planes, win: Window { h, w: h, oh: (h + 2 * (k / 2) - k) / s + 1, ow: (h + 2 * (k / 2) - k) / s + 1, kh: k, kw: k, sh: s, sw: s, ph: k / 2, pw: k / 2, dh: 1, dw: 1 }, accumulate: false };
        let (x, w) = (data(d.x_len(), 1), data(d.w_len(), 2));
        same_on_any_team(&format!("{d:?}"), || {
            let mut y = vec![0.0; d.y_len()];
            d.run(&x, &w, &mut y);
            y
        });
    }
}

#[test]
fn epilogues() {
    let acts = [Activation::Relu, Activation::Gelu, Activation::Clip { min: 0.0, max: 6.0 }, Activation::Sigmoid];
    let biases = [(Bias::None, 0), (Bias::PerColumn, 1), (Bias::PerRow { period: 61 }, 2), (Bias::PerRow { period: 20 }, 3)];
    for act in acts {
        for (bias, _) in biases {
            for residual in [false, true] {
                let e = Epilogue { rows: 61, cols: 1001, bias, residual, act };
                let (y0, b, z) = (data(e.y_len(), 4), data(e.bias_len().max(1001), 5), data(e.y_len(), 6));
                same_on_any_team(&format!("{e:?}"), || {
                    let mut y = y0.clone();
                    e.run(&mut y, &b, &z);
                    y
                });
            }
        }
    }
}

#[test]
fn column_matrices() {
    let g = Im2col { channels: 37, win: Window { h: 41, w: 43, oh: 21, ow: 22, kh: 3, kw: 3, sh: 2, sw: 2, ph: 1, pw: 1, dh: 1, dw: 1 } };
    let x = data(g.x_len(), 7);
    same_on_any_team(&format!("{g:?}"), || {
        let mut col = vec![0.0; g.col_len()];
        g.run(&x, &mut col);
        col
    });
}

#[test]
fn max_pools() {
    let m = MaxPool2d { planes: 67, win: Window { h: 112, w: 112, oh: 56, ow: 56, kh: 3, kw: 3, sh: 2, sw: 2, ph: 1, pw: 1, dh: 1, dw: 1 } };
    let x = data(m.x_len(), 8);
    same_on_any_team(&format!("{m:?}"), || {
        let mut y = vec![0.0; m.y_len()];
        m.run(&x, &mut y);
        y
    });
}

#[test]
fn softmaxes() {
    let s = Softmax { rows: 131, cols: 257 };
    let x = data(s.len(), 9);
    same_on_any_team(&format!("{s:?}"), || {
        let mut y = x.clone();
        s.run(&mut y);
        y
    });
}
