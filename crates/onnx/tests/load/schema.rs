//! Loader tests: schema export.

use super::*;

/// Writes our compiled FileDescriptorSet to `$KILN_ONNX_FDS_OUT` (used by
/// `scripts/check_proto.py`); otherwise just sanity-checks it.
#[test]
fn export_descriptor_set() {
    let fds = kiln_onnx::proto::FILE_DESCRIPTOR_SET;
    assert!(fds.len() > 1000);
    assert!(fds.windows(b"ModelProto".len()).any(|w| w == b"ModelProto"));
    if let Some(out) = std::env::var_os("KILN_ONNX_FDS_OUT") {
        std::fs::write(out, fds).unwrap();
    }
}

#[test]
fn onnx_file_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<OnnxFile>();
    check::<TensorData>();
    check::<LoadError>();
}
