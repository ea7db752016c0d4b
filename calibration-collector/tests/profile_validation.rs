//! Profiles round-trip through JSON; malformed or hostile ones are rejected
//! with a message naming the field.

mod common;

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
        headroom_core::spec::parse_runtime(&serde_json::to_value(&p.runtime).unwrap()).unwrap();
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
        "points[0]",
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
