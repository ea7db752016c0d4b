//! The page's whole state, and its form in the URL.
//!
//! A link reads like
//! `?model=llama-3.1-8b&batch=8&seq_len=8192&inference.new_tokens=64&x=log`:
//! the preset id (or `a.*` keys holding a custom architecture), then only the
//! workload fields that differ from that model's defaults (dotted serde
//! paths of the core's `Workload`, whose enum values are the core's keys:
//! `training.optimizer=sgd` is SGD with momentum, as in a spec; see
//! `crate::vocab`), then the view (`x`, `from`, `to`,
//! `gpus`, `margin`, `profile`). Anything that cannot be read falls back to
//! its default and is listed in a note the page shows.

use crate::calib;
use crate::defaults::{self, DEFAULT_MARGIN_PCT, DEFAULT_PRESET, MAX_MARGIN_PCT};
use crate::query;
use headroom_core::arch::Model;
use headroom_core::error::Error;
use headroom_core::gpus;
use headroom_core::presets;
use headroom_core::spec::{parse_model, parse_workload};
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
}

/// Query keys that are not workload fields.
const VIEW_KEYS: [&str; 7] = ["model", "name", "x", "from", "to", "gpus", "margin"];
const PROFILE_KEY: &str = "profile";
const ARCH_PREFIX: &str = "a.";

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
        let (from, to, log_x) = defaults::range_for(&model.arch);
        AppState {
            model,
            workload,
            view: View { log_x, from, to },
            gpus: default_gpus(),
            margin_pct: DEFAULT_MARGIN_PCT,
            profile: calib::BUILTIN_ID.into(),
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
        let (from, to, log_x) = defaults::range_for(&self.model.arch);
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
        query::join(&pairs)
    }

    /// Reads a URL query. What cannot be read takes its default and gets a
    /// line in the returned notes. Never panics.
    pub fn from_query(query_text: &str, profile_ids: &[&str]) -> (AppState, Vec<String>) {
        let pairs = query::parse(query_text);
        let mut notes = Vec::new();
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

        let vision = state.vision();
        let limit = if vision { MAX_IMAGE_SIZE } else { MAX_SEQ_LEN } as u32;
        if let Some(x) = get("x") {
            match x {
                "log" => state.view.log_x = true,
                "lin" | "linear" => state.view.log_x = false,
                other => notes.push(format!("ignored x={other}: allowed: log or lin")),
            }
        }
        let mut read_len = |key: &str, slot: &mut u32| {
            if let Some(v) = get(key) {
                match v.parse::<u32>() {
                    Ok(n) if (1..=limit).contains(&n) => *slot = n,
                    _ => notes.push(format!(
                        "ignored {key}={v}: allowed: an integer from 1 to {limit}"
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
                        "ignored GPU `{id}`: not in the catalog ({})",
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
                    "ignored margin={m}: allowed: an integer from 0 to {MAX_MARGIN_PCT} (percent)"
                )),
            }
        }
        if let Some(p) = get(PROFILE_KEY) {
            if profile_ids.contains(&p) {
                state.profile = p.to_string();
            } else if p == calib::LOADED_ID {
                notes.push(
                    "the link was made with a profile loaded from a file, which links cannot carry; using the built-in H200 profile"
                        .into(),
                );
            } else {
                notes.push(format!(
                    "ignored profile={p}: not bundled here ({})",
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
                query::set_path(&mut value, "name", Value::String(name.into()));
            }
            match parse_model(Some(&value)) {
                Ok(m) => m,
                Err(e) => {
                    notes.push(format!(
                        "ignored the custom model: {}; showing {DEFAULT_PRESET}",
                        readable(&e)
                    ));
                    default()
                }
            }
        }
        Some(id) => match presets::find(id) {
            Ok(p) => p.model(),
            Err(e) => {
                notes.push(format!("ignored model={id}: {e}; showing {DEFAULT_PRESET}"));
                default()
            }
        },
    }
}

fn readable(e: &Error) -> String {
    e.to_string()
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
                        notes.push(format!("ignored {k}={v}: not a setting of this page"));
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
                        notes.push(format!("ignored {k}={v}: {e}"));
                    }
                    None => {
                        notes.push(format!("ignored the workload settings of the link: {e}"));
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
