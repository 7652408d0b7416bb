//! A service that compiles one model at start-up and answers concurrent JSON requests through
//! one shared `kiln::CompiledModel`: no mutex around runs, each run on a blocking thread.
//!
//! ```text
//! kiln-example-service MODEL.onnx [HOST:PORT]
//! curl -d '{"inputs": {"image": {"shape": [1,1,8,8], "data": [0.5, ...]}}}' localhost:3000/predict
//! → {"outputs": {"probs": {"shape": [1,10], "data": [...]}}}
//! ```
//! f32 and i64 tensors only; `kiln serve` speaks the full Open Inference Protocol.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use kiln::{CompiledModel, DType, Tensor, TensorData};
use serde::{Deserialize, Serialize};

#[derive(Deserialize)]
struct Request {
    inputs: BTreeMap<String, Array>,
}

#[derive(Serialize)]
struct Response {
    outputs: BTreeMap<String, Array>,
}

/// A tensor as JSON: its dims and its elements in row-major order.
#[derive(Serialize, Deserialize)]
struct Array {
    shape: Vec<u64>,
    data: Vec<f64>,
}

type Failure = (StatusCode, Json<serde_json::Value>);

fn failure(status: StatusCode, message: impl std::fmt::Display) -> Failure {
    (status, Json(serde_json::json!({ "error": message.to_string() })))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().unwrap_or_else(|| "examples/models/tiny_cnn.onnx".into());
    let address = args.next().unwrap_or_else(|| "127.0.0.1:3000".into());
    // Compile once; every request shares the compiled model.
    let model = Arc::new(kiln::Model::load(&path)?.compile(&kiln::CompileOptions::default())?);
    let app = Router::new().route("/predict", post(predict)).with_state(model);
    let listener = tokio::net::TcpListener::bind(&address).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app).with_graceful_shutdown(async { tokio::signal::ctrl_c().await.unwrap_or(()) }).await?;
    Ok(())
}

async fn predict(State(model): State<Arc<CompiledModel>>, Json(request): Json<Request>) -> Result<Json<Response>, Failure> {
    let mut inputs = Vec::new();
    for (name, ty) in model.inputs() {
        let array = request.inputs.get(name).ok_or_else(|| failure(StatusCode::BAD_REQUEST, format!("input \"{name}\" is missing")))?;
        inputs.push(to_tensor(name, ty.dtype, array)?);
    }
    // Runs are CPU-bound: keep them off the async worker threads.
    let runner = model.clone();
    let outputs = tokio::task::spawn_blocking(move || runner.run(&inputs))
        .await
        .map_err(|e| failure(StatusCode::INTERNAL_SERVER_ERROR, e))?
        .map_err(|e| failure(StatusCode::BAD_REQUEST, e))?;
    let names = model.outputs().into_iter().map(|(n, _)| n.to_string());
    let outputs = names.zip(&outputs).map(|(n, t)| Ok((n.clone(), to_array(&n, t)?))).collect::<Result<_, Failure>>()?;
    Ok(Json(Response { outputs }))
}

fn to_tensor(name: &str, dtype: DType, array: &Array) -> Result<Tensor, Failure> {
    let numel = array.shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d));
    if numel != Some(array.data.len() as u64) {
        return Err(failure(StatusCode::BAD_REQUEST, format!("input \"{name}\": shape {:?} does not hold {} elements", array.shape, array.data.len())));
    }
    let bytes: Vec<u8> = match dtype {
        DType::F32 => array.data.iter().flat_map(|&x| (x as f32).to_le_bytes()).collect(),
        DType::I64 => array.data.iter().flat_map(|&x| (x as i64).to_le_bytes()).collect(),
        other => return Err(failure(StatusCode::BAD_REQUEST, format!("input \"{name}\": this example takes f32 and i64, not {}", other.name()))),
    };
    Ok(Tensor { dtype, shape: array.shape.clone(), data: TensorData::Raw(bytes.into()) })
}

fn to_array(name: &str, t: &Tensor) -> Result<Array, Failure> {
    let raw = t.raw().unwrap_or_default();
    let data = match t.dtype {
        DType::F32 => raw.chunks_exact(4).map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]]))).collect(),
        DType::I64 => raw.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f64).collect(),
        other => return Err(failure(StatusCode::INTERNAL_SERVER_ERROR, format!("output \"{name}\" is {}, which this example does not send", other.name()))),
    };
    Ok(Array { shape: t.shape.clone(), data })
}
