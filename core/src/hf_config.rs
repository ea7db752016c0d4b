//! Import of Hugging Face `config.json` files.
//!
//! Reads the keys transformers 5.17 reads for each supported `model_type`
//! and builds the [`Architecture`] that `from_config` would instantiate.
//! Optional keys take transformers' class defaults, which differ per type:
//!
//! | model_type | tie_word_embeddings | num_key_value_heads | sliding window |
//! |---|---|---|---|
//! | llama | false | = heads | none |
//! | mistral | false | 8 | `sliding_window`, 4096 when absent, null = none |
//! | mixtral | false | 8 | `sliding_window`, none when absent |
//! | qwen2, qwen2_moe | false | 32 / 16 | only with `use_sliding_window` |
//! | qwen3 | false | 32 (null: = heads) | only with `use_sliding_window` |
//! | qwen3_moe | false | 4 | only with `use_sliding_window` |
//! | gemma2 | true | 4 | 4096 on every other layer |
//! | phi3 | false | = heads | `sliding_window`, none when absent |
//!
//! Beyond shapes, four types run layers of their own: phi3 fuses q/k/v and
//! gate/up ([`DecoderArch::fused_projections`]); gemma2 normalises with
//! [`NormKind::GemmaRmsNorm`], four norms a layer, and scales its
//! embeddings ([`DecoderArch::scaled_embeddings`]); qwen3 and qwen3_moe
//! normalise each head's queries and keys ([`DecoderArch::qk_norm`]; qwen3's
//! `head_dim` is 128 when absent).
//!
//! Required keys (`hidden_size`, `intermediate_size`, `num_hidden_layers`,
//! `num_attention_heads`, `vocab_size`; GPT-2's `n_embd`, `n_layer`,
//! `n_head`, `vocab_size`) must be present: a missing one is an
//! [`Error::MissingField`], a bad one an [`Error::InvalidField`], both naming
//! the key and the range it accepts (the ranges of
//! [`crate::arch::validate_arch`], which also runs on the result).

use crate::arch::*;
use crate::error::{check_range, Error};
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::cell::RefCell;
use serde_json::{Map, Value};

/// Model types the importer understands.
pub const SUPPORTED: &str =
    "llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, gemma2, phi3, gpt2, bert, esm";

/// Largest width, as in [`crate::arch::validate_arch`].
const DIM: u64 = 1 << 20;
const MAX_LAYERS: u64 = 1024;
const MAX_HEADS: u64 = 4096;
const MAX_EXPERTS: u64 = 4096;
const MAX_POSITIONS: u64 = 1 << 22;

/// Imports a `config.json` document.
pub fn import(text: &str) -> Result<Architecture, Error> {
    let value = crate::readers::json::parse(text).map_err(|e| match e {
        Error::Json { message } => Error::Json {
            message: format!("config.json: {message}"),
        },
        other => other,
    })?;
    import_value(&value)
}

/// Imports a parsed `config.json`.
pub fn import_value(value: &Value) -> Result<Architecture, Error> {
    let map = value.as_object().ok_or_else(|| {
        Error::invalid(
            "hf_config",
            "is not a JSON object",
            "the object of a Hugging Face config.json",
        )
    })?;
    let model_type = match map.get("model_type") {
        None | Some(Value::Null) => return Err(Error::missing("model_type", SUPPORTED)),
        Some(Value::String(s)) => s.as_str(),
        Some(_) => {
            return Err(Error::invalid(
                "model_type",
                "is not a string",
                &format!("a string, one of: {SUPPORTED}"),
            ))
        }
    };
    let c = Config {
        map,
        model_type,
        read: RefCell::new(Vec::new()),
    };
    let (arch, renames) = match model_type {
        "llama" | "mistral" | "mixtral" | "qwen2" | "qwen2_moe" | "qwen3" | "qwen3_moe"
        | "gemma2" | "phi3" => (
            Architecture::Decoder(c.llama_family()?),
            c.decoder_renames(),
        ),
        "gpt2" => (Architecture::Decoder(c.gpt2()?), GPT2_RENAMES),
        "bert" => (Architecture::Encoder(c.bert()?), ENCODER_RENAMES),
        "esm" => (Architecture::Encoder(c.esm()?), ENCODER_RENAMES),
        other => {
            return Err(Error::UnsupportedModelType {
                model_type: other.into(),
                supported: SUPPORTED.into(),
            })
        }
    };
    crate::arch::validate_arch(&arch).map_err(|e| rename(e, renames))?;
    c.refuse_misspelled_keys()?;
    Ok(arch)
}

/// `validate_arch` field -> config.json key.
type Renames = &'static [(&'static str, &'static str)];

const DECODER_RENAMES: Renames = &[
    ("model.vocab_size", "vocab_size"),
    ("model.hidden_size", "hidden_size"),
    ("model.intermediate_size", "intermediate_size"),
    ("model.num_layers", "num_hidden_layers"),
    ("model.num_heads", "num_attention_heads"),
    ("model.num_kv_heads", "num_key_value_heads"),
    ("model.head_dim", "head_dim"),
    ("model.moe.num_experts", "num_local_experts"),
    ("model.moe.experts_per_token", "num_experts_per_tok"),
    ("model.moe.expert_intermediate_size", "intermediate_size"),
];

const QWEN2_MOE_RENAMES: Renames = &[
    ("model.vocab_size", "vocab_size"),
    ("model.hidden_size", "hidden_size"),
    ("model.intermediate_size", "intermediate_size"),
    ("model.num_layers", "num_hidden_layers"),
    ("model.num_heads", "num_attention_heads"),
    ("model.num_kv_heads", "num_key_value_heads"),
    ("model.head_dim", "head_dim"),
    ("model.moe.num_experts", "num_experts"),
    ("model.moe.experts_per_token", "num_experts_per_tok"),
    (
        "model.moe.expert_intermediate_size",
        "moe_intermediate_size",
    ),
];

const GPT2_RENAMES: Renames = &[
    ("model.vocab_size", "vocab_size"),
    ("model.hidden_size", "n_embd"),
    ("model.intermediate_size", "n_inner"),
    ("model.num_layers", "n_layer"),
    ("model.num_heads", "n_head"),
    ("model.num_kv_heads", "n_head"),
    ("model.head_dim", "n_head"),
];

const ENCODER_RENAMES: Renames = &[
    ("model.vocab_size", "vocab_size"),
    ("model.hidden_size", "hidden_size"),
    ("model.intermediate_size", "intermediate_size"),
    ("model.num_layers", "num_hidden_layers"),
    ("model.num_heads", "num_attention_heads"),
];

fn rename(e: Error, renames: Renames) -> Error {
    match e {
        Error::InvalidField {
            field,
            problem,
            allowed,
        } => {
            let field = renames
                .iter()
                .find(|(from, _)| *from == field)
                .map(|(_, to)| String::from(*to))
                .unwrap_or(field);
            Error::InvalidField {
                field,
                problem,
                allowed,
            }
        }
        other => other,
    }
}

fn range_text(min: u64, max: u64) -> String {
    format!("an integer from {min} to {max}")
}

fn clamp_u32(v: u64) -> u32 {
    v.min(u32::MAX as u64) as u32
}

/// One config.json object and its `model_type`.
struct Config<'a> {
    map: &'a Map<String, Value>,
    model_type: &'a str,
    /// Every key the importer looked up, present or not.
    read: RefCell<Vec<&'static str>>,
}

/// Largest edit distance at which a key the importer does not read is taken
/// for a misspelling of one it reads and is absent (`tie_word_embedding`,
/// `num_key_value_head`): two edits, a swap of neighbours counting one.
const MISSPELLING_EDITS: usize = 2;

impl Config<'_> {
    /// The raw value of `key` (`null` included), recorded as read. Not
    /// inlined: every reader calls it (one copy of the map's search and the
    /// recording was 606 bytes smaller in the page's gzipped bundle).
    #[inline(never)]
    fn lookup(&self, key: &'static str) -> Option<&Value> {
        let mut read = self.read.borrow_mut();
        if !read.contains(&key) {
            read.push(key);
        }
        self.map.get(key)
    }

    /// A config carries many keys the importer does not read (tokenizer ids,
    /// rope settings, ...), and that is fine; but one a letter or two away
    /// from a key it reads, while that key is absent, is a misspelling whose
    /// default would be used in silence (`"tie_word_embedding": false`
    /// left the embeddings tied: 9 GB off for Gemma 2 27B). Refused, naming
    /// the key it resembles and every key read.
    fn refuse_misspelled_keys(&self) -> Result<(), Error> {
        let read = self.read.borrow();
        for key in self.map.keys() {
            let near = read.iter().find(|r| {
                **r != key
                    && !self.map.contains_key(**r)
                    && crate::readers::known_keys::edit_distance(key, r) <= MISSPELLING_EDITS
            });
            if let Some(near) = near {
                return Err(Error::invalid(
                    &format!("hf_config.{key}"),
                    format!("not a key headroom reads; did you mean `{near}`?"),
                    &format!("the keys it reads: {}", crate::keys::one_of(&read)),
                ));
            }
        }
        Ok(())
    }

    /// The value of `key`; `null` counts as absent.
    fn get(&self, key: &'static str) -> Option<&Value> {
        match self.lookup(key) {
            None | Some(Value::Null) => None,
            Some(v) => Some(v),
        }
    }

    /// An integer in `[min, max]`, `None` when absent.
    fn int(&self, key: &'static str, min: u64, max: u64) -> Result<Option<u64>, Error> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let allowed = range_text(min, max);
        let n = match v {
            Value::Number(n) => {
                if let Some(u) = n.as_u64() {
                    u
                } else if let Some(i) = n.as_i64() {
                    return Err(Error::invalid(key, format!("{i} is negative"), &allowed));
                } else {
                    return Err(Error::invalid(
                        key,
                        format!("{n} is not an integer"),
                        &allowed,
                    ));
                }
            }
            Value::Bool(_) => return Err(Error::invalid(key, "is a boolean", &allowed)),
            Value::String(_) => return Err(Error::invalid(key, "is a string", &allowed)),
            _ => return Err(Error::invalid(key, "has the wrong type", &allowed)),
        };
        check_range(key, n, min, max)?;
        Ok(Some(n))
    }

    /// A required integer in `[min, max]`.
    fn required(&self, key: &'static str, min: u64, max: u64) -> Result<u32, Error> {
        match self.int(key, min, max)? {
            Some(n) => Ok(clamp_u32(n)),
            None => Err(Error::missing(key, &range_text(min, max))),
        }
    }

    /// An optional integer in `[min, max]` with transformers' default.
    fn optional(&self, key: &'static str, min: u64, max: u64, default: u32) -> Result<u32, Error> {
        Ok(self.int(key, min, max)?.map(clamp_u32).unwrap_or(default))
    }

    /// The first of `keys` present (GPT-2's attribute aliases), required.
    fn required_alias(&self, keys: &[&'static str], min: u64, max: u64) -> Result<u32, Error> {
        for key in keys {
            if let Some(n) = self.int(key, min, max)? {
                return Ok(clamp_u32(n));
            }
        }
        Err(Error::missing(keys[0], &range_text(min, max)))
    }

    fn boolean(&self, key: &'static str, default: bool) -> Result<bool, Error> {
        match self.get(key) {
            None => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(Error::invalid(key, "is not a boolean", "true or false")),
        }
    }

    fn string(&self, key: &'static str) -> Result<Option<&str>, Error> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.as_str())),
            Some(_) => Err(Error::invalid(key, "is not a string", "a string")),
        }
    }

    fn decoder_renames(&self) -> Renames {
        if matches!(self.model_type, "qwen2_moe" | "qwen3_moe") {
            QWEN2_MOE_RENAMES
        } else {
            DECODER_RENAMES
        }
    }

    /// Llama, Mistral, Mixtral, Qwen2, Qwen2-MoE, Qwen3, Qwen3-MoE, Gemma 2
    /// and Phi-3: RMSNorm, gated MLP, rotary positions.
    fn llama_family(&self) -> Result<DecoderArch, Error> {
        let t = self.model_type;
        let hidden_size = self.required("hidden_size", 1, DIM)?;
        let intermediate_size = self.required("intermediate_size", 1, 4 * DIM)?;
        let num_layers = self.required("num_hidden_layers", 1, MAX_LAYERS)?;
        let num_heads = self.required("num_attention_heads", 1, MAX_HEADS)?;
        let vocab_size = self.required("vocab_size", 1, 4 * DIM)?;
        let kv_default = match t {
            "mistral" | "mixtral" => 8,
            "gemma2" => 4,
            "qwen2" => 32,
            // Qwen3Config: 32 when absent, the query heads when null.
            "qwen3" if self.lookup("num_key_value_heads") == Some(&Value::Null) => num_heads,
            "qwen3" => 32,
            "qwen2_moe" => 16,
            "qwen3_moe" => 4,
            _ => num_heads,
        };
        let num_kv_heads = self.optional("num_key_value_heads", 1, MAX_HEADS, kv_default)?;
        let head_dim = match self.int("head_dim", 1, MAX_HEADS)? {
            Some(d) => clamp_u32(d),
            None if t == "gemma2" => 256,
            None if t == "qwen3" => 128,
            None if hidden_size < num_heads => {
                return Err(Error::invalid(
                    "num_attention_heads",
                    format!(
                        "{num_heads} exceeds hidden_size {hidden_size} and there is no head_dim"
                    ),
                    &format!("an integer from 1 to {hidden_size}, or an explicit head_dim"),
                ))
            }
            None => hidden_size / num_heads,
        };
        let tie_word_embeddings = self.boolean("tie_word_embeddings", t == "gemma2")?;
        let (qkv_bias, dense_bias) = match t {
            "llama" => {
                let attention = self.boolean("attention_bias", false)?;
                let mlp = self.boolean("mlp_bias", false)?;
                if attention != mlp {
                    return Err(Error::unsupported(format!(
                        "llama with attention_bias = {attention} but mlp_bias = {mlp} (headroom models both on or both off)"
                    )));
                }
                (attention, attention)
            }
            "qwen2" => (true, false),
            "qwen3" | "qwen3_moe" => {
                if self.boolean("attention_bias", false)? {
                    return Err(Error::unsupported(format!(
                        "{t} with attention_bias = true (headroom models Qwen3 without biases)"
                    )));
                }
                (false, false)
            }
            "qwen2_moe" => (self.boolean("qkv_bias", true)?, false),
            "gemma2" => {
                if self.boolean("attention_bias", false)? {
                    return Err(Error::unsupported("gemma2 with attention_bias = true"));
                }
                (false, false)
            }
            _ => (false, false),
        };
        let mut arch = DecoderArch {
            vocab_size,
            hidden_size,
            intermediate_size,
            num_layers,
            num_heads,
            num_kv_heads,
            head_dim,
            tie_word_embeddings,
            mlp: MlpKind::Gated,
            norm: if t == "gemma2" {
                NormKind::GemmaRmsNorm
            } else {
                NormKind::RmsNorm
            },
            qkv_bias,
            dense_bias,
            learned_positions: 0,
            extra_norms_per_layer: if t == "gemma2" { 2 } else { 0 },
            moe: None,
            sliding_window: 0,
            full_attention_every: 0,
            final_logit_softcapping: t == "gemma2"
                && !matches!(self.get("final_logit_softcapping"), Some(Value::Null)),
            attn_logit_softcapping: t == "gemma2"
                && !matches!(self.get("attn_logit_softcapping"), Some(Value::Null)),
            fused_projections: t == "phi3",
            scaled_embeddings: t == "gemma2",
            qk_norm: matches!(t, "qwen3" | "qwen3_moe"),
        };
        arch.moe = match t {
            "mixtral" => Some(MoeConfig {
                num_experts: self.optional("num_local_experts", 1, MAX_EXPERTS, 8)?,
                experts_per_token: self.optional("num_experts_per_tok", 1, MAX_EXPERTS, 2)?,
                expert_intermediate_size: intermediate_size,
                shared_expert_intermediate_size: 0,
                first_dense_layers: 0,
                routing_weights_in_model_dtype: false,
            }),
            "qwen2_moe" | "qwen3_moe" => self.qwen2_moe(num_layers)?,
            _ => None,
        };
        let (window, every) = self.sliding(num_layers)?;
        arch.sliding_window = window;
        arch.full_attention_every = every;
        Ok(arch)
    }

    /// Qwen2-MoE's and Qwen3-MoE's experts: sparse layers must be all but a
    /// leading run of dense ones (`mlp_only_layers` = 0..k,
    /// `decoder_sparse_step` 1).
    fn qwen2_moe(&self, num_layers: u32) -> Result<Option<MoeConfig>, Error> {
        // Qwen3-MoE's defaults, and no shared expert (its config has none).
        let qwen3 = self.model_type == "qwen3_moe";
        let (experts, top_k, width) = if qwen3 { (128, 8, 768) } else { (60, 4, 1408) };
        let num_experts = self.optional("num_experts", 0, MAX_EXPERTS, experts)?;
        if num_experts == 0 {
            return Ok(None);
        }
        let step = self.optional("decoder_sparse_step", 1, MAX_LAYERS, 1)?;
        if step != 1 && step <= num_layers {
            return Err(Error::unsupported(format!(
                "{} with decoder_sparse_step = {step} (only 1, every layer sparse, is modelled)",
                self.model_type
            )));
        }
        if step > num_layers {
            return Ok(None);
        }
        let mut first_dense_layers = 0u32;
        if let Some(v) = self.get("mlp_only_layers") {
            let list = v.as_array().ok_or_else(|| {
                Error::invalid(
                    "mlp_only_layers",
                    "is not a list",
                    "a list of layer indices",
                )
            })?;
            let mut indices: alloc::vec::Vec<u64> = alloc::vec::Vec::new();
            for item in list {
                let i = item.as_u64().ok_or_else(|| {
                    Error::invalid(
                        "mlp_only_layers",
                        "holds a non-integer",
                        "a list of layer indices",
                    )
                })?;
                indices.push(i);
            }
            // The distinct indices must be 0..k: marked in a list as long
            // as the indices (no sort, which would be one more sort in the
            // page's bundle), none past it and no gap.
            let n = indices.len();
            let mut seen = alloc::vec![false; n];
            let mut past = false;
            for &i in &indices {
                if i < n as u64 {
                    seen[i as usize] = true;
                } else {
                    past = true;
                }
            }
            let k = seen.iter().take_while(|&&s| s).count();
            if past || seen[k..].contains(&true) {
                return Err(Error::unsupported(format!(
                    "{} with mlp_only_layers other than the leading layers 0..k",
                    self.model_type
                )));
            }
            first_dense_layers = k as u32;
        }
        Ok(Some(MoeConfig {
            num_experts,
            experts_per_token: self.optional("num_experts_per_tok", 1, MAX_EXPERTS, top_k)?,
            expert_intermediate_size: self.optional("moe_intermediate_size", 1, 4 * DIM, width)?,
            shared_expert_intermediate_size: if qwen3 {
                0
            } else {
                self.optional("shared_expert_intermediate_size", 0, 4 * DIM, 5632)?
            },
            first_dense_layers,
            routing_weights_in_model_dtype: true,
        }))
    }

    /// `(sliding_window, full_attention_every)` as transformers 5.17's
    /// `DynamicCache` derives the layer types.
    fn sliding(&self, num_layers: u32) -> Result<(u32, u32), Error> {
        let t = self.model_type;
        let window_key = "sliding_window";
        let read = |default: Option<u32>| -> Result<Option<u32>, Error> {
            match self.lookup(window_key) {
                None => Ok(default),
                Some(Value::Null) => Ok(None),
                Some(_) => Ok(self.int(window_key, 1, u32::MAX as u64)?.map(clamp_u32)),
            }
        };
        // The window and the default layer pattern, before `layer_types`.
        let (window, every) = match t {
            "mistral" => (read(Some(4096))?, 0),
            "mixtral" | "phi3" => (read(None)?, 0),
            "gemma2" => (read(Some(4096))?, 2),
            "qwen2" | "qwen2_moe" | "qwen3" | "qwen3_moe" => {
                if !self.boolean("use_sliding_window", false)? {
                    (None, 0)
                } else {
                    let w = read(Some(4096))?;
                    let first = self.optional("max_window_layers", 0, MAX_LAYERS, 28)?;
                    if first >= num_layers {
                        (None, 0)
                    } else if first == 0 {
                        (w, 0)
                    } else if self.get("layer_types").is_none() {
                        return Err(Error::unsupported(format!(
                            "{t} with use_sliding_window and max_window_layers = {first} (full attention first, then sliding)"
                        )));
                    } else {
                        (w, 0)
                    }
                }
            }
            _ => (None, 0),
        };
        let Some(window) = window else {
            return Ok((0, 0));
        };
        let every = match self.get("layer_types") {
            None => every,
            Some(v) => layer_pattern(v, num_layers)?,
        };
        if every == u32::MAX {
            Ok((0, 0))
        } else {
            Ok((window, every))
        }
    }

    fn gpt2(&self) -> Result<DecoderArch, Error> {
        let hidden_size = self.required_alias(&["n_embd", "hidden_size"], 1, DIM)?;
        let num_layers = self.required_alias(&["n_layer", "num_hidden_layers"], 1, MAX_LAYERS)?;
        let num_heads = self.required_alias(&["n_head", "num_attention_heads"], 1, MAX_HEADS)?;
        let vocab_size = self.required("vocab_size", 1, 4 * DIM)?;
        let intermediate_size =
            self.optional("n_inner", 1, 4 * DIM, hidden_size.saturating_mul(4))?;
        let positions = match self.int("n_positions", 1, MAX_POSITIONS)? {
            Some(n) => clamp_u32(n),
            None => self.optional("max_position_embeddings", 1, MAX_POSITIONS, 1024)?,
        };
        if hidden_size % num_heads != 0 {
            return Err(Error::invalid(
                "n_head",
                format!("{num_heads} does not divide n_embd {hidden_size}"),
                "a divisor of n_embd",
            ));
        }
        Ok(DecoderArch {
            vocab_size,
            hidden_size,
            intermediate_size,
            num_layers,
            num_heads,
            num_kv_heads: num_heads,
            head_dim: hidden_size / num_heads,
            tie_word_embeddings: self.boolean("tie_word_embeddings", true)?,
            mlp: MlpKind::Plain,
            norm: NormKind::LayerNorm,
            qkv_bias: true,
            dense_bias: true,
            learned_positions: positions,
            extra_norms_per_layer: 0,
            moe: None,
            sliding_window: 0,
            full_attention_every: 0,
            final_logit_softcapping: false,
            attn_logit_softcapping: false,
            fused_projections: false,
            scaled_embeddings: false,
            qk_norm: false,
        })
    }

    fn encoder_shapes(&self, kind: EncoderKind) -> Result<EncoderArch, Error> {
        Ok(EncoderArch {
            kind,
            vocab_size: self.required("vocab_size", 1, 4 * DIM)?,
            hidden_size: self.required("hidden_size", 1, DIM)?,
            intermediate_size: self.required("intermediate_size", 1, 4 * DIM)?,
            num_layers: self.required("num_hidden_layers", 1, MAX_LAYERS)?,
            num_heads: self.required("num_attention_heads", 1, MAX_HEADS)?,
            max_position_embeddings: 0,
            type_vocab_size: 0,
        })
    }

    /// `BertForMaskedLM`: absolute positions, token types, tied MLM decoder.
    fn bert(&self) -> Result<EncoderArch, Error> {
        let mut a = self.encoder_shapes(EncoderKind::Bert)?;
        a.max_position_embeddings =
            self.optional("max_position_embeddings", 0, MAX_POSITIONS, 512)?;
        a.type_vocab_size = self.optional("type_vocab_size", 0, 4 * DIM, 2)?;
        if let Some(p) = self.string("position_embedding_type")? {
            if p != "absolute" {
                return Err(Error::unsupported(format!(
                    "bert with position_embedding_type = \"{p}\""
                )));
            }
        }
        if !self.boolean("tie_word_embeddings", true)? {
            return Err(Error::unsupported(
                "bert with tie_word_embeddings = false (the MLM decoder is modelled tied)",
            ));
        }
        Ok(a)
    }

    /// `EsmModel` (no pooler, no LM head).
    fn esm(&self) -> Result<EncoderArch, Error> {
        if self.boolean("is_folding_model", false)? {
            return Err(Error::unsupported(
                "an ESMFold config (`is_folding_model: true`) cannot be imported; use the preset `esmfold-v1`",
            ));
        }
        let mut a = self.encoder_shapes(EncoderKind::Esm)?;
        let positions = self.optional("max_position_embeddings", 1, MAX_POSITIONS, 1026)?;
        a.max_position_embeddings = match self
            .string("position_embedding_type")?
            .unwrap_or("absolute")
        {
            "rotary" => 0,
            "absolute" => positions,
            other => {
                return Err(Error::invalid(
                    "position_embedding_type",
                    format!("\"{other}\" is not modelled"),
                    "\"rotary\" or \"absolute\"",
                ))
            }
        };
        if self.boolean("emb_layer_norm_before", false)? {
            return Err(Error::unsupported("esm with emb_layer_norm_before = true"));
        }
        Ok(a)
    }
}

/// Reads an explicit `layer_types` list: `0` = every layer slides,
/// `n` = every `n`-th layer is full, `u32::MAX` = every layer is full.
fn layer_pattern(v: &Value, num_layers: u32) -> Result<u32, Error> {
    const ALLOWED: &str =
        "a list of \"sliding_attention\" / \"full_attention\", one per layer, full every n-th layer";
    let list = v
        .as_array()
        .ok_or_else(|| Error::invalid("layer_types", "is not a list", ALLOWED))?;
    if list.len() != num_layers as usize {
        return Err(Error::invalid(
            "layer_types",
            format!("has {} entries for {num_layers} layers", list.len()),
            ALLOWED,
        ));
    }
    let mut full = alloc::vec::Vec::with_capacity(list.len());
    for item in list {
        match item.as_str() {
            Some("full_attention") => full.push(true),
            Some("sliding_attention") => full.push(false),
            _ => {
                return Err(Error::invalid(
                    "layer_types",
                    format!("holds {item}, which is not modelled"),
                    ALLOWED,
                ))
            }
        }
    }
    if full.iter().all(|&f| f) {
        return Ok(u32::MAX);
    }
    if full.iter().all(|&f| !f) {
        return Ok(0);
    }
    let first_full = full.iter().position(|&f| f).unwrap_or(0) as u32 + 1;
    let every = first_full;
    let matches = full
        .iter()
        .enumerate()
        .all(|(i, &f)| f == (i as u32 + 1).is_multiple_of(every));
    if matches {
        Ok(every)
    } else {
        Err(Error::unsupported(
            "layer_types whose full-attention layers are not every n-th layer",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn layer_patterns() {
        let v = |s: &[&str]| Value::Array(s.iter().map(|x| Value::String(x.to_string())).collect());
        let (s, f) = ("sliding_attention", "full_attention");
        assert_eq!(layer_pattern(&v(&[s, f, s, f]), 4).unwrap(), 2);
        assert_eq!(layer_pattern(&v(&[s, s, s, s]), 4).unwrap(), 0);
        assert_eq!(layer_pattern(&v(&[f, f]), 2).unwrap(), u32::MAX);
        assert_eq!(layer_pattern(&v(&[s, s, f, s, s, f]), 6).unwrap(), 3);
        assert!(layer_pattern(&v(&[f, s, s, s]), 4).is_err());
        assert!(layer_pattern(&v(&[s, f]), 3).is_err());
    }

    /// Qwen2-MoE's dense layers: `mlp_only_layers` must be the leading
    /// layers 0..k, in any order and repeated or not.
    #[test]
    fn mlp_only_layers_are_a_leading_run() {
        let first_dense = |layers: &str| {
            let json =
                alloc::format!(r#"{{"model_type": "qwen2_moe", "mlp_only_layers": {layers}}}"#);
            let map: Map<String, Value> = serde_json::from_str(&json).unwrap();
            let config = Config {
                map: &map,
                model_type: "qwen2_moe",
                read: RefCell::new(Vec::new()),
            };
            config
                .qwen2_moe(24)
                .map(|moe| moe.unwrap().first_dense_layers)
        };
        assert_eq!(first_dense("[]").unwrap(), 0);
        assert_eq!(first_dense("[0]").unwrap(), 1);
        assert_eq!(first_dense("[2, 0, 1]").unwrap(), 3);
        assert_eq!(first_dense("[1, 0, 1, 0]").unwrap(), 2);
        for bad in [
            "[1]",
            "[0, 2]",
            "[0, 1, 3]",
            "[5, 5, 5, 5, 5, 5]",
            "[0, 18446744073709551615]",
        ] {
            let e = first_dense(bad).unwrap_err().to_string();
            assert!(e.contains("other than the leading layers"), "{bad}: {e}");
        }
        let e = first_dense("[0, -1]").unwrap_err().to_string();
        assert!(e.contains("holds a non-integer"), "{e}");
        let e = first_dense("[0, \"x\", 7]").unwrap_err().to_string();
        assert!(e.contains("holds a non-integer"), "{e}");
    }
}
