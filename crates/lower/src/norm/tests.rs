//! LayerNormalization and RMSNormalization: the runtime's `layernorm` in the common `f32`
//! case, the loop nest otherwise, both matching the reference evaluator.

use kiln_loops::ir::RuntimeFn;
use crate::linalg::tests::{calls, check, tensor, ty};

#[test]
fn layer_and_rms_normalization_call_the_runtime_when_they_can() {
    // (op, x dims, scale dims, bias dims, attributes, dtype, whether it calls `layernorm`)
    type Case<'a> = (&'a str, &'a [u64], &'a [u64], Option<&'a [u64]>, &'a str, &'a str, bool);
    let cases: [Case; 7] = [
        ("layer_normalization", &[2, 5, 64], &[64], Some(&[64]), "axis = -1, epsilon = 1e-5", "f32", true),
        ("layer_normalization", &[2, 3, 8], &[1, 3, 8], None, "axis = 1", "f32", true),
        ("rms_normalization", &[4, 37], &[37], None, "axis = -1, epsilon = 1e-3", "f32", true),
        // A scale that varies along the rows, not the normalized axis: the nest.
        ("layer_normalization", &[3, 3], &[3, 1], Some(&[3]), "axis = 1", "f32", false),
        // f64 statistics, or f64 values: the nest.
        ("layer_normalization", &[2, 16], &[16], Some(&[16]), "axis = -1, stash_type = f64", "f32", false),
        ("layer_normalization", &[2, 16], &[16], Some(&[16]), "axis = -1", "f64", false),
        ("rms_normalization", &[2, 16], &[16], None, "axis = -1", "f64", false),
    ];
    for (op, x, scale, bias, attrs, dt, runtime) in cases {
        let mut params = vec![format!("%0: {}", ty(dt, x)), format!("%1: {}", ty(dt, scale))];
        let mut inputs = vec![tensor(dt, x, 1, false), tensor(dt, scale, 2, false)];
        let mut args = "%0, %1".to_string();
        if let Some(b) = bias {
            params.push(format!("%2: {}", ty(dt, b)));
            inputs.push(tensor(dt, b, 3, false));
            args.push_str(", %2");
        }
        let r = params.len();
        let src = format!("graph @main({}) -> ({yt}) {{\n  %{r} = tensor.{op}({args}) {{{attrs}}} : {yt}\n  return %{r}\n}}", params.join(", "), yt = ty(dt, x));
        let want = if runtime { vec![RuntimeFn::LayerNorm] } else { vec![] };
        assert_eq!(calls(&src), want, "{src}");
        check(&src, &inputs);
    }
}
