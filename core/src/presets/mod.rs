//! The preset catalog: exact shapes of the models people ask about.
//!
//! The ids of the preset table of `docs/spec.md` use exactly the shapes given
//! there; the others follow the models' published `config.json`.

mod hub;
pub use hub::{find_by_hub_id, find_by_hub_id_in, is_hub_id};

use crate::arch::*;
use crate::error::Error;
use alloc::string::{String, ToString};
use alloc::vec;
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
        sliding_window: 0,
        final_logit_softcapping: false,
        attn_logit_softcapping: false,
        full_attention_every: 0,
        fused_projections: false,
        scaled_embeddings: false,
        qk_norm: false,
    }
}

/// A Qwen2 decoder: Llama shapes plus biases on q/k/v (always on in Qwen2).
#[allow(clippy::too_many_arguments)]
pub fn qwen2(
    vocab_size: u32,
    hidden_size: u32,
    intermediate_size: u32,
    num_layers: u32,
    num_heads: u32,
    num_kv_heads: u32,
    tie_word_embeddings: bool,
) -> DecoderArch {
    let mut a = llama_like(
        vocab_size,
        hidden_size,
        intermediate_size,
        num_layers,
        num_heads,
        num_kv_heads,
        tie_word_embeddings,
    );
    a.qkv_bias = true;
    a
}

/// A Qwen3 dense decoder: Llama shapes with 128-wide heads whatever the
/// width, no biases, and an RMSNorm over each head's queries and keys
/// (`q_norm`, `k_norm`); the 151936-row vocabulary.
pub fn qwen3(
    hidden_size: u32,
    intermediate_size: u32,
    num_layers: u32,
    num_heads: u32,
    num_kv_heads: u32,
    tie_word_embeddings: bool,
) -> DecoderArch {
    let mut a = llama_like(
        151936,
        hidden_size,
        intermediate_size,
        num_layers,
        num_heads,
        num_kv_heads,
        tie_word_embeddings,
    );
    a.head_dim = 128;
    a.qk_norm = true;
    a
}

/// A Gemma 2 decoder: gated GELU MLP, four RMSNorms per block, explicit
/// `head_dim`, tied 256000-row embedding, sliding window of 4096 on every
/// other layer (layers 0, 2, 4, ...).
pub fn gemma2(
    hidden_size: u32,
    intermediate_size: u32,
    num_layers: u32,
    num_heads: u32,
    num_kv_heads: u32,
    head_dim: u32,
) -> DecoderArch {
    let mut a = llama_like(
        256000,
        hidden_size,
        intermediate_size,
        num_layers,
        num_heads,
        num_kv_heads,
        true,
    );
    a.head_dim = head_dim;
    a.extra_norms_per_layer = 2;
    a.norm = NormKind::GemmaRmsNorm;
    a.scaled_embeddings = true;
    a.sliding_window = 4096;
    a.full_attention_every = 2;
    a.final_logit_softcapping = true;
    a.attn_logit_softcapping = true;
    a
}

/// A Phi-3 4k decoder: Llama shapes with HF's fused `qkv_proj` and
/// `gate_up_proj` (the same parameter count), 32064-row untied vocabulary,
/// and the 2047-token sliding window of the published 4k configs on every
/// layer.
pub fn phi3_4k(
    hidden_size: u32,
    intermediate_size: u32,
    num_layers: u32,
    num_heads: u32,
    num_kv_heads: u32,
) -> DecoderArch {
    let mut a = llama_like(
        32064,
        hidden_size,
        intermediate_size,
        num_layers,
        num_heads,
        num_kv_heads,
        false,
    );
    a.sliding_window = 2047;
    a.fused_projections = true;
    a
}

/// torchvision's `VisionTransformer` at 224 px with 1000 classes.
pub fn vit(
    patch_size: u32,
    hidden_size: u32,
    mlp_dim: u32,
    num_layers: u32,
    num_heads: u32,
) -> VitArch {
    VitArch {
        library: VitLibrary::Torchvision,
        image_size: 224,
        patch_size,
        hidden_size,
        mlp_dim,
        num_layers,
        num_heads,
        num_classes: 1000,
    }
}

/// The same shapes as timm builds them (`timm.create_model`).
fn timm(arch: VitArch) -> VitArch {
    VitArch {
        library: VitLibrary::Timm,
        ..arch
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

/// Every preset, grouped for pickers: LLM, MoE LLM, Encoder, Protein, Vision.
///
/// The ids of the preset table of `docs/spec.md` (llama-3.1-8b, llama-3.2-1b,
/// qwen2.5-7b, mistral-7b-v0.3, mixtral-8x7b, gpt2, bert-base-uncased,
/// esm2-t33-650m, esmfold-v1, resnet-34, resnet-50, resnet-152, vit-b-16,
/// vit-l-16 and timm's three ViTs) are built exactly as that table says;
/// the others follow the models' published `config.json` (torchvision's
/// constructors for the other vision models).
pub fn all() -> Vec<Preset> {
    fn decoder(id: &'static str, name: &'static str, arch: DecoderArch) -> Preset {
        Preset {
            id,
            name,
            group: if arch.moe.is_some() { "MoE LLM" } else { "LLM" },
            arch: Architecture::Decoder(arch),
        }
    }
    fn encoder(
        id: &'static str,
        name: &'static str,
        group: &'static str,
        arch: EncoderArch,
    ) -> Preset {
        Preset {
            id,
            name,
            group,
            arch: Architecture::Encoder(arch),
        }
    }
    fn vision(id: &'static str, name: &'static str, arch: Architecture) -> Preset {
        Preset {
            id,
            name,
            group: "Vision",
            arch,
        }
    }

    let mut mistral_nemo = llama_like(131072, 5120, 14336, 40, 32, 8, false);
    mistral_nemo.head_dim = 128; // published head_dim; hidden/heads would be 160

    let mut mixtral = llama_like(32000, 4096, 14336, 32, 32, 8, false);
    mixtral.moe = Some(MoeConfig {
        num_experts: 8,
        experts_per_token: 2,
        expert_intermediate_size: 14336,
        shared_expert_intermediate_size: 0,
        first_dense_layers: 0,
        routing_weights_in_model_dtype: false,
    });

    // Qwen/Qwen1.5-MoE-A2.7B: every layer sparse (decoder_sparse_step 1, no
    // mlp_only_layers); 60 routed experts of width 1408, top 4, plus a
    // shared expert of width 5632 behind a sigmoid gate Linear(hidden, 1).
    let mut qwen_moe = qwen2(151936, 2048, 5632, 24, 16, 16, false);
    qwen_moe.moe = Some(MoeConfig {
        num_experts: 60,
        experts_per_token: 4,
        expert_intermediate_size: 1408,
        shared_expert_intermediate_size: 5632,
        first_dense_layers: 0,
        routing_weights_in_model_dtype: true,
    });

    // Qwen/Qwen3-30B-A3B: Qwen3's attention (128-wide heads, q/k norms),
    // every layer sparse; 128 routed experts of width 768, top 8, no
    // shared expert.
    let mut qwen3_moe = qwen3(2048, 6144, 48, 32, 4, false);
    qwen3_moe.moe = Some(MoeConfig {
        num_experts: 128,
        experts_per_token: 8,
        expert_intermediate_size: 768,
        shared_expert_intermediate_size: 0,
        first_dense_layers: 0,
        routing_weights_in_model_dtype: true,
    });

    let gpt2 = DecoderArch {
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
        sliding_window: 0,
        final_logit_softcapping: false,
        attn_logit_softcapping: false,
        full_attention_every: 0,
        fused_projections: false,
        scaled_embeddings: false,
        qk_norm: false,
    };

    let resnet = |blocks: [u32; 4], bottleneck: bool| {
        Architecture::Cnn(CnnArch::ResNet {
            blocks,
            bottleneck,
            num_classes: 1000,
        })
    };

    vec![
        // LLM
        decoder(
            "llama-3.2-1b",
            "Llama 3.2 1B",
            llama_like(128256, 2048, 8192, 16, 32, 8, true),
        ),
        decoder(
            "llama-3.2-3b",
            "Llama 3.2 3B",
            llama_like(128256, 3072, 8192, 28, 24, 8, true),
        ),
        decoder(
            "llama-3.1-8b",
            "Llama 3.1 8B",
            llama_like(128256, 4096, 14336, 32, 32, 8, false),
        ),
        decoder(
            "llama-3.1-70b",
            "Llama 3.1 70B",
            llama_like(128256, 8192, 28672, 80, 64, 8, false),
        ),
        decoder(
            "llama-3.1-405b",
            "Llama 3.1 405B",
            llama_like(128256, 16384, 53248, 126, 128, 8, false),
        ),
        decoder(
            "qwen2.5-0.5b",
            "Qwen2.5 0.5B",
            qwen2(151936, 896, 4864, 24, 14, 2, true),
        ),
        decoder(
            "qwen2.5-1.5b",
            "Qwen2.5 1.5B",
            qwen2(151936, 1536, 8960, 28, 12, 2, true),
        ),
        decoder(
            "qwen2.5-3b",
            "Qwen2.5 3B",
            qwen2(151936, 2048, 11008, 36, 16, 2, true),
        ),
        decoder(
            "qwen2.5-7b",
            "Qwen2.5 7B",
            qwen2(152064, 3584, 18944, 28, 28, 4, false),
        ),
        decoder(
            "qwen2.5-14b",
            "Qwen2.5 14B",
            qwen2(152064, 5120, 13824, 48, 40, 8, false),
        ),
        decoder(
            "qwen2.5-32b",
            "Qwen2.5 32B",
            qwen2(152064, 5120, 27648, 64, 40, 8, false),
        ),
        decoder(
            "qwen2.5-72b",
            "Qwen2.5 72B",
            qwen2(152064, 8192, 29568, 80, 64, 8, false),
        ),
        decoder(
            "qwen3-0.6b",
            "Qwen3 0.6B",
            qwen3(1024, 3072, 28, 16, 8, true),
        ),
        decoder(
            "qwen3-1.7b",
            "Qwen3 1.7B",
            qwen3(2048, 6144, 28, 16, 8, true),
        ),
        decoder("qwen3-4b", "Qwen3 4B", qwen3(2560, 9728, 36, 32, 8, true)),
        decoder("qwen3-8b", "Qwen3 8B", qwen3(4096, 12288, 36, 32, 8, false)),
        decoder(
            "qwen3-14b",
            "Qwen3 14B",
            qwen3(5120, 17408, 40, 40, 8, false),
        ),
        decoder(
            "qwen3-32b",
            "Qwen3 32B",
            qwen3(5120, 25600, 64, 64, 8, false),
        ),
        decoder(
            "mistral-7b-v0.3",
            "Mistral 7B v0.3",
            llama_like(32768, 4096, 14336, 32, 32, 8, false),
        ),
        decoder("mistral-nemo-12b", "Mistral Nemo 12B", mistral_nemo),
        decoder(
            "gemma-2-9b",
            "Gemma 2 9B",
            gemma2(3584, 14336, 42, 16, 8, 256),
        ),
        decoder(
            "gemma-2-27b",
            "Gemma 2 27B",
            gemma2(4608, 36864, 46, 32, 16, 128),
        ),
        decoder(
            "phi-3-mini-4k",
            "Phi-3 mini 4k (3.8B)",
            phi3_4k(3072, 8192, 32, 32, 32),
        ),
        decoder(
            "phi-3-medium-4k",
            "Phi-3 medium 4k (14B)",
            phi3_4k(5120, 17920, 40, 40, 10),
        ),
        decoder("gpt2", "GPT-2 (124M)", gpt2),
        // MoE LLM
        decoder("mixtral-8x7b", "Mixtral 8x7B", mixtral),
        decoder("qwen1.5-moe-a2.7b", "Qwen1.5-MoE-A2.7B", qwen_moe),
        decoder("qwen3-30b-a3b", "Qwen3-30B-A3B", qwen3_moe),
        // Encoder
        encoder(
            "bert-base-uncased",
            "BERT base (uncased)",
            "Encoder",
            bert(768, 12, 12),
        ),
        encoder(
            "bert-large-uncased",
            "BERT large (uncased)",
            "Encoder",
            bert(1024, 24, 16),
        ),
        // Protein
        encoder("esm2-t12-35m", "ESM-2 35M", "Protein", esm2(480, 12, 20)),
        encoder("esm2-t30-150m", "ESM-2 150M", "Protein", esm2(640, 30, 20)),
        encoder("esm2-t33-650m", "ESM-2 650M", "Protein", esm2(1280, 33, 20)),
        encoder("esm2-t36-3b", "ESM-2 3B", "Protein", esm2(2560, 36, 40)),
        encoder("esm2-t48-15b", "ESM-2 15B", "Protein", esm2(5120, 48, 40)),
        Preset {
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
        },
        // Vision
        vision(
            "vit-b-16",
            "ViT-B/16",
            Architecture::Vit(vit(16, 768, 3072, 12, 12)),
        ),
        vision(
            "vit-l-16",
            "ViT-L/16",
            Architecture::Vit(vit(16, 1024, 4096, 24, 16)),
        ),
        vision(
            "vit-small-patch16-224",
            "ViT-S/16 (timm)",
            Architecture::Vit(timm(vit(16, 384, 1536, 12, 6))),
        ),
        vision(
            "vit-base-patch16-224",
            "ViT-B/16 (timm)",
            Architecture::Vit(timm(vit(16, 768, 3072, 12, 12))),
        ),
        vision(
            "vit-large-patch16-224",
            "ViT-L/16 (timm)",
            Architecture::Vit(timm(vit(16, 1024, 4096, 24, 16))),
        ),
        vision("resnet-18", "ResNet-18", resnet([2, 2, 2, 2], false)),
        vision("resnet-34", "ResNet-34", resnet([3, 4, 6, 3], false)),
        vision("resnet-50", "ResNet-50", resnet([3, 4, 6, 3], true)),
        vision("resnet-101", "ResNet-101", resnet([3, 4, 23, 3], true)),
        vision("resnet-152", "ResNet-152", resnet([3, 8, 36, 3], true)),
        vision(
            "mobilenet-v2",
            "MobileNetV2",
            Architecture::Cnn(CnnArch::MobileNetV2 { num_classes: 1000 }),
        ),
    ]
}

/// Whether two preset ids are the same as [`find`] compares them: without
/// case and without `-`, `_` or `.` ("mobilenetv2", "Llama-3.1-8B" and
/// "llama_3.1_8b" all name their preset).
pub fn same_id(a: &str, b: &str) -> bool {
    fn key(s: &str) -> impl Iterator<Item = u8> + '_ {
        s.bytes()
            .filter(|c| !matches!(c, b'-' | b'_' | b'.'))
            .map(|c| c.to_ascii_lowercase())
    }
    key(a).eq(key(b))
}

/// Finds a preset by id. Not inlined: the page calls it from several
/// places, one copy serves them.
#[inline(never)]
pub fn find(id: &str) -> Result<Preset, Error> {
    let presets = all();
    match presets
        .iter()
        .find(|p| p.id == id)
        .or_else(|| presets.iter().find(|p| same_id(p.id, id)))
    {
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
