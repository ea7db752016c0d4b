//! The workload words of the command line are the core's keys: every key of
//! every workload enum is accepted by `estimate`, and a wrong value is
//! refused with a message that names the field and every key.

use crate::common;

use common::{run, text};
use headroom_core::arch::Dtype;
use headroom_core::parallel::Strategy;
use headroom_core::workload::{
    Attention, InferenceKind, LoadPath, Logits, Mode, Optimizer, Precision,
};
use serde_json::{json, Value};

/// One workload field that takes a key.
struct Field {
    /// Dotted path below `workload`.
    path: &'static str,
    /// The keys it takes.
    keys: Vec<&'static str>,
    /// A spec the field is set in.
    base: Value,
}

fn fields() -> Vec<Field> {
    let gpt2 = json!({"model": "gpt2", "workload": {"mode": "inference", "seq_len": 128}});
    let training =
        json!({"model": "gpt2", "workload": {"mode": "training", "batch": 2, "seq_len": 128}});
    let forward = json!({"model": "gpt2", "workload": {"mode": "inference", "seq_len": 128, "inference": {"kind": "forward"}}});
    let quantisable = json!({"model": "llama-3.2-1b", "workload": {"mode": "inference", "seq_len": 128, "inference": {"new_tokens": 2}}});
    let esmfold = json!({"model": "esmfold-v1", "workload": {"mode": "inference", "seq_len": 64, "esmfold": {"num_recycles": 0}}});
    // The ESM-2 stem runs in a float dtype only.
    let float_dtypes: Vec<&'static str> = Dtype::ALL
        .iter()
        .filter(|d| d.is_float())
        .map(|d| d.key())
        .collect();
    // Jobs on several GPUs: sharded training, or tensor-parallel inference.
    let decoder_training = json!({"model": "llama-3.2-1b", "workload": {"mode": "training", "seq_len": 64, "training": {"precision": "fp32"}, "parallel": {"world_size": 2}}});
    let decoder_inference = json!({"model": "llama-3.2-1b", "workload": {"mode": "inference", "seq_len": 64, "parallel": {"world_size": 2}}});
    let fsdp2 = json!({"model": "llama-3.2-1b", "workload": {"mode": "training", "seq_len": 64, "training": {"precision": "fp32"}, "parallel": {"strategy": "fsdp2", "world_size": 2}}});
    let training_strategies: Vec<&'static str> = [Strategy::Ddp, Strategy::Fsdp2, Strategy::Zero1]
        .iter()
        .map(|s| s.key())
        .collect();
    let single = json!({"model": "llama-3.2-1b", "workload": {"mode": "inference", "seq_len": 64}});
    vec![
        Field {
            path: "mode",
            keys: Mode::KEYS.to_vec(),
            base: gpt2.clone(),
        },
        Field {
            path: "attention",
            keys: Attention::KEYS.to_vec(),
            base: gpt2.clone(),
        },
        Field {
            path: "load",
            keys: LoadPath::KEYS.to_vec(),
            base: gpt2.clone(),
        },
        Field {
            path: "dtype",
            keys: Dtype::KEYS.to_vec(),
            base: quantisable.clone(),
        },
        Field {
            path: "inference.kind",
            keys: InferenceKind::KEYS.to_vec(),
            base: gpt2,
        },
        Field {
            path: "inference.logits",
            keys: Logits::KEYS.to_vec(),
            base: forward,
        },
        Field {
            path: "inference.kv_dtype",
            // Every dtype but bitsandbytes' double-quantized weights.
            keys: Dtype::KEYS
                .iter()
                .copied()
                .filter(|k| *k != Dtype::Int4Dq.key())
                .collect(),
            base: quantisable,
        },
        Field {
            path: "training.optimizer",
            keys: Optimizer::KEYS.to_vec(),
            base: training.clone(),
        },
        Field {
            path: "training.precision",
            keys: Precision::KEYS.to_vec(),
            base: training,
        },
        Field {
            path: "esmfold.stem_dtype",
            keys: float_dtypes.clone(),
            base: esmfold,
        },
        Field {
            path: "parallel.strategy",
            keys: training_strategies,
            base: decoder_training,
        },
        Field {
            path: "parallel.strategy",
            keys: vec![Strategy::Tp.key()],
            base: decoder_inference,
        },
        Field {
            path: "parallel.strategy",
            keys: vec![Strategy::None.key()],
            base: single,
        },
        Field {
            path: "parallel.param_dtype",
            keys: float_dtypes.clone(),
            base: fsdp2.clone(),
        },
        Field {
            path: "parallel.reduce_dtype",
            keys: float_dtypes,
            base: fsdp2,
        },
    ]
}

/// `base` with `workload.<path>` set to `value`.
fn with(base: &Value, path: &str, value: &str) -> String {
    let mut spec = base.clone();
    let mut at = &mut spec["workload"];
    for part in path.split('.') {
        if at.get(part).is_none() {
            at[part] = json!({});
        }
        at = &mut at[part];
    }
    *at = json!(value);
    spec.to_string()
}

#[test]
fn every_workload_key_is_accepted() {
    for field in fields() {
        assert!(!field.keys.is_empty(), "{}", field.path);
        for key in &field.keys {
            let spec = with(&field.base, field.path, key);
            let out = run(&["estimate"], Some(&spec));
            assert_eq!(
                out.status.code(),
                Some(0),
                "workload.{} = {key:?} refused: {}",
                field.path,
                text(&out.stderr)
            );
            let v: Value = serde_json::from_slice(&out.stdout).unwrap();
            let mut echoed = &v["inputs"]["workload"];
            for part in field.path.split('.') {
                echoed = &echoed[part];
            }
            assert_eq!(
                echoed,
                &json!(key),
                "workload.{} echoed as its key",
                field.path
            );
        }
    }
}

#[test]
fn every_strategy_key_is_tried() {
    let tried: Vec<&str> = fields()
        .iter()
        .filter(|f| f.path == "parallel.strategy")
        .flat_map(|f| f.keys.clone())
        .collect();
    for key in Strategy::KEYS {
        assert!(tried.contains(key), "{key}");
    }
}

/// The command-line flag takes the same keys and names them all when wrong.
#[test]
fn the_strategy_flag_takes_the_cores_keys() {
    let training = json!({"model": "llama-3.2-1b", "workload": {"mode": "training", "seq_len": 64, "training": {"precision": "fp32"}}}).to_string();
    let inference =
        json!({"model": "llama-3.2-1b", "workload": {"mode": "inference", "seq_len": 64}})
            .to_string();
    for key in Strategy::KEYS {
        let spec = if *key == "tp" { &inference } else { &training };
        let world = if *key == "none" { "1" } else { "2" };
        let out = run(
            &["estimate", "--strategy", key, "--world-size", world],
            Some(spec),
        );
        assert_eq!(out.status.code(), Some(0), "{key}: {}", text(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["inputs"]["workload"]["parallel"]["strategy"], json!(key));
    }
    let out = run(&["estimate", "--strategy", "no_such_key"], Some(&training));
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("--strategy") && err.contains("workload.parallel.strategy"),
        "{err}"
    );
    for key in Strategy::KEYS {
        assert!(err.contains(&format!("\"{key}\"")), "{err}");
    }
}

#[test]
fn a_wrong_value_is_refused_naming_the_field_and_every_key() {
    for field in fields() {
        let spec = with(&field.base, field.path, "no_such_key");
        let out = run(&["estimate"], Some(&spec));
        assert_eq!(out.status.code(), Some(1), "workload.{}", field.path);
        let err = text(&out.stderr);
        assert!(
            err.contains(&format!("`workload.{}`", field.path)) && err.contains("no_such_key"),
            "{err}"
        );
        for key in &field.keys {
            assert!(
                err.contains(&format!("\"{key}\"")),
                "workload.{}: the message does not name {key:?}: {err}",
                field.path
            );
        }
    }
}

#[test]
fn a_framework_job_is_estimated_and_its_contradictions_refused() {
    // The measured Trainer job as its script wrote it, and with the knobs.
    let as_written = json!({"model": "llama-3.2-1b", "workload": {"framework": "hf_trainer",
        "seq_len": 1024, "training_args": {"per_device_train_batch_size": 4, "bf16": true}}});
    let as_knobs = json!({"model": "llama-3.2-1b", "workload": {"mode": "training", "batch": 4,
        "seq_len": 1024, "training": {"precision": "amp_bf16", "implementation": "fused", "steps": 3}}});
    let peak = |spec: &Value| {
        let out = run(&["estimate"], Some(&spec.to_string()));
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["driver_peak"].as_u64().unwrap()
    };
    assert_eq!(peak(&as_written), peak(&as_knobs));

    let mut contradicting = as_written.clone();
    contradicting["workload"]["training"] = json!({"precision": "fp32"});
    let out = run(&["estimate"], Some(&contradicting.to_string()));
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("`workload.training.precision`") && err.contains("training_args.bf16"),
        "{err}"
    );
}
