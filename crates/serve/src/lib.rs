//! Models compiled by kiln, served over HTTP on the Open Inference Protocol V2 (the KServe V2
//! REST API that Triton's and KServe's clients speak), with the binary-data extension.
//!
//! ```text
//! GET  /v2/health/live | /v2/health/ready            200, or 503 while models load
//! GET  /v2/models/{name}[/versions/{v}]              inputs and outputs; symbolic dims are -1
//! GET  /v2/models/{name}[/versions/{v}]/ready
//! POST /v2/models/{name}[/versions/{v}]/infer        JSON tensors, or JSON then binary data
//! GET  /metrics                                      Prometheus text
//! ```
//!
//! Every model compiles once, on a thread of its own at start-up; concurrent requests run the one
//! [`kiln::CompiledModel`] in parallel, up to a bound on concurrent runs. Errors are
//! `{"error": "..."}` with 400 (the request), 404 (the model), 413 (a limit), 503 (not ready, or
//! no run slot before the deadline) or 504 (the run passed its deadline).

mod batch;
mod error;
mod infer;
mod metrics;
mod protocol;
mod run;
mod tensor;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use kiln::CompiledModel;
use tokio::sync::Semaphore;

pub use batch::BatchOptions;
use error::ApiError;
use metrics::ModelMetrics;

/// A model to serve: its name in URLs, its file and how to compile it.
#[derive(Clone, Debug)]
pub struct ModelSpec {
    pub name: String,
    pub path: PathBuf,
    pub options: kiln::CompileOptions,
    /// Whether its requests are batched (with [`ServeOptions::batching`]). Only the user can
    /// say that a model's rows are independent: a leading symbolic dim may also be a sequence.
    pub batch: bool,
}

/// What requests may take.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Bytes of one request body.
    pub max_body_bytes: usize,
    /// Bytes of one input tensor.
    pub max_tensor_bytes: u64,
    /// From a request's arrival to its answer; a request's `timeout` parameter (microseconds)
    /// can only shorten it.
    pub timeout: Duration,
    /// Runs executing at once, over all models; requests beyond wait for a slot until their
    /// deadline.
    pub max_concurrent_runs: usize,
    /// Bytes of a request's JSON part (the binary part may be larger): parsed JSON takes many
    /// times its size, so large tensors should come as binary data.
    pub max_json_bytes: usize,
    /// Requests being read, decoded, run or answered at once, over all models; more get 503.
    pub max_requests_in_flight: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 64 << 20,
            max_tensor_bytes: 1 << 30,
            timeout: Duration::from_secs(30),
            max_concurrent_runs: std::thread::available_parallelism().map_or(1, |n| n.get()),
            max_json_bytes: 16 << 20,
            max_requests_in_flight: 32,
        }
    }
}

/// How the server runs.
#[derive(Clone, Debug, Default)]
pub struct ServeOptions {
    pub limits: Limits,
    /// Dynamic batching for the models that allow it, or `None` for one run per request.
    pub batching: Option<BatchOptions>,
}

/// A model's state: loading, ready, or failed to load.
enum Load {
    Loading,
    Ready(Arc<Served>),
    Failed(String),
}

/// A compiled model and what serving it needs.
struct Served {
    model: Arc<CompiledModel>,
    batcher: Option<batch::Batcher>,
}

/// One model's entry: its state and its counters.
struct Slot {
    spec: ModelSpec,
    load: RwLock<Load>,
    metrics: Arc<ModelMetrics>,
}

impl Slot {
    fn ready(&self) -> Result<Arc<Served>, ApiError> {
        match &*self.load.read().unwrap_or_else(|e| e.into_inner()) {
            Load::Ready(served) => Ok(served.clone()),
            Load::Loading => Err(ApiError::unavailable(format!("model \"{}\" is still loading", self.spec.name))),
            Load::Failed(why) => Err(ApiError::unavailable(format!("model \"{}\" failed to load: {why}", self.spec.name))),
        }
    }
}

/// What the handlers share.
struct Shared {
    options: ServeOptions,
    models: BTreeMap<String, Slot>,
    runs: Arc<Semaphore>,
    requests: Semaphore,
}

impl Shared {
    fn slot(&self, name: &str) -> Result<&Slot, ApiError> {
        self.models.get(name).ok_or_else(|| {
            let known: Vec<&str> = self.models.keys().map(String::as_str).collect();
            ApiError::not_found(format!("no model \"{}\" (serving {})", tensor::echo(name), kiln_tir::echo::list(&known)))
        })
    }
}

/// An inference server for a set of models.
#[derive(Clone)]
pub struct Server {
    shared: Arc<Shared>,
}

impl Server {
    /// A server for `models`; nothing is compiled until [`Server::load`].
    pub fn new(models: Vec<ModelSpec>, options: ServeOptions) -> Result<Server, String> {
        let mut slots = BTreeMap::new();
        for spec in models {
            let name = spec.name.clone();
            if name.is_empty() || name.contains('/') {
                return Err(format!("model name \"{name}\" cannot be part of a URL path"));
            }
            let slot = Slot { spec, load: RwLock::new(Load::Loading), metrics: Arc::default() };
            if slots.insert(name.clone(), slot).is_some() {
                return Err(format!("two models are named \"{name}\""));
            }
        }
        let runs = Arc::new(Semaphore::new(options.limits.max_concurrent_runs.max(1)));
        let requests = Semaphore::new(options.limits.max_requests_in_flight.max(1));
        Ok(Server { shared: Arc::new(Shared { options, models: slots, runs, requests }) })
    }

    /// Loads and compiles every model, one after another, and reports each on `progress`.
    /// Call inside a Tokio runtime (batching starts a task per model); it returns when all
    /// have loaded or failed, with the names of those that failed, and requests are answered
    /// meanwhile.
    pub async fn load(&self, progress: impl Fn(&str) + Send + Sync + 'static) -> Vec<String> {
        let mut failed = Vec::new();
        for (name, slot) in &self.shared.models {
            let spec = slot.spec.clone();
            let started = Instant::now();
            let batching = self.shared.options.batching.filter(|_| slot.spec.batch);
            let compiled = tokio::task::spawn_blocking(move || {
                let model = kiln::Model::load_with(&spec.path, &spec.options.limits).and_then(|m| m.compile(&spec.options))?;
                // A batch size that does not compile now is reported and compiled (or refused)
                // when a request needs it.
                let warm = batching.map(|b| warm_up(&model, &spec.options.input_shapes, b.max_rows));
                Ok::<_, kiln::Error>((model, warm))
            })
            .await;
            let load = match compiled {
                Ok(Ok((model, warm))) => {
                    if let Some(Err(e)) = warm {
                        progress(&format!("model \"{name}\": batched shapes not compiled ahead: {e}"));
                    }
                    slot.metrics.compiled(started.elapsed());
                    let model = Arc::new(model);
                    let batcher = batching.and_then(|options| match batch::unbatchable(&model) {
                        None => Some(batch::Batcher::start(model.clone(), self.shared.runs.clone(), slot.metrics.clone(), options)),
                        Some(why) => {
                            progress(&format!("model \"{name}\": not batched: {why}"));
                            None
                        }
                    });
                    progress(&format!("model \"{name}\" ready in {} ms{}", started.elapsed().as_millis(), if batcher.is_some() { " (batched)" } else { "" }));
                    Load::Ready(Arc::new(Served { model, batcher }))
                }
                Ok(Err(e)) => Load::Failed(e.to_string()),
                Err(e) => Load::Failed(format!("compilation stopped: {e}")),
            };
            if let Load::Failed(why) = &load {
                progress(&format!("model \"{name}\" failed to load: {why}"));
                failed.push(name.clone());
            }
            *slot.load.write().unwrap_or_else(|e| e.into_inner()) = load;
        }
        failed
    }

    /// The HTTP routes.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/v2", get(server_metadata))
            .route("/v2/health/live", get(|| async { StatusCode::OK }))
            .route("/v2/health/ready", get(server_ready))
            .route("/v2/models/{name}", get(model_metadata))
            .route("/v2/models/{name}/versions/{version}", get(model_metadata_versioned))
            .route("/v2/models/{name}/ready", get(model_ready))
            .route("/v2/models/{name}/versions/{version}/ready", get(model_ready_versioned))
            .route("/v2/models/{name}/infer", post(infer::infer))
            .route("/v2/models/{name}/versions/{version}/infer", post(infer::infer_versioned))
            .route("/metrics", get(metrics))
            .fallback(|| async { ApiError::not_found("no such endpoint") })
            .with_state(self.shared.clone())
    }
}

/// Compiles a batchable model for every batched run size now, when `input_shapes` gives every
/// input's shape, so that no request waits for a compilation.
fn warm_up(model: &CompiledModel, input_shapes: &[(String, Vec<u64>)], max_rows: u64) -> kiln::Result<()> {
    if batch::unbatchable(model).is_some() {
        return Ok(());
    }
    let Some(shapes) = model.inputs().iter().map(|(name, _)| input_shapes.iter().find(|(n, _)| n == name).map(|(_, d)| d.clone())).collect::<Option<Vec<Vec<u64>>>>() else {
        return Ok(());
    };
    for rows in batch::run_sizes(max_rows) {
        let shapes: Vec<Vec<u64>> = shapes.iter().map(|d| d.iter().enumerate().map(|(k, &n)| if k == 0 { rows } else { n }).collect()).collect();
        model.specialization(&shapes, &[])?;
    }
    Ok(())
}

async fn server_metadata() -> Response {
    axum::Json(protocol::ServerMetadata { name: "kiln", version: env!("CARGO_PKG_VERSION"), extensions: vec!["binary_tensor_data"] }).into_response()
}

async fn server_ready(State(shared): State<Arc<Shared>>) -> StatusCode {
    if shared.models.values().all(|s| s.ready().is_ok()) { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE }
}

async fn model_ready(State(shared): State<Arc<Shared>>, Path(name): Path<String>) -> Result<StatusCode, ApiError> {
    shared.slot(&name)?.ready().map(|_| StatusCode::OK)
}

async fn model_ready_versioned(state: State<Arc<Shared>>, Path((name, _)): Path<(String, String)>) -> Result<StatusCode, ApiError> {
    model_ready(state, Path(name)).await
}

async fn model_metadata(State(shared): State<Arc<Shared>>, Path(name): Path<String>) -> Result<Response, ApiError> {
    let served = shared.slot(&name)?.ready()?;
    let describe = |ports: Vec<(&str, &kiln::TensorType)>| {
        ports
            .into_iter()
            .map(|(name, ty)| protocol::TensorMetadata {
                name: name.to_string(),
                datatype: protocol::datatype(ty.dtype).unwrap_or("UNSUPPORTED"),
                shape: ty.shape.iter().map(|d| d.known().and_then(|d| i64::try_from(d).ok()).unwrap_or(-1)).collect(),
            })
            .collect()
    };
    Ok(axum::Json(protocol::ModelMetadata {
        name,
        versions: vec!["1".into()],
        platform: "onnx",
        inputs: describe(served.model.inputs()),
        outputs: describe(served.model.outputs()),
    })
    .into_response())
}

async fn model_metadata_versioned(state: State<Arc<Shared>>, Path((name, _)): Path<(String, String)>) -> Result<Response, ApiError> {
    model_metadata(state, Path(name)).await
}

async fn metrics(State(shared): State<Arc<Shared>>) -> String {
    let busy = shared.options.limits.max_concurrent_runs.max(1) - shared.runs.available_permits();
    metrics::render(shared.models.iter().map(|(name, slot)| (name.as_str(), &*slot.metrics)), busy)
}

/// Serves `server` on `listener` until `shutdown` completes, then finishes the requests in
/// flight.
pub async fn serve(listener: tokio::net::TcpListener, server: &Server, shutdown: impl std::future::Future<Output = ()> + Send + 'static) -> std::io::Result<()> {
    axum::serve(listener, server.router()).with_graceful_shutdown(shutdown).await
}

/// Completes on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let interrupt = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
}
