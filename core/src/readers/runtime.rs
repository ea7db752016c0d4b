//! The spec's `runtime` object: the runtime profile's coefficients (the
//! H200's where absent) and the allocator's settings.

use super::{field, known_keys, member, object};
use crate::error::Error;
use crate::runtime::{AllocatorConfig, RuntimeProfile};
use alloc::format;
use alloc::string::String;
use serde_json::Value;

/// Parses the `runtime` field (H200 defaults for absent coefficients).
pub fn parse_runtime(value: &Value) -> Result<RuntimeProfile, Error> {
    let map = object(value, "runtime")?;
    known_keys::check(
        map,
        "runtime",
        &[known_keys::RUNTIME, known_keys::RUNTIME_NOTES],
    )?;
    // Each field read on its own (serde's derived reader for the whole
    // struct weighed on the page's bundle); absent fields keep the
    // H200's figures, notes are not read.
    let mut r = RuntimeProfile::default();
    const BYTES: &str = "a whole number of bytes";
    let bytes = |key: &str| field::<u64>(map, "runtime", key, BYTES);
    let set = |slot: &mut u64, key: &str| -> Result<(), Error> {
        if let Some(v) = bytes(key)? {
            *slot = v;
        }
        Ok(())
    };
    set(&mut r.cuda_context_bytes, "cuda_context_bytes")?;
    set(&mut r.cublas_library_bytes, "cublas_library_bytes")?;
    set(&mut r.cublas_workspace_bytes, "cublas_workspace_bytes")?;
    set(&mut r.model_kernels_bytes, "model_kernels_bytes")?;
    set(&mut r.backward_library_bytes, "backward_library_bytes")?;
    set(&mut r.cudnn_library_bytes, "cudnn_library_bytes")?;
    set(&mut r.nccl_communicator_bytes, "nccl_communicator_bytes")?;
    set(&mut r.nccl_peer_bytes, "nccl_peer_bytes")?;
    if let Some(v) = member(map, "gpu_total_bytes") {
        r.gpu_total_bytes = if v.is_null() {
            None
        } else {
            bytes("gpu_total_bytes")?
        };
    }
    if let Some(v) = member(map, "gpu") {
        r.gpu = if v.is_null() {
            None
        } else {
            field::<String>(map, "runtime", "gpu", "a string")?
        };
    }
    if let Some(v) = field::<f64>(
        map,
        "runtime",
        "cudnn_workspace_scale",
        "a number from 0 to 16",
    )? {
        r.cudnn_workspace_scale = v;
    }
    if let Some(v) = field::<bool>(map, "runtime", "process_ran_backward", "true or false")? {
        r.process_ran_backward = v;
    }
    for (key, slot) in [
        ("multiprocessors", &mut r.multiprocessors),
        (
            "threads_per_multiprocessor",
            &mut r.threads_per_multiprocessor,
        ),
    ] {
        if let Some(v) = field::<u32>(map, "runtime", key, "a whole number")? {
            *slot = v;
        }
    }
    if let Some(v) = member(map, "allocator") {
        r.allocator = allocator_setting(v)?;
    }
    Ok(r)
}

/// `runtime.allocator`: `"default"`, `"expandable_segments"` (as
/// `PYTORCH_CUDA_ALLOC_CONF` writes it, `expandable_segments:True`, too)
/// or `{expandable_segments, max_split_size}`.
fn allocator_setting(v: &Value) -> Result<AllocatorConfig, Error> {
    const ALLOWED: &str =
        "\"default\", \"expandable_segments\" or {expandable_segments, max_split_size}";
    match v {
        Value::String(name) => match name.as_str() {
            "default" | "" => Ok(AllocatorConfig::default()),
            "expandable_segments" | "expandable_segments:True" => Ok(AllocatorConfig {
                expandable_segments: true,
                max_split_size: None,
            }),
            other => Err(Error::invalid(
                "runtime.allocator",
                format!("unknown setting `{other}`"),
                ALLOWED,
            )),
        },
        Value::Object(map) => {
            known_keys::check(map, "runtime.allocator", &[known_keys::ALLOCATOR])?;
            let mut config = AllocatorConfig::default();
            if let Some(e) = field::<bool>(
                map,
                "runtime.allocator",
                "expandable_segments",
                "true or false",
            )? {
                config.expandable_segments = e;
            }
            if let Some(v) = member(map, "max_split_size") {
                config.max_split_size = if v.is_null() {
                    None
                } else {
                    field::<u64>(
                        map,
                        "runtime.allocator",
                        "max_split_size",
                        "a whole number of bytes",
                    )?
                };
            }
            Ok(config)
        }
        _ => Err(Error::invalid(
            "runtime.allocator",
            "is neither a setting's name nor an object",
            ALLOWED,
        )),
    }
}
