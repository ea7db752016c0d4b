//! Architectures: the shapes that decide which tensors a run allocates.

pub mod cnn;

use crate::error::Error;
use crate::keys::keyed;
use alloc::format;
use alloc::string::String;

/// Numeric formats of weights, activations and caches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dtype {
    /// 32-bit float.
    Fp32,
    /// 16-bit IEEE half.
    Fp16,
    /// bfloat16.
    Bf16,
    /// 8-bit integer weights (bitsandbytes LLM.int8 layout: int8 + fp32 scale per row).
    Int8,
    /// 4-bit weights (bitsandbytes NF4 or FP4: packed two per byte, one
    /// fp32 absmax per 64 values).
    Int4,
    /// 4-bit weights with double quantization (QLoRA's
    /// `bnb_4bit_use_double_quant=True`): the absmax of each 64 values
    /// quantized to 8 bits, one fp32 scale per 256 of them.
    Int4Dq,
}

impl Dtype {
    /// Bytes per element for the float formats; for int8/int4 the storage of
    /// one element without its scales (int4 counts as 1 byte per 2 elements,
    /// use [`Dtype::storage_bytes`]).
    pub fn bytes(self) -> u64 {
        match self {
            Dtype::Fp32 => 4,
            Dtype::Fp16 | Dtype::Bf16 => 2,
            Dtype::Int8 | Dtype::Int4 | Dtype::Int4Dq => 1,
        }
    }

    /// Bytes to store `elements` values of this format, scales included.
    pub fn storage_bytes(self, elements: u64) -> u64 {
        match self {
            Dtype::Fp32 | Dtype::Fp16 | Dtype::Bf16 => elements * self.bytes(),
            // One int8 per value plus one fp32 scale per 4096-wide row: ~elements/1024.
            Dtype::Int8 => elements + elements.div_ceil(4096) * 4,
            // Two values per byte plus one fp32 absmax per 64-value block.
            Dtype::Int4 => elements.div_ceil(2) + elements.div_ceil(64) * 4,
            // The absmax in 8 bits plus one fp32 scale per 256 of them.
            Dtype::Int4Dq => {
                let blocks = elements.div_ceil(64);
                elements.div_ceil(2) + blocks + blocks.div_ceil(256) * 4
            }
        }
    }

    /// True for formats that run matmuls directly (fp32/fp16/bf16).
    pub fn is_float(self) -> bool {
        matches!(self, Dtype::Fp32 | Dtype::Fp16 | Dtype::Bf16)
    }

    /// The name used in specs and URLs: the same as [`Dtype::key`].
    pub fn name(self) -> &'static str {
        self.key()
    }
}

keyed! {
    Dtype {
        Fp32 => "fp32",
        Fp16 => "fp16",
        Bf16 => "bf16",
        Int8 => "int8",
        Int4 => "int4",
        Int4Dq => "int4_dq",
    }
}

/// A model: family plus exact shapes.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(tag = "family", rename_all = "snake_case"))]
pub enum Architecture {
    /// Decoder-only LLMs: Llama, Mistral, Qwen2, Gemma 2, Phi-3, GPT-2, Mixtral (MoE).
    Decoder(DecoderArch),
    /// Bidirectional encoders: BERT, ESM-2.
    Encoder(EncoderArch),
    /// Vision transformer (torchvision `VisionTransformer`).
    Vit(VitArch),
    /// ESMFold: ESM-2 stem, folding trunk, structure module.
    EsmFold(EsmFoldArch),
    /// Convolutional networks: ResNet, MobileNetV2.
    Cnn(CnnArch),
}

impl Architecture {
    /// Short family name, as in specs and URLs.
    pub fn family(&self) -> &'static str {
        match self {
            Architecture::Decoder(_) => "decoder",
            Architecture::Encoder(_) => "encoder",
            Architecture::Vit(_) => "vit",
            Architecture::EsmFold(_) => "esm_fold",
            Architecture::Cnn(_) => "cnn",
        }
    }

    /// Parameter count as instantiated (no LoRA adapters).
    pub fn params(&self) -> u64 {
        match self {
            Architecture::Decoder(a) => a.params(),
            Architecture::Encoder(a) => a.params(),
            Architecture::Vit(a) => a.params(),
            Architecture::EsmFold(a) => a.params(),
            Architecture::Cnn(a) => cnn::params(a),
        }
    }

    /// An upper bound on an architecture's parameters, in `f64` (a mixture of
    /// experts' own count can leave `u64` for shapes within the per-field
    /// ranges).
    pub fn param_bound(&self) -> f64 {
        match self {
            Architecture::Decoder(a) => {
                let n = f64::from;
                let h = n(a.hidden_size);
                let attention =
                    h * (n(a.num_heads) + 2.0 * n(a.num_kv_heads)) * n(a.head_dim) * 2.0;
                let mut mlp = 3.0 * h * n(a.intermediate_size);
                if let Some(m) = a.moe {
                    mlp += n(m.num_experts) * 3.0 * h * n(m.expert_intermediate_size)
                        + 3.0 * h * n(m.shared_expert_intermediate_size)
                        + h * n(m.num_experts);
                }
                let norms = (4.0 + n(a.extra_norms_per_layer)) * 2.0 * h;
                let biases =
                    4.0 * (h + n(a.intermediate_size)) + 3.0 * n(a.num_heads) * n(a.head_dim);
                n(a.num_layers) * (attention + mlp + norms + biases)
                    + (2.0 * n(a.vocab_size) + n(a.learned_positions) + 2.0) * h
            }
            other => other.params() as f64,
        }
    }

    /// True when the workload's length axis is an image size, not a sequence.
    pub fn is_vision(&self) -> bool {
        matches!(self, Architecture::Vit(_) | Architecture::Cnn(_))
    }
}

/// Most parameters a model may have (2^50, about a million times Llama 3.1
/// 405B): with it, no tensor or total of a replay leaves `u64`.
pub const MAX_PARAMS: f64 = (1u64 << 50) as f64;

/// The MLP of a transformer block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum MlpKind {
    /// `down(act(gate(x)) * up(x))`: Llama, Mistral, Qwen2, Gemma, Phi-3.
    Gated,
    /// `fc2(act(fc1(x)))` with biases: GPT-2, BERT, ESM, ViT.
    Plain,
}

/// The normalisation layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum NormKind {
    /// RMSNorm (weight only), computed in fp32 by HF.
    RmsNorm,
    /// LayerNorm (weight and bias).
    LayerNorm,
    /// Gemma's RMSNorm (transformers 5.17 `Gemma2RMSNorm`): fp32 from the
    /// input's cast to the end, `x * rsqrt(mean(x^2) + eps) * (1 +
    /// weight.float())`, then cast back to the input's dtype.
    GemmaRmsNorm,
}

/// Mixture-of-experts MLP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct MoeConfig {
    /// Experts per layer (all resident in memory).
    pub num_experts: u32,
    /// Experts each token is routed to (active per token).
    pub experts_per_token: u32,
    /// Intermediate size of one expert.
    pub expert_intermediate_size: u32,
    /// Intermediate size of the always-on shared expert, 0 when absent.
    #[cfg_attr(feature = "serde", serde(default))]
    pub shared_expert_intermediate_size: u32,
    /// Leading layers that use a dense MLP instead of experts (DeepSeek).
    #[cfg_attr(feature = "serde", serde(default))]
    pub first_dense_layers: u32,
    /// The router casts its top-k weights back to the hidden states' dtype
    /// (Qwen2-MoE's `router_top_value.to(router_logits.dtype)`), so the
    /// experts' weighted outputs stay in it; `false` keeps them fp32 from
    /// the router's `softmax(router_logits.float())` (Mixtral), which makes
    /// the weighted outputs fp32 too.
    #[cfg_attr(feature = "serde", serde(default))]
    pub routing_weights_in_model_dtype: bool,
}

/// A decoder-only transformer.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct DecoderArch {
    /// Vocabulary size (rows of the embedding and of the LM head).
    pub vocab_size: u32,
    /// Model width.
    pub hidden_size: u32,
    /// Dense MLP intermediate width.
    pub intermediate_size: u32,
    /// Transformer blocks.
    pub num_layers: u32,
    /// Query heads.
    pub num_heads: u32,
    /// Key/value heads (grouped-query attention when fewer than `num_heads`).
    pub num_kv_heads: u32,
    /// Width of one head.
    pub head_dim: u32,
    /// LM head shares the embedding matrix.
    pub tie_word_embeddings: bool,
    /// MLP shape.
    pub mlp: MlpKind,
    /// Normalisation.
    pub norm: NormKind,
    /// Biases on q/k/v (Qwen2) or on every linear (GPT-2 style).
    #[cfg_attr(feature = "serde", serde(default))]
    pub qkv_bias: bool,
    /// Biases on the attention output and MLP linears (GPT-2).
    #[cfg_attr(feature = "serde", serde(default))]
    pub dense_bias: bool,
    /// Learned absolute position embeddings (GPT-2), 0 for rotary.
    #[cfg_attr(feature = "serde", serde(default))]
    pub learned_positions: u32,
    /// Extra norms around attention and MLP (Gemma 2 has four per block).
    /// With 2, the layer is Gemma 2's sandwich: the attention's and the
    /// MLP's outputs are each normalised before their residual sum.
    #[cfg_attr(feature = "serde", serde(default))]
    pub extra_norms_per_layer: u32,
    /// Mixture of experts, when the MLP is routed.
    #[cfg_attr(feature = "serde", serde(default))]
    pub moe: Option<MoeConfig>,
    /// Sliding-window attention: the window, in tokens, of the layers that
    /// use one; 0 (the default) when every layer attends to the whole
    /// sequence. With a window, HF's `DynamicCache` keeps only the last
    /// `sliding_window - 1` positions of those layers (transformers 5.17
    /// `DynamicSlidingWindowLayer`), so their KV cache stops growing.
    /// Mistral 7B v0.1 (4096), Phi-3 mini/medium 4k (2047), Gemma 2 (4096).
    /// Parameters do not depend on it.
    #[cfg_attr(feature = "serde", serde(default))]
    pub sliding_window: u32,
    /// Which layers use `sliding_window`: 0 (the default) = every layer;
    /// `n > 0` = all but every `n`-th, i.e. layer `i` attends to the whole
    /// sequence when `(i + 1) % n == 0` (Gemma 2: 2, even layers slide).
    /// Ignored when `sliding_window` is 0.
    #[cfg_attr(feature = "serde", serde(default))]
    pub full_attention_every: u32,
    /// Final logits pass through `tanh(logits / cap) * cap` (Gemma 2's
    /// `final_logit_softcapping`): three more vocabulary-sized tensors.
    #[cfg_attr(feature = "serde", serde(default))]
    pub final_logit_softcapping: bool,
    /// Eager attention's scores pass through `tanh(scores / cap) * cap`
    /// before the mask (Gemma 2's `attn_logit_softcapping`; SDPA ignores
    /// it): two more score-sized tensors in flight, and in training
    /// `tanh`'s output kept for backward, one score-sized tensor a layer.
    #[cfg_attr(feature = "serde", serde(default))]
    pub attn_logit_softcapping: bool,
    /// Phi-3's layer (transformers 5.17 `modeling_phi3.py`): one
    /// `qkv_proj` whose output the queries, keys and values are views of,
    /// kept by the attention's `qkv` local until it returns; one
    /// `gate_up_proj` whose halves are the gate and the up projection, kept
    /// by the MLP's `gate` local until it returns; and rotary embeddings
    /// applied to a slice of each head and concatenated with the rest
    /// (`torch.cat([rotated, pass])`: a copy even when the rest is empty).
    /// Parameters do not depend on it.
    #[cfg_attr(feature = "serde", serde(default))]
    pub fused_projections: bool,
    /// The embedding's output is multiplied by `sqrt(hidden_size)` (Gemma's
    /// `ScaledWordEmbedding`): a second tensor of the hidden states' size,
    /// the lookup's freed once the product exists.
    #[cfg_attr(feature = "serde", serde(default))]
    pub scaled_embeddings: bool,
    /// Each head's queries and keys pass through an RMSNorm over the head
    /// width before the rotary embedding (Qwen3's `q_norm` and `k_norm`,
    /// transformers 5.17 `modeling_qwen3.py`): `head_dim` more parameters
    /// each, and per projection the norm's fp32 copy and its casts, the
    /// projection's output freed once its norm returns.
    #[cfg_attr(feature = "serde", serde(default))]
    pub qk_norm: bool,
}

impl DecoderArch {
    fn norm_params(&self) -> u64 {
        let h = self.hidden_size as u64;
        match self.norm {
            NormKind::RmsNorm | NormKind::GemmaRmsNorm => h,
            NormKind::LayerNorm => 2 * h,
        }
    }

    /// Parameters of the dense MLP of width `inter`.
    pub fn dense_mlp_params(&self, inter: u64) -> u64 {
        let h = self.hidden_size as u64;
        match self.mlp {
            MlpKind::Gated => 3 * h * inter + if self.dense_bias { 2 * inter + h } else { 0 },
            MlpKind::Plain => 2 * h * inter + if self.dense_bias { inter + h } else { 0 },
        }
    }

    /// Parameters of the attention block of one layer.
    pub fn attention_params(&self) -> u64 {
        let h = self.hidden_size as u64;
        let q = self.num_heads as u64 * self.head_dim as u64;
        let kv = self.num_kv_heads as u64 * self.head_dim as u64;
        let bias = if self.qkv_bias { q + 2 * kv } else { 0 };
        let out_bias = if self.dense_bias { h } else { 0 };
        let qk_norms = if self.qk_norm {
            2 * self.head_dim as u64
        } else {
            0
        };
        h * (q + 2 * kv) + bias + q * h + out_bias + qk_norms
    }

    /// Parameters of the MLP of layer `layer` (experts included).
    pub fn mlp_params(&self, layer: u32) -> u64 {
        let h = self.hidden_size as u64;
        match self.moe {
            Some(m) if layer >= m.first_dense_layers => {
                let experts =
                    m.num_experts as u64 * self.dense_mlp_params(m.expert_intermediate_size as u64);
                let router = h * m.num_experts as u64;
                let shared = if m.shared_expert_intermediate_size > 0 {
                    self.dense_mlp_params(m.shared_expert_intermediate_size as u64) + h
                } else {
                    0
                };
                experts + router + shared
            }
            _ => self.dense_mlp_params(self.intermediate_size as u64),
        }
    }

    /// Parameters of one transformer block.
    pub fn layer_params(&self, layer: u32) -> u64 {
        self.attention_params()
            + self.mlp_params(layer)
            + (2 + self.extra_norms_per_layer as u64) * self.norm_params()
    }

    /// Parameter count as instantiated.
    pub fn params(&self) -> u64 {
        let v = self.vocab_size as u64;
        let h = self.hidden_size as u64;
        let embed = v * h;
        let head = if self.tie_word_embeddings { 0 } else { v * h };
        let positions = self.learned_positions as u64 * h;
        let layers: u64 = (0..self.num_layers).map(|l| self.layer_params(l)).sum();
        embed + head + positions + layers + self.norm_params()
    }

    /// Parameters touched per token (MoE: only the routed experts).
    pub fn active_params(&self) -> u64 {
        match self.moe {
            None => self.params(),
            Some(m) => {
                let inactive_per_layer = (m.num_experts - m.experts_per_token.min(m.num_experts))
                    as u64
                    * self.dense_mlp_params(m.expert_intermediate_size as u64);
                let moe_layers = self.num_layers.saturating_sub(m.first_dense_layers) as u64;
                self.params() - inactive_per_layer * moe_layers
            }
        }
    }

    /// The sliding window of layer `layer`, `None` when it attends to the
    /// whole sequence (see [`DecoderArch::sliding_window`]).
    pub fn layer_sliding_window(&self, layer: u32) -> Option<u32> {
        if self.sliding_window == 0 {
            return None;
        }
        match self.full_attention_every {
            0 => Some(self.sliding_window),
            n if (layer + 1).is_multiple_of(n) => None,
            _ => Some(self.sliding_window),
        }
    }

    /// KV-cache bytes per token (all layers, keys and values) at `bytes_per_value`.
    pub fn kv_bytes_per_token(&self, bytes_per_value: u64) -> u64 {
        2 * self.num_layers as u64
            * self.num_kv_heads as u64
            * self.head_dim as u64
            * bytes_per_value
    }
}

/// Which encoder: decides embeddings and the head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum EncoderKind {
    /// BERT: absolute positions, token types, post-LN, MLM head with a transform.
    Bert,
    /// ESM-2: rotary positions, pre-LN, contact head, no token types.
    Esm,
}

/// A bidirectional transformer encoder.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct EncoderArch {
    /// BERT or ESM.
    pub kind: EncoderKind,
    /// Vocabulary size.
    pub vocab_size: u32,
    /// Model width.
    pub hidden_size: u32,
    /// MLP width.
    pub intermediate_size: u32,
    /// Blocks.
    pub num_layers: u32,
    /// Attention heads.
    pub num_heads: u32,
    /// Learned absolute positions (BERT: 512; ESM-2: 0, rotary).
    pub max_position_embeddings: u32,
    /// Token type embeddings (BERT: 2).
    #[cfg_attr(feature = "serde", serde(default))]
    pub type_vocab_size: u32,
}

impl EncoderArch {
    /// Parameters of one block (attention, MLP, two LayerNorms).
    pub fn layer_params(&self) -> u64 {
        let h = self.hidden_size as u64;
        let i = self.intermediate_size as u64;
        4 * (h * h + h) + 2 * h * i + i + h + 4 * h
    }

    /// Parameters of the encoder body (embeddings and blocks), without a head.
    pub fn body_params(&self) -> u64 {
        let h = self.hidden_size as u64;
        let v = self.vocab_size as u64;
        let emb = v * h
            + self.max_position_embeddings as u64 * h
            + self.type_vocab_size as u64 * h
            + match self.kind {
                EncoderKind::Bert => 2 * h, // embedding LayerNorm
                EncoderKind::Esm => 0,
            };
        let tail = match self.kind {
            EncoderKind::Bert => 0,
            // emb_layer_norm_after + contact head (layers*heads -> 1).
            EncoderKind::Esm => 2 * h + self.num_layers as u64 * self.num_heads as u64 + 1,
        };
        emb + self.num_layers as u64 * self.layer_params() + tail
    }

    /// Parameters of the masked-LM head (BERT's transform + tied decoder with bias).
    pub fn mlm_head_params(&self) -> u64 {
        let h = self.hidden_size as u64;
        h * h + h + 2 * h + self.vocab_size as u64
    }

    /// Parameter count as instantiated: BERT with its MLM head, ESM-2 without.
    pub fn params(&self) -> u64 {
        match self.kind {
            EncoderKind::Bert => self.body_params() + self.mlm_head_params(),
            EncoderKind::Esm => self.body_params(),
        }
    }
}

/// Which library's vision transformer a job runs. Their blocks run the
/// same kernels; around the blocks they hold different tensors.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum VitLibrary {
    /// torchvision's `VisionTransformer` (`vit_b_16`, `vit_l_16`):
    /// `nn.MultiheadAttention`, and the class-token concatenation held
    /// beside the position-embedded input through the encoder.
    #[default]
    Torchvision,
    /// timm's `VisionTransformer` (`vit_base_patch16_224`, ...): its own
    /// attention (`qkv` views straight into SDPA) and only the
    /// position-embedded input held through the blocks.
    Timm,
}

/// A vision transformer (torchvision's or timm's `VisionTransformer`).
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct VitArch {
    /// The library whose model the job builds (default torchvision).
    #[cfg_attr(feature = "serde", serde(default))]
    pub library: VitLibrary,
    /// Image size the position embedding was built for.
    pub image_size: u32,
    /// Patch edge in pixels.
    pub patch_size: u32,
    /// Model width.
    pub hidden_size: u32,
    /// MLP width.
    pub mlp_dim: u32,
    /// Blocks.
    pub num_layers: u32,
    /// Attention heads.
    pub num_heads: u32,
    /// Classifier outputs.
    pub num_classes: u32,
}

impl VitArch {
    /// Tokens for an image of `image_size` pixels: patches plus the class token.
    pub fn tokens(&self, image_size: u32) -> u64 {
        let side = (image_size / self.patch_size) as u64;
        side * side + 1
    }

    /// Parameter count.
    pub fn params(&self) -> u64 {
        let h = self.hidden_size as u64;
        let m = self.mlp_dim as u64;
        let p = self.patch_size as u64;
        let conv = 3 * h * p * p + h;
        let pos = self.tokens(self.image_size) * h;
        let layer = 2 * h + (3 * h * h + 3 * h) + (h * h + h) + 2 * h + (h * m + m) + (m * h + h);
        conv + h
            + pos
            + self.num_layers as u64 * layer
            + 2 * h
            + h * self.num_classes as u64
            + self.num_classes as u64
    }
}

/// ESMFold (HF `EsmForProteinFolding`).
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct EsmFoldArch {
    /// The ESM-2 language model stem.
    pub stem: EncoderArch,
    /// Folding-trunk blocks (48).
    pub trunk_blocks: u32,
    /// Sequence state width (1024).
    pub sequence_state_dim: u32,
    /// Pair state width (128).
    pub pairwise_state_dim: u32,
    /// Head width of sequence attention (32).
    pub sequence_head_width: u32,
    /// Head width of triangular attention (32).
    pub pairwise_head_width: u32,
    /// Relative position bins (32).
    pub position_bins: u32,
    /// Recycles the config allows (4).
    pub max_recycles: u32,
    /// Structure-module blocks (8).
    pub structure_blocks: u32,
    /// Structure-module single width (384).
    pub structure_sequence_dim: u32,
    /// Structure-module pair width (128).
    pub structure_pairwise_dim: u32,
    /// IPA heads (12).
    pub ipa_heads: u32,
    /// Parameters outside the stem (trunk, structure module, heads), as
    /// instantiated by transformers 5.17.0; see `families::esmfold`.
    pub folding_params: u64,
}

impl EsmFoldArch {
    /// Parameter count (stem + folding parts).
    pub fn params(&self) -> u64 {
        self.stem.body_params() + self.folding_params
    }
}

/// Convolutional network topologies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(tag = "topology", rename_all = "snake_case"))]
pub enum CnnArch {
    /// torchvision ResNet: blocks per stage, bottleneck (50/101/152) or basic (18/34).
    ResNet {
        /// Blocks in each of the four stages.
        blocks: [u32; 4],
        /// Bottleneck blocks (1x1, 3x3, 1x1 with expansion 4).
        bottleneck: bool,
        /// Classifier outputs.
        num_classes: u32,
    },
    /// torchvision MobileNetV2 (width 1.0).
    MobileNetV2 {
        /// Classifier outputs.
        num_classes: u32,
    },
}

/// Reads what the derived `Serialize` writes (`{"topology": "res_net",
/// "blocks": [...], "bottleneck": ..., "num_classes": ...}` or
/// `{"topology": "mobile_net_v2", "num_classes": ...}`) through one flat
/// struct: serde's derive for an internally tagged enum inside another one
/// (`family`) cost the page 3.7 KB of its gzipped bundle.
#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for CnnArch {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "snake_case")]
        enum Topology {
            ResNet,
            MobileNetV2,
        }
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Fields {
            topology: Topology,
            blocks: Option<[u32; 4]>,
            bottleneck: Option<bool>,
            num_classes: u32,
        }
        let f = Fields::deserialize(deserializer)?;
        Ok(match f.topology {
            Topology::ResNet => CnnArch::ResNet {
                blocks: f.blocks.ok_or_else(|| D::Error::missing_field("blocks"))?,
                bottleneck: f
                    .bottleneck
                    .ok_or_else(|| D::Error::missing_field("bottleneck"))?,
                num_classes: f.num_classes,
            },
            Topology::MobileNetV2 => CnnArch::MobileNetV2 {
                num_classes: f.num_classes,
            },
        })
    }
}

/// A named model: what the preset catalog and specs hold.
#[derive(Clone, Debug, PartialEq)]
pub struct Model {
    /// Stable id used in specs and URLs, e.g. `llama-3.1-8b`.
    pub id: String,
    /// Name to show people.
    pub name: String,
    /// The shapes.
    pub arch: Architecture,
}

/// Field names of an encoder's shapes: vocab_size, hidden_size,
/// intermediate_size, num_layers, num_heads.
type EncoderFields = [&'static str; 5];
const ENCODER_FIELDS: EncoderFields = [
    "model.vocab_size",
    "model.hidden_size",
    "model.intermediate_size",
    "model.num_layers",
    "model.num_heads",
];
/// The same, for ESMFold's language-model stem.
const STEM_FIELDS: EncoderFields = [
    "model.stem.vocab_size",
    "model.stem.hidden_size",
    "model.stem.intermediate_size",
    "model.stem.num_layers",
    "model.stem.num_heads",
];

fn validate_encoder(a: &EncoderArch, names: EncoderFields) -> Result<(), Error> {
    use crate::error::check_range;
    const DIM: u64 = 1 << 20;
    let [vocab, hidden, intermediate, layers, heads] = names;
    check_range(vocab, a.vocab_size as u64, 1, 4 * DIM)?;
    check_range(hidden, a.hidden_size as u64, 1, DIM)?;
    check_range(intermediate, a.intermediate_size as u64, 1, 4 * DIM)?;
    check_range(layers, a.num_layers as u64, 1, 1024)?;
    check_range(heads, a.num_heads as u64, 1, 4096)?;
    if !a.hidden_size.is_multiple_of(a.num_heads) {
        return Err(Error::invalid(
            heads,
            format!(
                "{} does not divide hidden_size {}",
                a.num_heads, a.hidden_size
            ),
            "a divisor of hidden_size",
        ));
    }
    Ok(())
}

/// Checks a custom architecture's shapes, naming the field.
pub fn validate_arch(arch: &Architecture) -> Result<(), Error> {
    use crate::error::check_range;
    const DIM: u64 = 1 << 20;
    match arch {
        Architecture::Decoder(a) => {
            check_range("model.vocab_size", a.vocab_size as u64, 1, 4 * DIM)?;
            check_range("model.hidden_size", a.hidden_size as u64, 1, DIM)?;
            check_range(
                "model.intermediate_size",
                a.intermediate_size as u64,
                1,
                4 * DIM,
            )?;
            check_range("model.num_layers", a.num_layers as u64, 1, 1024)?;
            check_range("model.num_heads", a.num_heads as u64, 1, 4096)?;
            check_range(
                "model.num_kv_heads",
                a.num_kv_heads as u64,
                1,
                a.num_heads as u64,
            )?;
            check_range("model.head_dim", a.head_dim as u64, 1, 4096)?;
            if a.num_heads % a.num_kv_heads != 0 {
                return Err(Error::invalid(
                    "model.num_kv_heads",
                    format!(
                        "{} does not divide num_heads {}",
                        a.num_kv_heads, a.num_heads
                    ),
                    "a divisor of num_heads",
                ));
            }
            if let Some(m) = a.moe {
                check_range("model.moe.num_experts", m.num_experts as u64, 1, 1024)?;
                check_range(
                    "model.moe.experts_per_token",
                    m.experts_per_token as u64,
                    1,
                    m.num_experts as u64,
                )?;
                check_range(
                    "model.moe.expert_intermediate_size",
                    m.expert_intermediate_size as u64,
                    1,
                    4 * DIM,
                )?;
            }
        }
        Architecture::Encoder(a) => validate_encoder(a, ENCODER_FIELDS)?,
        Architecture::Vit(a) => {
            check_range("model.patch_size", a.patch_size as u64, 1, 1024)?;
            check_range("model.hidden_size", a.hidden_size as u64, 1, DIM)?;
            check_range("model.mlp_dim", a.mlp_dim as u64, 1, 4 * DIM)?;
            check_range("model.num_layers", a.num_layers as u64, 1, 1024)?;
            check_range("model.num_heads", a.num_heads as u64, 1, 4096)?;
            check_range(
                "model.image_size",
                a.image_size as u64,
                a.patch_size as u64,
                8192,
            )?;
        }
        Architecture::EsmFold(a) => {
            validate_encoder(&a.stem, STEM_FIELDS)?;
            check_range("model.trunk_blocks", a.trunk_blocks as u64, 1, 1024)?;
            check_range(
                "model.pairwise_state_dim",
                a.pairwise_state_dim as u64,
                1,
                4096,
            )?;
            check_range(
                "model.sequence_state_dim",
                a.sequence_state_dim as u64,
                1,
                65536,
            )?;
            check_range("model.max_recycles", a.max_recycles as u64, 0, 64)?;
            // The folding parts' parameters beyond the trunk are replayed
            // as 64 KiB tensors: bounded so a load stays quick.
            check_range(
                "model.folding_params",
                a.folding_params,
                0,
                MAX_FOLDING_PARAMS,
            )?;
        }
        Architecture::Cnn(CnnArch::ResNet {
            blocks,
            num_classes,
            ..
        }) => {
            let fields = [
                "model.blocks[0]",
                "model.blocks[1]",
                "model.blocks[2]",
                "model.blocks[3]",
            ];
            for (field, &n) in fields.into_iter().zip(blocks) {
                check_range(field, n as u64, 1, 256)?;
            }
            check_range("model.num_classes", *num_classes as u64, 1, 4 * DIM)?;
        }
        Architecture::Cnn(CnnArch::MobileNetV2 { num_classes }) => {
            check_range("model.num_classes", *num_classes as u64, 1, 4 * DIM)?;
        }
    }
    let params = arch.param_bound();
    if params > crate::arch::MAX_PARAMS {
        return Err(Error::invalid(
            "model",
            format!("about {} parameters is too large", params as u64),
            "at most 2^50 (about 1.1e15) parameters",
        ));
    }
    Ok(())
}

/// Largest `folding_params` of a custom ESMFold (4.3e9; ESMFold has 0.7e9).
pub const MAX_FOLDING_PARAMS: u64 = 1 << 32;
