//! Dynamic batching: requests for one model that arrive within a short window run as one batch
//! along the model's leading symbolic dim, and their outputs are split again.
//!
//! A model qualifies when every input and every output has the same symbolic leading dim (the
//! batch) and byte-sized elements. Requests join one run only when the rest of their shapes
//! match; the others run in batches of their own.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kiln::{CompiledModel, DType, Dim, Tensor, TensorData};
use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::error::ApiError;
use crate::metrics::ModelMetrics;

/// When to run what has been collected.
#[derive(Clone, Copy, Debug)]
pub struct BatchOptions {
    /// How long the first request of a batch waits for others.
    pub window: Duration,
    /// Rows (sum of the requests' leading dims) of one run at most.
    pub max_rows: u64,
}

/// Why `model` cannot be batched along its leading dim, or `None` when it can.
pub fn unbatchable(model: &CompiledModel) -> Option<String> {
    let inputs = model.inputs();
    let outputs = model.outputs();
    let Some((first, ty)) = inputs.first() else {
        return Some("it has no inputs".into());
    };
    let batch = match ty.shape.first() {
        Some(d @ Dim::Sym(_)) => d,
        _ => return Some(format!("input \"{first}\" has no symbolic leading dim")),
    };
    for (name, ty) in inputs.iter().chain(&outputs) {
        if ty.shape.first() != Some(batch) {
            return Some(format!("\"{name}\" does not lead with the dim {batch} of input \"{first}\""));
        }
        // Rows stacked along the batch must not change any other dim.
        if ty.shape[1..].iter().any(|d| d.symbols().iter().any(|s| batch.symbols().contains(s))) {
            return Some(format!("\"{name}\" uses the batch dim {batch} after its first dim"));
        }
        if ty.dtype != DType::String && ty.dtype.bits() % 8 != 0 {
            return Some(format!("\"{name}\" has {} elements, which do not split into whole bytes", ty.dtype.name()));
        }
    }
    None
}

/// Each input's element type and dims after the leading one.
type Signature = Vec<(DType, Vec<u64>)>;

/// One request waiting in a batch.
struct Job {
    inputs: Vec<Tensor>,
    deadline: Instant,
    reply: oneshot::Sender<Result<Vec<Tensor>, ApiError>>,
}

impl Job {
    /// The request's rows: its inputs' common leading dim, or `None` when they disagree (the
    /// request then runs alone and gets the model's own error).
    fn rows(&self) -> Option<u64> {
        let rows = *self.inputs.first()?.shape.first()?;
        self.inputs.iter().all(|t| t.shape.first() == Some(&rows)).then_some(rows)
    }

    /// What must match for two requests to share a run: each input's type and trailing dims.
    fn signature(&self) -> Signature {
        self.inputs.iter().map(|t| (t.dtype, t.shape.get(1..).unwrap_or_default().to_vec())).collect()
    }
}

/// The queue in front of one model.
pub struct Batcher {
    jobs: mpsc::Sender<Job>,
}

impl Batcher {
    /// Starts the batching task on the current Tokio runtime.
    pub fn start(model: Arc<CompiledModel>, runs: Arc<Semaphore>, metrics: Arc<ModelMetrics>, options: BatchOptions) -> Batcher {
        let (jobs, queue) = mpsc::channel(1024);
        tokio::spawn(collect(queue, model, runs, metrics, options));
        Batcher { jobs }
    }

    /// Runs one request's inputs as part of a batch.
    pub async fn submit(&self, inputs: Vec<Tensor>, deadline: Instant) -> Result<Vec<Tensor>, ApiError> {
        let (reply, answer) = oneshot::channel();
        self.jobs.send(Job { inputs, deadline, reply }).await.map_err(|_| ApiError::unavailable("the model's batch queue is closed"))?;
        match tokio::time::timeout_at(deadline.into(), answer).await {
            Ok(answer) => answer.map_err(|_| ApiError::unavailable("the batch holding this request was dropped"))?,
            Err(_) => Err(ApiError::new(axum::http::StatusCode::GATEWAY_TIMEOUT, "the request passed its deadline before its batch finished")),
        }
    }
}

/// Collects jobs into batches for ever: the first job opens a window; jobs that arrive within
/// it join until the rows reach the maximum.
async fn collect(mut queue: mpsc::Receiver<Job>, model: Arc<CompiledModel>, runs: Arc<Semaphore>, metrics: Arc<ModelMetrics>, options: BatchOptions) {
    let mut carried: Option<Job> = None;
    loop {
        let first = match carried.take() {
            Some(job) => job,
            None => match queue.recv().await {
                Some(job) => job,
                None => return,
            },
        };
        let now = tokio::time::Instant::now();
        let closes = now.checked_add(options.window).unwrap_or(now);
        let mut rows = first.rows().unwrap_or(options.max_rows);
        let mut batch = vec![first];
        while rows < options.max_rows {
            match tokio::time::timeout_at(closes, queue.recv()).await {
                Ok(Some(job)) => {
                    let more = job.rows().unwrap_or(options.max_rows);
                    if rows.saturating_add(more) > options.max_rows {
                        carried = Some(job);
                        break;
                    }
                    rows = rows.saturating_add(more);
                    batch.push(job);
                }
                Ok(None) | Err(_) => break,
            }
        }
        for group in group(batch) {
            tokio::spawn(run_group(group, model.clone(), runs.clone(), metrics.clone(), options.max_rows));
        }
    }
}

/// Jobs split into groups that can share a run, in arrival order.
fn group(batch: Vec<Job>) -> Vec<Vec<Job>> {
    let mut groups: Vec<(Option<Signature>, Vec<Job>)> = Vec::new();
    for job in batch {
        let key = job.rows().map(|_| job.signature());
        match groups.iter_mut().find(|(k, _)| key.is_some() && *k == key) {
            Some((_, jobs)) => jobs.push(job),
            None => groups.push((key, vec![job])),
        }
    }
    groups.into_iter().map(|(_, jobs)| jobs).collect()
}

/// The leading dims batched runs use: powers of two below `max_rows`, and `max_rows`. Each is
/// one specialization, compiled once; padding a batch up to the next keeps their number (and
/// the memory their code and packed weights take) bounded.
pub fn run_sizes(max_rows: u64) -> Vec<u64> {
    let mut sizes: Vec<u64> = std::iter::successors(Some(1u64), |&n| n.checked_mul(2)).take_while(|&n| n < max_rows).collect();
    sizes.push(max_rows.max(1));
    sizes
}

/// Runs one group as one batch and answers each job with its rows of every output.
async fn run_group(jobs: Vec<Job>, model: Arc<CompiledModel>, runs: Arc<Semaphore>, metrics: Arc<ModelMetrics>, max_rows: u64) {
    // A request past its deadline (or gone) is not run; the others run until the latest of
    // theirs, and each waits only until its own (`Batcher::submit`).
    let now = Instant::now();
    let (jobs, expired): (Vec<Job>, Vec<Job>) = jobs.into_iter().partition(|j| j.deadline > now && !j.reply.is_closed());
    for job in expired {
        let _ = job.reply.send(Err(ApiError::new(axum::http::StatusCode::GATEWAY_TIMEOUT, "the request passed its deadline waiting for its batch")));
    }
    if jobs.is_empty() {
        return;
    }
    let deadline = jobs.iter().map(|j| j.deadline).max().unwrap_or(now);
    let rows: Vec<u64> = jobs.iter().map(|j| j.rows().unwrap_or(0)).collect();
    let total: u64 = rows.iter().sum();
    // A request that could not be batched, or whose rows are over the maximum, runs as it is.
    let size = run_sizes(max_rows).into_iter().find(|&s| s >= total);
    if jobs.len() == 1 && (jobs[0].rows().is_none() || size.is_none_or(|s| s == total)) {
        for job in jobs {
            let _ = job.reply.send(crate::run::run(model.clone(), runs.clone(), job.inputs, deadline).await);
        }
        return;
    }
    if jobs.len() > 1 {
        metrics.batch(jobs.len());
    }
    // Padding copies the last row of the last job that has rows; with no rows there is nothing
    // to pad with, and nothing to pad.
    let donor = jobs.iter().rposition(|j| j.rows().is_some_and(|r| r > 0));
    let padding = match donor {
        Some(_) => size.map_or(0, |s| s - total),
        None => 0,
    };
    let inputs = (0..jobs[0].inputs.len())
        .map(|i| {
            let pad = donor.and_then(|d| last_row(&jobs[d].inputs[i], padding));
            concat(jobs.iter().map(|j| &j.inputs[i]).chain(pad.as_ref()))
        })
        .collect();
    let result = crate::run::run(model, runs, inputs, deadline).await.and_then(|outputs| split(&outputs, &rows, total + padding));
    match result {
        Ok(per_job) => jobs.into_iter().zip(per_job).for_each(|(job, outputs)| drop(job.reply.send(Ok(outputs)))),
        Err(e) => jobs.into_iter().for_each(|job| drop(job.reply.send(Err(e.clone())))),
    }
}

/// Tensors of one type and trailing shape stacked along the leading dim.
fn concat<'a>(parts: impl Iterator<Item = &'a Tensor> + Clone) -> Tensor {
    let Some(first) = parts.clone().next() else {
        return Tensor { dtype: DType::F32, shape: vec![0], data: TensorData::Raw(Bytes::new()) };
    };
    let mut shape = first.shape.clone();
    shape[0] = parts.clone().map(|t| t.shape[0]).sum();
    let data = match &first.data {
        TensorData::Strings(_) => TensorData::Strings(parts.flat_map(|t| match &t.data {
            TensorData::Strings(s) => s.clone(),
            _ => Vec::new(),
        }).collect()),
        _ => {
            let mut bytes = BytesMut::new();
            for t in parts {
                bytes.extend_from_slice(t.raw().unwrap_or_default());
            }
            TensorData::Raw(bytes.freeze())
        }
    };
    Tensor { dtype: first.dtype, shape, data }
}

/// `t`'s last row repeated `times` times (padding: a real row is a valid input where zeros
/// might not be), or `None` for no rows.
fn last_row(t: &Tensor, times: u64) -> Option<Tensor> {
    let rows = *t.shape.first()?;
    if times == 0 || rows == 0 {
        return None;
    }
    let mut shape = t.shape.clone();
    shape[0] = times;
    let data = match &t.data {
        TensorData::Strings(s) => {
            let per = s.len() / rows as usize;
            let row = &s[s.len() - per..];
            TensorData::Strings((0..times).flat_map(|_| row.iter().cloned()).collect())
        }
        _ => {
            let raw = t.raw()?;
            let row = &raw[raw.len() - raw.len() / rows as usize..];
            TensorData::Raw(Bytes::from(row.repeat(times as usize)))
        }
    };
    Some(Tensor { dtype: t.dtype, shape, data })
}

/// Each job's rows of every output of a run over `total` rows (the last ones padding).
fn split(outputs: &[Tensor], rows: &[u64], total: u64) -> Result<Vec<Vec<Tensor>>, ApiError> {
    let mut per_job: Vec<Vec<Tensor>> = rows.iter().map(|_| Vec::with_capacity(outputs.len())).collect();
    for out in outputs {
        if out.shape.first() != Some(&total) {
            return Err(ApiError::new(axum::http::StatusCode::INTERNAL_SERVER_ERROR, format!("a batched output has shape {:?}, not {total} rows", out.shape)));
        }
        let row_elems: u64 = out.shape[1..].iter().product();
        let width = out.dtype.storage_bytes(1).unwrap_or(0);
        let whole = match &out.data {
            TensorData::Strings(s) => s.len() as u64,
            TensorData::Raw(b) => b.len() as u64 / width.max(1),
            TensorData::Absent => 0,
        };
        if whole != total * row_elems {
            return Err(ApiError::new(axum::http::StatusCode::INTERNAL_SERVER_ERROR, format!("a batched output holds {whole} elements, not {}", total * row_elems)));
        }
        let mut at = 0u64;
        for (job, &r) in per_job.iter_mut().zip(rows) {
            let mut shape = out.shape.clone();
            shape[0] = r;
            let (lo, hi) = (at * row_elems, (at + r) * row_elems);
            let data = match &out.data {
                TensorData::Strings(s) => TensorData::Strings(s[lo as usize..hi as usize].to_vec()),
                TensorData::Raw(b) => TensorData::Raw(b.slice((lo * width) as usize..(hi * width) as usize)),
                TensorData::Absent => TensorData::Raw(Bytes::new()),
            };
            job.push(Tensor { dtype: out.dtype, shape, data });
            at += r;
        }
    }
    Ok(per_job)
}
