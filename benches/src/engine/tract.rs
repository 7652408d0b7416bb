//! tract (`tract-onnx`): input facts from the specs, `into_optimized`, `into_runnable`, and one
//! reused state, as a service would hold it.
//!
//! Threads: with `threads > 1` the process-wide executor is a rayon pool of that size
//! (`tract-linalg`'s `multithread-mm`). tract parallelizes matrix products and a few
//! element-wise and reduction loops over it; the rest runs on the calling thread.

use anyhow::{anyhow, bail, Result};
use tract_linalg::multithread::{set_default_executor, Executor};
use tract_onnx::prelude::*;

use super::{Engine, Setup};
use crate::inputs::{Data, ElemType};

type Plan = TypedSimplePlan;

pub struct TractEngine {
    state: TypedSimpleState,
    inputs: TVec<TValue>,
    _plan: Arc<Plan>,
}

impl TractEngine {
    pub fn load(setup: &Setup) -> Result<TractEngine> {
        if setup.threads > 1 {
            set_default_executor(Executor::multithread(setup.threads));
        }
        let mut model = tract_onnx::onnx().model_for_path(setup.model).map_err(tract_err)?;
        for (i, spec) in setup.specs.iter().enumerate() {
            let shape: Vec<usize> = spec.shape.iter().map(|&d| d as usize).collect();
            let fact = match spec.elem {
                ElemType::F32 => f32::fact(&shape),
                ElemType::I64 => i64::fact(&shape),
                ElemType::I32 => i32::fact(&shape),
            };
            model = model.with_input_fact(i, fact.into()).map_err(tract_err)?;
        }
        let plan = model.into_optimized().map_err(tract_err)?.into_runnable().map_err(tract_err)?;
        let state = plan.spawn().map_err(tract_err)?;
        let inputs = setup
            .specs
            .iter()
            .zip(setup.data)
            .map(|(spec, data)| {
                let shape: Vec<usize> = spec.shape.iter().map(|&d| d as usize).collect();
                let tensor = match data {
                    Data::F32(v) => Tensor::from_shape(&shape, v),
                    Data::I64(v) => Tensor::from_shape(&shape, v),
                    Data::I32(v) => Tensor::from_shape(&shape, v),
                };
                // Shared (`Arc`) values: a run cannot take the caller's input over as scratch.
                Ok(Arc::new(tensor.map_err(tract_err)?).into_tvalue())
            })
            .collect::<Result<_>>()?;
        Ok(TractEngine { state, inputs, _plan: plan })
    }
}

impl Engine for TractEngine {
    fn run(&mut self) -> Result<()> {
        self.state.run(self.inputs.clone()).map_err(tract_err)?;
        Ok(())
    }

    fn first_output(&mut self) -> Result<Vec<f32>> {
        let outputs = self.state.run(self.inputs.clone()).map_err(tract_err)?;
        let Some(first) = outputs.first() else { bail!("the model has no outputs") };
        Ok(first.to_plain_array_view::<f32>().map_err(tract_err)?.iter().copied().collect())
    }
}

/// tract errors are `anyhow` errors of tract's own `anyhow` version; keep the whole chain.
fn tract_err(e: TractError) -> anyhow::Error {
    anyhow!("{e:?}")
}
