//! Bad input gets an error naming the field and what it accepts; nothing panics.
#![allow(clippy::field_reassign_with_default)]

use headroom_core::readers::Spec;
use headroom_core::{estimate, hf_config};

#[track_caller]
fn check(json: &str, expect: &[&str]) {
    match Spec::from_json(json)
        .and_then(|s| estimate(&s.model.arch, &s.workload, &s.runtime).map(|_| ()))
    {
        Ok(()) => panic!("accepted: {json}"),
        Err(e) => {
            let msg = e.to_string();
            for needle in expect {
                assert!(
                    msg.contains(needle),
                    "`{msg}` lacks `{needle}` (input {json})"
                );
                if is_field(needle) {
                    assert!(
                        msg.contains(&format!("`{needle}`")),
                        "`{msg}` does not name the field `{needle}` in backticks (input {json})"
                    );
                }
            }
        }
    }
}

/// A needle that is a field path (`workload.batch`, `model.blocks[0]`,
/// `workload.batch x workload.seq_len`): the error must name it in backticks.
fn is_field(needle: &str) -> bool {
    ["workload", "model", "runtime"].iter().any(|root| {
        needle.strip_prefix(root).is_some_and(|rest| {
            (rest.is_empty() || rest.starts_with('.') || rest.starts_with(" x "))
                && rest
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_.[] x".contains(c))
        })
    })
}

#[test]
fn bad_workloads_name_field_and_range() {
    let m = r#""model": "llama-3.1-8b""#;
    check(
        &format!(r#"{{{m}, "workload": {{"mode": "inference", "batch": 0}}}}"#),
        &["workload.batch", "must not be 0", "1 to 65536"],
    );
    check(
        &format!(r#"{{{m}, "workload": {{"mode": "inference", "batch": -1}}}}"#),
        &["workload.batch", "1 to 65536"],
    );
    check(
        &format!(r#"{{{m}, "workload": {{"mode": "inference", "batch": 1.5}}}}"#),
        &["workload.batch"],
    );
    check(
        &format!(r#"{{{m}, "workload": {{"mode": "inference", "batch": "8"}}}}"#),
        &["workload.batch"],
    );
    check(
        &format!(r#"{{{m}, "workload": {{"mode": "inference", "seq_len": 0}}}}"#),
        &["workload.seq_len", "1 to 4194304"],
    );
    check(
        &format!(
            r#"{{{m}, "workload": {{"mode": "inference", "seq_len": 18446744073709551615}}}}"#
        ),
        &["workload.seq_len"],
    );
    check(
        &format!(
            r#"{{{m}, "workload": {{"mode": "inference", "seq_len": 4194304, "batch": 65536}}}}"#
        ),
        &["workload.batch x workload.seq_len", "268435456"],
    );
    check(
        &format!(r#"{{{m}, "workload": {{"mode": "serving"}}}}"#),
        &["workload.mode", "inference"],
    );
    check(
        &format!(r#"{{{m}, "workload": {{"mode": "inference", "dtype": "fp8"}}}}"#),
        &["workload.dtype", "bf16"],
    );
    check(
        &format!(r#"{{{m}, "workload": {{"mode": "inference", "attention": "flash3"}}}}"#),
        &["workload.attention", "sdpa"],
    );
    check(
        &format!(
            r#"{{{m}, "workload": {{"mode": "inference", "inference": {{"new_tokens": -4}}}}}}"#
        ),
        &["workload.inference.new_tokens"],
    );
    for batches in ["0", "2.5", "1000001", "\"3\""] {
        check(
            &format!(
                r#"{{{m}, "workload": {{"mode": "inference", "inference": {{"kind": "forward", "batches": {batches}}}}}}}"#
            ),
            &["workload.inference.batches", "1 to 1000000"],
        );
    }
    check(
        r#"{"model": "esmfold-v1", "workload": {"mode": "inference", "seq_len": 64, "inference": {"batches": 2}}}"#,
        &["workload.inference.batches", "1 for esmfold"],
    );
    check(
        &format!(r#"{{{m}, "workload": {{"mode": "training", "training": {{"steps": 0}}}}}}"#),
        &["workload.training.steps", "1 to 1000"],
    );
    check(
        &format!(
            r#"{{{m}, "workload": {{"mode": "training", "training": {{"gradient_accumulation_steps": 0}}}}}}"#
        ),
        &["workload.training.gradient_accumulation_steps", "1 to 1000"],
    );
    check(
        &format!(
            r#"{{{m}, "workload": {{"mode": "training", "training": {{"gradient_accumulation_steps": 2.5}}}}}}"#
        ),
        &["workload.training.gradient_accumulation_steps", "1 to 1000"],
    );
    check(
        &format!(
            r#"{{{m}, "workload": {{"mode": "training", "training": {{"steps": 100, "gradient_accumulation_steps": 20}}}}}}"#
        ),
        &[
            "workload.training.steps x workload.training.gradient_accumulation_steps",
            "at most 1000",
        ],
    );
    check(
        &format!(
            r#"{{{m}, "workload": {{"mode": "training", "training": {{"gradient_accumulation_steps": 4}}, "parallel": {{"strategy": "ddp", "world_size": 2}}}}}}"#
        ),
        &["workload.training.gradient_accumulation_steps", "one GPU"],
    );
    check(
        &format!(
            r#"{{{m}, "workload": {{"mode": "training", "training": {{"precision": "fp8"}}}}}}"#
        ),
        &["workload.training.precision", "amp_fp16", "fp16"],
    );
    check(
        &format!(
            r#"{{{m}, "workload": {{"mode": "training", "training": {{"optimizer": "lion"}}}}}}"#
        ),
        &["workload.training.optimizer", "adamw"],
    );
    check(
        &format!(
            r#"{{{m}, "workload": {{"mode": "training", "training": {{"lora": {{"rank": 0}}}}}}}}"#
        ),
        &["workload.training.lora.rank"],
    );
    check(
        &format!(r#"{{{m}, "workload": {{"mode": "training", "dtype": "int4"}}}}"#),
        &["workload.dtype", "LoRA"],
    );
    check(
        r#"{"model": "esmfold-v1", "workload": {"mode": "inference", "seq_len": 100000}}"#,
        &["workload.seq_len", "65536"],
    );
    check(
        r#"{"model": "esmfold-v1", "workload": {"mode": "inference", "esmfold": {"chunk_size": 0}}}"#,
        &["workload.esmfold.chunk_size"],
    );
    check(
        r#"{"model": "esmfold-v1", "workload": {"mode": "training"}}"#,
        &["workload.mode"],
    );
    check(
        r#"{"model": "bert-base-uncased", "workload": {"mode": "inference", "inference": {"kind": "generate"}}}"#,
        &["workload.inference.kind", "forward"],
    );
    check(
        r#"{"model": "resnet-50", "workload": {"mode": "inference", "image_size": 8}}"#,
        &["workload.image_size", "16 to 8192"],
    );
    check(
        r#"{"model": "resnet-50", "workload": {"mode": "training", "training": {"grad_checkpointing": true}}}"#,
        &["grad_checkpointing"],
    );
}

#[test]
fn bad_documents_and_models_are_named() {
    check("", &["malformed JSON"]);
    check("{", &["malformed JSON"]);
    check("[]", &["not a JSON object"]);
    check(
        r#"{"model": "llama-3.1-8b", "workload": {"mode": "inference", "seq_len": NaN}}"#,
        &["malformed JSON"],
    );
    check(
        r#"{"workload": {"mode": "inference"}}"#,
        &["`model` is missing"],
    );
    check(
        r#"{"model": 42, "workload": {"mode": "inference"}}"#,
        &["`model`", "preset id"],
    );
    check(
        r#"{"model": "gpt-7", "workload": {"mode": "inference"}}"#,
        &["unknown preset `gpt-7`", "llama-3.1-8b"],
    );
    check(r#"{"model": "llama-3.1-8b"}"#, &["`workload` is missing"]);
    // A vision transformer's library: torchvision's or timm's.
    check(
        r#"{"model": {"family": "vit", "library": "jax", "image_size": 224,
            "patch_size": 16, "hidden_size": 384, "mlp_dim": 1536, "num_layers": 12,
            "num_heads": 6, "num_classes": 1000}, "workload": {"mode": "inference"}}"#,
        &["`model`", "`jax`", "`torchvision` or `timm`"],
    );
    check(
        r#"{"model": "llama-3.1-8b", "workload": []}"#,
        &["workload", "not a JSON object"],
    );
    check(
        r#"{"model": "llama-3.1-8b", "workload": {"mode": "inference"}, "runtime": {"cuda_context_bytes": -1}}"#,
        &["runtime.cuda_context_bytes", "a whole number of bytes"],
    );
    check(
        r#"{"model": "llama-3.1-8b", "workload": {"mode": "inference"}, "runtime": {"allocator": "magic"}}"#,
        &[
            "runtime.allocator",
            "unknown setting `magic`",
            "\"expandable_segments\"",
        ],
    );
    check(
        r#"{"model": "resnet-50", "workload": {"mode": "inference"}, "runtime": {"cudnn_workspace_scale": -1}}"#,
        &["runtime.cudnn_workspace_scale", "0 to 16"],
    );
    check(
        r#"{"model": "resnet-50", "workload": {"mode": "inference"}, "runtime": {"cudnn_workspace_scale": 1e300}}"#,
        &["runtime.cudnn_workspace_scale", "out of range"],
    );
    check(
        r#"{"model": "llama-3.1-8b", "workload": {"mode": "inference"}, "runtime": {"cuda_context_bytes": 18446744073709551615}}"#,
        &["runtime.cuda_context_bytes", "1 TiB"],
    );
    // A measured case's process-history fields never overflow.
    check(
        r#"{"model": "gpt2", "weight_bytes": 18446744073709551615, "workload": {"mode": "inference"}, "runtime": {"cublas_workspace_bytes": 18446744073709551615}, "measured": {"driver_peak": 1, "resident_before": 18446744073709551615}}"#,
        &["runtime.cublas_workspace_bytes", "1 TiB"],
    );
    check(
        r#"{"model": {"family": "decoder", "vocab_size": 0, "hidden_size": 64, "intermediate_size": 128, "num_layers": 2, "num_heads": 4, "num_kv_heads": 4, "head_dim": 16, "tie_word_embeddings": true, "mlp": "gated", "norm": "rms_norm"}, "workload": {"mode": "inference"}}"#,
        &["model.vocab_size", "must not be 0"],
    );
    check(
        r#"{"model": {"family": "transformer"}, "workload": {"mode": "inference"}}"#,
        &["model.family", "transformer"],
    );
    check(
        r#"{"model": {"hf_config": {"model_type": "t5"}}, "workload": {"mode": "inference"}}"#,
        &["model_type", "t5", "llama"],
    );
}

/// Shapes that are each within range but together would overflow the
/// replay's `u64` sizes (or take hours) are refused, naming what is too
/// large.
#[test]
fn jobs_and_models_too_large_to_replay_are_refused() {
    // 64 x 4096 heads x (4M tokens)^2 materialised scores: 2^66 bytes.
    check(
        r#"{"model": {"hf_config": {"model_type": "qwen2", "vocab_size": 7, "hidden_size": 7, "intermediate_size": 1, "num_hidden_layers": 1, "num_attention_heads": 4096, "num_key_value_heads": 64, "head_dim": 2}}, "workload": {"mode": "training", "batch": 64, "seq_len": 4194304, "training": {"precision": "fp32"}}}"#,
        &[
            "workload.batch x workload.seq_len",
            "attention scores",
            "1 EiB",
        ],
    );
    // Eager attention over 4M tokens of Gemma 2 27B at the largest batch.
    check(
        r#"{"model": "gemma-2-27b", "workload": {"mode": "training", "batch": 64, "seq_len": 4194304, "attention": "eager"}}"#,
        &["workload.batch x workload.seq_len", "1 EiB"],
    );
    // ViT with 1-pixel patches at 8192 px: 2^26 tokens per image.
    check(
        r#"{"model": {"family": "vit", "image_size": 8192, "patch_size": 1, "hidden_size": 64, "mlp_dim": 64, "num_layers": 1, "num_heads": 1, "num_classes": 10}, "workload": {"mode": "inference", "batch": 64, "image_size": 8192}}"#,
        &["workload.batch x workload.image_size", "attention scores"],
    );
    // 1024 layers of 1024 experts 4M wide: over 2^63 parameters.
    check(
        r#"{"model": {"hf_config": {"model_type": "mixtral", "vocab_size": 32000, "hidden_size": 1048576, "intermediate_size": 4194304, "num_hidden_layers": 1024, "num_attention_heads": 4096, "num_key_value_heads": 8, "num_local_experts": 1024, "num_experts_per_tok": 2}}, "workload": {"mode": "inference"}}"#,
        &["model", "parameters", "2^50"],
    );
}

/// Custom CNN and ESMFold shapes are checked like the others: a stage of
/// three billion blocks used to replay for hours, `folding_params` near
/// 2^64 to fill memory.
#[test]
fn custom_cnn_and_esmfold_shapes_name_the_field() {
    check(
        r#"{"model": {"family": "cnn", "topology": "res_net", "blocks": [3000000000, 4, 6, 3], "bottleneck": true, "num_classes": 1000}, "workload": {"mode": "inference", "image_size": 224}}"#,
        &["model.blocks[0]", "1 to 256"],
    );
    check(
        r#"{"model": {"family": "cnn", "topology": "mobile_net_v2", "num_classes": 0}, "workload": {"mode": "inference", "image_size": 224}}"#,
        &["model.num_classes", "must not be 0"],
    );
    let fold = |stem_hidden: u64, folding_params: u64| {
        format!(
            r#"{{"model": {{"family": "esm_fold", "stem": {{"kind": "esm", "vocab_size": 33, "hidden_size": {stem_hidden}, "intermediate_size": 64, "num_layers": 2, "num_heads": 4, "max_position_embeddings": 1026, "type_vocab_size": 0}}, "trunk_blocks": 2, "sequence_state_dim": 64, "pairwise_state_dim": 32, "sequence_head_width": 32, "pairwise_head_width": 32, "position_bins": 32, "max_recycles": 4, "structure_blocks": 8, "structure_sequence_dim": 384, "structure_pairwise_dim": 128, "ipa_heads": 12, "folding_params": {folding_params}}}, "workload": {{"mode": "inference", "seq_len": 64}}}}"#
        )
    };
    check(&fold(0, 1000), &["model.stem.hidden_size", "must not be 0"]);
    check(&fold(64, u64::MAX), &["model.folding_params", "4294967296"]);
    // Within range, the same custom ESMFold runs.
    let ok = Spec::from_json(&fold(64, 1000)).expect("a small custom ESMFold parses");
    estimate(&ok.model.arch, &ok.workload, &ok.runtime).expect("and is estimated");
}

#[test]
fn hf_config_errors_name_the_key() {
    let err = hf_config::import(r#"{"model_type": "llama", "hidden_size": -8}"#)
        .unwrap_err()
        .to_string();
    assert!(err.contains("hidden_size"), "{err}");
    let err = hf_config::import(r#"{"model_type": "whisper"}"#)
        .unwrap_err()
        .to_string();
    assert!(err.contains("whisper"), "{err}");
}

/// Custom CNNs read back what they write (the page's share requests and
/// links carry architectures as JSON), and a missing field is named.
#[test]
fn cnn_architectures_round_trip_and_name_missing_fields() {
    for id in ["resnet-18", "resnet-50", "resnet-101", "mobilenetv2"] {
        let arch = headroom_core::presets::find(id).unwrap().arch;
        let json = serde_json::to_string(&arch).unwrap();
        let back: headroom_core::Architecture = serde_json::from_str(&json).unwrap();
        assert_eq!(back, arch, "{json}");
    }
    check(
        r#"{"model": {"family": "cnn", "topology": "res_net", "bottleneck": true, "num_classes": 1000}, "workload": {"mode": "inference"}}"#,
        &["missing field `blocks`"],
    );
    check(
        r#"{"model": {"family": "cnn", "topology": "vgg", "num_classes": 1000}, "workload": {"mode": "inference"}}"#,
        &["unknown variant `vgg`", "res_net", "mobile_net_v2"],
    );
}

#[test]
fn misspelled_keys_are_named_with_the_closest_known_key() {
    let m = r#""model": "llama-3.1-8b""#;
    // Each of these used to estimate the defaults in silence.
    let cases: &[(&str, &[&str])] = &[
        (
            r#"{"model": "llama-3.1-8b", "workload": {"mode": "training", "batch": 8, "seqlen": 32768}}"#,
            &["workload.seqlen", "unknown key", "did you mean `seq_len`?"],
        ),
        (
            &format!(
                r#"{{{m}, "workload": {{"mode": "training", "training": {{"optimiser": "sgd"}}}}}}"#
            ),
            &["workload.training.optimiser", "did you mean `optimizer`?"],
        ),
        (
            &format!(
                r#"{{{m}, "workload": {{"mode": "training", "training": {{"grad_checkpoint": true}}}}}}"#
            ),
            &[
                "workload.training.grad_checkpoint",
                "did you mean `grad_checkpointing`?",
            ],
        ),
        (
            &format!(
                r#"{{{m}, "workload": {{"mode": "inference"}}, "runtime": {{"alocator": "expandable_segments"}}}}"#
            ),
            &["runtime.alocator", "did you mean `allocator`?"],
        ),
        (
            &format!(
                r#"{{{m}, "workload": {{"mode": "inference"}}, "runtime": {{"allocator": {{"expandable_segment": true}}}}}}"#
            ),
            &[
                "runtime.allocator.expandable_segment",
                "did you mean `expandable_segments`?",
            ],
        ),
        (
            &format!(
                r#"{{{m}, "workload": {{"mode": "inference", "inference": {{"new_token": 16}}}}}}"#
            ),
            &["workload.inference.new_token", "did you mean `new_tokens`?"],
        ),
        (
            &format!(
                r#"{{{m}, "workload": {{"mode": "training", "parallel": {{"strategy": "ddp", "worldsize": 2}}}}}}"#
            ),
            &["workload.parallel.worldsize", "did you mean `world_size`?"],
        ),
        (
            r#"{"model": "esmfold-v1", "workload": {"mode": "inference", "esmfold": {"chunksize": 64}}}"#,
            &["workload.esmfold.chunksize", "did you mean `chunk_size`?"],
        ),
        (
            &format!(
                r#"{{{m}, "workload": {{"mode": "training", "training": {{"lora": {{"rnk": 8}}}}}}}}"#
            ),
            &["workload.training.lora.rnk", "did you mean `rank`?"],
        ),
        (
            &format!(r#"{{{m}, "worklaod": {{"mode": "inference"}}}}"#),
            &["worklaod", "did you mean `workload`?"],
        ),
        (
            r#"{"model": {"family": "decoder", "vocab_size": 100, "hidden_size": 64, "intermediate_size": 128, "num_layer": 2, "num_heads": 4, "num_kv_heads": 4, "head_dim": 16, "tie_word_embeddings": true, "mlp": "gated", "norm": "rms_norm"}, "workload": {"mode": "inference"}}"#,
            &["model.num_layer", "did you mean `num_layers`?"],
        ),
        (
            r#"{"model": {"hf_config": {"model_type": "gpt2"}, "nmae": "x"}, "workload": {"mode": "inference"}}"#,
            &["model.nmae", "did you mean `name`?"],
        ),
        // Not a misspelling: no suggestion, the known keys listed.
        (
            &format!(
                r#"{{{m}, "workload": {{"mode": "inference", "/home/alice/secret_project": 1}}}}"#
            ),
            &["unknown key; allowed: the keys \"mode\", \"batch\""],
        ),
    ];
    for (json, expect) in cases {
        check(json, expect);
    }
}

#[test]
fn a_workload_without_a_mode_is_refused() {
    check(
        r#"{"model": "llama-3.1-8b", "workload": {}}"#,
        &[
            "workload.mode",
            "is missing",
            "\"inference\" or \"training\"",
        ],
    );
}

#[test]
fn the_measurement_formats_notes_are_known_keys() {
    let case = r#"{"case": "x", "source": "lab notebook", "model": "llama-3.2-1b", "params": 1, "weight_bytes": 2, "attn_implementation": "sdpa", "loss": "ce", "snapshot": null,
        "workload": {"mode": "training", "loss": "ce", "training": {"precision": "fp32", "zero_grad": "set_to_none"}, "parallel": {"strategy": "fsdp2", "world_size": 2, "wrap": "per layer", "init": "meta"}},
        "runtime": {"gpu": "NVIDIA H200", "driver": "580", "torch": "2.11", "cuda": "13.0", "transformers": "5.17", "nccl": "2.27", "nccl_nvls": false, "gpus_per_node": 2},
        "measured": {"driver_peak": 1, "anything": "goes"}, "predicted": {}, "collector": {"version": "0"}}"#;
    Spec::from_json(case).unwrap();
}

#[test]
fn lora_targets_must_name_modules_of_the_model() {
    check(
        r#"{"model": "llama-3.1-8b", "workload": {"mode": "training", "training": {"lora": {"rank": 8, "target_modules": ["nonexistent"]}}}}"#,
        &[
            "workload.training.lora.target_modules",
            "`nonexistent` is not a module of this model",
            "\"q_proj\", \"k_proj\", \"v_proj\", \"o_proj\", \"gate_proj\", \"up_proj\" or \"down_proj\"",
        ],
    );
    // GPT-2 names its linears differently.
    check(
        r#"{"model": "gpt2", "workload": {"mode": "training", "training": {"lora": {"rank": 8, "target_modules": ["q_proj"]}}}}"#,
        &[
            "`q_proj` is not a module of this model",
            "\"c_attn\", \"c_proj\" or \"c_fc\"",
        ],
    );
    // Phi-3 fuses q/k/v and gate/up, and peft has no default modules for it.
    check(
        r#"{"model": "phi-3-mini-4k", "workload": {"mode": "training", "training": {"lora": {"rank": 8, "target_modules": ["q_proj"]}}}}"#,
        &[
            "`q_proj` is not a module of this model",
            "\"qkv_proj\", \"o_proj\", \"gate_up_proj\" or \"down_proj\"",
        ],
    );
    check(
        r#"{"model": "phi-3-mini-4k", "workload": {"mode": "training", "training": {"lora": {"rank": 8}}}}"#,
        &[
            "workload.training.lora.target_modules",
            "peft has no default modules for this model",
            "\"all-linear\" or the modules \"qkv_proj\"",
        ],
    );
}

#[test]
fn phi3_lora_adapts_its_fused_linears() {
    // 32 layers of width 3072 (32 heads of 96, no grouping), MLP 8192.
    let adapters = |in_out: i64| 32 * 8 * in_out;
    let base = phi3_lora_params(r#"["o_proj"]"#) - adapters(3072 + 3072);
    assert_eq!(base, 3_821_079_552, "the base model's parameters");
    assert_eq!(
        phi3_lora_params(r#"["qkv_proj"]"#),
        base + adapters(3072 + 3 * 3072)
    );
    assert_eq!(
        phi3_lora_params(r#"["gate_up_proj"]"#),
        base + adapters(3072 + 2 * 8192)
    );
    assert_eq!(
        phi3_lora_params(r#"["all-linear"]"#),
        phi3_lora_params(r#"["qkv_proj", "o_proj", "gate_up_proj", "down_proj"]"#)
    );
}

/// Parameters of a LoRA job on `model` (adapters included).
fn lora_params(model: &str, targets: &str) -> i64 {
    let json = format!(
        r#"{{"model": "{model}", "workload": {{"mode": "training", "seq_len": 128, "training": {{"lora": {{"rank": 8, "target_modules": {targets}}}}}}}}}"#
    );
    let s = Spec::from_json(&json).unwrap();
    let e = estimate(&s.model.arch, &s.workload, &s.runtime).unwrap();
    e.params as i64
}

fn gpt2_lora_params(targets: &str) -> i64 {
    lora_params("gpt2", targets)
}

fn phi3_lora_params(targets: &str) -> i64 {
    lora_params("phi-3-mini-4k", targets)
}

#[test]
fn lora_targets_adapt_the_modules_they_name() {
    // An adapter of rank 8 on a linear in -> out has 8 x (in + out)
    // parameters; GPT-2 has 12 layers of width 768, MLP 3072.
    let adapters = |in_out: i64| 12 * 8 * in_out;
    let base = gpt2_lora_params(r#"["c_attn"]"#) - adapters(768 + 2304);
    // peft's default for GPT-2 is `c_attn`.
    assert_eq!(gpt2_lora_params("[]"), base + adapters(768 + 2304));
    assert_eq!(gpt2_lora_params(r#"["c_fc"]"#), base + adapters(768 + 3072));
    // `c_proj` adapts both GPT-2 linears of that name: attention and MLP output.
    assert_eq!(
        gpt2_lora_params(r#"["c_proj"]"#),
        base + adapters(768 + 768) + adapters(3072 + 768)
    );
    assert_eq!(
        gpt2_lora_params(r#"["all-linear"]"#),
        gpt2_lora_params(r#"["c_attn", "c_proj", "c_fc"]"#)
    );
}

#[test]
fn a_job_whose_live_tensors_together_pass_the_bound_is_refused_not_replayed() {
    // Found by `extreme_shapes_never_panic`: each kind of tensor was under
    // 2^60 bytes, the fp32 LoRA base's materialised attention scores of
    // 1,024 layers together were not, and the replay ran out of addresses.
    check(
        r#"{"model": {"hf_config": {"model_type": "mixtral", "vocab_size": 1, "hidden_size": 8, "intermediate_size": 1, "num_hidden_layers": 1024, "num_attention_heads": 64, "num_key_value_heads": 32, "head_dim": 1, "num_local_experts": 1, "num_experts_per_tok": 1}}, "workload": {"mode": "training", "batch": 1, "seq_len": 4194304, "dtype": "fp32", "training": {"precision": "amp_bf16", "lora": {"rank": 8}}}}"#,
        &["workload.batch x workload.seq_len", "2^60 bytes"],
    );
}

#[test]
fn generations_too_long_to_replay_are_refused_with_the_bound() {
    // 1,048,576 new tokens through Llama-3.1-8B's 32 layers is the bound.
    let spec = |model: &str, tokens: u32| {
        format!(
            r#"{{"model": "{model}", "workload": {{"mode": "inference", "seq_len": 16, "inference": {{"kind": "generate", "new_tokens": {tokens}}}}}}}"#
        )
    };
    Spec::from_json(&spec("llama-3.1-8b", 1_048_576)).unwrap();
    Spec::from_json(&spec("llama-3.1-70b", 419_430)).unwrap();
    for tokens in [419_431, 1_048_576] {
        let err = Spec::from_json(&spec("llama-3.1-70b", tokens))
            .unwrap_err()
            .to_string();
        for needle in [
            "`workload.inference.new_tokens`",
            &format!("{tokens} decode steps through 80 layers"),
            "new_tokens x layers up to 33554432 (here up to 419430 new tokens)",
        ] {
            assert!(err.contains(needle), "`{err}` lacks `{needle}`");
        }
    }
}

#[test]
fn beam_search_counts_only_in_a_decoders_generation() {
    for beams in ["0", "1025", "-2", "2.5", "\"four\""] {
        check(
            &format!(
                r#"{{"model": "llama-3.2-1b", "workload": {{"mode": "inference", "inference": {{"num_beams": {beams}}}}}}}"#
            ),
            &["workload.inference.num_beams", "1 to 1024"],
        );
    }
    check(
        r#"{"model": "bert-base-uncased", "workload": {"mode": "inference", "inference": {"num_beams": 2}}}"#,
        &[
            "workload.inference.num_beams",
            "decoder LLM",
            "1 for this model",
        ],
    );
    // A decoder's training job or forward does not use it, as it does not
    // use `new_tokens`.
    let peak = |workload: &str| {
        let s = Spec::from_json(&format!(
            r#"{{"model": "llama-3.2-1b", "workload": {workload}}}"#
        ))
        .unwrap();
        estimate(&s.model.arch, &s.workload, &s.runtime)
            .unwrap()
            .driver_peak
    };
    assert_eq!(
        peak(r#"{"mode": "training", "inference": {"num_beams": 4}}"#),
        peak(r#"{"mode": "training"}"#)
    );
    assert_eq!(
        peak(r#"{"mode": "inference", "inference": {"kind": "forward", "num_beams": 4}}"#),
        peak(r#"{"mode": "inference", "inference": {"kind": "forward"}}"#)
    );
    // Every prompt runs as `num_beams` rows: the per-step bound counts them.
    check(
        r#"{"model": "llama-3.2-1b", "workload": {"mode": "inference", "batch": 65536, "seq_len": 4096, "inference": {"num_beams": 4}}}"#,
        &[
            "workload.batch x workload.inference.num_beams x workload.seq_len",
            "at most 268435456 tokens per step",
        ],
    );
}

#[test]
fn padded_batches_name_the_models_they_cover() {
    check(
        r#"{"model": "llama-3.2-1b", "workload": {"mode": "inference", "padded": "yes"}}"#,
        &["workload.padded", "true or false"],
    );
    check(
        r#"{"model": "bert-base-uncased", "workload": {"mode": "inference", "padded": true}}"#,
        &[
            "workload.padded",
            "decoder LLMs only",
            "false for this model",
        ],
    );
    for model in ["gemma-2-9b", "phi-3-mini-4k"] {
        check(
            &format!(
                r#"{{"model": "{model}", "workload": {{"mode": "training", "padded": true}}}}"#
            ),
            &[
                "workload.padded",
                "sliding windows or fused projections",
                "Llama",
            ],
        );
    }
    // Accepted where it is modelled, and it costs memory there.
    let peak = |padded: bool| {
        let s = Spec::from_json(&format!(
            r#"{{"model": "qwen2.5-7b", "workload": {{"mode": "inference", "batch": 4, "seq_len": 4096, "padded": {padded}}}}}"#
        ))
        .unwrap();
        estimate(&s.model.arch, &s.workload, &s.runtime)
            .unwrap()
            .allocated_peak
    };
    assert!(peak(true) > peak(false));
}

#[test]
fn classification_heads_name_their_fields_and_the_models_they_cover() {
    for labels in ["0", "1000001", "-1", "2.5", "\"two\""] {
        check(
            &format!(
                r#"{{"model": "bert-base-uncased", "workload": {{"mode": "training", "head": "sequence_classification", "num_labels": {labels}}}}}"#
            ),
            &["workload.num_labels", "1 to 1000000"],
        );
    }
    check(
        r#"{"model": "bert-base-uncased", "workload": {"mode": "training", "head": "classifier"}}"#,
        &[
            "workload.head",
            "\"lm\", \"sequence_classification\" or \"token_classification\"",
        ],
    );
    check(
        r#"{"model": "bert-base-uncased", "workload": {"mode": "training", "num_labels": 3}}"#,
        &["workload.num_labels", "labels need a classification head"],
    );
    for model in ["vit-b-16", "resnet-50", "esmfold-v1"] {
        check(
            &format!(
                r#"{{"model": "{model}", "workload": {{"mode": "training", "head": "sequence_classification"}}}}"#
            ),
            &[
                "workload.head",
                "encoders (BERT, ESM-2)",
                "\"lm\" for this model",
            ],
        );
    }
    check(
        r#"{"model": "llama-3.2-1b", "workload": {"mode": "training", "head": "token_classification"}}"#,
        &[
            "workload.head",
            "a sequence classifier on decoder LLMs",
            "\"lm\" or \"sequence_classification\" for a decoder LLM",
        ],
    );
    // A decoder's sequence classifier: a forward or training on one GPU.
    check(
        r#"{"model": "llama-3.2-1b", "workload": {"mode": "inference", "head": "sequence_classification"}}"#,
        &[
            "workload.inference.kind",
            "does not generate",
            "\"forward\"",
        ],
    );
    check(
        r#"{"model": "llama-3.2-1b", "workload": {"mode": "inference", "head": "sequence_classification", "inference": {"kind": "forward", "logits": "none"}}}"#,
        &["workload.inference.logits", "\"all\" or \"last\""],
    );
    check(
        r#"{"model": "llama-3.2-1b", "workload": {"mode": "training", "head": "sequence_classification", "parallel": {"strategy": "ddp", "world_size": 2}}}"#,
        &["workload.head", "one GPU"],
    );
    check(
        r#"{"model": "esm2-t33-650m", "workload": {"mode": "inference", "head": "sequence_classification", "inference": {"kind": "forward", "logits": "none"}}}"#,
        &["workload.inference.logits", "\"all\" or \"last\""],
    );
    // `null` is the default, as the collector writes a workload back.
    let peak = |labels: &str| {
        let s = Spec::from_json(&format!(
            r#"{{"model": "bert-base-uncased", "workload": {{"mode": "training", "head": "sequence_classification"{labels}}}}}"#
        ))
        .unwrap();
        estimate(&s.model.arch, &s.workload, &s.runtime)
            .unwrap()
            .driver_peak
    };
    assert_eq!(
        peak(r#", "num_labels": null"#),
        peak(r#", "num_labels": 2"#)
    );
    assert_eq!(peak(""), peak(r#", "num_labels": 2"#));
}
