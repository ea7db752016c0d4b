//! Links round-trip, bad parts fall back with a note, any link opens.

use super::*;
use headroom_core::arch::Dtype;
use headroom_core::workload::{Lora, Mode, Optimizer};

const IDS: &[&str] = &["h200", "rtx4090"];

#[track_caller]
fn round_trip(state: &AppState) -> String {
    let q = state.to_query();
    let (back, notes) = AppState::from_query(&q, IDS);
    assert!(notes.is_empty(), "{q}: {notes:?}");
    assert_eq!(&back, state, "{q}");
    q
}

#[test]
fn default_state_is_a_short_link() {
    assert_eq!(round_trip(&AppState::default()), "model=llama-3.1-8b");
    assert_eq!(AppState::from_query("", IDS), (AppState::default(), vec![]));
}

#[test]
fn a_changed_workload_round_trips_readably() {
    let mut s = AppState::default();
    s.workload.batch = 8;
    s.workload.seq_len = 8192;
    s.workload.inference.new_tokens = 64;
    s.workload.inference.kv_dtype = Some(Dtype::Fp16);
    s.view.log_x = false;
    s.view.to = 65536;
    s.margin_pct = 15;
    s.profile = "rtx4090".into();
    s.gpus = vec![];
    let q = round_trip(&s);
    assert_eq!(
        q,
        "model=llama-3.1-8b&batch=8&inference.kv_dtype=fp16&inference.new_tokens=64&seq_len=8192&x=lin&to=65536&gpus=,&margin=15&profile=rtx4090"
    );
}

#[test]
fn training_with_lora_round_trips() {
    let mut s = AppState::default();
    s.workload.mode = Mode::Training;
    s.workload.training.optimizer = Optimizer::SgdMomentum;
    s.workload.training.lora = Some(Lora {
        rank: 16,
        alpha: Some(32.0),
        target_modules: vec!["q_proj".into()],
        dropout: None,
    });
    s.workload.dtype = Dtype::Int4;
    round_trip(&s);
    s.workload.training.lora.as_mut().unwrap().target_modules =
        vec!["q_proj".into(), "v_proj".into()];
    round_trip(&s);
}

#[test]
fn every_preset_and_a_custom_model_round_trip() {
    for p in presets::all() {
        let mut s = AppState::default();
        s.set_model(p.model());
        s.workload.batch += 1;
        round_trip(&s);
        let mut custom = s.clone();
        custom.model.id = "custom".into();
        custom.model.name = format!("my {}", p.name);
        round_trip(&custom);
    }
}

#[test]
fn switching_kind_resets_the_workload_but_not_within_a_kind() {
    let mut s = AppState::default();
    s.workload.batch = 4;
    s.set_model(presets::find("qwen2.5-7b").unwrap().model());
    assert_eq!(s.workload.batch, 4);
    s.set_model(presets::find("resnet-50").unwrap().model());
    assert_eq!(s.workload.batch, 64);
    assert_eq!(s.workload.image_size, Some(224));
}

#[track_caller]
fn check_notes(q: &str, expect: &[&str]) -> AppState {
    let (state, notes) = AppState::from_query(q, IDS);
    let all = notes.join("\n");
    for needle in expect {
        assert!(
            all.contains(needle),
            "notes for `{q}` lack `{needle}`:\n{all}"
        );
    }
    assert_eq!(notes.len(), expect.len(), "{q}: {notes:?}");
    state
}

#[test]
fn bad_parts_fall_back_with_a_note_and_good_parts_stay() {
    let s = check_notes(
        "model=gpt2&batch=0&seq_len=777&x=sideways&margin=500&gpus=h200,tpu9&bogus=1&profile=nope",
        &[
            "ignored batch=0: `workload.batch`",
            "ignored x=sideways",
            "ignored margin=500",
            "ignored GPU `tpu9`",
            "ignored bogus=1",
            "ignored profile=nope",
        ],
    );
    assert_eq!(s.model.id, "gpt2");
    assert_eq!(s.workload.seq_len, 777);
    assert_eq!(s.workload.batch, 1);
    assert_eq!(s.gpus, vec!["h200".to_string()]);

    let s = check_notes(
        "model=gpt-9",
        &["ignored model=gpt-9: `model`: unknown preset"],
    );
    assert_eq!(s.model.id, DEFAULT_PRESET);
    check_notes(
        "model=custom&a.family=decoder&a.hidden_size=8",
        &["ignored the custom model"],
    );
    check_notes("mode=flying", &["ignored mode=flying: `workload.mode`"]);
    check_notes(
        "training.lora.rank=0&mode=training",
        &["ignored training.lora.rank=0"],
    );
    check_notes("from=5000&to=10", &["from` must be below `to`"]);
    check_notes("profile=loaded", &["loaded from a file"]);
    check_notes(
        "%ZZ=%&&==&seq_len=1e999",
        &["ignored %ZZ=%", "ignored =", "ignored seq_len=1e999"],
    );
}

#[cfg(not(target_arch = "wasm32"))]
use proptest::prelude::*;

/// A query string made of real keys (workload paths, view keys, custom
/// architecture keys) and values that are valid, out of range, of the
/// wrong kind or not text at all, percent-escaped or not.
#[cfg(not(target_arch = "wasm32"))]
fn messy_query() -> impl Strategy<Value = String> {
    let key = prop::sample::select(vec![
        "model",
        "batch",
        "seq_len",
        "image_size",
        "dtype",
        "mode",
        "attention",
        "x",
        "from",
        "to",
        "gpus",
        "margin",
        "profile",
        "inference.kind",
        "inference.new_tokens",
        "inference.kv_dtype",
        "inference.logits",
        "training.optimizer",
        "training.lora.rank",
        "training.precision",
        "training.steps",
        "esmfold.chunk_size",
        "parallel.strategy",
        "parallel.world_size",
        "parallel.reshard_after_forward",
        "a.family",
        "a.hidden_size",
        "a.num_layers",
        "a.num_heads",
        "a.blocks",
        "a.topology",
        "a.stem",
        "bogus",
        "",
    ]);
    let value = prop_oneof![
        prop::sample::select(vec![
            "0",
            "1",
            "-1",
            "7",
            "4096",
            "4194304",
            "4294967296",
            "1e999",
            "NaN",
            "true",
            "null",
            "[]",
            "{}",
            "llama-3.1-8b",
            "esmfold-v1",
            "resnet-50",
            "custom",
            "decoder",
            "cnn",
            "res_net",
            "training",
            "generate",
            "fsdp2",
            "ddp",
            "tp",
            "8",
            "log",
            "lin",
            "h200,tpu9",
            "%ZZ",
            "%E2%9C%93",
            "a%26b%3Dc",
            "",
        ])
        .prop_map(str::to_string),
        "[ -~]{0,12}",
        "\\PC{0,6}",
    ];
    prop::collection::vec((key, value), 0..12).prop_map(|pairs| {
        pairs
            .into_iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("&")
    })
}

#[cfg(not(target_arch = "wasm32"))]
proptest! {
    /// Any link opens: whatever cannot be read falls back with a note,
    /// the state's workload is one the core accepts or rejects by name
    /// (never a panic), and the link the page writes for that state
    /// reads back as the same state.
    #[test]
    fn any_link_opens_and_its_rewritten_link_is_stable(q in messy_query()) {
        let ids = ["h200"];
        let (state, _notes) = AppState::from_query(&q, &ids);
        let rt = headroom_core::RuntimeProfile::h200();
        let _ = headroom_core::estimate(&state.model.arch, &state.workload, &rt);
        let again = state.to_query();
        let (back, notes) = AppState::from_query(&again, &ids);
        prop_assert!(notes.is_empty(), "{again}: {notes:?}");
        prop_assert_eq!(back, state);
    }
}

/// A job on several GPUs: the strategy, world size and FSDP2's resharding
/// travel in the link as the core's keys, and come back.
#[test]
fn jobs_on_several_gpus_round_trip() {
    use headroom_core::parallel::Strategy;
    use headroom_core::workload::Precision;
    let mut s = AppState::default();
    s.workload.mode = Mode::Training;
    s.workload.training.precision = Precision::Bf16;
    s.workload.parallel.strategy = Strategy::Fsdp2;
    s.workload.parallel.world_size = 8;
    s.workload.parallel.reshard_after_forward = false;
    let q = round_trip(&s);
    assert_eq!(
        q,
        "model=llama-3.1-8b&mode=training&parallel.reshard_after_forward=false&parallel.strategy=fsdp2&parallel.world_size=8&training.precision=bf16"
    );
    for strategy in [Strategy::Ddp, Strategy::Zero1] {
        s.workload.parallel.strategy = strategy;
        s.workload.parallel.reshard_after_forward = true;
        let q = round_trip(&s);
        assert!(
            q.contains(&format!("parallel.strategy={}", strategy.key())),
            "{q}"
        );
    }
    let mut tp = AppState::default();
    tp.workload.parallel.strategy = Strategy::Tp;
    tp.workload.parallel.world_size = 4;
    assert_eq!(
        round_trip(&tp),
        "model=llama-3.1-8b&parallel.strategy=tp&parallel.world_size=4"
    );
}

/// Links made before jobs on several GPUs open on one GPU.
#[test]
fn old_links_open_on_one_gpu() {
    let (s, notes) = AppState::from_query("model=llama-3.1-8b&mode=training&batch=2", IDS);
    assert!(notes.is_empty(), "{notes:?}");
    assert_eq!(
        s.workload.parallel,
        headroom_core::parallel::ParallelOptions::default()
    );
    assert_eq!(s.workload.parallel.world_size, 1);
    assert_eq!(s.workload.batch, 2);
}

/// A strategy the mode does not take, or a bad world size, is dropped with
/// the core's message; the rest of the link stays.
#[test]
fn bad_parallel_parts_fall_back_with_a_note() {
    let s = check_notes(
        "model=llama-3.1-8b&batch=3&parallel.strategy=fsdp2&parallel.world_size=8",
        &[
            "ignored parallel.strategy=fsdp2: `workload.parallel.strategy`",
            "ignored parallel.world_size=8: `workload.parallel.strategy`",
        ],
    );
    assert_eq!(s.workload.batch, 3);
    assert_eq!(
        s.workload.parallel.strategy,
        headroom_core::parallel::Strategy::None
    );
    assert_eq!(s.workload.parallel.world_size, 1);
    let s = check_notes(
        "model=llama-3.1-8b&mode=training&parallel.strategy=ddp&parallel.world_size=0",
        &["ignored parallel.world_size=0: `workload.parallel.world_size`"],
    );
    assert_eq!(
        s.workload.parallel.strategy,
        headroom_core::parallel::Strategy::Ddp
    );
    assert_eq!(s.workload.parallel.world_size, 1);
    check_notes(
        "parallel.strategy=sideways",
        &["ignored parallel.strategy=sideways: `workload.parallel.strategy`"],
    );
}
