//! Jobs described as their authors wrote them (`workload.framework` and the
//! frameworks' own arguments) are the jobs described with the spec's knobs:
//! every measured framework job of `measurements/real-jobs/` and
//! `measurements/real-jobs-2/`, written both ways, gives the same estimate
//! to the byte. Arguments that disagree with a knob, keys a framework does
//! not know, and arguments whose memory is not modelled are refused by name.
//!
//! `fixtures/frameworks/training_args_5.17.json` is
//! `TrainingArguments(output_dir="checkpoints", per_device_train_batch_size=4,
//! max_steps=3, bf16=True).to_dict()` from transformers 5.17 (`optim` as torch
//! 2.8 and later make it, `adamw_torch_fused`), and
//! `generation_config_5.17.json` is `GenerationConfig(max_new_tokens=256,
//! min_new_tokens=256).to_dict()`: every key the two classes write.

use headroom_core::error::Error;
use headroom_core::readers::Spec;
use serde_json::{json, Value};

fn estimate(spec: &Value) -> Result<(u64, u64, u64), Error> {
    let spec = Spec::from_value(spec)?;
    let e = headroom_core::estimate(&spec.model.arch, &spec.workload, &spec.runtime)?;
    Ok((e.allocated_peak.0, e.reserved_peak.0, e.driver_peak.0))
}

fn knob_spec(path: &str) -> Value {
    let file = format!("{}/../measurements/{path}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{file}: {e}"));
    serde_json::from_str(&text).unwrap()
}

fn fixture(name: &str) -> Value {
    let file = format!(
        "{}/tests/fixtures/frameworks/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap()
}

/// Each measured job: the spec that described it with knobs, and the same
/// job as its script wrote it.
fn both_ways() -> Vec<(&'static str, Value)> {
    let trainer = |model: &str, seq: u32, args: Value| json!({"model": model, "workload": {"framework": "hf_trainer", "seq_len": seq, "training_args": args}});
    let lightning = |batch: u32, seq: u32, args: Value| json!({"model": "gpt2", "workload": {"framework": "lightning", "batch": batch, "seq_len": seq, "lightning": args}});
    let timm = |model: &str, args: Value| json!({"model": model, "workload": {"framework": "timm", "timm": args}});
    let generate = |model: &str, batch: u32, seq: u32, config: Value| {
        json!({"model": model, "workload": {"framework": "hf_generate", "batch": batch, "seq_len": seq,
               "dtype": "bf16", "generation_config": config}})
    };
    let lora_q_v = json!({"r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"], "task_type": "CAUSAL_LM"});
    let with_lora = |mut spec: Value| {
        spec["workload"]["dtype"] = json!("bf16");
        spec["workload"]["lora_config"] = lora_q_v.clone();
        spec
    };
    vec![
        (
            "real-jobs/specs/trainer_llama1b.json",
            trainer(
                "llama-3.2-1b",
                1024,
                json!({"per_device_train_batch_size": 4, "max_steps": 3, "bf16": true}),
            ),
        ),
        (
            "real-jobs/specs/trainer_llama1b_gc.json",
            trainer(
                "llama-3.2-1b",
                2048,
                json!({"per_device_train_batch_size": 8, "max_steps": 3, "bf16": true,
                                              "gradient_checkpointing": true}),
            ),
        ),
        (
            "real-jobs/specs/trainer_llama1b_lora.json",
            with_lora(trainer(
                "llama-3.2-1b",
                1024,
                json!({"per_device_train_batch_size": 4, "max_steps": 3, "bf16": true}),
            )),
        ),
        (
            "real-jobs-2/specs/trainer_qwen3_1p7b_lora_gc.json",
            with_lora(trainer(
                "qwen3-1.7b",
                2048,
                json!({"per_device_train_batch_size": 8, "max_steps": 3, "bf16": true,
                                                      "gradient_checkpointing": true}),
            )),
        ),
        (
            "real-jobs-2/specs/trainer_llama1b_fp16.json",
            trainer(
                "llama-3.2-1b",
                1024,
                json!({"per_device_train_batch_size": 4, "max_steps": 3, "fp16": true}),
            ),
        ),
        (
            "real-jobs-2/specs/trainer_llama1b_ga4.json",
            trainer(
                "llama-3.2-1b",
                1024,
                json!({"per_device_train_batch_size": 2, "max_steps": 3, "bf16": true,
                                              "gradient_accumulation_steps": 4}),
            ),
        ),
        (
            "real-jobs-2/specs/trainer_llama1b_gc_fp16_ga2.json",
            trainer(
                "llama-3.2-1b",
                2048,
                json!({"per_device_train_batch_size": 4, "max_steps": 3, "fp16": true,
                                              "gradient_checkpointing": true, "gradient_accumulation_steps": 2}),
            ),
        ),
        (
            "real-jobs-2/specs/trainer_gpt2_fp16_foreach_ga4.json",
            trainer(
                "gpt2",
                1024,
                json!({"per_device_train_batch_size": 4, "max_steps": 3, "fp16": true,
                                      "optim": "adamw_torch", "gradient_accumulation_steps": 4}),
            ),
        ),
        (
            "real-jobs-2/specs/trainer_qwen05b.json",
            trainer(
                "qwen2.5-0.5b",
                1024,
                json!({"per_device_train_batch_size": 8, "max_steps": 3, "bf16": true}),
            ),
        ),
        ("real-jobs-2/specs/trainer_bert_seqcls.json", {
            let mut s = trainer(
                "bert-base-uncased",
                512,
                json!({"per_device_train_batch_size": 32, "max_steps": 3, "bf16": true}),
            );
            s["workload"]["head"] = json!("sequence_classification");
            s
        }),
        (
            "real-jobs/specs/lightning_gpt2.json",
            lightning(
                8,
                1024,
                json!({"accelerator": "gpu", "devices": 1, "precision": "bf16-mixed", "max_steps": 3}),
            ),
        ),
        (
            "real-jobs-2/specs/lightning_gpt2_16mixed_acc2.json",
            lightning(
                8,
                1024,
                json!({"precision": "16-mixed", "max_steps": 3, "accumulate_grad_batches": 2}),
            ),
        ),
        (
            "real-jobs-2/specs/lightning_gpt2_32true_acc4.json",
            lightning(
                4,
                1024,
                json!({"precision": "32-true", "max_steps": 3, "accumulate_grad_batches": 4}),
            ),
        ),
        (
            "real-jobs-2/specs/lightning_gpt2_bf16true_acc2.json",
            lightning(
                8,
                1024,
                json!({"precision": "bf16-true", "max_steps": 3, "accumulate_grad_batches": 2}),
            ),
        ),
        (
            "real-jobs/specs/timm_resnet50.json",
            timm(
                "resnet-50",
                json!({"batch_size": 128, "img_size": 224, "opt": "sgd", "amp": true, "amp_dtype": "bfloat16"}),
            ),
        ),
        (
            "real-jobs/specs/timm_resnet50_cl.json",
            timm(
                "resnet-50",
                json!({"batch_size": 128, "img_size": 224, "amp": true, "amp_dtype": "bfloat16", "channels_last": true}),
            ),
        ),
        (
            "real-jobs/specs/timm_vit_b16.json",
            timm(
                "vit-base-patch16-224",
                json!({"batch_size": 32, "img_size": 224, "opt": "adamw", "amp": true, "amp_dtype": "bfloat16"}),
            ),
        ),
        (
            "real-jobs-2/specs/timm_resnet101_cl_fp16_acc2.json",
            timm(
                "resnet-101",
                json!({"batch_size": 96, "img_size": 224, "amp": true, "channels_last": true, "grad_accum_steps": 2}),
            ),
        ),
        (
            "real-jobs-2/specs/timm_vit_b16_fp16_acc2.json",
            timm(
                "vit-base-patch16-224",
                json!({"batch_size": 32, "img_size": 224, "opt": "adamw", "amp": true, "grad_accum_steps": 2}),
            ),
        ),
        (
            "real-jobs-2/specs/timm_resnet34_adamw_fp32.json",
            timm(
                "resnet-34",
                json!({"batch_size": 128, "img_size": 224, "opt": "adamw"}),
            ),
        ),
        (
            "real-jobs-2/specs/timm_vit_s16_sgd_fp32_b128.json",
            timm(
                "vit-small-patch16-224",
                json!({"batch_size": 128, "img_size": 224, "opt": "sgd", "momentum": 0.9}),
            ),
        ),
        (
            "real-jobs-2/specs/timm_infer_resnet50_cl_fp16.json",
            json!({"model": "resnet-50", "workload": {
            "framework": "timm", "mode": "inference", "dtype": "fp16", "inference": {"batches": 3},
            "timm": {"batch_size": 256, "img_size": 224, "channels_last": true}}}),
        ),
        (
            "real-jobs/specs/generate_qwen05b.json",
            generate(
                "qwen2.5-0.5b",
                8,
                2048,
                json!({"max_new_tokens": 256, "min_new_tokens": 256, "do_sample": false,
                                                 "pad_token_id": 0, "eos_token_id": null}),
            ),
        ),
        (
            "real-jobs-2/specs/generate_qwen05b_eos_scores.json",
            generate(
                "qwen2.5-0.5b",
                8,
                2048,
                json!({"max_new_tokens": 256, "min_new_tokens": 256,
                                                 "return_dict_in_generate": true, "output_scores": true}),
            ),
        ),
        (
            "real-jobs-2/specs/generate_qwen3_4b_logits.json",
            generate(
                "qwen3-4b",
                16,
                1024,
                json!({"max_new_tokens": 128, "min_new_tokens": 128, "eos_token_id": null,
                                              "return_dict_in_generate": true, "output_logits": true}),
            ),
        ),
        (
            "real-jobs/specs/embed_bert.json",
            json!({"model": "bert-base-uncased", "workload": {
            "framework": "torch", "mode": "inference", "batch": 64, "seq_len": 512, "dtype": "fp16",
            "inference": {"kind": "forward", "logits": "none"}}}),
        ),
        (
            "real-jobs-2/specs/embed_bert_x4.json",
            json!({"model": "bert-base-uncased", "workload": {
            "framework": "torch", "mode": "inference", "batch": 64, "seq_len": 512, "dtype": "fp16",
            "inference": {"kind": "forward", "logits": "none", "batches": 4}}}),
        ),
    ]
}

#[test]
fn measured_framework_jobs_written_both_ways_agree_to_the_byte() {
    let jobs = both_ways();
    assert!(jobs.len() >= 25);
    for (path, framework_form) in jobs {
        let knobs = estimate(&knob_spec(path)).unwrap();
        let framework = estimate(&framework_form).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(framework, knobs, "{path}: framework form {framework_form}");
    }
}

#[test]
fn a_full_training_arguments_dict_is_read_as_the_trainer_runs_it() {
    let spec = json!({"model": "llama-3.2-1b", "workload": {"framework": "hf_trainer", "seq_len": 1024,
                      "training_args": fixture("training_args_5.17.json")}});
    assert_eq!(
        estimate(&spec).unwrap(),
        estimate(&knob_spec("real-jobs/specs/trainer_llama1b.json")).unwrap()
    );
}

#[test]
fn max_steps_below_three_replays_that_many_steps() {
    for (framework, args_key, max_steps) in [
        ("hf_trainer", "training_args", 1),
        ("hf_trainer", "training_args", 2),
        ("lightning", "lightning", 1),
    ] {
        let spec = json!({"model": "gpt2", "workload": {"framework": framework, "seq_len": 128,
                          "batch": 2, args_key: {"max_steps": max_steps}}});
        let read =
            Spec::from_value(&spec).unwrap_or_else(|e| panic!("{framework} {max_steps}: {e}"));
        assert_eq!(read.workload.training.steps, max_steps, "{framework}");
    }
}

#[test]
fn a_full_generation_config_dict_is_read() {
    let mut config = fixture("generation_config_5.17.json");
    config["eos_token_id"] = Value::Null;
    let spec = json!({"model": "qwen2.5-0.5b", "workload": {"framework": "hf_generate", "batch": 8,
                      "seq_len": 2048, "generation_config": config}});
    assert_eq!(
        estimate(&spec).unwrap(),
        estimate(&knob_spec("real-jobs/specs/generate_qwen05b.json")).unwrap()
    );
}

#[test]
fn the_frameworks_defaults_differ_where_the_frameworks_do() {
    let job = |framework: &str| {
        let spec = json!({"model": "gpt2", "workload": {"framework": framework, "mode": "training", "batch": 8, "seq_len": 1024,
                          "training": {"precision": "amp_bf16"}}});
        Spec::from_value(&spec).unwrap().workload.training
    };
    let trainer = job("hf_trainer");
    let plain = job("torch");
    let lightning = job("lightning");
    // The Trainer: fused AdamW (`adamw_torch_fused`), `use_cache=False`.
    assert_eq!(trainer.implementation.key(), "fused");
    assert!(!trainer.use_cache);
    // A plain loop and Lightning: foreach AdamW, the config's `use_cache`.
    assert_eq!(plain.implementation.key(), "foreach");
    assert!(plain.use_cache && lightning.use_cache);
    // Without the knob each framework's own default precision holds.
    let bare = |framework: &str| {
        let spec = json!({"model": "gpt2", "workload": {"framework": framework, "mode": "training", "batch": 8, "seq_len": 1024}});
        Spec::from_value(&spec)
            .unwrap()
            .workload
            .training
            .precision
            .key()
    };
    assert_eq!(bare("hf_trainer"), "fp32");
    assert_eq!(bare("lightning"), "fp32");
    assert_eq!(bare("torch"), "fp32");
}

#[test]
fn a_generation_job_is_a_fresh_inference_process() {
    let spec = json!({"model": "qwen2.5-0.5b", "workload": {"framework": "hf_generate", "batch": 1,
                      "seq_len": 512, "generation_config": {"max_new_tokens": 32}}});
    let parsed = Spec::from_value(&spec).unwrap();
    assert!(!parsed.runtime.process_ran_backward);
    assert_eq!(parsed.workload.inference.new_tokens, 32);
    // The runtime, when it says so, wins.
    let mut stated = spec.clone();
    stated["runtime"] = json!({"process_ran_backward": true});
    assert!(
        Spec::from_value(&stated)
            .unwrap()
            .runtime
            .process_ran_backward
    );
}

fn error_of(spec: Value) -> String {
    Spec::from_value(&spec).unwrap_err().to_string()
}

#[test]
fn an_argument_and_a_knob_that_disagree_are_refused_naming_both() {
    let e = error_of(
        json!({"model": "llama-3.2-1b", "workload": {"framework": "hf_trainer", "seq_len": 1024,
        "training": {"precision": "fp32"}, "training_args": {"bf16": true}}}),
    );
    assert!(
        e.contains("workload.training.precision") && e.contains("training_args.bf16"),
        "{e}"
    );
    let e = error_of(
        json!({"model": "llama-3.2-1b", "workload": {"framework": "hf_trainer", "batch": 2,
        "seq_len": 1024, "training_args": {"per_device_train_batch_size": 4}}}),
    );
    assert!(
        e.contains("workload.batch") && e.contains("per_device_train_batch_size"),
        "{e}"
    );
}

#[test]
fn unknown_and_unmodelled_arguments_are_refused_by_name() {
    let trainer = |args: Value| {
        error_of(
            json!({"model": "llama-3.2-1b", "workload": {"framework": "hf_trainer", "seq_len": 1024,
                        "training_args": args}}),
        )
    };
    let e = trainer(json!({"per_device_batch_size": 4}));
    assert!(
        e.contains("training_args.per_device_batch_size")
            && e.contains("per_device_train_batch_size"),
        "{e}"
    );
    for (args, says) in [
        (json!({"torch_compile": true}), "compiled"),
        (json!({"deepspeed": "ds_config.json"}), "DeepSpeed"),
        (json!({"optim": "adamw_apex_fused"}), "adamw_apex_fused"),
        (json!({"bf16": true, "fp16": true}), "both true"),
        (
            json!({"gradient_checkpointing_kwargs": {"use_reentrant": true}}),
            "reentrant",
        ),
        (json!({"label_smoothing_factor": 0.1}), "label smoother"),
    ] {
        let e = trainer(args.clone());
        assert!(e.contains(says), "{args}: {e}");
    }
    let e = error_of(
        json!({"model": "llama-3.2-1b", "workload": {"framework": "hf_trainer", "seq_len": 1024,
        "lora_config": {"r": 8, "target_modules": ".*q_proj"}}}),
    );
    assert!(e.contains("target_modules") && e.contains("pattern"), "{e}");
    let e = error_of(
        json!({"model": "llama-3.2-1b", "workload": {"framework": "lightnin", "mode": "training"}}),
    );
    assert!(
        e.contains("workload.framework") && e.contains("lightning"),
        "{e}"
    );
    let e = error_of(
        json!({"model": "resnet-50", "workload": {"framework": "hf_generate",
        "generation_config": {"max_new_tokens": 8}}}),
    );
    assert!(e.contains("decoder"), "{e}");
    let e = error_of(
        json!({"model": "gpt2", "workload": {"mode": "training", "training_args": {"bf16": true}}}),
    );
    assert!(e.contains("hf_trainer"), "{e}");
}

#[test]
fn lora_config_as_peft_writes_it() {
    let spec = |targets: Value| {
        json!({"model": "llama-3.2-1b", "workload": {"framework": "hf_trainer", "seq_len": 1024,
               "training_args": {"per_device_train_batch_size": 1, "bf16": true},
               "lora_config": {"r": 16, "lora_alpha": 32, "target_modules": targets, "lora_dropout": 0.0}}})
    };
    let all = Spec::from_value(&spec(json!("all-linear"))).unwrap();
    let lora = all.workload.training.lora.clone().unwrap();
    assert_eq!(
        (lora.rank, lora.target_modules.clone()),
        (16, vec!["all-linear".to_string()])
    );
    let one = Spec::from_value(&spec(json!("q_proj"))).unwrap();
    assert_eq!(
        one.workload.training.lora.unwrap().target_modules,
        vec!["q_proj".to_string()]
    );
}

#[test]
fn lora_dropout_keeps_a_mask_per_adapted_input() {
    let spec = |dropout: f64| {
        json!({"model": "llama-3.2-1b", "workload": {"framework": "hf_trainer", "seq_len": 1024, "dtype": "bf16",
               "training_args": {"per_device_train_batch_size": 4, "bf16": true},
               "lora_config": {"r": 8, "target_modules": ["q_proj", "v_proj"], "lora_dropout": dropout}}})
    };
    let (without, _, _) = estimate(&spec(0.0)).unwrap();
    let (with, _, _) = estimate(&spec(0.05)).unwrap();
    // peft's `nn.Dropout` on each adapter's fp32 input saves a bool mask of
    // the input's elements for backward: 2 adapters x 16 layers x
    // (4 x 1,024 x 2,048) bytes, all but the last layer's live at the peak.
    let masks = 2 * 16 * 4 * 1024 * 2048u64;
    assert!(with >= without + masks / 16 * 15, "{with} vs {without}");
    assert!(with < without + 2 * masks, "{with} vs {without}");
}

#[test]
fn a_bitsandbytes_config_is_the_weights_storage() {
    let spec = json!({"model": "llama-3.1-8b", "workload": {"framework": "hf_trainer", "seq_len": 2048,
        "training_args": {"per_device_train_batch_size": 1, "bf16": true, "gradient_checkpointing": true},
        "lora_config": {"r": 16, "lora_alpha": 32, "target_modules": "all-linear"},
        "quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": true, "load_in_8bit": false,
                                "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": true,
                                "bnb_4bit_compute_dtype": "bfloat16"}}});
    let parsed = Spec::from_value(&spec).unwrap();
    assert_eq!(parsed.workload.dtype.key(), "int4_dq");
    assert_eq!(parsed.workload.training.precision.key(), "amp_bf16");
    // Without double quantization the absmax stays fp32: plain int4.
    let mut plain = spec.clone();
    plain["workload"]["quantization_config"]["bnb_4bit_use_double_quant"] = json!(false);
    assert_eq!(
        Spec::from_value(&plain).unwrap().workload.dtype.key(),
        "int4"
    );
    // bitsandbytes computes in fp32 unless told: not modelled, said so.
    let mut fp32 = spec.clone();
    fp32["workload"]["quantization_config"]["bnb_4bit_compute_dtype"] = json!("float32");
    let e = error_of(fp32);
    assert!(
        e.contains("bnb_4bit_compute_dtype") && e.contains("bfloat16"),
        "{e}"
    );
    // The Trainer's bitsandbytes optimizers.
    for (optim, key) in [
        ("paged_adamw_8bit", "paged_adamw_8bit"),
        ("paged_adamw_32bit", "paged_adamw_32bit"),
        ("adamw_8bit", "adamw_8bit"),
        ("adamw_bnb_8bit", "adamw_8bit"),
    ] {
        let mut s = spec.clone();
        s["workload"]["training_args"]["optim"] = json!(optim);
        let w = Spec::from_value(&s).unwrap().workload;
        assert_eq!(w.training.optimizer.key(), key, "{optim}");
    }
}

#[test]
fn fsdp2_under_the_trainer_is_fsdp2_s_own_mixed_precision() {
    let spec = json!({"model": "llama-3.1-8b", "workload": {"framework": "hf_trainer", "seq_len": 4096,
        "training_args": {"per_device_train_batch_size": 1, "bf16": true, "gradient_checkpointing": true},
        "parallel": {"strategy": "fsdp2", "world_size": 8}}});
    let parsed = Spec::from_value(&spec).unwrap();
    let w = &parsed.workload;
    assert_eq!(w.training.precision.key(), "fp32");
    assert_eq!(w.parallel.param_dtype.key(), "bf16");
    assert_eq!(w.parallel.reduce_dtype.key(), "bf16");
    // The same as `gpus`' FSDP2 column reads a job written with autocast.
    let mut knobs = Spec::from_value(&json!({"model": "llama-3.1-8b", "workload": {"mode": "training",
        "batch": 1, "seq_len": 4096, "training": {"precision": "amp_bf16", "grad_checkpointing": true,
        "implementation": "fused", "steps": 3}}}))
    .unwrap()
    .workload;
    knobs = headroom_core::search::on_gpus(&knobs, headroom_core::parallel::Strategy::Fsdp2, 8);
    assert_eq!(&knobs, w);
}

#[test]
fn a_plain_loop_training_adapters_keeps_the_decoder_s_cache() {
    // No `mode`: the `lora_config` makes it a training job, and the plain
    // loop's defaults apply to it (the config's `use_cache=True`).
    let spec = json!({"model": "gpt2", "workload": {"framework": "torch", "seq_len": 512, "batch": 2,
        "lora_config": {"r": 8, "target_modules": "c_attn"}}});
    let w = Spec::from_value(&spec).unwrap().workload;
    assert!(w.training.use_cache);
    assert_eq!(w.training.steps, 3);
}
