//! Arbitrary JSON, arbitrary text and mutated real inputs through every
//! reader of the product: specs, measurement files and calibration
//! profiles. None may panic; each answers with a value or an error.
//!
//! The test run tries 512 inputs per reader; the fuzzing run tries 100,000:
//!
//! ```sh
//! PROPTEST_CASES=100000 cargo test --release -p headroom-tests --test it fuzz_inputs::
//! ```

use calibration_collector::cases::{classify, parse_records};
use calibration_collector::profile::{self, Identity};
use headroom_core::readers::Spec;
use proptest::prelude::*;
use serde_json::{Map, Value};

/// Any JSON value, up to a few levels deep, leaning on the shapes and words
/// specs use so that it reaches past the first check.
fn any_json() -> impl Strategy<Value = Value> {
    let words = prop_oneof![
        Just("model"),
        Just("workload"),
        Just("runtime"),
        Just("mode"),
        Just("training"),
        Just("inference"),
        Just("batch"),
        Just("seq_len"),
        Just("lora"),
        Just("parallel"),
        Just("family"),
        Just("decoder"),
        Just("hf_config"),
        Just("gpt2"),
        Just("llama-3.1-8b"),
        Just("points"),
        Just("measured"),
        Just("driver_peak"),
        Just("case"),
        Just("schema_version"),
        Just("allocator"),
        Just("runtime_overheads"),
    ]
    .prop_map(String::from);
    let key = prop_oneof![words.clone(), ".{0,12}"];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        (0u64..70_000).prop_map(Value::from),
        words.prop_map(Value::from),
        ".{0,16}".prop_map(Value::from),
    ];
    leaf.prop_recursive(5, 64, 8, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key.clone(), inner), 0..8)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// Real inputs: specs, measured cases and a profile kept in the
/// repository (read once).
fn seeds() -> &'static [Value] {
    static SEEDS: std::sync::OnceLock<Vec<Value>> = std::sync::OnceLock::new();
    SEEDS.get_or_init(read_seeds)
}

fn read_seeds() -> Vec<Value> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut out = Vec::new();
    for example in [
        "examples/llama-8b-lora.json",
        "examples/custom-config.json",
        "examples/esmfold-1024.json",
    ] {
        let text = std::fs::read_to_string(root.join(example)).unwrap();
        out.push(serde_json::from_str(&text).unwrap());
    }
    let public =
        std::fs::read_to_string(root.join("measurements/public/h200-public.jsonl")).unwrap();
    out.extend(
        public
            .lines()
            .take(12)
            .map(|l| serde_json::from_str::<Value>(l).unwrap()),
    );
    let profile =
        std::fs::read_to_string(root.join("calibration/profiles/h200-2026-11-30.json")).unwrap();
    out.push(serde_json::from_str(&profile).unwrap());
    out
}

/// `value` with the leaf or member at `path` (indices into the nested
/// objects and arrays, taken modulo their lengths) replaced by `with`, or
/// removed when `with` is `None`.
fn mutate(value: &mut Value, path: &[usize], with: Option<Value>) {
    let (first, rest) = match path.split_first() {
        Some(split) => split,
        None => {
            *value = with.unwrap_or(Value::Null);
            return;
        }
    };
    match value {
        Value::Object(map) if !map.is_empty() => {
            let key = map.keys().nth(first % map.len()).unwrap().clone();
            if rest.is_empty() && with.is_none() {
                map.remove(&key);
            } else {
                mutate(map.get_mut(&key).unwrap(), rest, with);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            let n = items.len();
            mutate(&mut items[first % n], rest, with);
        }
        other => *other = with.unwrap_or(Value::Null),
    }
}

/// Every reader on one value: as a spec, as a measurement file (one line
/// and a whole document) and as a profile.
fn read_everything(value: &Value) {
    let _ = Spec::from_value(value);
    let text = value.to_string();
    let _ = Spec::from_json(&text);
    if let Ok(records) = parse_records("fuzz.jsonl", &text) {
        for record in &records {
            let _ = classify(record);
        }
    }
    let _ = profile::from_value(value, &Identity::default());
    let _ = profile::parse(&text, &Identity::default());
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(512),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn arbitrary_json_is_answered(value in any_json()) {
        read_everything(&value);
    }

    #[test]
    fn mutated_real_inputs_are_answered(
        seed in any::<prop::sample::Index>(),
        path in prop::collection::vec(any::<usize>(), 0..6),
        replacement in prop::option::of(any_json()),
    ) {
        let seeds = seeds();
        let mut value = seeds[seed.index(seeds.len())].clone();
        mutate(&mut value, &path, replacement);
        read_everything(&value);
    }

    #[test]
    fn arbitrary_text_is_answered(text in "(?s).{0,400}", prefix in prop::sample::select(vec!["", "{", "[", "{\"model\": ", "{\"points\": ["])) {
        let text = format!("{prefix}{text}");
        let _ = Spec::from_json(&text);
        let _ = parse_records("fuzz.jsonl", &text);
        let _ = profile::parse(&text, &Identity::default());
    }
}
