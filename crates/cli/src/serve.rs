//! `kiln serve`: models over HTTP on the Open Inference Protocol V2 (`kiln_serve`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};

/// What `kiln serve` was asked for.
pub struct Serve {
    /// `NAME=PATH` pairs, and directories whose `*.onnx` files are served by file stem.
    pub models: Vec<String>,
    pub dirs: Vec<PathBuf>,
    /// `[MODEL:]INPUT=DIMS`: compiled at start-up for this input shape.
    pub input_shapes: Vec<String>,
    /// Models whose requests are batched.
    pub batched: Vec<String>,
    pub address: String,
    pub threads: Option<usize>,
    pub limits: kiln::ResourceLimits,
    pub serve: kiln_serve::ServeOptions,
}

pub fn serve(s: Serve) -> Result<()> {
    let mut named: Vec<(String, PathBuf)> = Vec::new();
    for m in &s.models {
        let Some((name, path)) = m.split_once('=') else {
            bail!("--model {m}: expected NAME=PATH")
        };
        named.push((name.to_string(), PathBuf::from(path)));
    }
    for dir in &s.dirs {
        named.extend(models_in(dir)?);
    }
    if named.is_empty() {
        bail!("nothing to serve: give --model NAME=PATH or --models DIR");
    }
    let mut base = kiln::CompileOptions { limits: s.limits.clone(), ..kiln::CompileOptions::from_env() };
    if let Some(t) = s.threads {
        base.threads = t.max(1);
    }
    if let Some(unknown) = s.batched.iter().find(|b| !named.iter().any(|(n, _)| n == *b)) {
        bail!("--batch {unknown}: no model of that name is served");
    }
    if s.serve.batching.is_some() != !s.batched.is_empty() {
        bail!("batching needs both --batch-window-ms and the models to batch (--batch NAME)");
    }
    let mut specs: Vec<kiln_serve::ModelSpec> = named.into_iter().map(|(name, path)| kiln_serve::ModelSpec { batch: s.batched.contains(&name), name, path, options: base.clone() }).collect();
    for text in &s.input_shapes {
        let (model, shape) = match text.split_once(':') {
            Some((model, rest)) if !rest.is_empty() && text.find('=').is_none_or(|eq| eq > model.len()) => (Some(model), rest),
            _ => (None, text.as_str()),
        };
        let (input, dims) = crate::parse_input_shape(shape)?;
        let mut matched = false;
        for spec in specs.iter_mut().filter(|m| model.is_none_or(|n| n == m.name)) {
            spec.options.input_shapes.push((input.clone(), dims.clone()));
            matched = true;
        }
        if !matched {
            bail!("--input-shape {text}: no model \"{}\" is served", model.unwrap_or_default());
        }
    }
    let server = kiln_serve::Server::new(specs, s.serve).map_err(anyhow::Error::msg)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the async runtime")?;
    let served = runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&s.address).await.with_context(|| format!("listening on {}", s.address))?;
        let bound = listener.local_addr()?;
        // The first line tells scripts where to connect (the port is chosen when it is 0).
        println!("kiln serve: listening on http://{bound}");
        let loader = server.clone();
        let (failed_tx, failed_rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let failed = loader.load(|line| eprintln!("kiln serve: {line}")).await;
            let _ = failed_tx.send(failed);
        });
        // A model that does not load stops the server (after the requests in flight), as a
        // deployment would want to hear at once; the others are served while they load.
        let failed = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let noted = failed.clone();
        let stop = async move {
            let load_failed = async {
                match failed_rx.await {
                    Ok(names) if !names.is_empty() => *noted.lock().unwrap_or_else(|e| e.into_inner()) = names,
                    _ => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                () = kiln_serve::shutdown_signal() => {}
                () = load_failed => {}
            }
        };
        kiln_serve::serve(listener, &server, stop).await.context("serving")?;
        let failed = failed.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if !failed.is_empty() {
            bail!("{} failed to load (above); stopped", failed.iter().map(|n| format!("model \"{n}\"")).collect::<Vec<_>>().join(", "));
        }
        eprintln!("kiln serve: stopped");
        Ok(())
    });
    // Compilations still running (a stop during loading) are not waited for.
    runtime.shutdown_background();
    served
}

/// `(stem, path)` of every `.onnx` file in `dir`, sorted.
fn models_in(dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("--models {}", dir.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "onnx")
            && let Some(stem) = path.file_stem().and_then(|s| s.to_str())
        {
            found.push((stem.to_string(), path.clone()));
        }
    }
    found.sort();
    Ok(found)
}

/// `--timeout-ms` and friends as a duration.
pub fn millis(ms: u64) -> Duration {
    Duration::from_millis(ms)
}
