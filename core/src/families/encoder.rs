//! Bidirectional encoders as transformers 5.17 runs them: BERT (post-LN,
//! absolute positions, fused `F.gelu`, masked-LM head or a classifier) and ESM-2 (pre-LN,
//! rotary, token-dropout rescaling of the embeddings, ESM's Python
//! `x * 0.5 * (1 + erf(x / sqrt(2)))` GELU whose temporaries are alive
//! together, final `emb_layer_norm_after`).

use super::nn::{self, AttnShape, Ctx, Linear, Params, FP32, INT64, T};
use super::optim::{self, Trainable};
use super::ReplaySummary;
use crate::arch::{EncoderArch, EncoderKind};
use crate::component::Component;
use crate::error::Error;
use crate::graph::{Graph, Saves, Value};
use crate::runtime::RuntimeProfile;
use crate::trace::Replay;
use crate::workload::{Attention, Head, InferenceKind, Logits, Mode, Workload};
use alloc::vec::Vec;
use core::cell::Cell;

/// Rejects workloads the encoder family cannot run.
pub fn validate(workload: &Workload) -> Result<(), Error> {
    if workload.mode == Mode::Inference && workload.inference.kind == InferenceKind::Generate {
        return Err(Error::invalid(
            "workload.inference.kind",
            "encoders do not generate",
            "\"forward\" for encoder models",
        ));
    }
    Ok(())
}

/// The head's weights, after the encoder's.
enum HeadWeights {
    /// No head (ESM-2's `EsmModel`, ESMFold's stem).
    None,
    /// BERT's masked-LM head: transform dense, LayerNorm, the decoder tied
    /// to the word embedding (its own bias).
    MaskedLm {
        transform: Linear,
        ln: Value,
        decoder: Linear,
    },
    /// A sequence classifier on the first token: BERT's pooler dense
    /// (then tanh) and classifier; ESM's `EsmClassificationHead` dense
    /// (then tanh) and `out_proj`.
    Sequence { dense: Linear, out: Linear },
    /// A token classifier: one linear map over every token.
    Token { classifier: Linear },
}

#[derive(Clone, Copy)]
struct Layer {
    ln_attn: Value,
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    ln_out: Value,
    fc: Linear,
    proj: Linear,
}

/// Weights of an encoder, built in module order.
pub(crate) struct Weights {
    embed: Value,
    /// BERT's `position_embeddings` and `token_type_embeddings`.
    positions: Option<Value>,
    token_types: Option<Value>,
    emb_ln: Value,
    layers: Vec<Layer>,
    final_ln: Value,
    head: HeadWeights,
    pub(crate) trainable: Vec<Trainable>,
    pub(crate) params: u64,
    pub(crate) bytes: u64,
    dsize: u64,
}

pub(crate) fn build(
    g: &mut Graph,
    a: &EncoderArch,
    dsize: u64,
    trainable: bool,
    head: Option<(Head, u64)>,
) -> Weights {
    let h = a.hidden_size as u64;
    let i = a.intermediate_size as u64;
    let mut p = Params::new(dsize, trainable);
    g.at("load weights", None);
    let embed = p.tensor(g, a.vocab_size as u64, h);
    let positions =
        (a.max_position_embeddings > 0).then(|| p.tensor(g, a.max_position_embeddings as u64, h));
    let token_types = (a.type_vocab_size > 0).then(|| p.tensor(g, a.type_vocab_size as u64, h));
    let emb_ln = if a.kind == EncoderKind::Bert {
        p.tensor(g, 2 * h, 1)
    } else {
        embed
    };
    let mut layers = Vec::new();
    for _ in 0..a.num_layers {
        let q = p.linear(g, h, h);
        let k = p.linear(g, h, h);
        let v = p.linear(g, h, h);
        let o = p.linear(g, h, h);
        let ln_attn = p.tensor(g, 2 * h, 1);
        let fc = p.linear(g, h, i);
        let proj = p.linear(g, i, h);
        let ln_out = p.tensor(g, 2 * h, 1);
        layers.push(Layer {
            ln_attn,
            q,
            k,
            v,
            o,
            ln_out,
            fc,
            proj,
        });
    }
    let final_ln = if a.kind == EncoderKind::Esm {
        let ln = p.tensor(g, 2 * h, 1);
        p.tensor(g, a.num_layers as u64 * a.num_heads as u64 + 1, 1); // contact head
        ln
    } else {
        embed
    };
    let head = match head {
        Some((Head::Lm, _)) if a.kind == EncoderKind::Bert => {
            let transform = p.linear(g, h, h);
            let ln = p.tensor(g, 2 * h, 1);
            let bias = p.tensor(g, a.vocab_size as u64, 1);
            let decoder = Linear {
                weight: embed,
                weight_dsize: dsize,
                bias: Some(bias),
                in_features: h,
                out_features: a.vocab_size as u64,
                lora: None,
                quantized: None,
            };
            HeadWeights::MaskedLm {
                transform,
                ln,
                decoder,
            }
        }
        Some((Head::SequenceClassification, labels)) => HeadWeights::Sequence {
            dense: p.linear(g, h, h),
            out: p.linear(g, h, labels),
        },
        Some((Head::TokenClassification, labels)) => HeadWeights::Token {
            classifier: p.linear(g, h, labels),
        },
        _ => HeadWeights::None,
    };
    // Buffers: BERT position_ids and token_type_ids (int64), ESM rotary inv_freq.
    let buffers = match a.kind {
        EncoderKind::Bert => 2 * a.max_position_embeddings as u64 * INT64,
        EncoderKind::Esm => (h / a.num_heads as u64) / 2 * FP32,
    };
    g.param(buffers, false);
    let bytes = p.bytes() + buffers;
    Weights {
        embed,
        positions,
        token_types,
        emb_ln,
        layers,
        final_ln,
        head,
        trainable: p.list,
        params: p.count,
        bytes,
        dsize,
    }
}

/// The forward of an encoder body (and head). Returns the output (logits or hidden states).
#[allow(clippy::too_many_arguments)]
pub(crate) fn forward(
    g: &mut Graph,
    cx: &mut Ctx,
    a: &EncoderArch,
    w: &Weights,
    b: u64,
    s: u64,
    attention: Attention,
    training: bool,
    head: bool,
    mut hidden: Option<&mut Vec<T>>,
    checkpointing: bool,
    kept_rope: &mut Option<(T, T)>,
) -> T {
    let h = a.hidden_size as u64;
    let heads = a.num_heads as u64;
    let rows = b * s;
    g.at("embeddings", None);
    let ids = g.input(rows * INT64, Component::Activations);
    let e0 = g.op(
        "embeddings: word",
        &[ids, w.embed],
        rows * h * w.dsize,
        Component::Activations,
        Saves::inputs(&[ids]),
    );
    nn::embedding_backward_scratch(g, e0, rows, a.vocab_size as u64, h);
    let e0 = T {
        v: e0,
        elems: rows * h,
        dsize: w.dsize,
    };
    let mut x = match a.kind {
        EncoderKind::Bert => {
            let tt = g.op(
                "embeddings: token type",
                &[w.token_types.unwrap_or(w.embed)],
                rows * h * w.dsize,
                Component::Transient,
                Saves::NOTHING,
            );
            let sum = nn::add(g, e0, T { v: tt, ..e0 }, "embeddings: sum");
            let pos = g.op(
                "embeddings: position",
                &[w.positions.unwrap_or(w.embed)],
                s * h * w.dsize,
                Component::Transient,
                Saves::NOTHING,
            );
            let sum2 = nn::add(
                g,
                sum,
                T {
                    v: pos,
                    elems: s * h,
                    dsize: w.dsize,
                },
                "embeddings: + positions",
            );
            g.drop(sum.v);
            let ln = nn::layer_norm(g, cx, sum2, w.emb_ln, h, "embeddings: LayerNorm");
            g.drop(sum2.v);
            let out = dropout_if(g, ln, training, "embeddings: dropout");
            // `token_type_embeddings` and `position_embeddings` are locals
            // of `BertEmbeddings.forward` until it returns.
            g.drop_all(&[tt, pos]);
            out
        }
        EncoderKind::Esm => {
            // token_dropout: masked_fill, then rescale by the observed mask ratio (fp32 division).
            let e1 = nn::unary(g, e0, "embeddings: token-dropout masked_fill", e0.dsize);
            let e2 = nn::unary(g, e1, "embeddings: * (1 - mask_ratio_train)", e1.dsize);
            let e3 = nn::unary(
                g,
                e2,
                "embeddings: / (1 - mask_ratio_observed)",
                FP32.max(e2.dsize),
            );
            g.drop(e2.v);
            let e4 = nn::cast(g, e3, e1.dsize, "embeddings: .to(dtype)");
            g.drop_all(&[e3.v, e1.v]);
            e4
        }
    };
    g.drop_all(&[e0.v, ids]);
    // `embedding_output` is a local of `EsmModel.forward` and of
    // `BertModel.forward`, alive while the encoder runs. Held, every BERT
    // inference job traced or measured in a fresh process is within 0.5%
    // (`measurements/h200-bert-eager/`, `measurements/h200-segments/`), and
    // the public set's two BERT cases reach the measured allocated peak to
    // 47 KB once the MLM head keeps `sequence_output` too (below); their
    // process reserves less than a fresh one for the same job
    // (`docs/decisions/bert-embedding-output.md`).
    let embedding_output = x.v;
    g.hold(embedding_output);
    let rope = if a.kind == EncoderKind::Esm {
        Some(nn::rotary_tables(g, s, h / heads, x.dsize))
    } else {
        None
    };
    for (l, lw) in w.layers.iter().enumerate() {
        if let Some(h) = hidden.as_deref_mut() {
            // output_hidden_states=True keeps every layer's input.
            g.hold(x.v);
            h.push(x);
        }
        let out = if checkpointing {
            // Non-reentrant checkpoint (`GradientCheckpointingLayer`): the
            // layer runs without saving; the boundary keeps its input.
            let grad = g.grad_mode;
            g.grad_mode = false;
            let o = encoder_layer(g, cx, a, lw, x, (b, s), attention, rope, training, l);
            g.grad_mode = grad;
            g.checkpoint(l as u32, x.v, o.v);
            o
        } else {
            encoder_layer(g, cx, a, lw, x, (b, s), attention, rope, training, l)
        };
        g.drop(x.v);
        x = out;
    }
    if let Some((cos, sin)) = rope {
        if checkpointing {
            // Kept for the recompute of each checkpointed layer.
            *kept_rope = Some((cos, sin));
        } else {
            g.drop_all(&[cos.v, sin.v]);
        }
    }
    if a.kind == EncoderKind::Esm {
        g.at("emb_layer_norm_after", None);
        let ln = nn::layer_norm(g, cx, x, w.final_ln, h, "emb_layer_norm_after");
        g.drop(x.v);
        x = ln;
        if let Some(h) = hidden {
            g.hold(x.v);
            h.push(x);
        }
    }
    g.drop(embedding_output);
    if !head {
        return x;
    }
    // `sequence_output`, a local of the `...For...` model's forward, lives
    // until that forward returns.
    let logits = run_head(g, cx, a, w, x, b, training);
    if logits.v != x.v {
        g.drop(x.v);
    }
    logits
}

/// The head on the encoder's output `x` (`b` sequences): its logits, or
/// `x` itself when there is no head. Drops nothing it was given.
fn run_head(
    g: &mut Graph,
    cx: &mut Ctx,
    a: &EncoderArch,
    w: &Weights,
    x: T,
    b: u64,
    training: bool,
) -> T {
    match &w.head {
        HeadWeights::None => x,
        HeadWeights::MaskedLm { .. } => mlm_head(g, cx, a, w, x),
        HeadWeights::Sequence { dense, out } => {
            sequence_head(g, cx, a.kind, (dense, out), x, b, training)
        }
        HeadWeights::Token { classifier } => {
            g.at("token classifier", None);
            // `self.dropout(sequence_output)` rebinds the local; the
            // model output still holds the original until the forward
            // returns, and the classifier saves the dropped-out copy.
            let d = if training {
                nn::dropout(g, x, "token classifier: dropout")
            } else {
                x
            };
            let logits = nn::linear(g, cx, d, classifier, "token classifier: logits");
            if d.v != x.v {
                g.drop(d.v);
            }
            logits
        }
    }
}

/// A sequence classifier on the first token, `hidden_states[:, 0]`: a view
/// of the whole output `x`, so a linear map that saves its input (no
/// autocast) keeps all of `x` alive into backward, and under autocast the
/// map's cast makes a (batch x hidden) copy instead. BERT: the pooler's
/// dense and tanh, dropout, the classifier; ESM: dropout, dense, tanh,
/// dropout, `out_proj`.
fn sequence_head(
    g: &mut Graph,
    cx: &mut Ctx,
    kind: EncoderKind,
    (dense, out): (&Linear, &Linear),
    x: T,
    b: u64,
    training: bool,
) -> T {
    g.at("sequence classifier: first token", None);
    let first = T {
        v: x.v,
        elems: b * dense.in_features,
        dsize: x.dsize,
    };
    let input = if kind == EncoderKind::Esm && training {
        nn::dropout(g, first, "sequence classifier: dropout")
    } else {
        first
    };
    let pre = nn::linear(g, cx, input, dense, "sequence classifier: dense");
    if input.v != x.v {
        g.drop(input.v);
    }
    let act = nn::tanh(g, pre, "sequence classifier: tanh");
    g.drop(pre.v);
    let d = dropout_if(g, act, training, "sequence classifier: dropout");
    let logits = nn::linear(g, cx, d, out, "sequence classifier: logits");
    g.drop(d.v);
    logits
}

/// BERT's masked-LM head (`BertOnlyMLMHead`) on `sequence_output`, which
/// it leaves to the caller: the transform's dense layer, GELU and
/// LayerNorm, then the decoder's logits.
fn mlm_head(g: &mut Graph, cx: &mut Ctx, a: &EncoderArch, w: &Weights, x: T) -> T {
    let HeadWeights::MaskedLm {
        transform,
        ln,
        decoder,
    } = &w.head
    else {
        return x;
    };
    g.at("MLM head: transform", None);
    let t = nn::linear(g, cx, x, transform, "MLM head: transform dense");
    let act = nn::unary_saving_input(g, t, "MLM head: gelu", t.dsize);
    g.drop(t.v);
    let n = nn::layer_norm(g, cx, act, *ln, a.hidden_size as u64, "MLM head: LayerNorm");
    g.drop(act.v);
    g.at("MLM head: decoder (logits)", None);
    let logits = nn::linear(g, cx, n, decoder, "MLM head: decoder (logits)");
    g.drop(n.v);
    logits
}

/// One encoder layer (`EsmLayer` / `BertLayer`): returns its output; drops
/// nothing it was given.
#[allow(clippy::too_many_arguments)]
fn encoder_layer(
    g: &mut Graph,
    cx: &mut Ctx,
    a: &EncoderArch,
    lw: &Layer,
    x: T,
    (b, s): (u64, u64),
    attention: Attention,
    rope: Option<(T, T)>,
    training: bool,
    l: usize,
) -> T {
    let h = a.hidden_size as u64;
    let heads = a.num_heads as u64;
    let layer = Some(l as u32);
    match a.kind {
        EncoderKind::Esm => {
            g.at("attention: LayerNorm", layer);
            let ln = nn::layer_norm(g, cx, x, lw.ln_attn, h, "attention: LayerNorm");
            // Python lifetimes of EsmAttention / EsmLayer (as for BERT):
            // `hidden_states_ln` and `attn_output` live until the
            // attention block returns, `attention_output_ln` and
            // `intermediate_output` until `feed_forward_chunk` returns.
            let attn = self_attention(g, cx, ln, lw, b, s, heads, attention, rope, layer);
            g.at("attention: output dense", layer);
            let o = nn::linear(g, cx, attn, &lw.o, "attention: output dense");
            let o = dropout_if(g, o, training, "attention: dropout");
            let x2 = nn::add(g, o, x, "attention: residual add");
            g.drop_all(&[o.v, attn.v, ln.v]);
            g.at("mlp: LayerNorm", layer);
            let ln2 = nn::layer_norm(g, cx, x2, lw.ln_out, h, "mlp: LayerNorm");
            g.at("mlp: intermediate dense", layer);
            let f = nn::linear(g, cx, ln2, &lw.fc, "mlp: intermediate dense");
            g.at("mlp: gelu (erf form)", layer);
            let act = esm_gelu(g, f);
            g.drop(f.v);
            g.at("mlp: output dense", layer);
            let d = nn::linear(g, cx, act, &lw.proj, "mlp: output dense");
            let d = dropout_if(g, d, training, "mlp: dropout");
            let out = nn::add(g, d, x2, "mlp: residual add");
            g.drop_all(&[d.v, act.v, ln2.v, x2.v]);
            out
        }
        EncoderKind::Bert => {
            // Python lifetimes of BertAttention / BertSelfOutput /
            // BertIntermediate / BertOutput (the H200 trace): the
            // attention output is held by `self_outputs` until the
            // attention block returns; `h = self.LayerNorm(h + input)`
            // keeps the dropped-out `h` until the norm returns; the
            // intermediate activation is a local of `feed_forward_chunk`.
            let attn = self_attention(g, cx, x, lw, b, s, heads, attention, None, layer);
            g.at("attention: output dense", layer);
            let o = nn::linear(g, cx, attn, &lw.o, "attention: output dense");
            let o = dropout_if(g, o, training, "attention: dropout");
            let s1 = nn::add(g, o, x, "attention: residual add");
            let x2 = nn::layer_norm(g, cx, s1, lw.ln_attn, h, "attention: LayerNorm");
            g.drop_all(&[s1.v, o.v, attn.v]);
            g.at("mlp: intermediate dense", layer);
            let f = nn::linear(g, cx, x2, &lw.fc, "mlp: intermediate dense");
            g.at("mlp: gelu", layer);
            let act = nn::unary_saving_input(g, f, "mlp: gelu", f.dsize);
            g.drop(f.v);
            g.at("mlp: output dense", layer);
            let d = nn::linear(g, cx, act, &lw.proj, "mlp: output dense");
            let d = dropout_if(g, d, training, "mlp: dropout");
            let s2 = nn::add(g, d, x2, "mlp: residual add");
            let out = nn::layer_norm(g, cx, s2, lw.ln_out, h, "mlp: LayerNorm");
            g.drop_all(&[s2.v, d.v, act.v, x2.v]);
            out
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn self_attention(
    g: &mut Graph,
    cx: &mut Ctx,
    x: T,
    lw: &Layer,
    b: u64,
    s: u64,
    heads: u64,
    attention: Attention,
    rope: Option<(T, T)>,
    layer: Option<u32>,
) -> T {
    let h = x.elems / (b * s);
    g.at("attention: q/k/v projections", layer);
    let q = nn::linear(g, cx, x, &lw.q, "attention: query");
    let k = nn::linear(g, cx, x, &lw.k, "attention: key");
    let v = nn::linear(g, cx, x, &lw.v, "attention: value");
    let (q, k) = match rope {
        Some((cos, sin)) => {
            // ESM scales the query before the rotary embedding.
            let qs = nn::unary(g, q, "attention: query * head_size^-0.5", q.dsize);
            g.drop(q.v);
            g.at("attention: rotary embedding", layer);
            let q32 = esm_rotary(g, qs, cos, sin);
            let k32 = esm_rotary(g, k, cos, sin);
            let qr = nn::cast(g, q32, qs.dsize, "rotary: q_embed.to(dtype)");
            let kr = nn::cast(g, k32, k.dsize, "rotary: k_embed.to(dtype)");
            g.drop_all(&[q32.v, k32.v, qs.v, k.v]);
            (qr, kr)
        }
        None => (q, k),
    };
    g.at("attention: scaled dot product", layer);
    let shape = AttnShape {
        batch: b,
        heads,
        kv_heads: heads,
        q_len: s,
        kv_len: s,
        head_dim: h / heads,
    };
    let out = match attention {
        Attention::Sdpa => nn::sdpa(g, cx, q, k, v, shape),
        Attention::Eager => {
            let esm = rope.is_some();
            // Dropped with the attention module's frame (`attn_output, _ = ...`).
            let (out, probs) = nn::eager_attention(
                g,
                q,
                k,
                v,
                shape,
                None,
                // BERT's and ESM's `eager_attention_forward`: a plain
                // softmax (fp32 only under autocast), dropout on the
                // probabilities in training (BERT's
                // `attention_probs_dropout_prob`; ESM-2's is 0).
                nn::EagerSoftmax {
                    fp32: cx.autocast,
                    dropout: g.grad_mode && !esm,
                    dropout_before_cast: true,
                    half_to_float: cx.fp16,
                    strided: nn::Operands::all(true),
                    softcap: false,
                    autocast: cx.autocast,
                },
            );
            g.drop(probs);
            out
        }
    };
    g.drop_all(&[q.v, k.v, v.v]);
    out
}

/// ESM's `gelu(x) = x * 0.5 * (1.0 + torch.erf(x / sqrt(2)))`, op by op.
fn esm_gelu(g: &mut Graph, x: T) -> T {
    let half = nn::unary(g, x, "gelu: x * 0.5", x.dsize);
    let scaled = nn::unary(g, x, "gelu: x / sqrt(2)", x.dsize);
    let erf = nn::unary_saving_input(g, scaled, "gelu: erf", x.dsize);
    g.set_backward_temporaries(erf.v, 4);
    g.drop(scaled.v);
    // `1.0 + erf`: adding a Scalar hands the gradient back as is.
    let one = nn::unary(g, erf, "gelu: 1 + erf", x.dsize);
    g.mark_addition(one.v);
    g.drop(erf.v);
    let out = nn::mul(g, half, one, "gelu: product");
    g.drop_all(&[half.v, one.v]);
    out
}

fn dropout_if(g: &mut Graph, x: T, training: bool, name: &'static str) -> T {
    if training {
        let d = nn::dropout(g, x, name);
        g.drop(x.v);
        d
    } else {
        x
    }
}

/// Replays an encoder run.
pub fn replay(
    a: &EncoderArch,
    workload: &Workload,
    runtime: &RuntimeProfile,
    replay: &mut Replay,
) -> Result<ReplaySummary, Error> {
    let mut g = Graph::for_runtime(replay, runtime);
    let training = workload.mode == Mode::Training;
    if training && workload.training.lora.is_some() {
        return Err(Error::invalid(
            "workload.training.lora",
            "LoRA on encoders is not modelled",
            "null (full fine-tuning) for this model",
        ));
    }
    if !training && !workload.dtype.is_float() {
        return Err(Error::invalid(
            "workload.dtype",
            "quantised encoders are not modelled",
            "fp32, fp16 or bf16",
        ));
    }
    let dsize = nn::param_dsize(workload);
    let head = training
        || match workload.head {
            Head::Lm => workload.inference.logits == Logits::All,
            _ => workload.inference.logits != Logits::None,
        };
    let w = build(
        &mut g,
        a,
        dsize,
        training,
        Some((workload.head, workload.labels())),
    );
    let summary = ReplaySummary {
        params: w.params,
        weight_bytes: w.bytes,
        ..ReplaySummary::default()
    };
    super::cublas_workspaces(&mut g, runtime, workload.mode == Mode::Training);
    let (b, s) = (workload.batch as u64, workload.seq_len as u64);
    if !training {
        let mut cx = Ctx::plain(dsize);
        cx.fp16 = nn::half_is_fp16(workload);
        super::inference_batches(&mut g, workload.inference.batches, &mut |g, _| {
            forward(
                g,
                &mut cx,
                a,
                &w,
                b,
                s,
                workload.attention,
                false,
                head,
                None,
                false,
                &mut None,
            )
            .v
        });
        return Ok(summary);
    }
    let checkpointing = workload.training.grad_checkpointing;
    // ESM's rotary tables, kept for the recomputes when checkpointing.
    let kept_rope: Cell<Option<(T, T)>> = Cell::new(None);
    let forward_loss = |g: &mut Graph, cx: &mut Ctx| {
        let mut kept = None;
        let sequence_output = forward(
            g,
            cx,
            a,
            &w,
            b,
            s,
            workload.attention,
            true,
            false,
            None,
            checkpointing,
            &mut kept,
        );
        kept_rope.set(kept);
        let logits = run_head(g, cx, a, &w, sequence_output, b, true);
        let loss = match w.head {
            // No head on ESM-2 presets: a mean of the hidden states as the loss.
            HeadWeights::None => g.op(
                "loss: mean of hidden states",
                &[logits.v],
                4,
                Component::Transient,
                Saves::NOTHING,
            ),
            HeadWeights::Sequence { .. } if workload.labels() == 1 => {
                g.at("loss: mean squared error (one label)", None);
                nn::mse_loss(g, cx.autocast, logits)
            }
            HeadWeights::Sequence { .. } => {
                g.at("loss: cross entropy over the sequences", None);
                nn::cross_entropy(g, cx.autocast, logits, b)
            }
            HeadWeights::MaskedLm { .. } | HeadWeights::Token { .. } => {
                g.at("loss: cross entropy over all tokens", None);
                nn::cross_entropy(g, cx.autocast, logits, b * s)
            }
        };
        // The model's forward computes the loss from `labels`, then
        // returns, releasing `sequence_output`.
        if logits.v != sequence_output.v {
            g.drop(sequence_output.v);
        }
        g.drop(logits.v);
        loss
    };
    if !checkpointing {
        optim::train_steps(&mut g, &workload.training, &w.trainable, forward_loss);
        return Ok(summary);
    }
    let recompute = |g: &mut Graph, cx: &mut Ctx, segment: u32, input: Value| {
        let l = segment as usize;
        let elems = b * s * a.hidden_size as u64;
        let x = T {
            v: input,
            elems,
            dsize: g.bytes(input) / elems.max(1),
        };
        g.at("backward: recompute checkpointed layer", Some(segment));
        cx.cache_weight_casts = false;
        let rope = kept_rope.get();
        let out = encoder_layer(
            g,
            cx,
            a,
            &w.layers[l],
            x,
            (b, s),
            workload.attention,
            rope,
            true,
            l,
        );
        if segment == 0 {
            // The last recompute: the recomputed nodes hold what they saved.
            if let Some((cos, sin)) = kept_rope.take() {
                g.drop_all(&[cos.v, sin.v]);
            }
        }
        out.v
    };
    optim::train_steps_recomputing(
        &mut g,
        &workload.training,
        &w.trainable,
        forward_loss,
        recompute,
    );
    Ok(summary)
}

/// ESM's `apply_rotary_pos_emb` for one of q and k, in fp32 whatever the
/// model's dtype: `(x.float() * cos) + (rotate_half(x.float()) * sin)`, two
/// separate `float()` copies (the first freed once multiplied), the
/// half-precision tables promoted. The H200 trace of ESM-2 650M bf16
/// (`measurements/h200-generalization/trace-segments.jsonl`) makes its
/// 80 MiB segments at `apply_rotary_pos_emb` and `rotate_half` where a
/// same-dtype rotary would take 40 MiB. Returns the fp32 result.
fn esm_rotary(g: &mut Graph, x: T, cos: T, sin: T) -> T {
    let a = nn::cast(g, x, FP32, "rotary: x.float()");
    let with_cos = nn::mul(g, a, cos, "rotary: x * cos");
    g.drop(a.v);
    let c = nn::cast(g, x, FP32, "rotary: x.float()");
    let rot = nn::rotate_half(g, c);
    g.drop(c.v);
    let with_sin = nn::mul(g, rot, sin, "rotary: rotate_half(x) * sin");
    g.drop(rot.v);
    let sum = nn::add(g, with_cos, with_sin, "rotary: sum");
    g.drop_all(&[with_cos.v, with_sin.v]);
    sum
}
