//! The core is built in layers, each importing only from its own layer and
//! those below it:
//!
//! 1. inputs: what the caller describes (`bytes`, `error`, `keys`, `arch`,
//!    `workload`, `parallel`, `runtime`, `gpus`, `presets`);
//! 2. replay engine: the allocator model and the tensor program replayed
//!    through it (`allocator`, `component`, `trace`, `graph`);
//! 3. `families`: each model family emitted op by op;
//! 4. answers: `estimate`, `search`;
//! 5. readers: `spec`, `hf_config`, `calibration` (JSON in, validated
//!    inputs out);
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
    ("readers", &["readers", "hf_config", "calibration"]),
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

/// The workspace's crates sit in layers too: every crate depends on the
/// core and on no other crate of the workspace, so the collector, the page
/// and the registry share the core's code and never each other's (the
/// registry serves without CUDA or an HTTP client in its build). The one
/// exception is `headroom-tests`, whose purpose is to read the collector's
/// output back with the core: its dev-dependencies may name the collector.
const CROSS_CRATE_TESTS: &str = "headroom-tests";

/// The workspace's members, read from the root `Cargo.toml`:
/// `(folder, package name)`.
fn workspace_members(root: &Path) -> Vec<(String, String)> {
    let manifest = fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let members_line = manifest
        .lines()
        .find(|l| l.trim_start().starts_with("members"))
        .expect("the root Cargo.toml lists its members");
    let list = members_line
        .split_once('[')
        .unwrap()
        .1
        .split(']')
        .next()
        .unwrap();
    list.split(',')
        .map(|m| m.trim().trim_matches('"').to_string())
        .filter(|m| !m.is_empty())
        .map(|folder| {
            let text = fs::read_to_string(root.join(&folder).join("Cargo.toml")).unwrap();
            let name = package_name(&text)
                .unwrap_or_else(|| panic!("{folder}/Cargo.toml has no package name"));
            (folder, name)
        })
        .collect()
}

fn package_name(manifest: &str) -> Option<String> {
    let mut in_package = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if in_package {
            if let Some(value) = line.strip_prefix("name") {
                let value = value.trim_start().strip_prefix('=')?.trim();
                return Some(value.trim_matches('"').to_string());
            }
        }
    }
    None
}

/// The dependencies a manifest names: `(table, crate key, the rest of the
/// line)`, for every `[dependencies]`, `[dev-dependencies]` and
/// `[build-dependencies]` table, target-specific ones included, and the
/// `[dependencies.NAME]` form.
fn dependencies(manifest: &str) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    let mut table: Option<String> = None;
    for line in manifest.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(header) = line.strip_prefix('[') {
            let header = header.trim_end_matches(']').trim();
            let kind = ["build-dependencies", "dev-dependencies", "dependencies"]
                .into_iter()
                .find(|kind| {
                    header == *kind
                        || header.ends_with(&format!(".{kind}"))
                        || header.contains(&format!("{kind}."))
                });
            table = kind.map(|_| header.to_string());
            // `[dependencies.NAME]`: the key is the header's last part.
            if let Some(kind) = kind {
                if let Some((_, name)) = header.rsplit_once(&format!("{kind}.")) {
                    out.push((
                        header.to_string(),
                        name.trim_matches('"').to_string(),
                        String::new(),
                    ));
                    table = None;
                }
            }
            continue;
        }
        if let Some(table) = &table {
            let key: String = line
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '-' || *c == '_')
                .collect();
            if !key.is_empty() {
                out.push((table.clone(), key, line.to_string()));
            }
        }
    }
    out
}

/// Each dependency of a workspace crate on a workspace crate other than the
/// core, as a message naming the manifest and the dependency.
fn crate_violations(root: &Path) -> Vec<String> {
    let members = workspace_members(root);
    let mut problems = Vec::new();
    for (folder, name) in &members {
        let manifest = fs::read_to_string(root.join(folder).join("Cargo.toml")).unwrap();
        for (table, key, rest) in dependencies(&manifest) {
            // A renamed dependency names its package; a path one its folder.
            let package = rest
                .split("package")
                .nth(1)
                .and_then(|p| p.split('"').nth(1))
                .unwrap_or(&key);
            let by_path = rest
                .split("path")
                .nth(1)
                .and_then(|p| p.split('"').nth(1))
                .map(|p| {
                    p.trim_start_matches("../")
                        .trim_end_matches('/')
                        .to_string()
                });
            let target = members
                .iter()
                .find(|(f, n)| n == package || by_path.as_deref() == Some(f.as_str()));
            let Some((_, target)) = target else {
                continue;
            };
            if target == "headroom-core" || target == name {
                continue;
            }
            if name == CROSS_CRATE_TESTS && table.contains("dev-dependencies") {
                continue;
            }
            problems.push(format!(
                "{folder}/Cargo.toml: [{table}] names the workspace crate `{target}`; allowed: headroom-core only"
            ));
        }
    }
    problems
}

#[test]
fn workspace_crates_depend_on_the_core_only() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let members = workspace_members(&root);
    assert!(
        members.iter().any(|(_, n)| n == "headroom-registry"),
        "the member list was not read: {members:?}"
    );
    let problems = crate_violations(&root);
    assert!(
        problems.is_empty(),
        "workspace crates depend on the core and on no other workspace crate:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_manifest_reader_sees_every_form_of_dependency() {
    let manifest = r#"
[package]
name = "x"

[dependencies]
calibration-collector = { path = "../calibration-collector" }
headroom-core.workspace = true

[target.'cfg(unix)'.dev-dependencies]
web = { package = "headroom-web", path = "../web" }

[build-dependencies.headroom-registry]
path = "../registry"
"#;
    let keys: Vec<String> = dependencies(manifest)
        .into_iter()
        .map(|(_, k, _)| k)
        .collect();
    assert_eq!(
        keys,
        [
            "calibration-collector",
            "headroom-core",
            "web",
            "headroom-registry"
        ]
    );
    assert_eq!(package_name(manifest).as_deref(), Some("x"));
}
