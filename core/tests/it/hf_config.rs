//! Import of published Hugging Face `config.json` files (fixtures copied from
//! the model repositories) and the errors bad configs get.
#![allow(clippy::field_reassign_with_default)]

use headroom_core::arch::{Architecture, NormKind};
use headroom_core::hf_config::{import, import_value};
use headroom_core::presets;
use headroom_core::Error;

fn fixture(name: &str) -> String {
    let path = format!(
        "{}/tests/fixtures/hf/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[track_caller]
fn imported(name: &str) -> Architecture {
    import(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Each published config imports to exactly the preset's shapes, and so to
/// the checkpoint's parameter count.
#[test]
fn published_configs_import_to_the_presets() {
    let table: &[(&str, &str, u64)] = &[
        ("Llama-3.1-8B", "llama-3.1-8b", 8_030_261_248),
        ("Mistral-7B-v0.3", "mistral-7b-v0.3", 7_248_023_552),
        ("Mixtral-8x7B-v0.1", "mixtral-8x7b", 46_702_792_704),
        ("Qwen2.5-7B", "qwen2.5-7b", 7_615_616_512),
        ("gemma-2-9b", "gemma-2-9b", 9_241_705_984),
        ("Phi-3-mini-4k-instruct", "phi-3-mini-4k", 3_821_079_552),
        ("gpt2", "gpt2", 124_439_808),
        ("bert-base-uncased", "bert-base-uncased", 109_514_298),
        ("esm2_t33_650M_UR50D", "esm2-t33-650m", 649_400_981),
        ("Qwen1.5-MoE-A2.7B", "qwen1.5-moe-a2.7b", 14_315_784_192),
        ("Qwen3-8B", "qwen3-8b", 8_190_735_360),
        ("Qwen3-30B-A3B", "qwen3-30b-a3b", 30_532_122_624),
    ];
    for (file, preset, params) in table {
        let arch = imported(file);
        assert_eq!(arch.params(), *params, "{file}");
        assert_eq!(arch, presets::find(preset).unwrap().arch, "{file}");
    }
}

#[test]
fn per_type_details() {
    let Architecture::Decoder(g) = imported("gemma-2-9b") else {
        panic!()
    };
    assert_eq!(
        (
            g.head_dim,
            g.extra_norms_per_layer,
            g.sliding_window,
            g.full_attention_every
        ),
        (256, 2, 4096, 2)
    );
    assert!(g.tie_word_embeddings, "gemma2 ties by default");
    assert_eq!(g.norm, NormKind::GemmaRmsNorm, "gemma2's RMSNorm");
    assert!(g.scaled_embeddings, "gemma2 scales its embeddings");
    assert!(
        g.attn_logit_softcapping && g.final_logit_softcapping,
        "gemma2 caps its attention scores and its logits"
    );
    let Architecture::Decoder(p) = imported("Phi-3-mini-4k-instruct") else {
        panic!()
    };
    assert_eq!((p.sliding_window, p.full_attention_every), (2047, 0));
    let Architecture::Decoder(q) = imported("Qwen2.5-7B") else {
        panic!()
    };
    assert!(q.qkv_bias && q.sliding_window == 0);
    let Architecture::Decoder(m) = imported("Mixtral-8x7B-v0.1") else {
        panic!()
    };
    let moe = m.moe.unwrap();
    assert_eq!(
        (
            moe.num_experts,
            moe.experts_per_token,
            moe.expert_intermediate_size
        ),
        (8, 2, 14336)
    );
    let Architecture::Encoder(e) = imported("esm2_t33_650M_UR50D") else {
        panic!()
    };
    assert_eq!(
        e.max_position_embeddings, 0,
        "rotary ESM has no learned positions"
    );
}

/// Keys the published configs leave out take transformers' class defaults.
#[test]
fn defaults_follow_transformers() {
    let arch = |json: &str| import(json).unwrap_or_else(|e| panic!("{json}: {e}"));
    let base = r#""hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100"#;

    // llama: kv heads = heads, untied, head_dim = hidden / heads.
    let Architecture::Decoder(a) = arch(&format!(r#"{{"model_type": "llama", {base}}}"#)) else {
        panic!()
    };
    assert_eq!(
        (
            a.num_kv_heads,
            a.head_dim,
            a.tie_word_embeddings,
            a.sliding_window
        ),
        (4, 16, false, 0)
    );
    // gemma2: tied, head_dim 256, window 4096 on even layers.
    let Architecture::Decoder(a) = arch(&format!(
        r#"{{"model_type": "gemma2", "num_key_value_heads": 2, {base}}}"#
    )) else {
        panic!()
    };
    assert_eq!(
        (
            a.head_dim,
            a.tie_word_embeddings,
            a.sliding_window,
            a.full_attention_every
        ),
        (256, true, 4096, 2)
    );
    // qwen3: head_dim 128 whatever the width, 32 kv heads, each head's q/k
    // normalised; qwen3_moe: 128 experts of width 768, top 8, no shared
    // expert, head_dim = hidden / heads.
    let Architecture::Decoder(a) = arch(
        r#"{"model_type": "qwen3", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 32, "vocab_size": 100}"#,
    ) else {
        panic!()
    };
    assert_eq!(
        (a.num_kv_heads, a.head_dim, a.qk_norm, a.qkv_bias),
        (32, 128, true, false)
    );
    // An explicit null takes the query heads (Qwen3Config's __post_init__).
    let Architecture::Decoder(a) = arch(&format!(
        r#"{{"model_type": "qwen3", "num_key_value_heads": null, {base}}}"#
    )) else {
        panic!()
    };
    assert_eq!(a.num_kv_heads, 4);
    let Architecture::Decoder(a) = arch(&format!(
        r#"{{"model_type": "qwen3_moe", "num_key_value_heads": 4, {base}}}"#
    )) else {
        panic!()
    };
    let moe = a.moe.unwrap();
    assert_eq!(
        (
            a.head_dim,
            a.qk_norm,
            moe.num_experts,
            moe.experts_per_token,
            moe.expert_intermediate_size,
            moe.shared_expert_intermediate_size
        ),
        (16, true, 128, 8, 768, 0)
    );
    // mistral: a config without `sliding_window` gets transformers' 4096; null means none.
    let Architecture::Decoder(a) = arch(&format!(
        r#"{{"model_type": "mistral", "num_key_value_heads": 2, {base}}}"#
    )) else {
        panic!()
    };
    assert_eq!(a.sliding_window, 4096);
    let Architecture::Decoder(a) = arch(&format!(
        r#"{{"model_type": "mistral", "num_key_value_heads": 2, "sliding_window": null, {base}}}"#
    )) else {
        panic!()
    };
    assert_eq!(a.sliding_window, 0);
    // null num_key_value_heads counts as absent.
    let Architecture::Decoder(a) = arch(&format!(
        r#"{{"model_type": "phi3", "num_key_value_heads": null, {base}}}"#
    )) else {
        panic!()
    };
    assert_eq!(a.num_kv_heads, 4);
    // gpt2: n_inner null -> 4 * n_embd, tied, n_positions learned positions.
    let Architecture::Decoder(a) = arch(
        r#"{"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "n_inner": null, "n_positions": 256, "vocab_size": 100}"#,
    ) else {
        panic!()
    };
    assert_eq!(
        (
            a.intermediate_size,
            a.tie_word_embeddings,
            a.learned_positions
        ),
        (256, true, 256)
    );
    // bert: 512 positions, 2 token types.
    let Architecture::Encoder(e) = arch(&format!(r#"{{"model_type": "bert", {base}}}"#)) else {
        panic!()
    };
    assert_eq!((e.max_position_embeddings, e.type_vocab_size), (512, 2));
    // esm: absolute positions unless rotary.
    let Architecture::Encoder(e) = arch(&format!(r#"{{"model_type": "esm", {base}}}"#)) else {
        panic!()
    };
    assert_eq!(e.max_position_embeddings, 1026);
    // explicit layer_types: full attention every third layer.
    let Architecture::Decoder(a) = arch(
        r#"{"model_type": "gemma2", "num_key_value_heads": 2, "num_hidden_layers": 3, "layer_types": ["sliding_attention", "sliding_attention", "full_attention"], "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "vocab_size": 100}"#,
    ) else {
        panic!()
    };
    assert_eq!(a.full_attention_every, 3);
}

#[track_caller]
fn check_err(json: &str, expected: &[&str]) -> Error {
    let err = import(json).unwrap_err();
    let text = err.to_string();
    for needle in expected {
        assert!(text.contains(needle), "error `{text}` lacks `{needle}`");
    }
    err
}

#[test]
fn bad_configs_name_the_key_and_range() {
    // Unsupported model type, named.
    let err = check_err(
        r#"{"model_type": "t5", "d_model": 512}"#,
        &["`t5`", "not supported", "llama"],
    );
    assert!(
        matches!(err, Error::UnsupportedModelType { ref model_type, .. } if model_type == "t5")
    );
    // Missing required key.
    let llama = fixture("Llama-3.1-8B");
    let mut v: serde_json::Value = serde_json::from_str(&llama).unwrap();
    v.as_object_mut().unwrap().remove("hidden_size");
    let err = import_value(&v).unwrap_err();
    assert!(
        matches!(err, Error::MissingField { ref field, .. } if field == "hidden_size"),
        "{err}"
    );
    assert!(err.to_string().contains("1 to 1048576"), "{err}");
    // Negative, zero, huge, fractional and ill-typed values.
    let err = check_err(
        &llama.replace(r#""num_hidden_layers": 32"#, r#""num_hidden_layers": -3"#),
        &["num_hidden_layers", "-3 is negative", "1 to 1024"],
    );
    assert!(matches!(err, Error::InvalidField { .. }));
    check_err(
        &llama.replace(r#""num_hidden_layers": 32"#, r#""num_hidden_layers": 0"#),
        &["num_hidden_layers", "must not be 0"],
    );
    check_err(
        &llama.replace(r#""hidden_size": 4096"#, r#""hidden_size": 99999999999999"#),
        &["hidden_size", "out of range", "1 to 1048576"],
    );
    check_err(
        &llama.replace(r#""vocab_size": 128256"#, r#""vocab_size": 1e30"#),
        &["vocab_size", "not an integer"],
    );
    check_err(
        &llama.replace(r#""vocab_size": 128256"#, r#""vocab_size": 12.5"#),
        &["vocab_size", "not an integer"],
    );
    check_err(
        &llama.replace(
            r#""num_attention_heads": 32"#,
            r#""num_attention_heads": "32""#,
        ),
        &["num_attention_heads", "is a string"],
    );
    check_err(
        &llama.replace(
            r#""tie_word_embeddings": false"#,
            r#""tie_word_embeddings": 0"#,
        ),
        &["tie_word_embeddings", "true or false"],
    );
    // Cross-field checks come from spec::validate_arch, renamed to config keys.
    check_err(
        &llama.replace(r#""num_key_value_heads": 8"#, r#""num_key_value_heads": 5"#),
        &["`num_key_value_heads`", "divisor"],
    );
    check_err(
        &llama.replace(
            r#""num_key_value_heads": 8"#,
            r#""num_key_value_heads": 64"#,
        ),
        &["`num_key_value_heads`", "1 to 32"],
    );
    let mixtral = fixture("Mixtral-8x7B-v0.1");
    check_err(
        &mixtral.replace(r#""num_experts_per_tok": 2"#, r#""num_experts_per_tok": 9"#),
        &["`num_experts_per_tok`", "1 to 8"],
    );
    // Malformed JSON and non-objects.
    check_err(
        r#"{"model_type": "llama", "hidden_size": 4096"#,
        &["malformed JSON"],
    );
    check_err("[1, 2, 3]", &["not a JSON object"]);
    check_err(
        r#"{"hidden_size": 4096}"#,
        &["`model_type` is missing", "llama"],
    );
    check_err(r#"{"model_type": 7}"#, &["`model_type`", "not a string"]);
}

#[test]
fn esmfold_configs_point_to_the_preset() {
    let esm = fixture("esm2_t33_650M_UR50D").replace(
        r#""is_folding_model": false"#,
        r#""is_folding_model": true"#,
    );
    let err = check_err(&esm, &["esmfold-v1"]);
    assert!(matches!(err, Error::Unsupported { .. }));
}

#[test]
fn unmodelled_variants_are_refused_by_name() {
    let llama = fixture("Llama-3.1-8B");
    check_err(
        &llama.replace(r#""attention_bias": false"#, r#""attention_bias": true"#),
        &["attention_bias"],
    );
    let esm = fixture("esm2_t33_650M_UR50D");
    check_err(
        &esm.replace(
            r#""position_embedding_type": "rotary""#,
            r#""position_embedding_type": "alibi""#,
        ),
        &["position_embedding_type", "rotary"],
    );
    let qwen = fixture("Qwen2.5-7B").replace(
        r#""use_sliding_window": false"#,
        r#""use_sliding_window": true"#,
    );
    check_err(
        &qwen.replace(r#""max_window_layers": 28"#, r#""max_window_layers": 14"#),
        &["max_window_layers"],
    );
    // With max_window_layers >= num_hidden_layers no layer slides.
    let Architecture::Decoder(a) = import(&qwen).unwrap() else {
        panic!()
    };
    assert_eq!(a.sliding_window, 0);
}

/// The importer never panics, whatever the values of the keys it reads.
#[test]
fn no_value_panics() {
    let keys = [
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "vocab_size",
        "sliding_window",
        "num_local_experts",
        "num_experts_per_tok",
    ];
    let values = [
        "0",
        "1",
        "-1",
        "4294967296",
        "18446744073709551615",
        "1e400",
        "null",
        "true",
        "\"x\"",
        "[]",
        "{}",
    ];
    for model_type in ["llama", "mistral", "mixtral", "qwen2", "gemma2", "phi3"] {
        for key in keys {
            for value in values {
                let json = format!(
                    r#"{{"model_type": "{model_type}", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100, "{key}": {value}}}"#
                );
                let _ = import(&json);
            }
        }
    }
}

/// A key one or two letters from a key the importer reads, while that key
/// is absent, is a misspelling whose default would be used in silence
/// (Gemma 2 with `"tie_word_embedding": false` kept the embeddings tied):
/// refused, naming the key, the one it resembles and the keys read. Keys
/// the importer does not read and that resemble none stay accepted.
#[test]
fn a_misspelled_key_is_refused_not_defaulted() {
    let mut gemma: serde_json::Value = serde_json::from_str(&fixture("gemma-2-9b")).unwrap();
    gemma["tie_word_embedding"] = serde_json::json!(false);
    let e = import_value(&gemma).unwrap_err().to_string();
    assert!(e.contains("`hf_config.tie_word_embedding`"), "{e}");
    assert!(e.contains("did you mean `tie_word_embeddings`?"), "{e}");
    assert!(
        e.contains("the keys it reads:") && e.contains("num_key_value_heads"),
        "{e}"
    );

    let mut llama: serde_json::Value = serde_json::from_str(&fixture("Llama-3.1-8B")).unwrap();
    let kv = llama
        .as_object_mut()
        .unwrap()
        .remove("num_key_value_heads")
        .unwrap();
    llama["num_key_value_head"] = kv;
    let e = import_value(&llama).unwrap_err().to_string();
    assert!(e.contains("did you mean `num_key_value_heads`?"), "{e}");

    // Both spellings present: not a misspelling; an unrelated key: fine.
    let mut both: serde_json::Value = serde_json::from_str(&fixture("gemma-2-9b")).unwrap();
    both["tie_word_embeddings"] = serde_json::json!(false);
    both["tie_word_embedding"] = serde_json::json!(false);
    both["my_own_note"] = serde_json::json!("kept");
    import_value(&both).unwrap();
}
