//! Golden tests: every preset's estimate for a typical workload, kept as a
//! readable table in `tests/golden/<preset>.txt`. A change in the model that
//! moves any byte shows up as a diff to review. To accept new numbers:
//! `HEADROOM_BLESS=1 cargo test -p headroom-core --test it golden::`.
#![allow(clippy::field_reassign_with_default)]

use headroom_core::arch::Architecture;
use headroom_core::workload::{InferenceKind, Logits, Mode};
use headroom_core::{estimate, presets, RuntimeProfile, Workload};
use std::fmt::Write;
use std::path::PathBuf;

/// The workloads each preset is pinned on.
fn workloads(arch: &Architecture) -> Vec<(&'static str, Workload)> {
    let mut out = Vec::new();
    match arch {
        Architecture::Decoder(_) => {
            let mut gen = Workload::default();
            gen.mode = Mode::Inference;
            gen.inference.kind = InferenceKind::Generate;
            gen.seq_len = 4096;
            out.push(("generate b1 L4096 bf16, 16 new tokens", gen.clone()));
            if arch.params() < 20_000_000_000 {
                let mut train = Workload::default();
                train.mode = Mode::Training;
                train.batch = 2;
                train.seq_len = 1024;
                out.push(("training amp_bf16 AdamW b2 L1024", train));
            }
        }
        Architecture::Encoder(e) => {
            let mut fwd = Workload::default();
            fwd.inference.kind = InferenceKind::Forward;
            fwd.inference.logits = if e.kind == headroom_core::arch::EncoderKind::Bert {
                Logits::All
            } else {
                Logits::None
            };
            fwd.dtype = headroom_core::arch::Dtype::Fp32;
            fwd.batch = 8;
            fwd.seq_len = 512;
            out.push(("forward b8 L512 fp32", fwd));
        }
        Architecture::EsmFold(_) => {
            let mut fold = Workload::default();
            fold.seq_len = 512;
            out.push(("fold L512, fp16 stem, unchunked", fold.clone()));
            fold.esmfold.chunk_size = Some(64);
            fold.seq_len = 1024;
            out.push(("fold L1024, fp16 stem, chunk 64", fold));
        }
        Architecture::Vit(_) | Architecture::Cnn(_) => {
            let mut inf = Workload::default();
            inf.dtype = headroom_core::arch::Dtype::Fp32;
            inf.batch = 32;
            inf.image_size = Some(224);
            out.push(("inference b32 224px fp32", inf.clone()));
            let mut train = inf;
            train.mode = Mode::Training;
            out.push(("training amp_bf16 AdamW b32 224px", train));
        }
    }
    out
}

fn render(id: &str) -> String {
    let preset = presets::find(id).unwrap();
    let mut text = String::new();
    writeln!(
        text,
        "{} ({}), {} parameters",
        preset.name,
        preset.id,
        preset.arch.params()
    )
    .unwrap();
    for (label, w) in workloads(&preset.arch) {
        writeln!(text, "\n## {label}").unwrap();
        match estimate(&preset.arch, &w, &RuntimeProfile::h200()) {
            Err(e) => writeln!(text, "error: {e}").unwrap(),
            Ok(e) => {
                writeln!(
                    text,
                    "driver peak    {:>16} B  ({})",
                    e.driver_peak.0, e.driver_peak
                )
                .unwrap();
                writeln!(text, "reserved peak  {:>16} B", e.reserved_peak.0).unwrap();
                writeln!(text, "allocated peak {:>16} B", e.allocated_peak.0).unwrap();
                writeln!(text, "peak op        {}", e.peak_op).unwrap();
                for s in &e.breakdown {
                    if s.bytes.0 > 0 {
                        writeln!(text, "  {:28} {:>16} B", s.component.label(), s.bytes.0).unwrap();
                    }
                }
            }
        }
    }
    text
}

#[test]
fn every_preset_matches_its_golden_file() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let bless = std::env::var_os("HEADROOM_BLESS").is_some();
    let mut failures = Vec::new();
    for preset in presets::all() {
        let actual = render(preset.id);
        let path = dir.join(format!("{}.txt", preset.id));
        if bless {
            std::fs::write(&path, &actual).unwrap();
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(expected) if expected == actual => {}
            Ok(expected) => failures.push(format!(
                "{}: golden differs\n--- expected\n{expected}\n--- actual\n{actual}",
                preset.id
            )),
            Err(_) => failures.push(format!("{}: missing {}", preset.id, path.display())),
        }
    }
    assert!(
        failures.is_empty(),
        "{}\n(rerun with HEADROOM_BLESS=1 to accept)",
        failures.join("\n")
    );
}
