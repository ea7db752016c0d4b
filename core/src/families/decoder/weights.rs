//! The decoder's weights as the model's constructor creates them: module
//! order, quantised and LoRA layers, FSDP2's units, tensor-parallel shards.

use super::{Layer, Mlp, Storage, Weights};
use crate::arch::{DecoderArch, MlpKind, NormKind};
use crate::component::Component;
use crate::error::Error;
use crate::families::nn::{self, Linear, BF16, FP32};
use crate::families::optim::Trainable;
use crate::families::sharding::{Fsdp2, Fsdp2Options, Unit};
use crate::graph::{Graph, Value};
use crate::parallel::Strategy;
use crate::workload::{Head, Mode, Workload};
use alloc::vec::Vec;

struct Builder<'a, 'r> {
    g: &'a mut Graph<'r>,
    s: Storage,
    trainable: Vec<Trainable>,
    params: u64,
    bytes: u64,
    /// FSDP2: the units being built.
    shards: Option<ShardBuild>,
}

/// FSDP2 units as `fully_shard` makes them: each decoder layer, then the
/// root (every parameter outside the layers).
struct ShardBuild {
    world: u64,
    /// Bytes per element of the sharded parameters (the training
    /// precision's parameter dtype).
    orig_dsize: u64,
    /// The unit whose parameters are being created.
    current: Unit,
    layers: Vec<Unit>,
    root: Unit,
}

impl Builder<'_, '_> {
    /// FSDP2: the parameters created so far belong to the root (`None`) or
    /// to decoder layer `Some(n)`.
    fn end_unit(&mut self, layer: bool) {
        if let Some(sb) = self.shards.as_mut() {
            let unit = core::mem::take(&mut sb.current);
            if layer {
                sb.layers.push(unit);
            } else {
                sb.root.params.extend(unit.params);
                sb.root.shards.extend(unit.shards);
            }
        }
    }

    fn tensor(&mut self, rows: u64, cols: u64, quantizable: bool) -> Value {
        let elems = rows * cols;
        if let Some(sb) = self.shards.as_mut() {
            // fully_shard: this rank's dim-0 shard (padded to ceil(rows /
            // world) rows) in the parameter dtype, allocated now; the
            // unsharded parameter (padded rows, `param_dtype`) exists only
            // while its unit is gathered.
            let shard_rows = rows.div_ceil(sb.world);
            let shard_bytes = shard_rows * cols * sb.orig_dsize;
            let shard = self.g.param(shard_bytes, false);
            let unsharded_rows = shard_rows * sb.world;
            let v = self.g.param_deferred(unsharded_rows * cols * self.s.dsize);
            sb.current.params.push(Trainable {
                value: v,
                dsize: self.s.dsize,
                rows: unsharded_rows,
                cols,
            });
            let shard = Trainable {
                value: shard,
                dsize: sb.orig_dsize,
                rows: shard_rows,
                cols,
            };
            sb.current.shards.push(shard);
            self.trainable.push(shard);
            self.params += elems;
            self.bytes += shard_bytes;
            return v;
        }
        if let (true, Some(scheme)) = (quantizable, self.s.quant) {
            return self.quantized_tensor(scheme, rows, cols);
        }
        let bytes = elems * self.s.dsize;
        let train = !self.s.frozen;
        let v = self.g.param(bytes, train);
        self.params += elems;
        self.bytes += bytes;
        if train {
            self.trainable.push(Trainable {
                value: v,
                dsize: self.s.dsize,
                rows,
                cols,
            });
        }
        v
    }

    /// A weight `from_pretrained` quantizes on its way in: the checkpoint's
    /// bf16 tensor is copied to the GPU, bitsandbytes allocates the
    /// quantized weight and its state, and the copy is freed.
    fn quantized_tensor(&mut self, scheme: nn::bnb::Scheme, rows: u64, cols: u64) -> Value {
        let source = self.g.replay.alloc(rows * cols * BF16, Component::Weights);
        let mut pieces = scheme.stored_tensors(rows, cols).into_iter();
        let packed = pieces.next().unwrap_or(0);
        let weight = self.g.param(packed, false);
        self.bytes += packed;
        for bytes in pieces {
            // The quantization state: parameters' companions for the run.
            self.g.param(bytes, false);
            self.bytes += bytes;
        }
        self.g.replay.free(source);
        self.params += rows * cols;
        weight
    }

    /// The model's output layer (no bias, no adapter), never quantized.
    fn output_linear(&mut self, inp: u64, out: u64) -> Linear {
        let weight = self.tensor(out, inp, false);
        Linear {
            weight,
            weight_dsize: self.s.dsize,
            bias: None,
            in_features: inp,
            out_features: out,
            lora: None,
            quantized: None,
        }
    }

    fn linear(&mut self, inp: u64, out: u64, bias: bool, lora_target: bool) -> Linear {
        let weight = self.tensor(out, inp, true);
        let bias = if bias {
            Some(self.tensor(out, 1, false))
        } else {
            None
        };
        let lora = if lora_target && self.s.lora_rank > 0 {
            let r = self.s.lora_rank;
            let a = self.g.param(r * inp * FP32, true);
            let b = self.g.param(out * r * FP32, true);
            self.params += r * (inp + out);
            self.bytes += r * (inp + out) * FP32;
            self.trainable.push(Trainable {
                value: a,
                dsize: FP32,
                rows: r,
                cols: inp,
            });
            self.trainable.push(Trainable {
                value: b,
                dsize: FP32,
                rows: out,
                cols: r,
            });
            Some((a, b, r))
        } else {
            None
        };
        Linear {
            weight,
            weight_dsize: self.s.dsize,
            bias,
            in_features: inp,
            out_features: out,
            lora,
            quantized: self.s.quant,
        }
    }
}

/// peft's `target_modules` value that adapts every linear but the output
/// head.
const ALL_LINEAR: &str = "all-linear";

/// The linear modules of a decoder layer that LoRA can adapt, by the names
/// transformers gives them (peft matches a target against the last part of
/// a module's name): GPT-2's fused `c_attn` and its two `c_proj` (attention
/// output and MLP output, both adapted by `c_proj`) and `c_fc`; Phi-3's
/// fused `qkv_proj`, `o_proj`, `gate_up_proj` and `down_proj`; the others'
/// `q_proj`, `k_proj`, `v_proj`, `o_proj` and their MLP's linears. Routed
/// experts are not adaptable here, so a mixture-of-experts model lists its
/// dense MLP's linears only when it has dense layers.
pub(crate) fn lora_modules(a: &DecoderArch) -> Vec<&'static str> {
    let gpt2 = a.norm == NormKind::LayerNorm;
    let mut names = if gpt2 {
        alloc::vec!["c_attn", "c_proj"]
    } else if a.fused_projections {
        alloc::vec!["qkv_proj", "o_proj"]
    } else {
        alloc::vec!["q_proj", "k_proj", "v_proj", "o_proj"]
    };
    let dense_mlp = a.moe.is_none_or(|m| m.first_dense_layers > 0);
    if dense_mlp {
        match (a.mlp, gpt2) {
            (MlpKind::Gated, _) if a.fused_projections => {
                names.extend(["gate_up_proj", "down_proj"])
            }
            (MlpKind::Gated, _) => names.extend(["gate_proj", "up_proj", "down_proj"]),
            (MlpKind::Plain, true) => names.push("c_fc"),
            (MlpKind::Plain, false) => names.extend(["fc1", "fc2"]),
        }
    }
    names
}

/// The attention is one fused linear whose output q, k and v are views of:
/// GPT-2's `c_attn` (the LayerNorm decoders here are GPT-2 shaped) and
/// Phi-3's `qkv_proj`.
pub(super) fn fused_qkv(a: &DecoderArch) -> bool {
    a.norm == NormKind::LayerNorm || a.fused_projections
}

/// peft's default targets when `target_modules` is empty (peft 0.21's
/// `TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING`): `c_attn` for
/// GPT-2, `q_proj` and `v_proj` for the Llama-style models; none for
/// Phi-3, for which peft asks the modules to be named.
pub(crate) fn default_lora_targets(a: &DecoderArch) -> Option<Vec<&'static str>> {
    if a.fused_projections {
        None
    } else if a.norm == NormKind::LayerNorm {
        Some(alloc::vec!["c_attn"])
    } else {
        Some(alloc::vec!["q_proj", "v_proj"])
    }
}

/// Fails on a LoRA target that names no adaptable module of the model
/// (peft refuses it too: "Target modules ... not found in the base model").
pub(super) fn validate_lora_targets(a: &DecoderArch, workload: &Workload) -> Result<(), Error> {
    let Some(lora) = &workload.training.lora else {
        return Ok(());
    };
    let modules = lora_modules(a);
    if lora.target_modules.is_empty() && default_lora_targets(a).is_none() {
        let mut allowed = alloc::string::String::from("\"all-linear\" or the modules ");
        allowed.push_str(&crate::keys::one_of(&modules));
        return Err(Error::invalid(
            "workload.training.lora.target_modules",
            "peft has no default modules for this model: name them",
            &allowed,
        ));
    }
    for target in &lora.target_modules {
        if target != ALL_LINEAR && !modules.contains(&target.as_str()) {
            let mut allowed = alloc::string::String::from("\"all-linear\" or the modules ");
            allowed.push_str(&crate::keys::one_of(&modules));
            return Err(Error::invalid(
                "workload.training.lora.target_modules",
                alloc::format!("`{target}` is not a module of this model"),
                &allowed,
            ));
        }
    }
    Ok(())
}

/// The LoRA rank and the modules it adapts, for a training job with LoRA.
fn lora_targets(a: &DecoderArch, workload: &Workload) -> Option<(u64, Vec<&'static str>)> {
    let lora = workload.training.lora.as_ref()?;
    if workload.mode != Mode::Training {
        return None;
    }
    let modules = lora_modules(a);
    let targets = if lora.target_modules.is_empty() {
        default_lora_targets(a).unwrap_or_default()
    } else if lora.target_modules.iter().any(|t| t == ALL_LINEAR) {
        modules
    } else {
        modules
            .into_iter()
            .filter(|m| lora.target_modules.iter().any(|t| t == m))
            .collect()
    };
    Some((lora.rank as u64, targets))
}

/// Builds the weights; an untied `lm_head` holds `1 / head_shards` of the
/// vocabulary (tensor parallelism).
pub(super) fn build(
    g: &mut Graph,
    a: &DecoderArch,
    workload: &Workload,
    head_shards: u64,
) -> Weights {
    let training = workload.mode == Mode::Training;
    let lora = lora_targets(a, workload);
    // LoRA freezes a base in the workload's dtype; otherwise the precision
    // decides. A quantized base trains as peft's
    // `prepare_model_for_kbit_training` leaves it: every parameter that is
    // not quantized (embeddings, norms, `lm_head`) cast to fp32.
    let dsize = if training && lora.is_some() {
        if workload.dtype.is_float() {
            workload.dtype.bytes()
        } else {
            FP32
        }
    } else {
        nn::param_dsize(workload)
    };
    let quant = nn::bnb::Scheme::of(workload.dtype);
    let (h, v) = (a.hidden_size as u64, a.vocab_size as u64);
    let qd = a.num_heads as u64 * a.head_dim as u64;
    let kvd = a.num_kv_heads as u64 * a.head_dim as u64;
    let (rank, targets) = lora.unwrap_or((0, Vec::new()));
    let is = |name: &str| targets.contains(&name);
    let parallel = &workload.parallel;
    let shards = (parallel.strategy == Strategy::Fsdp2 && training).then(|| ShardBuild {
        world: parallel.world_size as u64,
        orig_dsize: nn::param_dsize(workload),
        current: Unit::default(),
        layers: Vec::new(),
        root: Unit::default(),
    });
    let dsize = if shards.is_some() {
        parallel.param_dtype.bytes()
    } else {
        dsize
    };
    let mut b = Builder {
        shards,
        g,
        s: Storage {
            dsize,
            quant,
            frozen: rank > 0,
            lora_rank: rank,
        },
        trainable: Vec::new(),
        params: 0,
        bytes: 0,
    };
    b.g.at("load weights", None);
    let embed = b.tensor(v, h, false);
    let positions = if a.learned_positions > 0 {
        Some(b.tensor(a.learned_positions as u64, h, false))
    } else {
        None
    };
    let norm_len = match a.norm {
        NormKind::RmsNorm | NormKind::GemmaRmsNorm => 1,
        NormKind::LayerNorm => 2,
    };
    b.end_unit(false);
    let mut layers = Vec::with_capacity(a.num_layers as usize);
    for layer in 0..a.num_layers {
        // A fused q/k/v linear is stored in `q` (k and v then stay unused).
        // Phi-3's attention registers `o_proj` before `qkv_proj`.
        let fused = fused_qkv(a);
        let phi3_o = a
            .fused_projections
            .then(|| b.linear(qd, h, a.dense_bias, is("o_proj")));
        let q = if a.fused_projections {
            b.linear(h, qd + 2 * kvd, a.qkv_bias, is("qkv_proj"))
        } else if fused {
            b.linear(h, qd + 2 * kvd, a.qkv_bias, is("c_attn"))
        } else {
            b.linear(h, qd, a.qkv_bias, is("q_proj"))
        };
        let k = if fused {
            q
        } else {
            b.linear(h, kvd, a.qkv_bias, is("k_proj"))
        };
        let vv = if fused {
            q
        } else {
            b.linear(h, kvd, a.qkv_bias, is("v_proj"))
        };
        let o = match phi3_o {
            Some(o) => o,
            None => b.linear(
                qd,
                h,
                a.dense_bias,
                is(if fused { "c_proj" } else { "o_proj" }),
            ),
        };
        // Qwen3's attention registers `q_norm` and `k_norm` after `o_proj`.
        let qk_norms = a.qk_norm.then(|| {
            let hd = a.head_dim as u64;
            (b.tensor(hd, 1, false), b.tensor(hd, 1, false))
        });
        let mlp = match (a.moe, a.mlp) {
            (Some(m), _) if layer >= m.first_dense_layers => {
                let router = b.tensor(m.num_experts as u64, h, false);
                let e = m.num_experts as u64;
                let i = m.expert_intermediate_size as u64;
                let gate_up = b.linear(h, e * 2 * i, false, false);
                let down = b.linear(i, e * h, false, false);
                let shared = if m.shared_expert_intermediate_size > 0 {
                    let si = m.shared_expert_intermediate_size as u64;
                    let sg = b.linear(h, si, false, false);
                    let su = b.linear(h, si, false, false);
                    let sd = b.linear(si, h, false, false);
                    let _shared_gate = b.tensor(1, h, false);
                    Some((sg, su, sd))
                } else {
                    None
                };
                Mlp::Moe {
                    router,
                    experts: e,
                    top_k: m.experts_per_token as u64,
                    gate_up,
                    down,
                    shared,
                }
            }
            (_, MlpKind::Gated) if a.fused_projections => {
                let i = a.intermediate_size as u64;
                Mlp::GatedFused {
                    gate_up: b.linear(h, 2 * i, a.dense_bias, is("gate_up_proj")),
                    down: b.linear(i, h, a.dense_bias, is("down_proj")),
                }
            }
            (_, MlpKind::Gated) => {
                let i = a.intermediate_size as u64;
                Mlp::Gated {
                    gate: b.linear(h, i, a.dense_bias, is("gate_proj")),
                    up: b.linear(h, i, a.dense_bias, is("up_proj")),
                    down: b.linear(i, h, a.dense_bias, is("down_proj")),
                }
            }
            (_, MlpKind::Plain) => {
                let i = a.intermediate_size as u64;
                Mlp::Plain {
                    fc: b.linear(h, i, a.dense_bias, is(if fused { "c_fc" } else { "fc1" })),
                    proj: b.linear(i, h, a.dense_bias, is(if fused { "c_proj" } else { "fc2" })),
                }
            }
        };
        let norm1 = b.tensor(h * norm_len, 1, false);
        let norm2 = b.tensor(h * norm_len, 1, false);
        let extra: Vec<Value> = (0..a.extra_norms_per_layer)
            .map(|_| b.tensor(h * norm_len, 1, false))
            .collect();
        let sandwich_norms = match extra[..] {
            [after_attention, after_mlp] => Some((after_attention, after_mlp)),
            _ => None,
        };
        b.end_unit(true);
        layers.push(Layer {
            norm1,
            q,
            k,
            v: vv,
            o,
            qk_norms,
            norm2,
            sandwich_norms,
            mlp,
        });
    }
    let norm = b.tensor(h * norm_len, 1, false);
    if a.learned_positions == 0 {
        // Rotary inv_freq buffer (fp32, not a parameter).
        let inv = a.head_dim as u64 / 2 * FP32;
        b.g.param(inv, false);
        b.bytes += inv;
    }
    // transformers keeps the output layer out of quantization
    // (`get_keys_to_not_convert`: `lm_head`, or a classifier's `score`).
    let lm_head = if workload.head == Head::SequenceClassification {
        // `*ForSequenceClassification`: `score`, no bias, and no `lm_head`.
        b.output_linear(h, workload.labels())
    } else if a.tie_word_embeddings {
        Linear {
            weight: embed,
            weight_dsize: dsize,
            bias: None,
            in_features: h,
            out_features: v,
            lora: None,
            quantized: None,
        }
    } else {
        b.output_linear(h, v / head_shards)
    };
    b.end_unit(false);
    let fsdp = b.shards.take().map(|sb| {
        let options = Fsdp2Options {
            world: sb.world,
            param_dsize: dsize,
            orig_dsize: sb.orig_dsize,
            reduce_dsize: parallel.reduce_dtype.bytes(),
            reshard_after_forward: parallel.reshard_after_forward,
        };
        Fsdp2::new(options, sb.root, sb.layers)
    });
    let (trainable, params, bytes) = (b.trainable, b.params, b.bytes);
    Weights {
        fsdp,
        embed,
        positions,
        layers,
        norm,
        lm_head,
        trainable,
        params,
        bytes,
    }
}
