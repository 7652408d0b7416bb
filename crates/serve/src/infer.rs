//! `POST /v2/models/{name}/infer`: decode the request, run (alone or in a batch), encode the
//! outputs as JSON or as binary data after the JSON.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use kiln::Tensor;
use serde_json::Value;

use crate::error::ApiError;
use crate::protocol::{self, HEADER_LENGTH, InferRequest, InferResponse, ResponseOutput};
use crate::tensor::{self, echo};
use crate::{Served, Shared};

pub async fn infer(State(shared): State<Arc<Shared>>, Path(name): Path<String>, headers: HeaderMap, body: Body) -> Response {
    let arrived = Instant::now();
    let slot = match shared.slot(&name) {
        Ok(slot) => slot,
        Err(e) => return e.into_response(),
    };
    let response = match answer(&shared, &name, headers, body, arrived).await {
        Ok(response) => response,
        Err(e) => e.into_response(),
    };
    slot.metrics.request(arrived.elapsed(), response.status().as_u16());
    response
}

pub async fn infer_versioned(state: State<Arc<Shared>>, Path((name, _)): Path<(String, String)>, headers: HeaderMap, body: Body) -> Response {
    infer(state, Path(name), headers, body).await
}

async fn answer(shared: &Shared, name: &str, headers: HeaderMap, body: Body, arrived: Instant) -> Result<Response, ApiError> {
    let limits = &shared.options.limits;
    let served = shared.slot(name)?.ready()?;
    let _in_flight = shared.requests.try_acquire().map_err(|_| {
        ApiError::unavailable(format!("{} requests are in flight, the most this server takes (--max-requests)", limits.max_requests_in_flight))
    })?;
    // Reading the body counts against the request's deadline: a client that sends slowly
    // cannot hold its place for ever.
    let reading = read_body(&headers, body, limits.max_body_bytes);
    let body = tokio::time::timeout_at(arrived.checked_add(limits.timeout).unwrap_or(arrived).into(), reading)
        .await
        .map_err(|_| ApiError::new(axum::http::StatusCode::REQUEST_TIMEOUT, "the request body did not arrive before the request's deadline"))??;
    let (json, mut binary) = split_body(&headers, body)?;
    if json.len() > limits.max_json_bytes {
        return Err(ApiError::too_large(format!("the request's JSON takes {} bytes, over the limit of {} (send large tensors as binary data)", json.len(), limits.max_json_bytes)));
    }
    let request: InferRequest = serde_json::from_slice(&json).map_err(|e| ApiError::bad(format!("the request's JSON: {e}")))?;

    let timeout = match request.parameters.get("timeout").and_then(Value::as_u64) {
        Some(us) => limits.timeout.min(Duration::from_micros(us)),
        None => limits.timeout,
    };
    // A timeout too long for the clock is as good as none.
    let deadline = arrived.checked_add(timeout).or_else(|| arrived.checked_add(Duration::from_secs(1 << 31))).unwrap_or(arrived);
    let inputs = decode_inputs(&served, &request, &mut binary, limits.max_tensor_bytes)?;
    if !binary.is_empty() {
        return Err(ApiError::bad(format!("{} bytes of binary data after the last input's", binary.len())));
    }
    let wanted = wanted_outputs(&served, &request)?;

    let outputs = match &served.batcher {
        Some(batcher) => batcher.submit(inputs, deadline).await?,
        None => crate::run::run(served.model.clone(), Arc::clone(&shared.runs), inputs, deadline).await?,
    };
    encode(&served, name, request.id, &outputs, &wanted)
}

/// The body, refused with 413 once it passes `limit` bytes.
async fn read_body(headers: &HeaderMap, body: Body, limit: usize) -> Result<Bytes, ApiError> {
    let too_large = || ApiError::too_large(format!("the request body is over the limit of {limit} bytes (--max-body-bytes)"));
    let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    axum::body::to_bytes(body, limit).await.map_err(|e| {
        let inner = e.into_inner();
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&*inner);
        while let Some(c) = cause {
            if c.is::<http_body_util::LengthLimitError>() {
                return too_large();
            }
            cause = c.source();
        }
        ApiError::bad(format!("reading the request body: {inner}"))
    })
}

/// The JSON part of the body and the binary part after it.
fn split_body(headers: &HeaderMap, body: Bytes) -> Result<(Bytes, Bytes), ApiError> {
    let Some(value) = headers.get(HEADER_LENGTH) else {
        return Ok((body, Bytes::new()));
    };
    let json_len = value
        .to_str()
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&n| n <= body.len())
        .ok_or_else(|| ApiError::bad(format!("header Inference-Header-Content-Length: {:?} is not a length within the {}-byte body", value, body.len())))?;
    Ok((body.slice(..json_len), body.slice(json_len..)))
}

/// The request's tensors in the model's input order; binary data is taken from the front of
/// `binary` in request order.
fn decode_inputs(served: &Served, request: &InferRequest, binary: &mut Bytes, max_bytes: u64) -> Result<Vec<Tensor>, ApiError> {
    let names: Vec<&str> = served.model.inputs().into_iter().map(|(n, _)| n).collect();
    let mut ordered: Vec<Option<Tensor>> = vec![None; names.len()];
    for input in &request.inputs {
        let at = names.iter().position(|n| *n == input.name).ok_or_else(|| {
            ApiError::bad(format!("input \"{}\": the model has no such input (its inputs: {})", echo(&input.name), kiln_tir::echo::list(&names)))
        })?;
        if ordered[at].is_some() {
            return Err(ApiError::bad(format!("input \"{}\" is given twice", echo(&input.name))));
        }
        let bytes = match input.parameters.get("binary_data_size") {
            None => None,
            Some(size) => {
                let size = size.as_u64().and_then(|s| usize::try_from(s).ok()).filter(|&s| s <= binary.len()).ok_or_else(|| {
                    ApiError::bad(format!("input \"{}\": binary_data_size {size} is not a length within the {} binary bytes left", echo(&input.name), binary.len()))
                })?;
                Some(binary.split_to(size))
            }
        };
        ordered[at] = Some(tensor::decode(input, bytes, max_bytes)?);
    }
    ordered
        .into_iter()
        .zip(&names)
        .map(|(t, name)| t.ok_or_else(|| ApiError::bad(format!("input \"{}\" is missing", echo(name)))))
        .collect()
}

/// For each output to answer with, its index among the model's outputs and whether it goes
/// as binary data.
fn wanted_outputs(served: &Served, request: &InferRequest) -> Result<Vec<(usize, bool)>, ApiError> {
    let all_binary = protocol::flag(&request.parameters, "binary_data_output");
    let names: Vec<&str> = served.model.outputs().into_iter().map(|(n, _)| n).collect();
    match &request.outputs {
        None => Ok((0..names.len()).map(|i| (i, all_binary)).collect()),
        Some(asked) => asked
            .iter()
            .map(|o| {
                let at = names.iter().position(|n| *n == o.name).ok_or_else(|| {
                    ApiError::bad(format!("output \"{}\": the model has no such output (its outputs: {})", echo(&o.name), kiln_tir::echo::list(&names)))
                })?;
                let binary = o.parameters.get("binary_data").and_then(Value::as_bool).unwrap_or(all_binary);
                Ok((at, binary))
            })
            .collect(),
    }
}

/// The response: JSON alone, or JSON followed by the binary outputs in order.
fn encode(served: &Served, model: &str, id: Option<String>, outputs: &[Tensor], wanted: &[(usize, bool)]) -> Result<Response, ApiError> {
    let names: Vec<&str> = served.model.outputs().into_iter().map(|(n, _)| n).collect();
    let mut chunks = Vec::new();
    let described = wanted
        .iter()
        .map(|&(at, binary)| {
            let t = &outputs[at];
            let name = names.get(at).map_or_else(String::new, |n| n.to_string());
            let datatype = protocol::datatype(t.dtype).ok_or_else(|| {
                ApiError::new(axum::http::StatusCode::INTERNAL_SERVER_ERROR, format!("output \"{}\" has type {}, which the protocol cannot carry", echo(&name), t.dtype.name()))
            })?;
            let mut out = ResponseOutput {
                name,
                datatype,
                shape: t.shape.clone(),
                parameters: Default::default(),
                data: None,
            };
            if binary {
                let bytes = tensor::to_binary(t);
                out.parameters.insert("binary_data_size".into(), Value::from(bytes.len()));
                chunks.push(bytes);
            } else {
                out.data = Some(tensor::to_json(t));
            }
            Ok(out)
        })
        .collect::<Result<_, ApiError>>()?;
    let response = InferResponse { model_name: model.to_string(), id, outputs: described };
    let json = serde_json::to_vec(&response).unwrap_or_default();
    if chunks.is_empty() {
        return Ok(([(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], json).into_response());
    }
    let mut body = BytesMut::with_capacity(json.len() + chunks.iter().map(Bytes::len).sum::<usize>());
    body.extend_from_slice(&json);
    chunks.iter().for_each(|c| body.extend_from_slice(c));
    let length = HeaderValue::from(json.len());
    Ok(([(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream")), (header::HeaderName::from_static(HEADER_LENGTH), length)], body.freeze()).into_response())
}
