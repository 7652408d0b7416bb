//! The engines under test, behind one small trait so the worker loop is engine-agnostic.

mod kiln;
mod ort;
mod tract;

use std::path::Path;

use anyhow::{bail, Result};

use crate::inputs::{Data, InputSpec};

/// An engine name as the command line and the table spell it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineKind {
    Kiln,
    /// kiln as another build of this harness compiled it (`--base-bin`): a before/after
    /// comparison in the same run.
    KilnBase,
    Ort,
    Tract,
}

impl EngineKind {
    pub const ALL: [EngineKind; 3] = [EngineKind::Kiln, EngineKind::Ort, EngineKind::Tract];

    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Kiln => "kiln",
            EngineKind::KilnBase => "kiln-base",
            EngineKind::Ort => "onnxruntime",
            EngineKind::Tract => "tract",
        }
    }

    pub fn parse(s: &str) -> Result<EngineKind> {
        match s {
            "kiln" => Ok(EngineKind::Kiln),
            "kiln-base" => Ok(EngineKind::KilnBase),
            "ort" | "onnxruntime" => Ok(EngineKind::Ort),
            "tract" => Ok(EngineKind::Tract),
            _ => bail!("unknown engine {s} (kiln, kiln-base, onnxruntime, tract)"),
        }
    }
}

/// What a worker needs to build an engine.
pub struct Setup<'a> {
    pub model: &'a Path,
    pub specs: &'a [InputSpec],
    pub data: &'a [Data],
    /// Intra-op threads, where the engine has the knob.
    pub threads: usize,
}

/// A model loaded and compiled by one engine, with its inputs already in the engine's form.
pub trait Engine {
    /// One inference on the prepared inputs; outputs are produced and dropped.
    fn run(&mut self) -> Result<()>;

    /// One inference, returning the first output as `f32` values (for the agreement check).
    fn first_output(&mut self) -> Result<Vec<f32>>;
}

/// Process set-up that is not part of loading a model (onnxruntime: opening the shared
/// library and creating its environment). Called once, before the load timer starts.
pub fn prepare(kind: EngineKind) -> Result<()> {
    match kind {
        EngineKind::Ort => ort::prepare(),
        EngineKind::Kiln | EngineKind::KilnBase | EngineKind::Tract => Ok(()),
    }
}

/// Loads and compiles `setup.model` with `kind`: the time this takes is the table's load column.
pub fn load(kind: EngineKind, setup: &Setup) -> Result<Box<dyn Engine>> {
    Ok(match kind {
        // A baseline worker is another binary's kiln engine; in this one it is this kiln.
        EngineKind::Kiln | EngineKind::KilnBase => Box::new(kiln::KilnEngine::load(setup)?),
        EngineKind::Ort => Box::new(ort::OrtEngine::load(setup)?),
        EngineKind::Tract => Box::new(tract::TractEngine::load(setup)?),
    })
}
