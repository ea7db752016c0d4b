//! Hugging Face Hub ids of the presets: a spec's `model` may be the id a
//! job passes to `from_pretrained` (`"meta-llama/Llama-3.1-8B-Instruct"`),
//! and timm's `timm/NAME.TAG`. An id names the preset of the same
//! architecture: a model's instruction-tuned or chat release has its base
//! model's shapes. Ids compare without case.

/// (Hub id, preset id). Each id is the model's repository as published.
pub const HUB_IDS: &[(&str, &str)] = &[
    ("meta-llama/Llama-3.2-1B", "llama-3.2-1b"),
    ("meta-llama/Llama-3.2-1B-Instruct", "llama-3.2-1b"),
    ("meta-llama/Llama-3.2-3B", "llama-3.2-3b"),
    ("meta-llama/Llama-3.2-3B-Instruct", "llama-3.2-3b"),
    ("meta-llama/Llama-3.1-8B", "llama-3.1-8b"),
    ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"),
    ("meta-llama/Meta-Llama-3.1-8B", "llama-3.1-8b"),
    ("meta-llama/Meta-Llama-3.1-8B-Instruct", "llama-3.1-8b"),
    ("meta-llama/Llama-3.1-70B", "llama-3.1-70b"),
    ("meta-llama/Llama-3.1-70B-Instruct", "llama-3.1-70b"),
    ("meta-llama/Meta-Llama-3.1-70B", "llama-3.1-70b"),
    ("meta-llama/Meta-Llama-3.1-70B-Instruct", "llama-3.1-70b"),
    ("meta-llama/Llama-3.1-405B", "llama-3.1-405b"),
    ("meta-llama/Llama-3.1-405B-Instruct", "llama-3.1-405b"),
    ("meta-llama/Meta-Llama-3.1-405B", "llama-3.1-405b"),
    ("meta-llama/Meta-Llama-3.1-405B-Instruct", "llama-3.1-405b"),
    ("Qwen/Qwen2.5-0.5B", "qwen2.5-0.5b"),
    ("Qwen/Qwen2.5-0.5B-Instruct", "qwen2.5-0.5b"),
    ("Qwen/Qwen2.5-1.5B", "qwen2.5-1.5b"),
    ("Qwen/Qwen2.5-1.5B-Instruct", "qwen2.5-1.5b"),
    ("Qwen/Qwen2.5-3B", "qwen2.5-3b"),
    ("Qwen/Qwen2.5-3B-Instruct", "qwen2.5-3b"),
    ("Qwen/Qwen2.5-7B", "qwen2.5-7b"),
    ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"),
    ("Qwen/Qwen2.5-14B", "qwen2.5-14b"),
    ("Qwen/Qwen2.5-14B-Instruct", "qwen2.5-14b"),
    ("Qwen/Qwen2.5-32B", "qwen2.5-32b"),
    ("Qwen/Qwen2.5-32B-Instruct", "qwen2.5-32b"),
    ("Qwen/Qwen2.5-72B", "qwen2.5-72b"),
    ("Qwen/Qwen2.5-72B-Instruct", "qwen2.5-72b"),
    ("Qwen/Qwen3-0.6B", "qwen3-0.6b"),
    ("Qwen/Qwen3-0.6B-Base", "qwen3-0.6b"),
    ("Qwen/Qwen3-1.7B", "qwen3-1.7b"),
    ("Qwen/Qwen3-1.7B-Base", "qwen3-1.7b"),
    ("Qwen/Qwen3-4B", "qwen3-4b"),
    ("Qwen/Qwen3-4B-Base", "qwen3-4b"),
    ("Qwen/Qwen3-8B", "qwen3-8b"),
    ("Qwen/Qwen3-8B-Base", "qwen3-8b"),
    ("Qwen/Qwen3-14B", "qwen3-14b"),
    ("Qwen/Qwen3-14B-Base", "qwen3-14b"),
    ("Qwen/Qwen3-32B", "qwen3-32b"),
    ("Qwen/Qwen3-30B-A3B", "qwen3-30b-a3b"),
    ("Qwen/Qwen3-30B-A3B-Base", "qwen3-30b-a3b"),
    ("Qwen/Qwen1.5-MoE-A2.7B", "qwen1.5-moe-a2.7b"),
    ("Qwen/Qwen1.5-MoE-A2.7B-Chat", "qwen1.5-moe-a2.7b"),
    ("mistralai/Mistral-7B-v0.3", "mistral-7b-v0.3"),
    ("mistralai/Mistral-7B-Instruct-v0.3", "mistral-7b-v0.3"),
    ("mistralai/Mistral-Nemo-Base-2407", "mistral-nemo-12b"),
    ("mistralai/Mistral-Nemo-Instruct-2407", "mistral-nemo-12b"),
    ("mistralai/Mixtral-8x7B-v0.1", "mixtral-8x7b"),
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b"),
    ("google/gemma-2-9b", "gemma-2-9b"),
    ("google/gemma-2-9b-it", "gemma-2-9b"),
    ("google/gemma-2-27b", "gemma-2-27b"),
    ("google/gemma-2-27b-it", "gemma-2-27b"),
    ("microsoft/Phi-3-mini-4k-instruct", "phi-3-mini-4k"),
    ("microsoft/Phi-3-medium-4k-instruct", "phi-3-medium-4k"),
    ("openai-community/gpt2", "gpt2"),
    ("google-bert/bert-base-uncased", "bert-base-uncased"),
    ("google-bert/bert-large-uncased", "bert-large-uncased"),
    ("facebook/esm2_t12_35M_UR50D", "esm2-t12-35m"),
    ("facebook/esm2_t30_150M_UR50D", "esm2-t30-150m"),
    ("facebook/esm2_t33_650M_UR50D", "esm2-t33-650m"),
    ("facebook/esm2_t36_3B_UR50D", "esm2-t36-3b"),
    ("facebook/esm2_t48_15B_UR50D", "esm2-t48-15b"),
    ("facebook/esmfold_v1", "esmfold-v1"),
];

/// The preset id a Hub id names: from [`HUB_IDS`], or timm's
/// `timm/NAME.TAG` as timm's `NAME` (`timm/resnet50.a1_in1k` is
/// `resnet50`, which the preset reader finds as `resnet-50`). `None` for a
/// name without a `/`, or a Hub id headroom has no preset for.
pub fn preset_of(hub_id: &str) -> Option<&'static str> {
    if !hub_id.contains('/') {
        return None;
    }
    HUB_IDS
        .iter()
        .find(|(hub, _)| hub.eq_ignore_ascii_case(hub_id))
        .map(|(_, preset)| *preset)
}

/// timm's model name in `timm/NAME.TAG`, if `hub_id` is one.
pub fn timm_name(hub_id: &str) -> Option<&str> {
    let rest = hub_id.strip_prefix("timm/")?;
    Some(rest.split('.').next().unwrap_or(rest))
}
