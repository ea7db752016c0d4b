//! The core is built in layers, each importing only from its own layer and
//! those below it:
//!
//! 1. inputs: what the caller describes (`bytes`, `error`, `keys`, `arch`,
//!    `workload`, `parallel`, `runtime`, `gpus`, `presets`);
//! 2. replay engine: the allocator model and the tensor program replayed
//!    through it (`allocator`, `component`, `trace`, `graph`);
//! 3. `families`: each model family emitted op by op;
//! 4. answers: `estimate`, `search`;
//! 5. readers: `spec`, `hf_config` (JSON in, validated inputs out);
//! 6. reports: `report` (the estimate as the front ends report it).
//!
//! This test reads the core's sources and fails on any `use crate::...` or
//! `crate::x::` path that reaches a higher layer, and on a top-level module
//! that no layer lists.

use std::fs;
use std::path::{Path, PathBuf};

const LAYERS: &[(&str, &[&str])] = &[
    (
        "inputs",
        &[
            "bytes", "error", "keys", "arch", "workload", "parallel", "runtime", "gpus", "presets",
        ],
    ),
    (
        "replay engine",
        &["allocator", "component", "timeline", "trace", "graph"],
    ),
    ("families", &["families"]),
    ("answers", &["estimate", "search", "uncertainty", "advice"]),
    ("readers", &["spec", "hf_config"]),
    ("reports", &["report"]),
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS
        .iter()
        .position(|(_, modules)| modules.contains(&module))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a source file belongs to (`None` for `lib.rs`).
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let relative = file.strip_prefix(src).unwrap();
    let first = relative.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (name != "lib").then(|| name.to_string())
}

/// The top-level modules a line of code names through `crate::`.
fn crate_paths(line: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("crate::") {
        let before = &rest[..at];
        let after = &rest[at + "crate::".len()..];
        rest = after;
        // `some_crate::x` is another crate's path, not this one's.
        if before
            .chars()
            .last()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
        {
            continue;
        }
        if let Some(group) = after.strip_prefix('{') {
            // `use crate::{a::X, b};`
            let group = group.split('}').next().unwrap_or("");
            for item in group.split(',') {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    found.push(name);
                }
            }
        } else {
            let name: String = after
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                found.push(name);
            }
        }
    }
    found
}

/// Items re-exported at the crate root (`crate::Bytes`): the module they
/// come from, read from `lib.rs`'s `pub use` lines.
fn root_reexports(lib: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for line in lib.lines() {
        let Some(path) = line.trim().strip_prefix("pub use ") else {
            continue;
        };
        let path = path.trim_end_matches(';');
        let Some((module, items)) = path.split_once("::") else {
            continue;
        };
        let items = items.trim_start_matches('{').trim_end_matches('}');
        for item in items.split(',') {
            let item = item.trim().rsplit("::").next().unwrap_or("").to_string();
            if !item.is_empty() {
                out.push((item, module.to_string()));
            }
        }
    }
    out
}

fn violations() -> Vec<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = fs::read_to_string(src.join("lib.rs")).unwrap();
    let reexports = root_reexports(&lib);
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut problems = Vec::new();
    for file in &files {
        let Some(module) = module_of(&src, file) else {
            continue;
        };
        let repo = src.parent().and_then(Path::parent).unwrap();
        let shown = file.strip_prefix(repo).unwrap().display();
        let Some(layer) = layer_of(&module) else {
            problems.push(format!(
                "{shown}: module `{module}` is in no layer; add it to LAYERS in core/tests/it/layering.rs"
            ));
            continue;
        };
        let text = fs::read_to_string(file).unwrap();
        for (number, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            for target in crate_paths(code) {
                let target = reexports
                    .iter()
                    .find(|(item, _)| *item == target)
                    .map_or(target, |(_, module)| module.clone());
                let Some(target_layer) = layer_of(&target) else {
                    continue;
                };
                if target_layer > layer {
                    problems.push(format!(
                        "{shown}:{}: `{module}` ({}) imports `crate::{target}` ({}), a layer above it",
                        number + 1,
                        LAYERS[layer].0,
                        LAYERS[target_layer].0,
                    ));
                }
            }
        }
    }
    problems
}

#[test]
fn modules_import_only_from_their_layer_or_below() {
    let problems = violations();
    assert!(
        problems.is_empty(),
        "the core's layers run inputs -> replay engine -> families -> answers -> readers -> reports; \
         these imports run the other way:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_scanner_sees_every_form_of_crate_path() {
    assert_eq!(crate_paths("use crate::graph::{Graph, Value};"), ["graph"]);
    assert_eq!(
        crate_paths("use crate::{estimate::Estimate, trace};"),
        ["estimate", "trace"]
    );
    assert_eq!(
        crate_paths("let x = crate::families::cnn::params(a);"),
        ["families"]
    );
    assert_eq!(crate_paths("f($crate::keys::one_of(K))"), ["keys"]);
    assert!(crate_paths("use headroom_crate::x;").is_empty());
}
