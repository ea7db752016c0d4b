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
    s.view.to = 50000;
    s.margin_pct = 15;
    s.profile = "rtx4090".into();
    s.gpus = vec![];
    let q = round_trip(&s);
    assert_eq!(
        q,
        "model=llama-3.1-8b&batch=8&inference.kv_dtype=fp16&inference.new_tokens=64&seq_len=8192&x=lin&to=50000&gpus=,&margin=15&profile=rtx4090"
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
            "ignored unknown key `bogus` in the link",
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
        &[
            "ignored unknown key `%ZZ`",
            "ignored `==`: a part of the link without a key",
            "ignored seq_len=1e999",
        ],
    );
}

/// An unknown key is named, with the closest key the link may hold; a
/// spec's path of a workload field reads as the link's key.
#[test]
fn unknown_keys_are_named_with_the_closest_known_key() {
    let s = check_notes(
        "model=gpt2&workload.seqlen=4096&seqlen=2048&traning.steps=3&colour=red&moddel=gpt2&gpu=h200&batch=3",
        &[
            "ignored unknown key `workload.seqlen` in the link; did you mean `workload.seq_len`?",
            "ignored unknown key `seqlen` in the link; did you mean `seq_len`?",
            "ignored unknown key `traning.steps` in the link; did you mean `training.steps`?",
            "ignored unknown key `colour` in the link: this page has no such setting",
            "ignored unknown key `moddel` in the link; did you mean `model`?",
            "ignored unknown key `gpu` in the link; did you mean `gpus`?",
        ],
    );
    assert_eq!(s.model.id, "gpt2");
    assert_eq!(s.workload.batch, 3);
    assert_eq!(
        s.workload.seq_len,
        defaults::workload_for(&s.model.arch).seq_len
    );
    let s = check_notes(
        "model=gpt2&workload.seq_len=777&workload.inference.new_tokens=5",
        &[],
    );
    assert_eq!(s.workload.seq_len, 777);
    assert_eq!(s.workload.inference.new_tokens, 5);
    assert_eq!(
        s.to_query(),
        "model=gpt2&inference.new_tokens=5&seq_len=777"
    );
}

/// A key set twice: the last counts, and the note says so (a refused last
/// value is named, not the earlier one).
#[test]
fn a_key_set_twice_reads_the_last_and_says_so() {
    let s = check_notes(
        "model=gpt2&batch=4&batch=0&x=log&x=lin",
        &[
            "`batch` is set 2 times in the link; only the last, `batch=0`, is read",
            "ignored batch=0: `workload.batch`",
            "`x` is set 2 times in the link; only the last, `x=lin`, is read",
        ],
    );
    assert_eq!(s.workload.batch, 1);
    assert!(!s.view.log_x);
    let s = check_notes(
        "model=gpt2&batch=0&batch=4",
        &["`batch` is set 2 times in the link; only the last, `batch=4`, is read"],
    );
    assert_eq!(s.workload.batch, 4);
}

/// Escapes that spell no text, and text that could hide or reorder a
/// note, are named or escaped; nothing from the link is quoted at length.
#[test]
fn garbled_and_hostile_text_in_a_link_is_named_safely() {
    let (s, notes) = AppState::from_query(
        "model=gpt2&%FF%FE=1&x=%FF&batch=%E2%80%AE9&foo%1B%5B31m=1&seq_len=12%00",
        IDS,
    );
    let all = notes.join("\n");
    for needle in [
        "ignored `%FF%FE=1`: its %-escapes are not UTF-8 text",
        "ignored `x=%FF`: its %-escapes are not UTF-8 text",
        "ignored batch=\\u{202e}9",
        "ignored unknown key `foo\\u{1b}[31m`",
        "ignored seq_len=12\\u{0}",
    ] {
        assert!(all.contains(needle), "notes lack `{needle}`:\n{all}");
    }
    assert!(!all.contains(['\u{0}', '\u{1b}', '\u{202e}']), "{all}");
    assert_eq!(s.model.id, "gpt2");
    // A long value is quoted in part.
    let long = "9".repeat(3000);
    let (_, notes) = AppState::from_query(&format!("batch={long}&model={long}"), IDS);
    assert_eq!(notes.len(), 2, "{notes:?}");
    for note in &notes {
        assert!(note.chars().count() < 700, "{note}");
        assert!(
            note.contains(&format!("{}…", "9".repeat(QUOTE_CHARS))),
            "{note}"
        );
    }
}

/// Over the length the page reads, a link is not read at all; under it,
/// thousands of bad parts are read quickly and listed in a dozen notes.
#[test]
fn an_enormous_link_is_refused_and_a_long_one_read_quickly() {
    let huge = format!("model=gpt2&batch=3&{}=1", "a".repeat(100_000));
    let (s, notes) = AppState::from_query(&huge, IDS);
    assert_eq!(s, AppState::default());
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].contains("100,021 characters long, over the 8,192 this page reads"),
        "{notes:?}"
    );
    let (s, _) = AppState::from_query(&"b".repeat(MAX_LINK_CHARS), IDS);
    assert_eq!(s.model.id, DEFAULT_PRESET);
    for part in ["k=1&", "batch=0&", "batch=1&", "=&", "%FF=1&", "a.x=1&"] {
        let mut q = String::from("model=gpt2&");
        while q.len() + part.len() <= MAX_LINK_CHARS {
            q.push_str(part);
        }
        let started = std::time::Instant::now();
        let (s, notes) = AppState::from_query(&q, IDS);
        let took = started.elapsed();
        assert!(took.as_millis() < 2000, "{part}: {took:?}");
        assert!(notes.len() <= MAX_NOTES, "{part}: {} notes", notes.len());
        assert_eq!(s.model.id, "gpt2", "{part}");
        if notes.len() == MAX_NOTES {
            assert!(
                notes[MAX_NOTES - 1].contains("more parts of the link"),
                "{notes:?}"
            );
        }
    }
}

/// A dotted key thousands of levels deep (all a link of the largest length
/// can hold) is refused by name, without exhausting the stack.
#[test]
fn a_deeply_dotted_key_is_refused_by_name() {
    let deep = format!("model=custom&a.family=decoder&a.{}y=1", "x.".repeat(4000));
    let (s, notes) = AppState::from_query(&deep, IDS);
    assert_eq!(s.model.id, DEFAULT_PRESET);
    assert!(
        notes[0].contains("ignored `a.x.x.x.") && notes[0].contains("a key of 4,002 dotted parts"),
        "{notes:?}"
    );
    let deep = format!("model=gpt2&training.{}y=1", "x.".repeat(4000));
    let (s, notes) = AppState::from_query(&deep, IDS);
    assert_eq!(s.model.id, "gpt2");
    assert!(notes[0].contains("dotted parts"), "{notes:?}");
}

/// A custom architecture's unknown key is the core's message, with the
/// link's key; architecture keys beside a preset are named.
#[test]
fn a_custom_architecture_s_unknown_key_shows_the_core_s_message() {
    let mut s = AppState::for_model(presets::find("gpt2").unwrap().model());
    s.model.id = "custom".into();
    s.model.name = "mine".into();
    let q = s.to_query().replace("a.hidden_size=", "a.hidden_sise=");
    check_notes(
        &q,
        &["ignored the custom model (the link's `a.hidden_sise`): `model.hidden_sise`: unknown key; did you mean `hidden_size`?"],
    );
    check_notes(
        "model=gpt2&a.family=decoder&a.hidden_size=3",
        &["ignored `a.family` and the link's other architecture keys"],
    );
    let long = s
        .to_query()
        .replace("name=mine", &format!("name={}", "n".repeat(500)));
    let (back, notes) = AppState::from_query(&long, IDS);
    assert_eq!(
        back.model.name.chars().count(),
        MAX_NAME_CHARS + 1,
        "{notes:?}"
    );
    assert!(
        notes.iter().any(|n| n.contains("name was cut")),
        "{notes:?}"
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
        "memory_format",
        "padded",
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

#[test]
fn a_registry_profile_and_the_registry_s_address_round_trip() {
    let mut s = AppState {
        profile: crate::registry::profile_id(7),
        ..AppState::default()
    };
    let q = round_trip(&s);
    assert_eq!(q, "model=llama-3.1-8b&profile=registry-7");
    s.registry = Some("http://gpu-box:8090".into());
    let q = round_trip(&s);
    assert_eq!(
        q,
        "model=llama-3.1-8b&profile=registry-7&registry=http%3A%2F%2Fgpu-box%3A8090"
    );
    // The address as typed reads too, its trailing `/` dropped.
    let (typed, notes) =
        AppState::from_query("profile=registry-7&registry=http://gpu-box:8090/", IDS);
    assert!(notes.is_empty(), "{notes:?}");
    assert_eq!(typed, s);
}

#[test]
fn a_bad_registry_address_or_profile_id_falls_back_with_a_note() {
    let (s, notes) = AppState::from_query("registry=javascript:alert(1)&profile=registry-07", IDS);
    assert_eq!(s.registry, None);
    assert_eq!(s.profile, calib::BUILTIN_ID);
    assert_eq!(notes.len(), 2, "{notes:?}");
    assert!(notes[0].contains("ignored registry=javascript:alert(1): not an http"));
    assert!(notes[1].contains("ignored profile=registry-07"));
    let (_, notes) = AppState::from_query("registy=http://h:1", IDS);
    assert!(notes[0].contains("did you mean `registry`?"), "{notes:?}");
}

/// The open panels travel in the link; a link from before they existed
/// opens with them closed, and a value the page cannot read is noted.
#[test]
fn open_panels_round_trip_and_old_links_open_them_closed() {
    let mut s = AppState::default();
    s.panels.advise = Some("rtx-4090".into());
    s.panels.timeline = true;
    let q = round_trip(&s);
    assert_eq!(q, "model=llama-3.1-8b&advise=rtx-4090&timeline=1");
    let (old, notes) = AppState::from_query("model=gpt2&batch=3&x=lin", &[]);
    assert!(notes.is_empty(), "{notes:?}");
    assert_eq!(old.panels, Panels::default());
    check_notes(
        "advise=tpu-v9&timeline=yes",
        &[
            "ignored advise=tpu-v9: not a GPU of the catalog",
            "ignored timeline=yes: allowed: 1 (open) or 0",
        ],
    );
    let (closed, _) = AppState::from_query("timeline=0", &[]);
    assert!(!closed.panels.timeline);
}
