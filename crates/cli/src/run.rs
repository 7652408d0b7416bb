//! `kiln run`: one run, outputs written as `.npy`.

use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use kiln::{CompileOptions, Model, Tensor};

/// A deterministic tensor for `dtype`/`dims`: floats uniform in [-1, 1), integers in 0..8192.
pub fn random_tensor(dtype: kiln::DType, dims: &[u64], state: &mut u64) -> Result<Tensor> {
    let n = dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d)).ok_or_else(|| anyhow!("shape {dims:?} has more than 2^64 elements"))?;
    let mut next = || {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    };
    let mut bytes = Vec::new();
    for _ in 0..n {
        let r = next();
        match dtype {
            kiln::DType::F32 => bytes.extend_from_slice(&((r >> 40) as f32 / (1u64 << 23) as f32 - 1.0).to_le_bytes()),
            kiln::DType::F64 => bytes.extend_from_slice(&((r >> 11) as f64 / (1u64 << 52) as f64 - 1.0).to_le_bytes()),
            kiln::DType::I64 => bytes.extend_from_slice(&((r % 8192) as i64).to_le_bytes()),
            kiln::DType::I32 => bytes.extend_from_slice(&((r % 8192) as i32).to_le_bytes()),
            kiln::DType::Bool => bytes.push((r & 1) as u8),
            other => bail!("--random-inputs cannot make {other} tensors"),
        }
    }
    Ok(Tensor { dtype, shape: dims.to_vec(), data: kiln::TensorData::Raw(bytes.into()) })
}

/// Sizes for the symbolic dims of random inputs: whole input shapes (`--input-shape`) and
/// symbols (`--bind`); any other symbolic dim is 1.
#[derive(Default)]
pub struct Sizes {
    pub input_shapes: Vec<(String, Vec<u64>)>,
    pub symbols: Vec<(String, u64)>,
}

impl Sizes {
    fn dims(&self, name: &str, ty: &kiln::TensorType) -> Result<Vec<u64>> {
        if let Some((_, dims)) = self.input_shapes.iter().find(|(n, _)| n == name) {
            if dims.len() != ty.rank() {
                bail!("--input-shape {name}: {} dims given, the input has rank {} ({ty})", dims.len(), ty.rank());
            }
            return Ok(dims.clone());
        }
        Ok(ty
            .shape
            .iter()
            .map(|d| match (d.known(), d.symbols().as_slice()) {
                (Some(n), _) => n,
                (None, [s]) if *d == kiln::Dim::sym(s) => self.symbols.iter().find(|(n, _)| n == s).map_or(1, |(_, v)| *v),
                _ => 1,
            })
            .collect())
    }
}

/// Inputs for every graph input: from files where given, else random when allowed (symbolic
/// dims sized by `sizes`).
pub fn gather_inputs(model: &Model, given: &[String], random: bool, seed: u64, sizes: &Sizes, limits: &kiln::ResourceLimits) -> Result<Vec<Tensor>> {
    let g = model.graph();
    let mut files = Vec::new();
    for spec in given {
        let (name, file) = spec.split_once('=').ok_or_else(|| anyhow!("--input {spec}: expected NAME=FILE"))?;
        if !g.inputs().iter().any(|&v| g.value(v).name == name) {
            bail!("--input {spec}: the model has no input named \"{name}\"");
        }
        files.push((name.to_string(), Path::new(file).to_path_buf()));
    }
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut inputs = Vec::new();
    for &v in g.inputs() {
        let val = g.value(v);
        let t = match files.iter().find(|(n, _)| *n == val.name) {
            Some((_, path)) => read_tensor(path)?,
            None if random => {
                let dims = sizes.dims(&val.name, &val.ty)?;
                limits.check_input(&val.name, val.ty.dtype, &dims)?;
                random_tensor(val.ty.dtype, &dims, &mut state)?
            }
            None => bail!("input \"{}\" is not given (use --input {}=FILE or --random-inputs)", val.name, val.name),
        };
        inputs.push(t);
    }
    Ok(inputs)
}

fn read_tensor(path: &Path) -> Result<Tensor> {
    if path.extension().is_some_and(|e| e == "npy") {
        let bytes = kiln_onnx::load::read_regular_file(path).with_context(|| format!("cannot read {}", path.display()))?;
        kiln::npy::read(&bytes).map_err(|e| anyhow!("{}: {e}", path.display()))
    } else {
        Ok(kiln_onnx::import::read_tensor_file(path).with_context(|| format!("cannot read {}", path.display()))?.1)
    }
}

pub fn run(model_path: &Path, given: &[String], random: bool, seed: u64, sizes: &Sizes, out_dir: &Path, options: &CompileOptions) -> Result<()> {
    let model = Model::load_with(model_path, &options.limits).with_context(|| format!("cannot import {}", model_path.display()))?;
    let inputs = gather_inputs(&model, given, random, seed, sizes, &options.limits)?;
    let compiled = model.compile(options)?;
    let outputs = compiled.run(&inputs)?;
    std::fs::create_dir_all(out_dir).with_context(|| format!("cannot create {}", out_dir.display()))?;
    let g = model.graph();
    let names: Vec<&str> = g.outputs().iter().map(|&v| g.value(v).name.as_str()).collect();
    for ((name, t), file) in names.iter().zip(&outputs).zip(kiln::npy::file_names(&names)) {
        let path = out_dir.join(file);
        std::fs::write(&path, kiln::npy::write(t).map_err(|e| anyhow!("output \"{name}\": {e}"))?).with_context(|| format!("cannot write {}", path.display()))?;
        println!("{} {} → {}", name, t.ty(), path.display());
    }
    Ok(())
}
