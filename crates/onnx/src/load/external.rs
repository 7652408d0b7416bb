//! External tensor data: locating, mapping (once per file) and slicing.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

use bytes::Bytes;

use super::{LoadError, map_file, tensor_name};
use crate::proto::TensorProto;

/// Cache of mapped external data files, keyed by canonical path.
#[derive(Default)]
pub(super) struct ExternalFiles {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Canonical form of the model's base directory, computed on first use.
    canonical_base: Option<PathBuf>,
    /// Mapped files by canonical path.
    files: HashMap<PathBuf, Bytes>,
}

/// The recognised `external_data` entries of a tensor.
struct ExternalInfo<'a> {
    location: &'a str,
    offset: Option<&'a str>,
    length: Option<&'a str>,
}

fn parse_info(t: &TensorProto) -> Result<ExternalInfo<'_>, String> {
    let (mut location, mut offset, mut length) = (None, None, None);
    for entry in &t.external_data {
        let value = entry.value.as_deref().unwrap_or("");
        match entry.key.as_deref().unwrap_or("") {
            "location" => location = Some(value),
            "offset" => offset = Some(value),
            "length" => length = Some(value),
            // "checksum" and unknown keys are ignored.
            _ => {}
        }
    }
    let location = location.filter(|l| !l.is_empty()).ok_or_else(|| {
        "data_location is EXTERNAL but external_data has no 'location'".to_string()
    })?;
    Ok(ExternalInfo {
        location,
        offset,
        length,
    })
}

fn parse_u64(key: &str, value: &str) -> Result<u64, String> {
    value
        .trim()
        .parse::<u64>()
        .map_err(|_| format!("'{key}' must be a non-negative integer, got '{value}'"))
}

/// Rejects absolute locations and relative ones that climb above the base
/// directory lexically (symlink escapes are caught after canonicalizing).
fn check_relative(location: &str) -> Result<(), String> {
    let path = Path::new(location);
    let mut depth: usize = 0;
    for c in path.components() {
        match c {
            Component::Prefix(_) | Component::RootDir => {
                return Err(format!(
                    "location '{location}' is absolute; it must be relative to the model directory"
                ));
            }
            Component::CurDir => {}
            Component::ParentDir => {
                depth = depth
                    .checked_sub(1)
                    .ok_or_else(|| format!("location '{location}' escapes the model directory"))?;
            }
            Component::Normal(_) => depth += 1,
        }
    }
    Ok(())
}

impl ExternalFiles {
    /// Returns the bytes of `t`'s external data: a zero-copy slice of the
    /// mapped file named by its `location`, relative to `base_dir`.
    pub(super) fn resolve(
        &self,
        t: &TensorProto,
        base_dir: Option<&Path>,
    ) -> Result<Bytes, LoadError> {
        self.resolve_inner(t, base_dir)
            .map_err(|reason| LoadError::ExternalData {
                tensor: tensor_name(t),
                reason,
            })
    }

    fn resolve_inner(&self, t: &TensorProto, base_dir: Option<&Path>) -> Result<Bytes, String> {
        let info = parse_info(t)?;
        let location = info.location;
        check_relative(location)?;
        let base_dir = base_dir.ok_or_else(|| {
            format!(
                "external file '{location}' cannot be resolved: the model was loaded from memory \
                 without a base directory"
            )
        })?;
        let offset = info
            .offset
            .map(|v| parse_u64("offset", v))
            .transpose()?
            .unwrap_or(0);
        let length = info.length.map(|v| parse_u64("length", v)).transpose()?;

        let data = self.map(base_dir, location)?;
        let file_len = data.len() as u64;
        if offset > file_len {
            return Err(format!(
                "offset {offset} is past the end of '{location}' ({file_len} bytes)"
            ));
        }
        let length = length.unwrap_or(file_len - offset);
        let end = offset
            .checked_add(length)
            .filter(|&end| end <= file_len)
            .ok_or_else(|| {
                format!("offset {offset} + length {length} is past the end of '{location}' ({file_len} bytes)")
            })?;
        Ok(data.slice(offset as usize..end as usize))
    }

    /// Maps `base_dir/location`, once per canonical path.
    fn map(&self, base_dir: &Path, location: &str) -> Result<Bytes, String> {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let base = match &inner.canonical_base {
            Some(b) => b.clone(),
            None => {
                let b = base_dir
                    .canonicalize()
                    .map_err(|e| format!("model directory '{}': {e}", base_dir.display()))?;
                inner.canonical_base = Some(b.clone());
                b
            }
        };
        let full = base_dir.join(location);
        let canonical = full
            .canonicalize()
            .map_err(|e| format!("cannot open external file '{}': {e}", full.display()))?;
        if !canonical.starts_with(&base) {
            return Err(format!(
                "location '{location}' resolves to '{}', outside the model directory '{}'",
                canonical.display(),
                base.display()
            ));
        }
        if let Some(bytes) = inner.files.get(&canonical) {
            return Ok(bytes.clone());
        }
        let bytes = map_file(&canonical)
            .map_err(|e| format!("cannot map external file '{}': {e}", full.display()))?;
        inner.files.insert(canonical, bytes.clone());
        Ok(bytes)
    }
}
