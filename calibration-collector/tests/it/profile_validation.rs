//! Profiles round-trip through JSON; malformed or hostile ones are rejected
//! with a message naming the field.

use crate::common;

use calibration_collector::profile::{self, Identity, ProfileError};
use common::valid_profile;
use serde_json::{json, Value};

fn nobody() -> Identity {
    Identity::default()
}

fn reject(doc: &Value, field: &str) -> String {
    let err = profile::from_value(doc, &nobody()).expect_err("must be rejected");
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("`{field}`")),
        "expected `{field}` in: {msg}"
    );
    msg
}

fn with(mut doc: Value, pointer: &str, value: Value) -> Value {
    *doc.pointer_mut(pointer)
        .unwrap_or_else(|| panic!("{pointer}")) = value;
    doc
}

#[test]
fn a_valid_profile_round_trips() {
    let doc = valid_profile();
    let p = profile::from_value(&doc, &nobody()).unwrap();
    let text = serde_json::to_string_pretty(&p).unwrap();
    let again = profile::parse(&text, &nobody()).unwrap();
    assert_eq!(p, again);
    // The page reads `runtime` with the core's parser: the fitted runtime is a spec runtime.
    let rt =
        headroom_core::readers::parse_runtime(&serde_json::to_value(&p.runtime).unwrap()).unwrap();
    assert_eq!(rt, p.runtime);
}

#[test]
fn malformed_fields_are_named() {
    let d = valid_profile;
    reject(&with(d(), "/schema_version", json!(2)), "schema_version");
    reject(
        &with(d(), "/runtime/cuda_context_bytes", json!(-5)),
        "runtime.cuda_context_bytes",
    );
    reject(
        &with(d(), "/runtime/cuda_context_bytes", json!("lots")),
        "runtime.cuda_context_bytes",
    );
    reject(
        &with(d(), "/runtime/cublas_library_bytes", json!(1u64 << 40)),
        "runtime.cublas_library_bytes",
    );
    reject(&with(d(), "/gpu/total_bytes", json!(5)), "gpu.total_bytes");
    reject(
        &with(d(), "/gpu/compute_capability", json!("nine")),
        "gpu.compute_capability",
    );
    reject(&with(d(), "/created", json!("yesterday")), "created");
    reject(&with(d(), "/torch", json!("2.11; rm -rf /")), "torch");
    reject(
        &with(d(), "/coefficients/cuda_context_bytes/value", json!(1)),
        "coefficients.cuda_context_bytes.value",
    );
    reject(
        &with(
            d(),
            "/coefficients/cuda_context_bytes/uncertainty",
            json!(-1),
        ),
        "coefficients.cuda_context_bytes.uncertainty",
    );
    reject(&with(d(), "/fit/basis", json!("vibes")), "fit.basis");
    reject(
        &with(d(), "/summary/after/median_abs_err", json!(1e300)),
        "summary.after.median_abs_err",
    );
    reject(
        &with(d(), "/points/0/measured/driver_peak", json!(1u64 << 50)),
        "points[0].measured.driver_peak",
    );
    reject(
        &with(d(), "/points/0/measured/driver_peak", json!(-1)),
        "points[0].measured.driver_peak",
    );
    reject(
        &with(d(), "/points/0/model", json!("no-such-model")),
        "points[0].model",
    );
    reject(
        &with(d(), "/points/0/workload/batch", json!(0)),
        "points[0].workload",
    );
    reject(
        &with(d(), "/points/0/prediction/after", json!("x")),
        "points[0].prediction.after",
    );
    let mut missing = d();
    missing.as_object_mut().unwrap().remove("runtime");
    reject(&missing, "runtime");
    let mut no_ctx = d();
    no_ctx["coefficients"]
        .as_object_mut()
        .unwrap()
        .remove("cuda_context_bytes");
    reject(&no_ctx, "coefficients.cuda_context_bytes");
    reject(&json!([1, 2]), "(document)");
}

#[test]
fn hostile_profiles_are_rejected() {
    let d = valid_profile;
    // Unknown fields anywhere are refused, so nothing unvetted travels.
    let mut extra = d();
    extra["hostname"] = json!("gpu-box-7");
    let msg = reject(&extra, "hostname");
    assert!(msg.contains("unknown field"), "{msg}");
    let mut extra = d();
    extra["gpu"]["uuid"] = json!("GPU-1234");
    reject(&extra, "gpu.uuid");
    let mut extra = d();
    extra["runtime"]["home"] = json!("x");
    reject(&extra, "runtime.home");
    let mut extra = d();
    extra["points"][0]["collector"] = json!({"cmd": "python /home/alice/job.py"});
    reject(&extra, "points[0].collector");
    let mut extra = d();
    extra["points"][0]["measured"]["error"] = json!("Traceback ...");
    reject(&extra, "points[0].measured.error");
    // Oversized, control characters, paths, host and user names.
    reject(&with(d(), "/name", json!("x".repeat(10_000))), "name");
    reject(
        &with(d(), "/gpu/name", json!("NVIDIA\u{1b}[2J H200")),
        "gpu.name",
    );
    let msg = reject(
        &with(d(), "/points/0/case", json!("/home/alice/runs/a.jsonl")),
        "points[0].case",
    );
    assert!(msg.contains("file path"), "{msg}");
    reject(
        &with(
            d(),
            "/coefficients/cuda_context_bytes/source",
            json!("probe on C:\\Users\\bob"),
        ),
        "coefficients.cuda_context_bytes.source",
    );
    let who = Identity {
        host: Some("gpu-box-7".into()),
        user: Some("alice".into()),
    };
    let named = with(d(), "/name", json!("H200 in gpu-box-7"));
    let err = profile::from_value(&named, &who).unwrap_err().to_string();
    assert!(err.contains("`name`") && err.contains("host name"), "{err}");
    let named = with(d(), "/points/0/case", json!("alice_llama"));
    let err = profile::from_value(&named, &who).unwrap_err().to_string();
    assert!(
        err.contains("`points[0].case`") && err.contains("user name"),
        "{err}"
    );
    // Too many points.
    let many = with(
        d(),
        "/points",
        Value::Array(vec![d()["points"][0].clone(); profile::MAX_POINTS + 1]),
    );
    reject(&many, "points");
}

#[test]
fn hostile_documents_fail_cleanly() {
    let deep = "[".repeat(100_000);
    assert!(matches!(
        profile::parse(&deep, &nobody()),
        Err(ProfileError::Json(_))
    ));
    let huge = " ".repeat(profile::MAX_PROFILE_BYTES + 1);
    assert!(matches!(
        profile::parse(&huge, &nobody()),
        Err(ProfileError::TooLarge(_))
    ));
    let text = serde_json::to_string(&valid_profile())
        .unwrap()
        .replace("0.81", "1e999");
    assert!(matches!(
        profile::parse(&text, &nobody()),
        Err(ProfileError::Json(_))
    ));
    assert!(profile::parse("", &nobody()).is_err());
    assert!(profile::parse("\u{feff}{}", &nobody()).is_err());
}

/// `/points/0/workload` as the field name a message uses: `points[0].workload`.
fn field_of(pointer: &str) -> String {
    let mut field = String::new();
    for part in pointer.split('/').skip(1) {
        if part.bytes().all(|b| b.is_ascii_digit()) {
            field.push_str(&format!("[{part}]"));
        } else {
            if !field.is_empty() {
                field.push('.');
            }
            field.push_str(part);
        }
    }
    field
}

/// A valid profile whose point trains with LoRA under DDP.
fn training_profile() -> Value {
    let mut doc = valid_profile();
    doc["points"][0]["workload"] = json!({
        "mode": "training", "batch": 1, "seq_len": 512, "dtype": "bf16", "attention": "sdpa",
        "loss": "cross_entropy_on_all_tokens",
        "training": {"optimizer": "adamw", "steps": 2, "zero_grad": "set_to_none", "precision": "bf16",
                     "grad_checkpointing": false,
                     "lora": {"rank": 16, "alpha": 32, "target_modules": ["q_proj", "v_proj"], "dropout": 0.0}},
        "parallel": {"strategy": "fsdp2", "world_size": 2, "wrap": "per_decoder_layer_then_root",
                     "init": "meta_then_to_empty", "reshard_after_forward": true,
                     "param_dtype": "bf16", "reduce_dtype": "fp32"}
    });
    doc
}

/// A valid profile whose point folds a protein.
fn esmfold_profile() -> Value {
    let mut doc = valid_profile();
    doc["points"][0]["model"] = json!("esmfold-v1");
    doc["points"][0]["workload"] = json!({
        "mode": "inference", "batch": 1, "seq_len": 512,
        "esmfold": {"stem_dtype": "fp16", "chunk_size": null, "num_recycles": 3}
    });
    doc
}

#[test]
fn unknown_keys_are_refused_at_every_level() {
    let mut inference = valid_profile();
    inference["runtime"]["allocator"] =
        json!({"expandable_segments": true, "max_split_size": null});
    inference["points"][0]["runtime"]["allocator"] = json!({"expandable_segments": false});
    let cases: [(Value, &[&str]); 3] = [
        (
            inference,
            &[
                "",
                "/gpu",
                "/runtime",
                "/runtime/allocator",
                "/coefficients",
                "/coefficients/cuda_context_bytes",
                "/fit",
                "/summary",
                "/summary/before",
                "/summary/after",
                "/points/0",
                "/points/0/workload",
                "/points/0/workload/inference",
                "/points/0/runtime",
                "/points/0/runtime/allocator",
                "/points/0/measured",
                "/points/0/prediction",
            ],
        ),
        (
            training_profile(),
            &[
                "/points/0/workload/training",
                "/points/0/workload/training/lora",
                "/points/0/workload/parallel",
            ],
        ),
        (esmfold_profile(), &["/points/0/workload/esmfold"]),
    ];
    for (base, pointers) in cases {
        profile::from_value(&base, &nobody()).expect("the base profile is valid");
        for pointer in pointers {
            for key in ["/home/alice/secret_project", "note"] {
                let mut doc = base.clone();
                doc.pointer_mut(pointer)
                    .unwrap_or_else(|| panic!("{pointer}"))
                    .as_object_mut()
                    .unwrap()
                    .insert(key.into(), json!("ran on alice's laptop, see notes"));
                let field = match field_of(pointer).as_str() {
                    "" => key.to_string(),
                    f => format!("{f}.{key}"),
                };
                let msg = reject(&doc, &field);
                assert!(msg.contains("unknown field"), "{msg}");
            }
        }
    }
}

#[test]
fn hidden_objects_and_free_text_notes_are_refused() {
    let d = valid_profile;
    // A plain value that holds an object or a list smuggles keys.
    let mut doc = d();
    doc["points"][0]["measured"]["poll_hz"] = json!({"/home/alice/secret_project": 1});
    reject(&doc, "points[0].measured.poll_hz");
    reject(
        &with(d(), "/points/0/params", json!(["alice@example.org"])),
        "points[0].params",
    );
    // The measurement format's notes are names, not prose.
    let t = training_profile;
    reject(
        &with(
            t(),
            "/points/0/workload/loss",
            json!("cross entropy, tuned by Alice on her laptop"),
        ),
        "points[0].workload.loss",
    );
    reject(
        &with(
            t(),
            "/points/0/workload/parallel/wrap",
            json!("see my notes"),
        ),
        "points[0].workload.parallel.wrap",
    );
    reject(
        &with(
            t(),
            "/points/0/workload/training/lora/target_modules",
            json!(["q_proj", "all of them, ask bob"]),
        ),
        "points[0].workload.training.lora.target_modules[1]",
    );
    reject(
        &with(
            t(),
            "/points/0/workload/training/zero_grad",
            json!({"a": 1}),
        ),
        "points[0].workload.training.zero_grad",
    );
}

#[test]
fn identifying_text_is_refused_in_values_and_keys() {
    let d = valid_profile;
    for (value, says) in [
        ("data/x.csv", "file path"),
        ("./run.sh", "file path"),
        ("../a", "file path"),
        ("runs\\a", "file path"),
        ("results.csv", "file path"),
        ("see notes.txt.", "file path"),
        ("~/runs", "home directory"),
        ("~alice", "home directory"),
        ("$HOME/runs", "home directory"),
        ("%USERPROFILE%", "home directory"),
        ("alice@example.org", "e-mail"),
        ("run by alice@gpu-box-7", "e-mail"),
    ] {
        let msg = reject(&with(d(), "/points/0/case", json!(value)), "points[0].case");
        assert!(msg.contains(says), "{value}: {msg}");
        let msg = reject(
            &with(d(), "/coefficients/cuda_context_bytes/source", json!(value)),
            "coefficients.cuda_context_bytes.source",
        );
        assert!(msg.contains(says), "{value}: {msg}");
        // Keys are scanned as well as values.
        let doc = json!({"points": [{"workload": {value: 1}}]});
        let msg = profile::scan_strings(&doc, "", &nobody())
            .expect_err(value)
            .to_string();
        assert!(
            msg.contains("points[0].workload") && msg.contains(says),
            "{msg}"
        );
    }
    let who = Identity {
        host: Some("gpu-box-7".into()),
        user: Some("alice".into()),
    };
    let msg = profile::scan_strings(&json!({"gpu-box-7": 1}), "", &who)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("host name"), "{msg}");
    // What `fit` writes still passes.
    for source in [
        "least squares over 3 point(s): measured driver_peak minus predicted (weighted by 1/measured^2) reserved peak, minus context and cuBLAS library",
        "torch's CublasHandlePool.cpp default for compute capability 9.0 (inside torch's allocator)",
        "probe on 2 rank(s) (NCCL 2.27.3, NVLink multicast off): communicator, measured by the several-GPU harness",
    ] {
        let doc = with(d(), "/coefficients/cuda_context_bytes/source", json!(source));
        profile::from_value(&doc, &nobody()).unwrap_or_else(|e| panic!("{source}: {e}"));
    }
}

#[test]
fn the_committed_profile_validates() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../calibration/profiles/h200-2026-11-30.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let p = profile::parse(&text, &nobody()).unwrap();
    assert!(!p.points.is_empty());
}

/// A point's workload takes every key the core's spec reader takes (the
/// same lists): a field the core adds, such as the optimizer's
/// implementation, travels in a profile too.
#[test]
fn a_points_workload_takes_the_cores_keys() {
    let mut p = common::valid_profile();
    p["points"][0]["workload"]["mode"] = "training".into();
    p["points"][0]["workload"]["training"] = serde_json::json!({"optimizer": "adamw", "implementation": "fused", "zero_grad": "set_to_none"});
    calibration_collector::profile::from_value(
        &p,
        &calibration_collector::profile::Identity::default(),
    )
    .unwrap();
    p["points"][0]["workload"]["training"]["implementaton"] = "fused".into();
    let err = calibration_collector::profile::from_value(
        &p,
        &calibration_collector::profile::Identity::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("implementaton"), "{err}");
}
