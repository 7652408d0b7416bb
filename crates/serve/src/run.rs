//! One run of a compiled model off the async threads: a permit from the server's bound on
//! concurrent runs, the request's deadline, and cancellation when the request goes away.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use axum::http::StatusCode;
use kiln::{CompiledModel, RunOptions, Tensor};
use tokio::sync::Semaphore;

use crate::error::ApiError;

/// Sets its flag when dropped: a run whose request was dropped (the client hung up, the server
/// is stopping) stops at its next check.
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Runs `model` on `inputs` on a blocking thread once one of `runs`' permits is free. Waiting
/// for a permit past `deadline` is 503; a run that passes it is stopped (504).
pub async fn run(model: Arc<CompiledModel>, runs: Arc<Semaphore>, inputs: Vec<Tensor>, deadline: Instant) -> Result<Vec<Tensor>, ApiError> {
    let permit = match tokio::time::timeout_at(deadline.into(), runs.acquire_owned()).await {
        Ok(Ok(permit)) => permit,
        Ok(Err(_)) => return Err(ApiError::unavailable("the server is shutting down")),
        Err(_) => return Err(ApiError::unavailable("no run could start before the request's deadline: every run slot stayed busy (--max-concurrent-runs)")),
    };
    let cancel = Arc::new(AtomicBool::new(false));
    let _guard = CancelOnDrop(cancel.clone());
    let options = RunOptions { cancel: Some(cancel), deadline: Some(deadline) };
    let job = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        model.run_with(&inputs, &options)
    });
    match job.await {
        Ok(result) => result.map_err(ApiError::from_kiln),
        Err(e) => Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, format!("the run failed: {e}"))),
    }
}
