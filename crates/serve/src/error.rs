//! Errors as the protocol answers them: an HTTP status and `{"error": "..."}`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// A request that could not be answered.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError { status, message: message.into() }
    }

    /// 400: the request is malformed or does not fit the model.
    pub fn bad(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    /// 404.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, message)
    }

    /// 413: the body or a tensor is over a limit.
    pub fn too_large(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, message)
    }

    /// 503: the model is not ready, or no run could start before the request's deadline.
    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, message)
    }

    /// How kiln's own error answers: a request kiln refuses is the client's (400), a stopped run
    /// passed its deadline (504) and anything else is the server's (500).
    pub fn from_kiln(e: kiln::Error) -> ApiError {
        use kiln::Error as E;
        let status = match e {
            E::InputCount { .. } | E::UnknownInput(_) | E::InputDType { .. } | E::InputShape { .. } => StatusCode::BAD_REQUEST,
            E::Limit(_) => StatusCode::PAYLOAD_TOO_LARGE,
            E::Stopped(_) => StatusCode::GATEWAY_TIMEOUT,
            // Compiling for the request's shapes failed: those shapes do not fit the model.
            E::Bind(_) | E::Import(_) => StatusCode::BAD_REQUEST,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError::new(status, e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(serde_json::json!({ "error": self.message }))).into_response()
    }
}
