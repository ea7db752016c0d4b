//! Each request round-trips, and answers as the page's thread computes.

use super::*;
use crate::curve::tests::fake;
use crate::curve::{share, view_lengths};
use crate::state::AppState;

fn inputs_for(id: &str) -> Inputs {
    let p = headroom_core::presets::find(id).unwrap();
    Inputs {
        workload: AppState::for_model(p.model()).workload,
        arch: p.arch,
        runtime: RuntimeProfile::h200(),
    }
}

#[track_caller]
fn round_trips(request: &Request) {
    let json = request.to_json();
    assert_eq!(Request::from_json(&json).as_ref(), Ok(request), "{json}");
}

/// Each kind of request reads back as itself, the kind included.
#[test]
fn every_kind_of_request_round_trips() {
    let inputs = inputs_for("gpt2");
    let requests = [
        Request::curve(inputs.clone(), vec![128, 512, 1024]),
        Request::Estimate {
            inputs: inputs.clone(),
            length: 777,
        },
        Request::FitRows {
            inputs,
            margin_pct: 15,
        },
    ];
    let kinds: Vec<&str> = requests.iter().map(Request::kind).collect();
    assert_eq!(kinds, ["curve", "estimate", "fit_rows"]);
    for request in &requests {
        round_trips(request);
    }
}

/// The kind decides what is asked: fields of another kind are not read.
#[test]
fn the_kind_decides_what_is_asked() {
    let inputs = inputs_for("gpt2");
    let curve = Request::curve(inputs.clone(), vec![128]);
    let mut v: Value = serde_json::from_str(&curve.to_json()).unwrap();
    v["margin_pct"] = Value::from(10);
    v["length"] = Value::from(5);
    assert_eq!(Request::from_json(&v.to_string()), Ok(curve));
    v["kind"] = Value::from("fit_rows");
    assert!(matches!(
        Request::from_json(&v.to_string()),
        Ok(Request::FitRows { margin_pct: 10, .. })
    ));
    v["kind"] = Value::from("estimate");
    assert!(matches!(
        Request::from_json(&v.to_string()),
        Ok(Request::Estimate { length: 5, .. })
    ));
    for kind in [Value::from("table"), Value::Null] {
        v["kind"] = kind;
        let e = Request::from_json(&v.to_string()).unwrap_err();
        assert!(e.starts_with("`kind`:"), "{e}");
    }
    // A margin above the page's largest is read as the largest.
    v["kind"] = Value::from("fit_rows");
    v["margin_pct"] = Value::from(1_000_000);
    assert!(matches!(
        Request::from_json(&v.to_string()),
        Ok(Request::FitRows { margin_pct, .. }) if margin_pct == crate::defaults::MAX_MARGIN_PCT
    ));
}

/// A share sent to a worker comes back with the estimates this thread
/// computes, for every preset (nothing is lost on the way).
#[test]
fn a_curve_share_gives_the_same_estimates() {
    let rt = RuntimeProfile::h200();
    for p in headroom_core::presets::all() {
        let s = AppState::for_model(p.model());
        let lengths = share(&view_lengths(&s.view, 6), 2, 1);
        let key = s.workload.with_length(s.vision(), 0);
        let request = Request::curve(
            Inputs {
                arch: p.arch.clone(),
                workload: key.clone(),
                runtime: rt.clone(),
            },
            lengths.clone(),
        );
        round_trips(&request);
        let answered = read_estimates(&answer(&request.to_json()), lengths.len()).unwrap();
        assert_eq!(
            answered,
            estimate_lengths(&p.arch, &key, &rt, &lengths),
            "{}",
            p.id
        );
    }
}

/// A single estimate comes back as this thread computes it.
#[test]
fn an_estimate_request_gives_the_same_estimate() {
    let i = inputs_for("llama-3.2-1b");
    let request = Request::Estimate {
        inputs: i.clone(),
        length: 300,
    };
    let answered = read_estimates(&answer(&request.to_json()), 1).unwrap();
    assert_eq!(
        answered,
        estimate_lengths(&i.arch, &i.workload, &i.runtime, &[300])
    );
}

/// A GPU-table request answers with the table this thread computes.
#[test]
fn a_fit_rows_request_gives_the_same_table() {
    let i = inputs_for("gpt2");
    let request = Request::FitRows {
        inputs: i.clone(),
        margin_pct: 15,
    };
    let peak = Some(Bytes(5_000_000_000));
    assert_eq!(
        decode_rows(
            &answer(&request.to_json()),
            gpu_rows::reservation(&i.arch, &i.workload, &i.runtime, peak, 15)
        )
        .unwrap(),
        gpu_rows::rows(&i.arch, &i.workload, &i.runtime, peak, 15)
    );
}

/// A GPU table with fewest cards per strategy (a Llama in training on
/// several GPUs) answers through a worker as this thread computes it.
#[test]
fn a_fit_rows_request_gives_the_fewest_cards_of_every_strategy() {
    use headroom_core::parallel::Strategy;
    use headroom_core::workload::{Mode, Precision};
    let mut i = inputs_for("llama-3.2-1b");
    i.workload.mode = Mode::Training;
    i.workload.seq_len = 1024;
    i.workload.training.precision = Precision::Bf16;
    i.workload.parallel.strategy = Strategy::Fsdp2;
    i.workload.parallel.world_size = 8;
    let request = Request::FitRows {
        inputs: i.clone(),
        margin_pct: 10,
    };
    round_trips(&request);
    let rows = decode_rows(&answer(&request.to_json()), None).unwrap();
    assert_eq!(
        rows,
        gpu_rows::rows(&i.arch, &i.workload, &i.runtime, None, 10)
    );
    let strategies: Vec<Strategy> = rows[0].fewest.iter().map(|(s, _)| *s).collect();
    assert_eq!(
        strategies,
        [Strategy::Ddp, Strategy::Zero1, Strategy::Fsdp2]
    );
}

/// Every workload option the page can set survives the trip to a
/// worker (a field lost on the way would give a different curve).
#[test]
#[allow(clippy::field_reassign_with_default)]
fn a_request_keeps_every_workload_option() {
    use headroom_core::arch::Dtype;
    use headroom_core::workload::{
        Attention, InferenceKind, LoadPath, Logits, Lora, Mode, Optimizer, Precision,
    };
    let mut variants = Vec::new();
    let mut w = Workload::default();
    w.mode = Mode::Training;
    w.batch = 3;
    w.seq_len = 777;
    w.attention = Attention::Eager;
    w.training.optimizer = Optimizer::SgdMomentum;
    w.training.steps = 3;
    w.training.precision = Precision::Bf16;
    w.training.grad_checkpointing = true;
    w.training.optimizer_state_resident = true;
    w.training.use_cache = true;
    w.load = LoadPath::BuildThenCast;
    variants.push(w.clone());
    w.training.optimizer = Optimizer::Sgd;
    w.training.lora = Some(Lora {
        rank: 8,
        alpha: Some(16.0),
        target_modules: vec!["q_proj".into(), "v_proj".into()],
        dropout: None,
    });
    variants.push(w.clone());
    // A job on several GPUs, each option off its default.
    w.training.lora = None;
    w.parallel.strategy = headroom_core::parallel::Strategy::Fsdp2;
    w.parallel.world_size = 8;
    w.parallel.reshard_after_forward = false;
    w.parallel.param_dtype = Dtype::Fp32;
    w.parallel.reduce_dtype = Dtype::Bf16;
    w.parallel.bucket_cap_mb = 50;
    w.parallel.gradient_as_bucket_view = true;
    variants.push(w);
    let mut w = Workload::default();
    w.dtype = Dtype::Int4;
    w.inference.kind = InferenceKind::Forward;
    w.inference.logits = Logits::All;
    w.inference.kv_cache = false;
    w.inference.new_tokens = 5;
    w.inference.kv_dtype = Some(Dtype::Int8);
    variants.push(w);
    let mut fold = Workload::default();
    fold.dtype = Dtype::Fp32;
    fold.esmfold.stem_dtype = Dtype::Fp32;
    fold.esmfold.chunk_size = Some(64);
    fold.esmfold.num_recycles = Some(1);
    let mut vision = Workload::default();
    vision.image_size = Some(384);
    let mut runtime = RuntimeProfile::h200();
    runtime.process_ran_backward = false;
    runtime.cudnn_workspace_scale = 0.5;
    for (id, w) in variants
        .into_iter()
        .map(|w| ("llama-3.2-1b", w))
        .chain([("esmfold-v1", fold), ("vit-b-16", vision)])
    {
        let inputs = Inputs {
            arch: headroom_core::presets::find(id).unwrap().arch,
            workload: w,
            runtime: runtime.clone(),
        };
        round_trips(&Request::curve(inputs.clone(), vec![128, 4096]));
        round_trips(&Request::Estimate {
            inputs: inputs.clone(),
            length: 4096,
        });
        round_trips(&Request::FitRows {
            inputs,
            margin_pct: 0,
        });
    }
}

#[test]
fn a_bad_request_is_an_error_not_a_panic() {
    let r = read_estimates(&answer("{\"model\": 5}"), 1).unwrap_err();
    assert!(r.starts_with("worker request:"), "{r}");
    let r = read_estimates(&answer("not json"), 1).unwrap_err();
    assert!(r.starts_with("worker request:"), "{r}");
    assert!(read_estimates("O 1 2\tx", 1)
        .unwrap_err()
        .contains("malformed"));
    assert!(read_estimates("O 1 2 3 4 5 6 1 1 99 7\tx", 1)
        .unwrap_err()
        .contains("malformed"));
    assert!(read_estimates("", 2)
        .unwrap_err()
        .contains("0 results for 2"));
    // An estimate that failed at one length travels as its message.
    let results = vec![Ok(fake(100)), Err("too long".to_string())];
    assert_eq!(
        read_estimates(&encode_results(&results), 2).unwrap(),
        results
    );
}

/// A table sent through a worker's text reads back as the same table,
/// errors and lengths that do not fit included.
#[test]
fn rows_through_text_are_the_same_rows() {
    let peak = Some(Bytes(20_000_000_000));
    let i = inputs_for("gpt2");
    let mut table = gpu_rows::rows(&i.arch, &i.workload, &i.runtime, peak, 15);
    table[0].max_length = Ok(None);
    table[1].max_batch = Err("`workload.batch`: too large\tand\nmore".to_string());
    use headroom_core::parallel::Strategy;
    table[2].fewest = vec![
        (Strategy::Ddp, Ok(Some(16))),
        (Strategy::Zero1, Ok(None)),
        (
            Strategy::Fsdp2,
            Err("`workload.seq_len`: a\tb=c".to_string()),
        ),
    ];
    table[3].fewest = vec![(Strategy::Tp, Ok(Some(8)))];
    let reservation = gpu_rows::reservation(&i.arch, &i.workload, &i.runtime, peak, 15);
    let back = decode_rows(&encode_rows(&table), reservation).unwrap();
    table[1].max_batch = Err("`workload.batch`: too large and more".to_string());
    table[2].fewest[2].1 = Err("`workload.seq_len`: a b=c".to_string());
    assert_eq!(back, table);
    let bad_strategy = encode_rows(&table).replacen("tp=8", "pp=8", 1);
    assert!(decode_rows(&bad_strategy, reservation).is_err());
    assert!(decode_rows("1\t2\n", reservation).is_err());
    assert!(decode_rows(&"x\ty\n".repeat(CATALOG.len()), reservation).is_err());
}
