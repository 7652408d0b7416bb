//! kiln through its public API: `Model::load`, `compile`, `CompiledModel::run`.
//! `threads` is `CompileOptions::threads`: the calling thread plus `threads − 1` pool workers.

use anyhow::{bail, Result};
use kiln::{CompileOptions, CompiledModel, DType, Model, Tensor, TensorData};

use super::{Engine, Setup};
use crate::inputs::ElemType;

pub struct KilnEngine {
    compiled: CompiledModel,
    inputs: Vec<Tensor>,
}

impl KilnEngine {
    pub fn load(setup: &Setup) -> Result<KilnEngine> {
        let model = Model::load(setup.model)?;
        // The run's input shapes are compiled up front, so compile time counts a model with
        // symbolic dims too (and a model run in stages compiles its first one).
        let input_shapes = setup.specs.iter().map(|s| (s.name.clone(), s.shape.clone())).collect();
        let compiled = model.compile(&CompileOptions { threads: setup.threads, input_shapes, ..CompileOptions::from_env() })?;
        let inputs = setup
            .specs
            .iter()
            .zip(setup.data)
            .map(|(spec, data)| {
                let dtype = match spec.elem {
                    ElemType::F32 => DType::F32,
                    ElemType::I64 => DType::I64,
                    ElemType::I32 => DType::I32,
                };
                Tensor { dtype, shape: spec.shape.clone(), data: TensorData::Raw(data.to_le_bytes().into()) }
            })
            .collect();
        Ok(KilnEngine { compiled, inputs })
    }
}

impl Engine for KilnEngine {
    fn run(&mut self) -> Result<()> {
        self.compiled.run(&self.inputs)?;
        Ok(())
    }

    fn first_output(&mut self) -> Result<Vec<f32>> {
        let outputs = self.compiled.run(&self.inputs)?;
        let Some(first) = outputs.first() else { bail!("the model has no outputs") };
        match (first.dtype, first.raw()) {
            (DType::F32, Some(raw)) => Ok(raw.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()),
            (dtype, _) => bail!("first output is {dtype}, not f32"),
        }
    }
}
