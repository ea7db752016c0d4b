//! Which keys each object of a spec may hold, and the error for any other.
//!
//! A misspelled key (`"seqlen"`, `"optimiser"`, `runtime.alocator`) would
//! otherwise be ignored and its default estimated in silence. Every object
//! a spec reader visits is checked against its list here; the error names
//! the key and suggests the closest known one.
//!
//! The measurement format describes a run with fields a spec does not use
//! (a case's `measured`, the harness's `workload.loss`, `runtime.torch`,
//! ...). They are known keys wherever they sit, so every measured case
//! stays a valid spec; they are read and ignored.

use crate::error::Error;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use serde_json::{Map, Value};

/// Top level of a spec.
pub const SPEC: &[&str] = &["model", "workload", "runtime"];

/// Top level of a measurement case, beyond [`SPEC`]: its name, what the
/// harness or the collector recorded about the run, and notes (a
/// calibration profile's points also carry their `prediction`).
pub const CASE_NOTES: &[&str] = &[
    "case",
    "params",
    "weight_bytes",
    "measured",
    "predicted",
    "collector",
    "snapshot",
    "source",
    "attn_implementation",
    "loss",
    "prediction",
    "allocator_limit_bytes",
];

/// A `model` object that wraps a Hugging Face config.
pub const HF_MODEL: &[&str] = &["hf_config", "name"];

/// A custom architecture object, beyond its family's shape fields.
pub const CUSTOM_MODEL: &[&str] = &["family", "name"];

/// `workload`.
pub const WORKLOAD: &[&str] = &[
    "mode",
    "batch",
    "seq_len",
    "image_size",
    "dtype",
    "attention",
    "load",
    "memory_format",
    "inference",
    "training",
    "parallel",
    "esmfold",
    "padded",
    "head",
    "num_labels",
];

/// `workload` notes of the measurement harness (the loss it computed).
pub const WORKLOAD_NOTES: &[&str] = &["loss"];

/// `workload.inference`.
pub const INFERENCE: &[&str] = &[
    "kind",
    "logits",
    "kv_cache",
    "new_tokens",
    "kv_dtype",
    "batches",
    "num_beams",
    "output_scores",
    "output_logits",
    "logits_processors",
];

/// `workload.training`.
pub const TRAINING: &[&str] = &[
    "optimizer",
    "implementation",
    "momentum",
    "steps",
    "gradient_accumulation_steps",
    "precision",
    "grad_checkpointing",
    "use_cache",
    "optimizer_state_resident",
    "lora",
];

/// `workload.training` notes of the measurement harness (how it zeroed
/// gradients: always `set_to_none=True`, which the model assumes).
pub const TRAINING_NOTES: &[&str] = &["zero_grad"];

/// `workload.training.lora`.
pub const LORA: &[&str] = &["rank", "alpha", "target_modules", "dropout"];

/// `workload.parallel`.
pub const PARALLEL: &[&str] = &[
    "strategy",
    "world_size",
    "reshard_after_forward",
    "param_dtype",
    "reduce_dtype",
    "bucket_cap_mb",
    "gradient_as_bucket_view",
];

/// `workload.parallel` notes of the measurement harness (how it wrapped
/// and built the model).
pub const PARALLEL_NOTES: &[&str] = &["wrap", "init"];

/// `workload.esmfold`.
pub const ESMFOLD: &[&str] = &["stem_dtype", "chunk_size", "num_recycles"];

/// `runtime`: the fields of [`crate::runtime::RuntimeProfile`].
pub const RUNTIME: &[&str] = &[
    "gpu",
    "gpu_total_bytes",
    "cuda_context_bytes",
    "cublas_library_bytes",
    "cublas_workspace_bytes",
    "model_kernels_bytes",
    "backward_library_bytes",
    "cudnn_library_bytes",
    "nccl_communicator_bytes",
    "nccl_peer_bytes",
    "cudnn_workspace_scale",
    "process_ran_backward",
    "multiprocessors",
    "threads_per_multiprocessor",
    "allocator",
];

/// `runtime` notes of a measured run: the software it ran with and, on
/// several GPUs, the NCCL version, its NVLink SHARP setting and the node.
/// (`process_builds_before`, how many models the case's process built, ran
/// and dropped before its own, is read by `Spec::from_value` only: see
/// [`crate::readers::ProcessHistory`].)
pub const RUNTIME_NOTES: &[&str] = &[
    "driver",
    "torch",
    "cuda",
    "transformers",
    "nccl",
    "nccl_nvls",
    "gpus_per_node",
];

/// `runtime.allocator` as an object.
pub const ALLOCATOR: &[&str] = &["expandable_segments", "max_split_size"];

/// Fails on the first key of `map` (an object at `prefix`) that none of
/// `known` lists, naming it and suggesting the closest known key.
pub fn check(map: &Map<String, Value>, prefix: &str, known: &[&[&str]]) -> Result<(), Error> {
    let is_known = |key: &str| known.iter().any(|list| list.contains(&key));
    match map.keys().find(|key| !is_known(key)) {
        None => Ok(()),
        Some(key) => Err(unknown_key(
            prefix,
            key,
            known.iter().flat_map(|l| l.iter().copied()),
        )),
    }
}

/// The error for `key`, unknown in the object at `prefix` whose keys are
/// `known`: the closest known key when one is near, and the whole list.
pub fn unknown_key<'a>(prefix: &str, key: &str, known: impl Iterator<Item = &'a str>) -> Error {
    let known: Vec<&str> = known.collect();
    let field = if prefix.is_empty() {
        String::from(key)
    } else {
        format!("{prefix}.{key}")
    };
    let problem = match closest(key, &known) {
        Some(near) => format!("unknown key; did you mean `{near}`?"),
        None => String::from("unknown key"),
    };
    Error::invalid(
        &field,
        problem,
        &format!("the keys {}", crate::keys::one_of(&known)),
    )
}

/// The known key nearest to `key` by edit distance (a swap of two
/// neighbouring letters counts as one edit), if it is near enough to be a
/// misspelling: one edit for words of up to four letters, else at most a
/// third of the longer word's letters (and at least 2), or one is the
/// other with a suffix (`grad_checkpoint`). Ties go to the key of the same
/// length.
pub fn closest<'a>(key: &str, known: &[&'a str]) -> Option<&'a str> {
    let lower = key.to_ascii_lowercase();
    let len = lower.chars().count();
    known
        .iter()
        .map(|k| (edit_distance(&lower, k), *k))
        .filter(|(d, k)| {
            let longer = len.max(k.chars().count());
            let allowed = if longer <= 4 { 1 } else { (longer / 3).max(2) };
            *d <= allowed
                || (lower.len() >= 4 && (k.starts_with(lower.as_str()) || lower.starts_with(k)))
        })
        .min_by_key(|(d, k)| (*d, k.chars().count().abs_diff(len)))
        .map(|(_, k)| k)
}

/// Edit distance in characters: insertions, deletions, substitutions and
/// swaps of two neighbouring characters (optimal string alignment).
pub fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let width = b.len() + 1;
    let mut d: Vec<usize> = alloc::vec![0; (a.len() + 1) * width];
    for (i, row) in d.chunks_mut(width).enumerate() {
        row[0] = i;
    }
    for (j, cell) in d.iter_mut().take(width).enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[(i - 1) * width + j] + 1)
                .min(d[i * width + j - 1] + 1)
                .min(d[(i - 1) * width + j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[(i - 2) * width + j - 2] + 1);
            }
            d[i * width + j] = best;
        }
    }
    d[a.len() * width + b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn misspellings_find_their_key() {
        assert_eq!(closest("seqlen", WORKLOAD), Some("seq_len"));
        assert_eq!(closest("optimiser", TRAINING), Some("optimizer"));
        assert_eq!(
            closest("grad_checkpoint", TRAINING),
            Some("grad_checkpointing")
        );
        assert_eq!(closest("alocator", RUNTIME), Some("allocator"));
        assert_eq!(closest("Batch", WORKLOAD), Some("batch"));
        assert_eq!(closest("worldsize", PARALLEL), Some("world_size"));
    }

    #[test]
    fn swapped_letters_are_one_edit_and_short_words_need_a_close_match() {
        assert_eq!(edit_distance("modle", "model"), 1);
        assert_eq!(closest("modle", SPEC), Some("model"));
        assert_eq!(closest("mdoe", WORKLOAD), Some("mode"));
        assert_eq!(closest("foo", &["from", "mode"]), None);
    }

    #[test]
    fn unrelated_words_get_no_suggestion() {
        assert_eq!(closest("colour", WORKLOAD), None);
        assert_eq!(closest("/home/alice/project", WORKLOAD), None);
        assert_eq!(closest("x", WORKLOAD), None);
    }

    #[test]
    fn distance_counts_edits() {
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("seqlen", "seq_len"), 1);
        assert_eq!(edit_distance("same", "same"), 0);
    }

    #[cfg(feature = "serde")]
    #[test]
    fn runtime_keys_are_the_profile_fields() {
        let value = serde_json::to_value(crate::runtime::RuntimeProfile::default()).unwrap();
        let mut fields: Vec<&str> = value
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.as_str())
            .collect();
        let mut listed = RUNTIME.to_vec();
        fields.sort_unstable();
        listed.sort_unstable();
        assert_eq!(fields, listed);
    }
}
