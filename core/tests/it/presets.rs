//! The preset catalog: ids, groups and parameter counts against published
//! or calibration totals.
#![allow(clippy::field_reassign_with_default)]

use headroom_core::arch::{Architecture, DecoderArch, MlpKind, NormKind};
use headroom_core::presets::{self, Preset};
use std::collections::HashSet;

fn preset(id: &str) -> Preset {
    presets::find(id).unwrap_or_else(|e| panic!("{e}"))
}

fn decoder(id: &str) -> DecoderArch {
    match preset(id).arch {
        Architecture::Decoder(a) => a,
        other => panic!("{id} is not a decoder: {other:?}"),
    }
}

/// The preset table of `docs/spec.md`, exactly (ResNet-50's count comes
/// from `families::cnn`, tested there).
#[test]
fn calibration_presets_match_the_readme_table() {
    let table: &[(&str, u64)] = &[
        ("esmfold-v1", 3_525_038_915),
        ("llama-3.1-8b", 8_030_261_248),
        ("llama-3.2-1b", 1_235_814_400),
        ("qwen2.5-7b", 7_615_616_512),
        ("mistral-7b-v0.3", 7_248_023_552),
        ("mixtral-8x7b", 46_702_792_704),
        ("gpt2", 124_439_808),
        ("bert-base-uncased", 109_514_298),
        ("esm2-t33-650m", 649_400_981),
        ("vit-b-16", 86_567_656),
    ];
    for (id, params) in table {
        assert_eq!(preset(id).arch.params(), *params, "{id}");
    }
    assert!(matches!(preset("resnet-50").arch, Architecture::Cnn(_)));
}

/// ESMFold's stem is an ESM-2 3B `EsmModel`: the README gives its count.
#[test]
fn esm2_3b_is_the_esmfold_stem() {
    assert_eq!(preset("esm2-t36-3b").arch.params(), 2_832_444_321);
    match preset("esmfold-v1").arch {
        Architecture::EsmFold(f) => {
            assert_eq!(Architecture::Encoder(f.stem), preset("esm2-t36-3b").arch)
        }
        _ => panic!("esmfold-v1 is not EsmFold"),
    }
}

/// Totals of the published checkpoints (safetensors metadata / HF model
/// cards; torchvision's documented count for ViT-L/16), which equal what
/// transformers 5.17 instantiates from the config.
#[test]
fn published_parameter_counts() {
    let table: &[(&str, u64)] = &[
        ("llama-3.2-3b", 3_212_749_824),
        ("llama-3.1-70b", 70_553_706_496),
        ("llama-3.1-405b", 405_853_388_800),
        ("qwen2.5-0.5b", 494_032_768),
        ("qwen2.5-1.5b", 1_543_714_304),
        ("qwen2.5-3b", 3_085_938_688),
        ("qwen2.5-14b", 14_770_033_664),
        ("qwen2.5-32b", 32_763_876_352),
        ("qwen2.5-72b", 72_706_203_648),
        ("mistral-nemo-12b", 12_247_782_400),
        // Qwen3: the published 0.6B to 32B; the smaller three tie their
        // embedding (q_norm and k_norm: 256 parameters a layer).
        ("qwen3-0.6b", 596_049_920),
        ("qwen3-1.7b", 1_720_574_976),
        ("qwen3-4b", 4_022_468_096),
        ("qwen3-8b", 8_190_735_360),
        ("qwen3-14b", 14_768_307_200),
        ("qwen3-32b", 32_762_123_264),
        // 128 experts of width 768 in each of 48 layers.
        ("qwen3-30b-a3b", 30_532_122_624),
        ("gemma-2-9b", 9_241_705_984),
        ("gemma-2-27b", 27_227_128_320),
        ("phi-3-mini-4k", 3_821_079_552),
        ("phi-3-medium-4k", 13_960_238_080),
        // BertForMaskedLM(bert-large-uncased): BertModel without pooler
        // (334,092,288) + MLM transform (1,049,600 + LayerNorm 2,048) + decoder bias 30,522.
        ("bert-large-uncased", 335_174_458),
        ("vit-l-16", 304_326_632),
        // torchvision's (and timm's) ResNet-34 and ResNet-152, as the H200
        // jobs of `measurements/channels-last/measured-2.jsonl` counted them.
        ("resnet-34", 21_797_672),
        ("resnet-152", 60_192_808),
        // timm's ViTs as `timm_infer.py` and `timm_train.py` counted them on
        // the H200 (`measurements/real-jobs-2/logs/`).
        ("vit-small-patch16-224", 22_050_664),
        ("vit-base-patch16-224", 86_567_656),
        ("vit-large-patch16-224", 304_326_632),
    ];
    for (id, params) in table {
        assert_eq!(preset(id).arch.params(), *params, "{id}");
    }
}

/// Qwen1.5-MoE-A2.7B as transformers 5.17's `Qwen2MoeForCausalLM` builds it:
/// per layer, attention with q/k/v biases (16,783,360), 60 experts
/// (gate_up 2x1408x2048 + down 2048x1408 each: 519,045,120), router
/// 60x2048 (122,880), shared expert 3x2048x5632 (34,603,008) and its gate
/// Linear(2048, 1, bias=False) (2,048), two RMSNorms (4,096).
#[test]
fn qwen_moe_counts_the_shared_expert_gate() {
    let a = decoder("qwen1.5-moe-a2.7b");
    assert_eq!(a.mlp_params(0), 519_045_120 + 122_880 + 34_603_008 + 2_048);
    assert_eq!(a.layer_params(0), 570_560_512);
    assert_eq!(a.params(), 14_315_784_192);
    // Active: 4 of 60 routed experts plus the shared one.
    let inactive = 56 * 3 * 2048 * 1408 * 24;
    assert_eq!(a.active_params(), 14_315_784_192 - inactive);
}

/// Mixtral as transformers 5.17 builds it: experts stored as
/// `gate_up_proj [8, 2*14336, 4096]` + `down_proj [8, 4096, 14336]`, router
/// `weight [8, 4096]` without bias, two RMSNorms per layer.
#[test]
fn mixtral_layer_breakdown() {
    let a = decoder("mixtral-8x7b");
    assert_eq!(a.attention_params(), 41_943_040);
    assert_eq!(a.mlp_params(0), 8 * 3 * 4096 * 14336 + 8 * 4096);
    assert_eq!(a.layer_params(0), 1_451_270_144);
    assert_eq!(
        a.active_params(),
        46_702_792_704 - 6 * 3 * 4096 * 14336 * 32
    );
}

#[test]
fn shapes_that_differ_from_hidden_over_heads() {
    assert_eq!(decoder("mistral-nemo-12b").head_dim, 128);
    assert_eq!(decoder("gemma-2-9b").head_dim, 256);
    assert_eq!(decoder("gemma-2-27b").head_dim, 128);
    assert_eq!(decoder("phi-3-mini-4k").head_dim, 96);
    let g = decoder("gemma-2-9b");
    assert!(g.tie_word_embeddings);
    assert_eq!(
        (g.vocab_size, g.extra_norms_per_layer, g.mlp, g.norm),
        (256000, 2, MlpKind::Gated, NormKind::GemmaRmsNorm)
    );
    assert!(g.scaled_embeddings && !g.fused_projections);
    let p = decoder("phi-3-mini-4k");
    assert!(p.fused_projections && !p.scaled_embeddings);
    for id in ["qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-3b"] {
        let q = decoder(id);
        assert!(q.qkv_bias && q.tie_word_embeddings, "{id}");
    }
    for id in [
        "qwen2.5-7b",
        "qwen2.5-14b",
        "qwen2.5-32b",
        "qwen2.5-72b",
        "qwen1.5-moe-a2.7b",
    ] {
        let q = decoder(id);
        assert!(q.qkv_bias && !q.tie_word_embeddings, "{id}");
    }
    for id in ["phi-3-mini-4k", "phi-3-medium-4k"] {
        let p = decoder(id);
        assert!(!p.tie_word_embeddings && p.vocab_size == 32064, "{id}");
    }
}

/// Sliding windows: Gemma 2 alternates (even layers slide), Phi-3 4k slides
/// everywhere, the calibration decoders never do.
#[test]
fn sliding_windows() {
    let g = decoder("gemma-2-9b");
    assert_eq!(g.layer_sliding_window(0), Some(4096));
    assert_eq!(g.layer_sliding_window(1), None);
    assert_eq!(g.layer_sliding_window(40), Some(4096));
    assert_eq!(g.layer_sliding_window(41), None);
    let p = decoder("phi-3-mini-4k");
    assert!((0..32).all(|l| p.layer_sliding_window(l) == Some(2047)));
    for id in [
        "llama-3.1-8b",
        "mistral-7b-v0.3",
        "mixtral-8x7b",
        "qwen2.5-7b",
        "gpt2",
        "mistral-nemo-12b",
    ] {
        let a = decoder(id);
        assert!(
            (0..a.num_layers).all(|l| a.layer_sliding_window(l).is_none()),
            "{id}"
        );
    }
}

#[test]
fn every_preset_is_valid_unique_and_grouped() {
    let all = presets::all();
    let mut ids = HashSet::new();
    for p in &all {
        assert!(ids.insert(p.id), "duplicate id {}", p.id);
        assert!(
            ["LLM", "MoE LLM", "Encoder", "Protein", "Vision"].contains(&p.group),
            "{}: group {}",
            p.id,
            p.group
        );
        assert!(!p.name.is_empty());
        headroom_core::readers::validate_arch(&p.arch).unwrap_or_else(|e| panic!("{}: {e}", p.id));
        let moe = matches!(&p.arch, Architecture::Decoder(d) if d.moe.is_some());
        assert_eq!(moe, p.group == "MoE LLM", "{}", p.id);
        assert_eq!(p.arch.is_vision(), p.group == "Vision", "{}", p.id);
        assert_eq!(presets::find(p.id).unwrap(), *p);
        assert_eq!(p.model().id, p.id);
    }
    for id in [
        "llama-3.1-70b",
        "llama-3.1-405b",
        "llama-3.2-3b",
        "qwen2.5-0.5b",
        "qwen2.5-72b",
        "mistral-nemo-12b",
        "gemma-2-9b",
        "gemma-2-27b",
        "phi-3-mini-4k",
        "phi-3-medium-4k",
        "qwen1.5-moe-a2.7b",
        "esm2-t12-35m",
        "esm2-t30-150m",
        "esm2-t36-3b",
        "esm2-t48-15b",
        "bert-large-uncased",
        "vit-l-16",
        "vit-small-patch16-224",
        "vit-base-patch16-224",
        "vit-large-patch16-224",
        "resnet-18",
        "resnet-34",
        "resnet-101",
        "resnet-152",
        "mobilenet-v2",
    ] {
        assert!(ids.contains(id), "missing {id}");
    }
}

#[test]
fn esm2_shapes() {
    for (id, h, l, heads) in [
        ("esm2-t12-35m", 480, 12, 20),
        ("esm2-t30-150m", 640, 30, 20),
        ("esm2-t33-650m", 1280, 33, 20),
        ("esm2-t36-3b", 2560, 36, 40),
        ("esm2-t48-15b", 5120, 48, 40),
    ] {
        match preset(id).arch {
            Architecture::Encoder(e) => {
                assert_eq!(
                    (
                        e.hidden_size,
                        e.num_layers,
                        e.num_heads,
                        e.intermediate_size,
                        e.vocab_size
                    ),
                    (h, l, heads, 4 * h, 33),
                    "{id}"
                );
                assert_eq!(
                    (e.max_position_embeddings, e.type_vocab_size),
                    (0, 0),
                    "{id}"
                );
            }
            _ => panic!("{id} is not an encoder"),
        }
    }
}

#[test]
fn unknown_preset_names_some_known_ones() {
    let err = presets::find("llama-9").unwrap_err().to_string();
    assert!(
        err.contains("unknown preset `llama-9`") && err.contains("llama-3.1-8b"),
        "{err}"
    );
}

/// Published Hugging Face Hub ids and the preset of their shapes.
const PUBLISHED_HUB_IDS: &[(&str, &str)] = &[
    ("meta-llama/Llama-3.2-1B", "llama-3.2-1b"),
    ("meta-llama/Llama-3.2-1B-Instruct", "llama-3.2-1b"),
    ("meta-llama/Llama-3.2-3B", "llama-3.2-3b"),
    ("meta-llama/Llama-3.2-3B-Instruct", "llama-3.2-3b"),
    ("meta-llama/Llama-3.1-8B", "llama-3.1-8b"),
    ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"),
    ("meta-llama/Meta-Llama-3.1-8B", "llama-3.1-8b"),
    ("meta-llama/Meta-Llama-3.1-8B-Instruct", "llama-3.1-8b"),
    ("meta-llama/Llama-3.1-70B", "llama-3.1-70b"),
    ("meta-llama/Llama-3.1-70B-Instruct", "llama-3.1-70b"),
    ("meta-llama/Meta-Llama-3.1-70B", "llama-3.1-70b"),
    ("meta-llama/Meta-Llama-3.1-70B-Instruct", "llama-3.1-70b"),
    ("meta-llama/Llama-3.1-405B", "llama-3.1-405b"),
    ("meta-llama/Llama-3.1-405B-Instruct", "llama-3.1-405b"),
    ("meta-llama/Meta-Llama-3.1-405B", "llama-3.1-405b"),
    ("meta-llama/Meta-Llama-3.1-405B-Instruct", "llama-3.1-405b"),
    ("Qwen/Qwen2.5-0.5B", "qwen2.5-0.5b"),
    ("Qwen/Qwen2.5-0.5B-Instruct", "qwen2.5-0.5b"),
    ("Qwen/Qwen2.5-1.5B", "qwen2.5-1.5b"),
    ("Qwen/Qwen2.5-1.5B-Instruct", "qwen2.5-1.5b"),
    ("Qwen/Qwen2.5-3B", "qwen2.5-3b"),
    ("Qwen/Qwen2.5-3B-Instruct", "qwen2.5-3b"),
    ("Qwen/Qwen2.5-7B", "qwen2.5-7b"),
    ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"),
    ("Qwen/Qwen2.5-14B", "qwen2.5-14b"),
    ("Qwen/Qwen2.5-14B-Instruct", "qwen2.5-14b"),
    ("Qwen/Qwen2.5-32B", "qwen2.5-32b"),
    ("Qwen/Qwen2.5-32B-Instruct", "qwen2.5-32b"),
    ("Qwen/Qwen2.5-72B", "qwen2.5-72b"),
    ("Qwen/Qwen2.5-72B-Instruct", "qwen2.5-72b"),
    ("Qwen/Qwen3-0.6B", "qwen3-0.6b"),
    ("Qwen/Qwen3-0.6B-Base", "qwen3-0.6b"),
    ("Qwen/Qwen3-1.7B", "qwen3-1.7b"),
    ("Qwen/Qwen3-1.7B-Base", "qwen3-1.7b"),
    ("Qwen/Qwen3-4B", "qwen3-4b"),
    ("Qwen/Qwen3-4B-Base", "qwen3-4b"),
    ("Qwen/Qwen3-8B", "qwen3-8b"),
    ("Qwen/Qwen3-8B-Base", "qwen3-8b"),
    ("Qwen/Qwen3-14B", "qwen3-14b"),
    ("Qwen/Qwen3-14B-Base", "qwen3-14b"),
    ("Qwen/Qwen3-32B", "qwen3-32b"),
    ("Qwen/Qwen3-30B-A3B", "qwen3-30b-a3b"),
    ("Qwen/Qwen3-30B-A3B-Base", "qwen3-30b-a3b"),
    ("Qwen/Qwen1.5-MoE-A2.7B", "qwen1.5-moe-a2.7b"),
    ("Qwen/Qwen1.5-MoE-A2.7B-Chat", "qwen1.5-moe-a2.7b"),
    ("mistralai/Mistral-7B-v0.3", "mistral-7b-v0.3"),
    ("mistralai/Mistral-7B-Instruct-v0.3", "mistral-7b-v0.3"),
    ("mistralai/Mistral-Nemo-Base-2407", "mistral-nemo-12b"),
    ("mistralai/Mistral-Nemo-Instruct-2407", "mistral-nemo-12b"),
    ("mistralai/Mixtral-8x7B-v0.1", "mixtral-8x7b"),
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b"),
    ("google/gemma-2-9b", "gemma-2-9b"),
    ("google/gemma-2-9b-it", "gemma-2-9b"),
    ("google/gemma-2-27b", "gemma-2-27b"),
    ("google/gemma-2-27b-it", "gemma-2-27b"),
    ("microsoft/Phi-3-mini-4k-instruct", "phi-3-mini-4k"),
    ("microsoft/Phi-3-medium-4k-instruct", "phi-3-medium-4k"),
    ("openai-community/gpt2", "gpt2"),
    ("google-bert/bert-base-uncased", "bert-base-uncased"),
    ("google-bert/bert-large-uncased", "bert-large-uncased"),
    ("facebook/esm2_t12_35M_UR50D", "esm2-t12-35m"),
    ("facebook/esm2_t30_150M_UR50D", "esm2-t30-150m"),
    ("facebook/esm2_t33_650M_UR50D", "esm2-t33-650m"),
    ("facebook/esm2_t36_3B_UR50D", "esm2-t36-3b"),
    ("facebook/esm2_t48_15B_UR50D", "esm2-t48-15b"),
    ("facebook/esmfold_v1", "esmfold-v1"),
];

#[test]
fn a_hub_id_names_its_preset() {
    use headroom_core::readers::Spec;
    for (hub, preset) in PUBLISHED_HUB_IDS {
        assert!(
            headroom_core::presets::find(preset).is_ok(),
            "{hub} -> {preset}"
        );
        let encoder = preset.starts_with("bert") || preset.starts_with("esm2");
        let inference = if encoder {
            r#","inference":{"kind":"forward","logits":"none"}"#
        } else {
            ""
        };
        let spec = format!(
            r#"{{"model":"{hub}","workload":{{"mode":"inference","seq_len":64{inference}}}}}"#
        );
        let parsed = Spec::from_json(&spec).unwrap_or_else(|e| panic!("{hub}: {e}"));
        assert_eq!(parsed.model.id, *preset);
    }
    let lower = Spec::from_json(
        r#"{"model":"qwen/qwen2.5-7b-instruct","workload":{"mode":"inference","seq_len":64}}"#,
    )
    .unwrap();
    assert_eq!(lower.model.id, "qwen2.5-7b");
    let timm = Spec::from_json(
        r#"{"model":"timm/resnet50.a1_in1k","workload":{"mode":"inference","image_size":224}}"#,
    )
    .unwrap();
    assert_eq!(timm.model.id, "resnet-50");
    let e = Spec::from_json(r#"{"model":"foo/bar","workload":{"mode":"inference"}}"#)
        .unwrap_err()
        .to_string();
    assert!(e.contains("`foo/bar`") && e.contains("hf_config"), "{e}");
}
