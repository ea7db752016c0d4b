//! The page's whole state, and its form in the URL.
//!
//! A link reads like
//! `?model=llama-3.1-8b&batch=8&seq_len=8192&inference.new_tokens=64&x=log`:
//! the preset id (or `a.*` keys holding a custom architecture), then only the
//! workload fields that differ from that model's defaults (dotted serde
//! paths of the core's `Workload`, whose enum values are the core's keys:
//! `training.optimizer=sgd` is SGD with momentum, as in a spec; see
//! `crate::vocab`), then the view (`x`, `from`, `to`,
//! `gpus`, `margin`, `profile`, and `registry`: the profile registry's
//! address, when it is not this page's origin; see `crate::registry`).
//! Anything that cannot be read falls back to
//! its default and is listed in a note the page shows: an unknown key (with
//! the closest known one), a key set twice (the last counts), escapes that
//! are not UTF-8, a value out of range. A spec's path of a workload field
//! (`workload.seq_len`) reads as the link's key (`seq_len`).
//!
//! The page reads links of at most [`MAX_LINK_CHARS`] characters (its own
//! are well under 2,000); a longer one is not read at all. The notes quote
//! at most [`QUOTE_CHARS`] characters of a key or value, control and
//! invisible characters escaped (`crate::format::shown`), and at most
//! [`MAX_NOTES`] notes are listed.

use crate::calib;
use crate::defaults::{self, DEFAULT_MARGIN_PCT, DEFAULT_PRESET, MAX_MARGIN_PCT};
use crate::format;
use crate::import::read_model_json;
use crate::query;
use crate::registry;
use headroom_core::arch::Model;
use headroom_core::error::Error;
use headroom_core::gpus;
use headroom_core::presets;
use headroom_core::readers::known_keys;
use headroom_core::readers::parse_workload;
use headroom_core::workload::{Workload, MAX_IMAGE_SIZE, MAX_SEQ_LEN};
use serde_json::Value;

/// How the chart is laid out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View {
    /// Logarithmic length axis.
    pub log_x: bool,
    /// Shortest length on the chart.
    pub from: u32,
    /// Longest length on the chart.
    pub to: u32,
}

/// Everything the page shows is a function of this.
#[derive(Clone, Debug, PartialEq)]
pub struct AppState {
    /// The model (a preset, or `id == "custom"`).
    pub model: Model,
    /// What runs.
    pub workload: Workload,
    /// Chart layout.
    pub view: View,
    /// GPU ids drawn as lines on the chart.
    pub gpus: Vec<String>,
    /// Fragmentation margin of the fit table, percent.
    pub margin_pct: u32,
    /// Calibration profile id.
    pub profile: String,
    /// The profile registry's address from the link (`None`: this page's
    /// origin).
    pub registry: Option<String>,
    /// Which of the results' panels are open.
    pub panels: Panels,
}

/// The results' panels a link opens (`advise=GPU`, `timeline=1`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Panels {
    /// The catalog GPU whose "what would make it fit" is open.
    pub advise: Option<String>,
    /// The chart of memory over the job is open.
    pub timeline: bool,
}

impl Panels {
    /// The link's pairs for the open panels.
    fn to_pairs(&self, pairs: &mut Vec<(String, String)>) {
        if let Some(gpu) = &self.advise {
            pairs.push((ADVISE_KEY.into(), gpu.clone()));
        }
        if self.timeline {
            pairs.push((TIMELINE_KEY.into(), "1".into()));
        }
    }

    /// Reads the panels' keys of a link; what cannot be read leaves its
    /// panel closed, with a note.
    fn read(advise: Option<&str>, timeline: Option<&str>, notes: &mut Vec<String>) -> Panels {
        let mut panels = Panels::default();
        if let Some(id) = advise {
            if gpus::find(id).is_some() {
                panels.advise = Some(id.to_string());
            } else {
                notes.push(format!(
                    "ignored {ADVISE_KEY}={}: not a GPU of the catalog",
                    quote(id)
                ));
            }
        }
        match timeline {
            None | Some("0") => {}
            Some("1") => panels.timeline = true,
            Some(other) => notes.push(format!(
                "ignored {TIMELINE_KEY}={}: allowed: 1 (open) or 0",
                quote(other)
            )),
        }
        panels
    }
}

/// Query keys that are not workload fields.
const VIEW_KEYS: [&str; 10] = [
    "model",
    "name",
    "x",
    "from",
    "to",
    "gpus",
    "margin",
    registry::LINK_KEY,
    ADVISE_KEY,
    TIMELINE_KEY,
];
const ADVISE_KEY: &str = "advise";
const TIMELINE_KEY: &str = "timeline";
const PROFILE_KEY: &str = "profile";
const ARCH_PREFIX: &str = "a.";
/// A spec's prefix of workload fields, accepted before a workload key.
const SPEC_PREFIX: &str = "workload.";

/// Longest link query the page reads, in characters as the address bar
/// holds them (percent escapes included). A link the page writes is well
/// under 2,000 (a custom architecture's fields included).
pub const MAX_LINK_CHARS: usize = 8192;

/// Most notes listed about one link; a last note counts the others.
pub const MAX_NOTES: usize = 12;

/// Most characters of a key or value a note quotes.
pub const QUOTE_CHARS: usize = 60;

/// Most characters of a note (a core message may quote a value).
const NOTE_CHARS: usize = 600;

/// Most dotted parts of a key read (the page's own keys have at most four:
/// `a.moe.num_experts`); a deeper one would build a value as deep.
pub const MAX_KEY_PARTS: usize = 8;

/// Longest model name kept (from a link or a config.json), in characters.
pub const MAX_NAME_CHARS: usize = 120;

/// `text` from a link, to quote in a note.
fn quote(text: &str) -> String {
    format::shown(text, QUOTE_CHARS)
}

/// `name` cut to [`MAX_NAME_CHARS`] characters.
pub fn clip_name(name: &str) -> String {
    match name.char_indices().nth(MAX_NAME_CHARS) {
        Some((at, _)) => format!("{}…", &name[..at]),
        None => name.to_string(),
    }
}

/// Every workload key a link may hold: the core's keys of `workload` and
/// of its objects, dotted (`training.lora.rank`), objects included
/// (`training.lora=null` turns LoRA off).
fn workload_keys() -> Vec<String> {
    let mut out: Vec<String> = known_keys::WORKLOAD.iter().map(|k| k.to_string()).collect();
    for (object, keys) in [
        ("inference", known_keys::INFERENCE),
        ("training", known_keys::TRAINING),
        ("training.lora", known_keys::LORA),
        ("parallel", known_keys::PARALLEL),
        ("esmfold", known_keys::ESMFOLD),
    ] {
        out.extend(keys.iter().map(|k| format!("{object}.{k}")));
    }
    out
}

/// The note for a key no link holds, with the closest known key.
fn unknown_key_note(key: &str, workload: &[String]) -> String {
    // `workload.seqlen`: the spec's prefix, then a misspelt workload key.
    let (prefix, rest) = match key.strip_prefix(SPEC_PREFIX) {
        Some(rest) => (SPEC_PREFIX, rest),
        None => ("", key),
    };
    let mut known: Vec<&str> = workload.iter().map(String::as_str).collect();
    if prefix.is_empty() {
        known.extend(VIEW_KEYS);
        known.push(PROFILE_KEY);
    }
    match known_keys::closest(rest, &known) {
        Some(near) => format!(
            "ignored unknown key `{}` in the link; did you mean `{prefix}{near}`?",
            quote(key)
        ),
        None => format!(
            "ignored unknown key `{}` in the link: this page has no such setting",
            quote(key)
        ),
    }
}

/// The link's `key=value` pairs that the page can read, decoded: each part
/// that is not text, has no key or an unknown key is dropped with a note,
/// and of a key set more than once only the last is kept (with a note).
fn read_pairs(query_text: &str, notes: &mut Vec<String>) -> Vec<(String, String)> {
    let workload = workload_keys();
    let is_workload = |k: &str| workload.iter().any(|w| w == k);
    let mut pairs: Vec<(String, String)> = Vec::new();
    for raw in query::split(query_text) {
        let (k, v) = raw.split_once('=').unwrap_or((raw, ""));
        let (Some(key), Some(value)) = (query::decode_utf8(k), query::decode_utf8(v)) else {
            notes.push(format!(
                "ignored `{}`: its %-escapes are not UTF-8 text",
                quote(raw)
            ));
            continue;
        };
        if key.is_empty() {
            notes.push(format!(
                "ignored `{}`: a part of the link without a key",
                quote(raw)
            ));
            continue;
        }
        let parts = key.split('.').count();
        if parts > MAX_KEY_PARTS {
            notes.push(format!(
                "ignored `{}`: a key of {} dotted parts, and this page's have at most {MAX_KEY_PARTS}",
                quote(&key),
                format::int(parts as u64)
            ));
            continue;
        }
        let key = match key.strip_prefix(SPEC_PREFIX) {
            Some(rest) if is_workload(rest) => rest.to_string(),
            _ => key,
        };
        let known = VIEW_KEYS.contains(&key.as_str())
            || key == PROFILE_KEY
            || key.starts_with(ARCH_PREFIX)
            || is_workload(&key);
        if known {
            pairs.push((key, value));
        } else {
            notes.push(unknown_key_note(&key, &workload));
        }
    }
    // The last of a key counts (as a form's query would). The list is
    // scanned for each key rather than counted in a map: a link is at most
    // MAX_LINK_CHARS long, so this is quick, and a map type is 1 KB more
    // of the page's bundle.
    let mut kept = Vec::with_capacity(pairs.len());
    for (at, (k, v)) in pairs.iter().enumerate() {
        if pairs[at + 1..].iter().any(|(later, _)| later == k) {
            continue;
        }
        let n = pairs.iter().filter(|(other, _)| other == k).count();
        if n > 1 {
            notes.push(format!(
                "`{}` is set {n} times in the link; only the last, `{}={}`, is read",
                quote(k),
                quote(k),
                quote(v)
            ));
        }
        kept.push((k.clone(), v.clone()));
    }
    kept
}

impl Default for AppState {
    fn default() -> Self {
        let model = presets::find(DEFAULT_PRESET)
            .expect("the default preset exists")
            .model();
        AppState::for_model(model)
    }
}

impl AppState {
    /// Defaults for a model: its workload, chart range, every catalog GPU.
    pub fn for_model(model: Model) -> AppState {
        let workload = defaults::workload_for(&model.arch);
        let (from, to, log_x) =
            defaults::range_for(&model.arch, workload.length(model.arch.is_vision()));
        AppState {
            model,
            workload,
            view: View { log_x, from, to },
            gpus: default_gpus(),
            margin_pct: DEFAULT_MARGIN_PCT,
            profile: calib::BUILTIN_ID.into(),
            registry: None,
            panels: Panels::default(),
        }
    }

    /// Switches the model; the workload and range restart from the new
    /// model's defaults when its kind changes, and are kept otherwise.
    pub fn set_model(&mut self, model: Model) {
        if defaults::kind_key(&model.arch) != defaults::kind_key(&self.model.arch) {
            let fresh = AppState::for_model(model);
            self.workload = fresh.workload;
            self.view = fresh.view;
            self.model = fresh.model;
        } else {
            self.model = model;
        }
        // Padding is modelled for some decoders only.
        if !defaults::applies(&self.model.arch).padding {
            self.workload.padded = false;
        }
    }

    /// True when the x axis is an image size.
    pub fn vision(&self) -> bool {
        self.model.arch.is_vision()
    }

    /// The chosen length (the marker on the chart).
    pub fn length(&self) -> u32 {
        self.workload.length(self.vision())
    }

    /// The URL query (no leading `?`).
    pub fn to_query(&self) -> String {
        let mut pairs: Vec<(String, String)> = Vec::new();
        if self.model.id == "custom" {
            pairs.push(("model".into(), "custom".into()));
            pairs.push(("name".into(), self.model.name.clone()));
            let arch = serde_json::to_value(&self.model.arch).unwrap_or(Value::Null);
            let mut leaves = Vec::new();
            query::flatten("", &arch, &mut leaves);
            pairs.extend(
                leaves
                    .into_iter()
                    .map(|(k, v)| (format!("{ARCH_PREFIX}{k}"), v)),
            );
        } else {
            pairs.push(("model".into(), self.model.id.clone()));
        }
        pairs.extend(workload_diff(
            &defaults::workload_for(&self.model.arch),
            &self.workload,
        ));
        let (from, to, log_x) = defaults::range_for(&self.model.arch, self.length());
        if self.view.log_x != log_x {
            pairs.push((
                "x".into(),
                if self.view.log_x { "log" } else { "lin" }.into(),
            ));
        }
        if self.view.from != from {
            pairs.push(("from".into(), self.view.from.to_string()));
        }
        if self.view.to != to {
            pairs.push(("to".into(), self.view.to.to_string()));
        }
        if self.gpus != default_gpus() {
            let mut list = self.gpus.join(",");
            if self.gpus.len() <= 1 {
                list.push(',');
            }
            pairs.push(("gpus".into(), list));
        }
        if self.margin_pct != DEFAULT_MARGIN_PCT {
            pairs.push(("margin".into(), self.margin_pct.to_string()));
        }
        if self.profile != calib::BUILTIN_ID {
            pairs.push((PROFILE_KEY.into(), self.profile.clone()));
        }
        if let Some(base) = &self.registry {
            pairs.push((registry::LINK_KEY.into(), base.clone()));
        }
        self.panels.to_pairs(&mut pairs);
        query::join(&pairs)
    }

    /// Reads a URL query. What cannot be read takes its default and gets a
    /// line in the returned notes. Never panics.
    pub fn from_query(query_text: &str, profile_ids: &[&str]) -> (AppState, Vec<String>) {
        let query_text = query_text.trim_start_matches(['?', '#']);
        if query_text.len() > MAX_LINK_CHARS {
            let note = format!(
                "the link's query is {} characters long, over the {} this page reads: none of it was read, and the page opens with its defaults",
                format::int(query_text.len() as u64),
                format::int(MAX_LINK_CHARS as u64)
            );
            return (AppState::default(), vec![note]);
        }
        let (state, mut notes) = Self::read_query(query_text, profile_ids);
        for note in &mut notes {
            *note = format::shown(note, NOTE_CHARS);
        }
        if notes.len() > MAX_NOTES {
            let more = notes.len() - (MAX_NOTES - 1);
            notes.truncate(MAX_NOTES - 1);
            notes.push(format!(
                "and {} more parts of the link that could not be read",
                format::int(more as u64)
            ));
        }
        (state, notes)
    }

    fn read_query(query_text: &str, profile_ids: &[&str]) -> (AppState, Vec<String>) {
        let mut notes = Vec::new();
        let pairs = read_pairs(query_text, &mut notes);
        let get = |key: &str| {
            pairs
                .iter()
                .rev()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        };

        let model = read_model(&pairs, get("model"), get("name"), &mut notes);
        let mut state = AppState::for_model(model);

        let workload_pairs: Vec<(&str, &str)> = pairs
            .iter()
            .filter(|(k, _)| {
                !VIEW_KEYS.contains(&k.as_str()) && k != PROFILE_KEY && !k.starts_with(ARCH_PREFIX)
            })
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        state.workload = read_workload(&state.workload, &workload_pairs, &mut notes);
        // The chart's range follows the job the link describes.
        let (from, to, log_x) = defaults::range_for(&state.model.arch, state.length());
        state.view = View { log_x, from, to };

        let vision = state.vision();
        let limit = if vision { MAX_IMAGE_SIZE } else { MAX_SEQ_LEN } as u32;
        if let Some(x) = get("x") {
            match x {
                "log" => state.view.log_x = true,
                "lin" | "linear" => state.view.log_x = false,
                other => notes.push(format!("ignored x={}: allowed: log or lin", quote(other))),
            }
        }
        let mut read_len = |key: &str, slot: &mut u32| {
            if let Some(v) = get(key) {
                match v.parse::<u32>() {
                    Ok(n) if (1..=limit).contains(&n) => *slot = n,
                    _ => notes.push(format!(
                        "ignored {key}={}: allowed: an integer from 1 to {limit}",
                        quote(v)
                    )),
                }
            }
        };
        let (mut from, mut to) = (state.view.from, state.view.to);
        read_len("from", &mut from);
        read_len("to", &mut to);
        if from < to {
            state.view.from = from;
            state.view.to = to;
        } else {
            notes.push(format!(
                "ignored from={from}, to={to}: `from` must be below `to`"
            ));
        }
        if let Some(list) = get("gpus") {
            let mut chosen = Vec::new();
            for id in list.split(',').filter(|s| !s.is_empty()) {
                if gpus::find(id).is_some() {
                    if !chosen.iter().any(|c| c == id) {
                        chosen.push(id.to_string());
                    }
                } else {
                    let known: Vec<&str> = gpus::CATALOG.iter().map(|g| g.id).collect();
                    notes.push(format!(
                        "ignored GPU `{}`: not in the catalog ({})",
                        quote(id),
                        known.join(", ")
                    ));
                }
            }
            state.gpus = chosen;
        }
        if let Some(m) = get("margin") {
            match m.parse::<u32>() {
                Ok(n) if n <= MAX_MARGIN_PCT => state.margin_pct = n,
                _ => notes.push(format!(
                    "ignored margin={}: allowed: an integer from 0 to {MAX_MARGIN_PCT} (percent)",
                    quote(m)
                )),
            }
        }
        state.panels = Panels::read(get(ADVISE_KEY), get(TIMELINE_KEY), &mut notes);
        if let Some(base) = get(registry::LINK_KEY) {
            match registry::parse_base(base) {
                Ok(base) => state.registry = Some(base),
                Err(e) => notes.push(format!(
                    "ignored {}={}: {e}",
                    registry::LINK_KEY,
                    quote(base)
                )),
            }
        }
        if let Some(p) = get(PROFILE_KEY) {
            // A registry's profile is fetched once the page is up.
            if profile_ids.contains(&p) || registry::profile_number(p).is_some() {
                state.profile = p.to_string();
            } else if p == calib::LOADED_ID {
                notes.push(
                    "the link was made with a profile loaded from a file, which links cannot carry; using the built-in H200 profile"
                        .into(),
                );
            } else {
                notes.push(format!(
                    "ignored profile={}: not bundled here ({})",
                    quote(p),
                    profile_ids.join(", ")
                ));
            }
        }
        (state, notes)
    }
}

/// GPU lines drawn unless the link says otherwise: the cards people most
/// often size for (those of them the catalog has; all when it has none).
pub fn default_gpus() -> Vec<String> {
    const COMMON: [&str; 4] = ["rtx-4090", "a100-80gb", "h100-80gb", "h200"];
    let picked: Vec<String> = gpus::CATALOG
        .iter()
        .filter(|g| COMMON.contains(&g.id))
        .map(|g| g.id.to_string())
        .collect();
    if picked.is_empty() {
        gpus::CATALOG.iter().map(|g| g.id.to_string()).collect()
    } else {
        picked
    }
}

fn read_model(
    pairs: &[(String, String)],
    id: Option<&str>,
    name: Option<&str>,
    notes: &mut Vec<String>,
) -> Model {
    let default = || {
        presets::find(DEFAULT_PRESET)
            .expect("the default preset exists")
            .model()
    };
    let arch_pairs: Vec<(&str, &str)> = pairs
        .iter()
        .filter_map(|(k, v)| k.strip_prefix(ARCH_PREFIX).map(|k| (k, v.as_str())))
        .collect();
    match id {
        None if arch_pairs.is_empty() => default(),
        Some("custom") | None => {
            let mut value = query::unflatten(arch_pairs.iter().copied());
            if let Some(name) = name {
                let clipped = clip_name(name);
                if clipped != name {
                    notes.push(format!(
                        "the model's name was cut to its first {MAX_NAME_CHARS} characters"
                    ));
                }
                query::set_path(&mut value, "name", Value::String(clipped));
            }
            match read_model_json(Some(&value)) {
                Ok(m) => m,
                Err(e) => {
                    // The core names the field as in a spec (`model.x`);
                    // the link's key is `a.x`.
                    let key = e
                        .field()
                        .and_then(|f| f.strip_prefix("model."))
                        .map(|f| format!(" (the link's `{ARCH_PREFIX}{}`)", quote(f)))
                        .unwrap_or_default();
                    notes.push(format!(
                        "ignored the custom model{key}: {}; showing {DEFAULT_PRESET}",
                        readable(&e)
                    ));
                    default()
                }
            }
        }
        Some(id) => match presets::find(id) {
            Ok(p) => {
                if let Some((k, _)) = arch_pairs.first() {
                    notes.push(format!(
                        "ignored `{ARCH_PREFIX}{}` and the link's other architecture keys: they describe a custom model, and the link names the preset `{}`",
                        quote(k),
                        quote(id)
                    ));
                }
                p.model()
            }
            Err(e) => {
                notes.push(format!(
                    "ignored model={}: {}; showing {DEFAULT_PRESET}",
                    quote(id),
                    readable(&e)
                ));
                default()
            }
        },
    }
}

/// A core message about the link (which may quote its values).
fn readable(e: &Error) -> String {
    format::shown(&e.to_string(), NOTE_CHARS)
}

/// The error's field as a workload key (`workload.inference.new_tokens` →
/// `inference.new_tokens`).
fn error_key(e: &Error) -> Option<String> {
    let field = match e {
        Error::InvalidField { field, .. } | Error::MissingField { field, .. } => field,
        _ => return None,
    };
    field.strip_prefix("workload.").map(str::to_string)
}

/// Applies URL pairs to `base`, dropping (with a note) each pair the core
/// rejects, until what is left reads.
fn read_workload(base: &Workload, pairs: &[(&str, &str)], notes: &mut Vec<String>) -> Workload {
    let base_value = serde_json::to_value(base).expect("a workload serialises");
    let mut pairs: Vec<(&str, &str)> = pairs.to_vec();
    loop {
        let mut value = base_value.clone();
        for (k, v) in &pairs {
            query::set_path(&mut value, k, query::leaf(v));
        }
        let parsed = parse_workload(Some(&value)).and_then(|w| w.validate().map(|()| w));
        match parsed {
            Ok(w) => {
                // Keys the parser silently ignored are unknown fields.
                let mut known = Vec::new();
                query::flatten(
                    "",
                    &serde_json::to_value(&w).unwrap_or(Value::Null),
                    &mut known,
                );
                for (k, v) in &pairs {
                    let ok = known.iter().any(|(kk, _)| {
                        kk == k
                            || kk.starts_with(&format!("{k}."))
                            || k.starts_with(&format!("{kk}."))
                    });
                    if !ok {
                        notes.push(format!(
                            "ignored {k}={}: not a setting of this page",
                            quote(v)
                        ));
                    }
                }
                return w;
            }
            Err(e) => {
                let key = error_key(&e);
                let find = |key: &str| {
                    pairs.iter().position(|(k, _)| {
                        *k == key
                            || key.starts_with(&format!("{k}."))
                            || k.starts_with(&format!("{key}."))
                    })
                };
                // A world size above 1 without a strategy is the strategy's
                // error, but the world size is what the link set.
                let hit = key.as_deref().and_then(|key| {
                    find(key).or_else(|| {
                        (key == "parallel.strategy")
                            .then(|| find("parallel.world_size"))
                            .flatten()
                    })
                });
                match hit {
                    Some(i) => {
                        let (k, v) = pairs.remove(i);
                        notes.push(format!("ignored {k}={}: {}", quote(v), readable(&e)));
                    }
                    None => {
                        notes.push(format!(
                            "ignored the workload settings of the link: {}",
                            readable(&e)
                        ));
                        return base.clone();
                    }
                }
            }
        }
    }
}

/// Workload fields of `w` that differ from `base`, as query pairs.
pub fn workload_diff(base: &Workload, w: &Workload) -> Vec<(String, String)> {
    let mut a = Vec::new();
    let mut b = Vec::new();
    query::flatten(
        "",
        &serde_json::to_value(base).unwrap_or(Value::Null),
        &mut a,
    );
    query::flatten("", &serde_json::to_value(w).unwrap_or(Value::Null), &mut b);
    b.into_iter().filter(|leaf| !a.contains(leaf)).collect()
}

#[cfg(test)]
mod tests;
