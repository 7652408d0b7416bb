//! onnxruntime, loaded at run time from the PyPI wheel's `libonnxruntime.so` (`ORT_DYLIB_PATH`).
//!
//! Session options are onnxruntime's defaults (all graph optimizations, sequential execution,
//! intra-op spinning on) except `intra_op_num_threads`, which is `threads`.

use std::borrow::Cow;
use std::sync::OnceLock;

use anyhow::{anyhow, bail, Context, Result};
use ort::environment::Environment;
use ort::session::Session;
use ort::value::{DynValue, Tensor};

use super::{Engine, Setup};
use crate::inputs::Data;

pub struct OrtEngine {
    session: Session,
    inputs: Vec<(String, DynValue)>,
}

/// The process's onnxruntime environment; sessions are created from it.
static ENV: OnceLock<Environment> = OnceLock::new();

/// Loads the shared library named by `ORT_DYLIB_PATH` and creates the environment.
pub fn prepare() -> Result<()> {
    let dylib = std::env::var_os("ORT_DYLIB_PATH").context("ORT_DYLIB_PATH is not set: point it at the onnxruntime wheel's capi/libonnxruntime.so.*")?;
    let env = ort::init_from(&dylib).map_err(|e| anyhow!("cannot load {}: {e}", dylib.to_string_lossy()))?.with_name("kiln-bench").build()?;
    let _ = ENV.set(env);
    Ok(())
}

impl OrtEngine {
    pub fn load(setup: &Setup) -> Result<OrtEngine> {
        let env = ENV.get().context("onnxruntime is not prepared")?;
        let mut builder = Session::builder(env)?.with_intra_threads(setup.threads).map_err(|e| anyhow!("{e}"))?;
        let session = builder.commit_from_file(setup.model)?;
        let inputs = setup
            .specs
            .iter()
            .zip(setup.data)
            .map(|(spec, data)| {
                let shape: Vec<i64> = spec.shape.iter().map(|&d| d as i64).collect();
                let value = match data {
                    Data::F32(v) => Tensor::from_array((shape, v.clone()))?.upcast().into_dyn(),
                    Data::I64(v) => Tensor::from_array((shape, v.clone()))?.upcast().into_dyn(),
                    Data::I32(v) => Tensor::from_array((shape, v.clone()))?.upcast().into_dyn(),
                };
                Ok((spec.name.clone(), value))
            })
            .collect::<Result<_>>()?;
        Ok(OrtEngine { session, inputs })
    }
}

/// The prepared inputs as session feeds (borrowed: nothing is copied per run).
fn feeds(inputs: &[(String, DynValue)]) -> Vec<(Cow<'_, str>, &DynValue)> {
    inputs.iter().map(|(n, v)| (Cow::Borrowed(n.as_str()), v)).collect()
}

impl Engine for OrtEngine {
    fn run(&mut self) -> Result<()> {
        self.session.run(feeds(&self.inputs))?;
        Ok(())
    }

    fn first_output(&mut self) -> Result<Vec<f32>> {
        let outputs = self.session.run(feeds(&self.inputs))?;
        if outputs.len() == 0 {
            bail!("the model has no outputs");
        }
        let (_, values) = outputs[0].try_extract_tensor::<f32>()?;
        Ok(values.to_vec())
    }
}
