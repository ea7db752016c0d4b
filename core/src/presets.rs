//! The preset catalog: exact shapes of the models people ask about.
//!
//! The ids of `shared/calibration/README.md` use exactly the shapes given
//! there; the others follow the models' published `config.json`.

use crate::arch::*;
use crate::error::Error;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

/// A preset: id, name, group (for the page's grouped list) and shapes.
#[derive(Clone, Debug, PartialEq)]
pub struct Preset {
    /// Stable id used in specs and URLs.
    pub id: &'static str,
    /// Display name.
    pub name: &'static str,
    /// Group for pickers: "LLM", "MoE LLM", "Encoder", "Protein", "Vision".
    pub group: &'static str,
    /// The shapes.
    pub arch: Architecture,
}

impl Preset {
    /// As a [`Model`].
    pub fn model(&self) -> Model {
        Model {
            id: self.id.to_string(),
            name: self.name.to_string(),
            arch: self.arch.clone(),
        }
    }
}

/// A Llama-style decoder (RMSNorm, gated SiLU MLP, rotary, no biases).
#[allow(clippy::too_many_arguments)]
pub fn llama_like(
    vocab_size: u32,
    hidden_size: u32,
    intermediate_size: u32,
    num_layers: u32,
    num_heads: u32,
    num_kv_heads: u32,
    tie_word_embeddings: bool,
) -> DecoderArch {
    DecoderArch {
        vocab_size,
        hidden_size,
        intermediate_size,
        num_layers,
        num_heads,
        num_kv_heads,
        head_dim: hidden_size / num_heads,
        tie_word_embeddings,
        mlp: MlpKind::Gated,
        norm: NormKind::RmsNorm,
        qkv_bias: false,
        dense_bias: false,
        learned_positions: 0,
        extra_norms_per_layer: 0,
        moe: None,
    }
}

/// ESM-2 encoder shapes.
pub fn esm2(hidden_size: u32, num_layers: u32, num_heads: u32) -> EncoderArch {
    EncoderArch {
        kind: EncoderKind::Esm,
        vocab_size: 33,
        hidden_size,
        intermediate_size: 4 * hidden_size,
        num_layers,
        num_heads,
        max_position_embeddings: 0,
        type_vocab_size: 0,
    }
}

/// BERT encoder shapes (with the masked-LM head).
pub fn bert(hidden_size: u32, num_layers: u32, num_heads: u32) -> EncoderArch {
    EncoderArch {
        kind: EncoderKind::Bert,
        vocab_size: 30522,
        hidden_size,
        intermediate_size: 4 * hidden_size,
        num_layers,
        num_heads,
        max_position_embeddings: 512,
        type_vocab_size: 2,
    }
}

/// Every preset.
pub fn all() -> Vec<Preset> {
    let mut v = Vec::new();
    v.push(Preset {
        id: "llama-3.1-8b",
        name: "Llama 3.1 8B",
        group: "LLM",
        arch: Architecture::Decoder(llama_like(128256, 4096, 14336, 32, 32, 8, false)),
    });
    v.push(Preset {
        id: "llama-3.2-1b",
        name: "Llama 3.2 1B",
        group: "LLM",
        arch: Architecture::Decoder(llama_like(128256, 2048, 8192, 16, 32, 8, true)),
    });
    let mut qwen7 = llama_like(152064, 3584, 18944, 28, 28, 4, false);
    qwen7.qkv_bias = true;
    v.push(Preset {
        id: "qwen2.5-7b",
        name: "Qwen2.5 7B",
        group: "LLM",
        arch: Architecture::Decoder(qwen7),
    });
    v.push(Preset {
        id: "mistral-7b-v0.3",
        name: "Mistral 7B v0.3",
        group: "LLM",
        arch: Architecture::Decoder(llama_like(32768, 4096, 14336, 32, 32, 8, false)),
    });
    let mut mixtral = llama_like(32000, 4096, 14336, 32, 32, 8, false);
    mixtral.moe = Some(MoeConfig {
        num_experts: 8,
        experts_per_token: 2,
        expert_intermediate_size: 14336,
        shared_expert_intermediate_size: 0,
        first_dense_layers: 0,
    });
    v.push(Preset {
        id: "mixtral-8x7b",
        name: "Mixtral 8x7B",
        group: "MoE LLM",
        arch: Architecture::Decoder(mixtral),
    });
    v.push(Preset {
        id: "gpt2",
        name: "GPT-2 (124M)",
        group: "LLM",
        arch: Architecture::Decoder(DecoderArch {
            vocab_size: 50257,
            hidden_size: 768,
            intermediate_size: 3072,
            num_layers: 12,
            num_heads: 12,
            num_kv_heads: 12,
            head_dim: 64,
            tie_word_embeddings: true,
            mlp: MlpKind::Plain,
            norm: NormKind::LayerNorm,
            qkv_bias: true,
            dense_bias: true,
            learned_positions: 1024,
            extra_norms_per_layer: 0,
            moe: None,
        }),
    });
    v.push(Preset {
        id: "bert-base-uncased",
        name: "BERT base (uncased)",
        group: "Encoder",
        arch: Architecture::Encoder(bert(768, 12, 12)),
    });
    v.push(Preset {
        id: "esm2-t33-650m",
        name: "ESM-2 650M",
        group: "Protein",
        arch: Architecture::Encoder(esm2(1280, 33, 20)),
    });
    v.push(Preset {
        id: "esmfold-v1",
        name: "ESMFold v1",
        group: "Protein",
        arch: Architecture::EsmFold(EsmFoldArch {
            stem: esm2(2560, 36, 40),
            trunk_blocks: 48,
            sequence_state_dim: 1024,
            pairwise_state_dim: 128,
            sequence_head_width: 32,
            pairwise_head_width: 32,
            position_bins: 32,
            max_recycles: 4,
            structure_blocks: 8,
            structure_sequence_dim: 384,
            structure_pairwise_dim: 128,
            ipa_heads: 12,
            folding_params: 3_525_038_915 - 2_832_444_321,
        }),
    });
    v.push(Preset {
        id: "resnet-50",
        name: "ResNet-50",
        group: "Vision",
        arch: Architecture::Cnn(CnnArch::ResNet {
            blocks: [3, 4, 6, 3],
            bottleneck: true,
            num_classes: 1000,
        }),
    });
    v.push(Preset {
        id: "vit-b-16",
        name: "ViT-B/16",
        group: "Vision",
        arch: Architecture::Vit(VitArch {
            image_size: 224,
            patch_size: 16,
            hidden_size: 768,
            mlp_dim: 3072,
            num_layers: 12,
            num_heads: 12,
            num_classes: 1000,
        }),
    });
    v
}

/// Finds a preset by id.
pub fn find(id: &str) -> Result<Preset, Error> {
    let presets = all();
    match presets.iter().find(|p| p.id == id) {
        Some(p) => Ok(p.clone()),
        None => {
            let known: Vec<&str> = presets.iter().map(|p| p.id).collect();
            Err(Error::UnknownPreset {
                id: String::from(id),
                known: known.join(", "),
            })
        }
    }
}
