//! Attention: the fused SDPA kernels, SDPA's math fallback, eager
//! attention, and rotary position embeddings.

use super::{add, cast, dropout, mul, tanh, unary, Ctx, BF16, FP32, T};
use crate::component::Component;
use crate::graph::{GradOrder, Graph, Saves, Value};

/// Attention shapes.
#[derive(Clone, Copy, Debug)]
pub struct AttnShape {
    /// Batch.
    pub batch: u64,
    /// Query heads.
    pub heads: u64,
    /// Key/value heads.
    pub kv_heads: u64,
    /// Query length.
    pub q_len: u64,
    /// Key length.
    pub kv_len: u64,
    /// Head width.
    pub head_dim: u64,
}

/// Whether a sliding-window layer attending to `kv_len` keys gets an
/// explicit mask under SDPA: transformers 5.17's `sdpa_mask` returns none
/// (SDPA runs causal, grouped heads through `enable_gqa`) while the keys
/// are fewer than the window (`_ignore_causal_mask_sdpa`: "we need to add
/// special patterns to the mask" only once `kv_length >=
/// local_attention_size`). A decode step's keys reach it when the cache
/// holds `window - 1` tokens.
pub fn sliding_window_mask_needed(window: u64, kv_len: u64) -> bool {
    kv_len >= window
}

/// SDPA's inputs as the kernel takes them: sdpa is on autocast's bf16
/// list, so fp32 inputs are cast (and saved); otherwise held as they are.
/// Autocast casts the arguments right to left, as the compiler evaluates
/// them (as for `F.linear`): the values, the keys, then the queries (the
/// H200 trace of Qwen3-0.6B amp training, b2 L512: the fp32 keys' 2 MiB
/// cast before the queries' 4 MiB,
/// `measurements/h200-generalization/trace-segments-24.jsonl.gz`).
fn sdpa_inputs(g: &mut Graph, cx: &Ctx, q: T, k: T, v: T) -> (T, T, T) {
    if cx.autocast {
        let v = cast(g, v, BF16, "attention (sdpa): autocast cast of value");
        let k = cast(g, k, BF16, "attention (sdpa): autocast cast of key");
        let q = cast(g, q, BF16, "attention (sdpa): autocast cast of query");
        (q, k, v)
    } else {
        g.hold(q.v);
        g.hold(k.v);
        g.hold(v.v);
        (q, k, v)
    }
}

/// Backward allocates the input gradients first, then its workspace.
/// fp32 (the memory-efficient kernel): `grad_out * out` for the row sums,
/// then its fp32 accumulator over whole blocks of 64 queries and a
/// counter per block (the H200 trace of BERT fp32 training: three 24 MiB
/// gradients, a 24 MiB product, then a 24.02 MiB workspace). 16-bit: one fp32 workspace holding the
/// query gradient's accumulator, a second accumulator when the kernel
/// takes grouped keys and values itself (`enable_gqa`), the row sums of
/// `grad_out * out` (one per query and head) and 256 bytes. The H200
/// traces, one block per layer: BERT-base amp b32 L128, 12.19 MiB (12 MiB
/// and 192 KiB; `measurements/h200-segments/training-segments.jsonl`);
/// GPT-2 bf16 b16 L1024, 48.75 MiB (`trace-segments.jsonl`); with grouped
/// heads twice the accumulator: Qwen3-0.6B amp b2 L512, 16.06 MiB
/// (`trace-segments-24.jsonl.gz`); Llama-3.2-1B bf16 b4 L2048, 129 MiB
/// (`trace-segments-28.jsonl.gz`); Llama-3.1-8B LoRA b4 L2048, 257 MiB
/// (`trace-segments-6.jsonl`; the last three in
/// `measurements/h200-generalization/`).
fn efficient_backward_scratch(g: &mut Graph, out: Value, dsize: u64, out_elems: u64, s: AttnShape) {
    let accumulator = out_elems * FP32;
    let scratch = if dsize == FP32 {
        // The fp32 kernel's accumulator covers whole blocks of 64 queries,
        // with 16 bytes of counters per block, batch and head: 50,380,800
        // B for 197 tokens (256 rows) at 768 (batch, head) pairs in the H200
        // traces of ViT-B/16 fp32 b64 (`trace-segments-6.jsonl`) and timm's
        // ViT-S/16 fp32 b128 (`../real-jobs-2/trace-segments-11.jsonl.gz`);
        // BERT's 512 tokens need no padding (25,190,400 B at b16).
        let blocks = s.q_len.div_ceil(EFFICIENT_QUERY_BLOCK);
        let rows = blocks * EFFICIENT_QUERY_BLOCK;
        let pairs = s.batch * s.heads;
        // The row sums of `grad_out * out`, one per query and head, and
        // their transposed copy (the trace of timm's ViT-B/16 fp32 b288:
        // two 2,723,328 B blocks after the 174 MB product,
        // `../real-jobs-2/trace-segments-12.jsonl.gz`).
        g.set_backward_row_sums(out, pairs * s.q_len * FP32);
        [
            accumulator,
            pairs * rows * s.head_dim * FP32 + pairs * blocks * EFFICIENT_BLOCK_COUNTER_BYTES,
        ]
    } else {
        let accumulators = if s.kv_heads < s.heads { 2 } else { 1 };
        let row_sums = s.batch * s.heads * s.q_len * FP32;
        [
            0,
            accumulators * accumulator + row_sums + FUSED_BACKWARD_PADDING,
        ]
    };
    g.set_backward_scratch(out, scratch);
}

/// The memory-efficient kernel's saved logsumexp: fp32, one per head and
/// query, the queries padded to [`EFFICIENT_LSE_ALIGN`] (`kAlignLSE`); the
/// flash kernel's is not padded. The trace of timm's ViT-B/16 fp32 b288
/// keeps 3,096,576 B per layer for 197 tokens: 224 rows
/// (`../real-jobs-2/trace-segments-12.jsonl.gz`).
fn efficient_logsumexp(s: AttnShape) -> u64 {
    s.batch * s.heads * s.q_len.div_ceil(EFFICIENT_LSE_ALIGN) * EFFICIENT_LSE_ALIGN * FP32
}

/// The query multiple the memory-efficient kernel pads its logsumexp to.
const EFFICIENT_LSE_ALIGN: u64 = 32;

/// Queries per block of the fp32 memory-efficient backward kernel.
const EFFICIENT_QUERY_BLOCK: u64 = 64;

/// Counter bytes the fp32 memory-efficient backward keeps per block of
/// queries, batch and head (see [`efficient_backward_scratch`]).
const EFFICIENT_BLOCK_COUNTER_BYTES: u64 = 16;

/// Bytes the 16-bit fused attention backward's workspace takes beyond its
/// accumulators and row sums: 256 in every H200 trace (see
/// [`efficient_backward_scratch`]).
const FUSED_BACKWARD_PADDING: u64 = 256;

/// `repeat_kv` of keys and values to `elems` each (every query head).
pub fn repeat_kv(g: &mut Graph, k: T, v: T, elems: u64) -> (T, T) {
    let kr = unary(g, T { elems, ..k }, "attention: repeat_kv (keys)", k.dsize);
    let vr = unary(
        g,
        T { elems, ..v },
        "attention: repeat_kv (values)",
        v.dsize,
    );
    (kr, vr)
}

/// SDPA with grouped keys and values repeated to every query head
/// (`repeat_kv`, when there are fewer key-value heads), as transformers
/// calls it with a mask; `bias`: the mask reaches the kernel as an
/// additive bias ([`sdpa_with_mask`]). The repeats are locals of
/// `sdpa_attention_forward`, freed as it returns.
pub fn sdpa_on_every_head(
    g: &mut Graph,
    cx: &Ctx,
    q: T,
    k: T,
    v: T,
    s: AttnShape,
    bias: bool,
) -> T {
    let (kr, vr) = if s.kv_heads < s.heads {
        repeat_kv(g, k, v, s.batch * s.heads * s.kv_len * s.head_dim)
    } else {
        g.hold(k.v);
        g.hold(v.v);
        (k, v)
    };
    let every_head = AttnShape {
        kv_heads: s.heads,
        ..s
    };
    let out = if bias {
        sdpa_with_mask(g, cx, q, kr, vr, every_head)
    } else {
        sdpa(g, cx, q, kr, vr, every_head)
    };
    g.drop_all(&[kr.v, vr.v]);
    out
}

/// `scaled_dot_product_attention` (flash / memory-efficient kernels).
///
/// Measured on the H200: in inference the kernel allocates only its
/// output, already in (b, s, heads, hd) layout, so HF's
/// `transpose(1, 2).contiguous()` is free (llama-3.1-8b generate trace,
/// `measurements/h200-segments`). Under autocast, fp32 inputs are cast to
/// bf16 first and the casts are what backward keeps (llama-3.2-1b amp
/// training snapshot: six blocks per layer at `sdpa_attention_forward`).
/// In grad mode the kernel also saves an fp32 logsumexp and its output (in
/// HF models the next projection saves that storage too; in torchvision's
/// fp32 ViT training a `contiguous()` copy goes to `out_proj` and the
/// kernel's output stays with the kernel: 24 blocks per 12 layers at
/// `multi_head_attention_forward` in `trace-snapshots-6.md`). Its backward
/// allocates the input gradients, then its fp32 accumulator (the
/// memory-efficient kernel in fp32 first takes `grad_out * out` for the row
/// sums, and per-(batch, head) counters with the accumulator).
pub fn sdpa(g: &mut Graph, cx: &Ctx, q: T, k: T, v: T, s: AttnShape) -> T {
    let (q, k, v) = sdpa_inputs(g, cx, q, k, v);
    let out_elems = s.batch * s.heads * s.q_len * s.head_dim;
    let lse = if !g.grad_mode {
        0
    } else if q.dsize == FP32 {
        efficient_logsumexp(s)
    } else {
        s.batch * s.heads * s.q_len * FP32
    };
    let out = g.op(
        "attention (sdpa)",
        &[q.v, k.v, v.v],
        out_elems * q.dsize,
        Component::Transient,
        Saves::inputs(&[q.v, k.v, v.v]).and_output().and_buffer(lse),
    );
    efficient_backward_scratch(g, out, q.dsize, out_elems, s);
    g.drop_all(&[q.v, k.v, v.v]);
    T {
        v: out,
        elems: out_elems,
        dsize: q.dsize,
    }
}

/// `scaled_dot_product_attention` with a boolean mask (a padded batch):
/// the autocast casts as in [`sdpa`], then the mask turned into an
/// additive bias of the query's dtype, (b, 1, q, kv), which the
/// memory-efficient kernel reads and saves for backward; in inference it
/// goes when the call returns. The H200 trace of Llama-3.2-1B bf16 b8
/// L4096 (`measurements/padding/trace-forward.events.txt`): the 256 MiB
/// bias, the 128 MiB output, the bias freed.
pub fn sdpa_with_mask(g: &mut Graph, cx: &Ctx, q: T, k: T, v: T, s: AttnShape) -> T {
    let (q, k, v) = sdpa_inputs(g, cx, q, k, v);
    let bias = g.input(s.batch * s.q_len * s.kv_len * q.dsize, Component::Transient);
    let out_elems = s.batch * s.heads * s.q_len * s.head_dim;
    let lse = efficient_logsumexp(s);
    let out = g.op(
        "attention (sdpa, masked)",
        &[q.v, k.v, v.v, bias],
        out_elems * q.dsize,
        Component::Transient,
        Saves::inputs(&[q.v, k.v, v.v, bias])
            .and_output()
            .and_buffer(lse),
    );
    efficient_backward_scratch(g, out, q.dsize, out_elems, s);
    g.drop_all(&[q.v, k.v, v.v, bias]);
    T {
        v: out,
        elems: out_elems,
        dsize: q.dsize,
    }
}

/// `scaled_dot_product_attention` on PyTorch's math backend: what fp32
/// inputs with grouped-query heads (`enable_gqa=True`) fall back to, since
/// flash and cuDNN attention take only half precision and the
/// memory-efficient kernel no grouped heads (`sdp_utils.cpp`). As
/// `_scaled_dot_product_attention_math` composes it: the query scaled by
/// the square root of the scale, a causal mask (bool `tril`, then a float
/// copy), keys and values `repeat_interleave`d to every head, the keys
/// transposed and scaled, `q @ k^T`, the mask added in place,
/// `_safe_softmax` (with a bool row mask), `probs @ v`; its locals live
/// until it returns (the transposed scaled keys and `matmul`'s contiguous
/// copy of them only through the first product). The
/// output comes in (b, heads, s, hd) layout, so the caller's
/// `transpose(1, 2).contiguous()` copies it. Llama-3.2-1B fp32 training b2
/// L1024 on the H200 allocates 4.6 GB more than the efficient kernel would
/// (`measurements/h200-generalization/`).
pub fn sdpa_math(g: &mut Graph, q: T, k: T, v: T, s: AttnShape) -> T {
    let ds = q.dsize;
    let score_elems = s.batch * s.heads * s.q_len * s.kv_len;
    let kv_elems = s.batch * s.heads * s.kv_len * s.head_dim;
    let out_elems = s.batch * s.heads * s.q_len * s.head_dim;
    let scaled_q = g.op(
        "attention (sdpa math): query * sqrt(scale)",
        &[q.v],
        q.bytes(),
        Component::Transient,
        Saves::NOTHING,
    );
    let mask = (s.q_len > 1).then(|| {
        let tril = g.input(s.q_len * s.kv_len, Component::Transient);
        let float = g.input(s.q_len * s.kv_len * ds, Component::Transient);
        g.drop(tril);
        float
    });
    let expand = |g: &mut Graph, x: T, name| {
        if s.heads > s.kv_heads {
            g.op(
                name,
                &[x.v],
                kv_elems * ds,
                Component::Transient,
                Saves::NOTHING,
            )
        } else {
            g.hold(x.v);
            x.v
        }
    };
    let keys = expand(g, k, "attention (sdpa math): repeat_interleave(key)");
    let values = expand(g, v, "attention (sdpa math): repeat_interleave(value)");
    let scaled_k = g.op(
        "attention (sdpa math): key^T * sqrt(scale)",
        &[keys],
        kv_elems * ds,
        Component::Transient,
        Saves::NOTHING,
    );
    // The scaled keys keep the transposed layout: `matmul` copies them
    // contiguous for its batched GEMM, and both go when it returns (the
    // scaled keys stay only if autograd saved them).
    let operand = g.op(
        "attention (sdpa math): contiguous key operand",
        &[scaled_k],
        kv_elems * ds,
        Component::Transient,
        Saves::NOTHING,
    );
    let scores = g.op(
        "attention (sdpa math): query @ key^T",
        &[scaled_q, scaled_k],
        score_elems * ds,
        Component::Transient,
        Saves::inputs(&[scaled_q, scaled_k]),
    );
    g.drop_all(&[operand, scaled_k]);
    let probs = g.op(
        "attention (sdpa math): softmax",
        &[scores],
        score_elems * ds,
        Component::Transient,
        Saves::output(),
    );
    // Its backward takes a scores-sized temporary once the gradient is
    // allocated (three scores-sized blocks per layer backward in the H200
    // trace of Llama-3.2-1B fp32 training, `trace-segments-5.jsonl`).
    g.set_backward_scratch(probs, [score_elems * ds, 0]);
    // `_safe_softmax` zeroes fully masked rows through a bool mask of the
    // scores' shape.
    g.workspace("attention (sdpa math): softmax row mask", score_elems);
    g.drop(scores);
    let out = g.op(
        "attention (sdpa math): probs @ value",
        &[probs, values],
        out_elems * ds,
        Component::Transient,
        Saves::inputs(&[probs, values]),
    );
    g.drop_all(&[scaled_q, probs, keys, values]);
    if let Some(m) = mask {
        g.drop(m);
    }
    let t = g.op(
        "attention output transpose",
        &[out],
        out_elems * ds,
        Component::Transient,
        Saves::NOTHING,
    );
    g.drop(out);
    T {
        v: t,
        elems: out_elems,
        dsize: ds,
    }
}

/// One flag for each of attention's query, key and value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Operands {
    /// The query.
    pub query: bool,
    /// The key.
    pub key: bool,
    /// The value.
    pub value: bool,
}

impl Operands {
    /// The same flag for all three.
    pub const fn all(flag: bool) -> Operands {
        Operands {
            query: flag,
            key: flag,
            value: flag,
        }
    }
}

/// How a model's eager attention turns scores into probabilities.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EagerSoftmax {
    /// The softmax runs on an fp32 copy of the scores: `softmax(...,
    /// dtype=torch.float32)` (Llama, Mistral, Qwen2, the encoders), or a
    /// plain `softmax` under autocast, which runs it in fp32 (GPT-2 amp).
    pub fp32: bool,
    /// `dropout(attn_weights, p)` in training after the cast back to the
    /// values' dtype (GPT-2's `attn_pdrop`): its output and bool mask are
    /// kept for backward, and it is the tensor the caller holds.
    pub dropout: bool,
    /// BERT and ESM: no cast back to the values' dtype; the dropout (if
    /// any) runs on the softmax output and autocast casts the result for
    /// the product, which saves the cast.
    pub dropout_before_cast: bool,
    /// The scores are IEEE fp16 (not bf16): an fp32 softmax reads them
    /// without a converted copy.
    pub half_to_float: bool,
    /// The query, the key and the value: each a transposed view of its
    /// projection (`view(b, s, heads, d).transpose(1, 2)`, also after a
    /// rotary embedding, which keeps its input's layout) rather than
    /// contiguous in (batch, heads, tokens, head_dim) (the output of the
    /// cache's `torch.cat`, of `repeat_kv`, of Phi-3's rotary `cat`).
    /// `torch.matmul` folds batch and heads for `bmm` with `reshape`,
    /// which copies such an operand when the batch is above 1, and in
    /// training `bmm` saves the copy, not the view.
    pub strided: Operands,
    /// `tanh(scores / cap) * cap` after the scaling (Gemma 2's
    /// `attn_logit_softcapping`, `modeling_gemma2.eager_attention_forward`):
    /// each step a new score-sized tensor, and `tanh` keeps its output for
    /// backward.
    pub softcap: bool,
    /// Under `torch.autocast` both products run in its 16-bit dtype: fp32
    /// operands (Llama-style queries and keys after an fp32 rotary
    /// embedding, the fp32 probabilities) are cast first, and the products
    /// save the casts (the H200 trace of Llama-3.2-1B eager amp training,
    /// `measurements/padding/eager-train-*.events.txt`: 16-bit scores, then
    /// a 16-bit copy of the fp32 probabilities for `probs @ V`).
    pub autocast: bool,
}

/// Eager attention: `softmax(QK^T * scale + mask, dtype=fp32).to(q.dtype) @ V`
/// with `repeat_kv` copies for grouped-query attention (GPT-2: the softmax
/// in the scores' dtype unless autocast runs it in fp32, then dropout on
/// the probabilities in training; see [`EagerSoftmax`]).
///
/// The attention probabilities are returned too (`attn_weights`): the
/// caller's `hidden_states, _ = self.self_attn(...)` keeps them until its
/// forward returns (seen in the H200 snapshot: 512 MiB alive through the
/// MLP); drop them there.
pub fn eager_attention(
    g: &mut Graph,
    q: T,
    k: T,
    v: T,
    s: AttnShape,
    mask: Option<T>,
    style: EagerSoftmax,
) -> (T, Value) {
    let groups = s.heads / s.kv_heads.max(1);
    let (kr, vr) = if groups > 1 {
        let kr = unary(
            g,
            T {
                elems: s.batch * s.heads * s.kv_len * s.head_dim,
                ..k
            },
            "repeat_kv",
            k.dsize,
        );
        let vr = unary(
            g,
            T {
                elems: s.batch * s.heads * s.kv_len * s.head_dim,
                ..v
            },
            "repeat_kv",
            v.dsize,
        );
        (kr, vr)
    } else {
        g.hold(k.v);
        g.hold(v.v);
        (k, v)
    };
    let score_elems = s.batch * s.heads * s.q_len * s.kv_len;
    // Autocast's casts of fp32 operands for `QK^T` (query, then key).
    let product_dsize = if style.autocast { 2 } else { q.dsize };
    let q_in = cast(g, q, product_dsize, "attention scores: autocast cast");
    let k_in = cast(g, kr, product_dsize, "attention scores: autocast cast");
    // `torch.matmul` folds the batch and head dims into one for `bmm` with
    // `reshape`: a strided query cannot be viewed that way when batch > 1
    // and is copied (a q-sized temporary around the scores' allocation in
    // the H200 trace); with batch 1 the fold is a view (no copy in the
    // trace of Mistral-7B eager, b1 L8192,
    // `measurements/h200-generalization/trace-segments-5.jsonl`).
    let operand = (s.batch > 1 && style.strided.query).then(|| {
        g.op(
            "attention scores: matmul operand copy",
            &[q_in.v],
            q_in.bytes(),
            Component::Transient,
            Saves::NOTHING,
        )
    });
    // A strided key is copied the same way, after the query and before the
    // scores, and freed first (the H200 trace of BERT-base eager fp32 b16
    // L512: two 24 MiB copies, the 192 MiB scores, then both freed;
    // `measurements/h200-bert-eager/`).
    let key_operand = (s.batch > 1 && style.strided.key).then(|| {
        g.op(
            "attention scores: matmul key copy",
            &[k_in.v],
            k_in.bytes(),
            Component::Transient,
            Saves::NOTHING,
        )
    });
    // `bmm` saves the operands it multiplies: the copies where there are
    // copies, not the views they were made from. A view would hold its
    // whole base (GPT-2's fused q/k/v projection) until backward.
    let saved = [operand.unwrap_or(q_in.v), key_operand.unwrap_or(k_in.v)];
    let scores = g.op(
        "attention scores QK^T",
        &[q_in.v, k_in.v],
        score_elems * product_dsize,
        Component::Transient,
        Saves::inputs(&saved),
    );
    // `bmm`'s backward computes `mat2`'s gradient (the key's) before
    // `self`'s (the query's): see `GradOrder`.
    g.mark_gemm(scores, GradOrder::WeightFirst);
    g.drop_all(&[q_in.v, k_in.v]);
    if let Some(copy) = key_operand {
        g.drop(copy);
    }
    if let Some(operand) = operand {
        g.drop(operand);
    }
    let scores = T {
        v: scores,
        elems: score_elems,
        dsize: product_dsize,
    };
    let scaled = unary(g, scores, "attention scores * scale", product_dsize);
    g.drop(scores.v);
    // `attn_weights = attn_weights / softcap`, `torch.tanh(...)`, `* softcap`:
    // each rebinding frees the one before (dividing and multiplying by a
    // constant save nothing; autograd keeps the tanh output in training).
    let scaled = if style.softcap {
        let divided = unary(g, scaled, "attention scores / softcap", q.dsize);
        g.drop(scaled.v);
        let th = tanh(g, divided, "tanh(attention scores / softcap)");
        g.drop(divided.v);
        let capped = unary(g, th, "attention scores * softcap", q.dsize);
        g.drop(th.v);
        capped
    } else {
        scaled
    };
    let masked = match mask {
        Some(m) => {
            let r = add(g, scaled, m, "attention scores + mask");
            g.drop(scaled.v);
            r
        }
        None => scaled,
    };
    // softmax(x, dtype=torch.float32) converts its input first, then
    // softmaxes the copy: masked scores, the fp32 copy and the fp32 output
    // are alive together (H200 snapshot of eager attention). On CUDA, fp16
    // scores skip the copy: `at::softmax` calls `_softmax(x,
    // half_to_float=True)`, which reads the half input and writes fp32
    // (Mistral-7B eager fp16 generation, b1 L8192: 8 GiB less than bf16).
    let sm_dsize = if style.fp32 { FP32 } else { masked.dsize };
    let up = if style.half_to_float && masked.dsize == 2 {
        g.hold(masked.v);
        masked
    } else {
        cast(g, masked, sm_dsize, "softmax: input to fp32")
    };
    let sm = g.op(
        "softmax",
        &[up.v],
        score_elems * sm_dsize,
        Component::Transient,
        Saves::output(),
    );
    // Its backward (`softmax_backward_cuda_out`) computes `grad * output`
    // into a temporary once the input's gradient is allocated (the H200
    // traces of Llama-3.2-1B eager amp training: a second scores-sized
    // fp32 block, freed at once, at each softmax backward;
    // `measurements/padding/eager-train-none.events.txt` and
    // `measurements/h200-generalization/trace-segments-28.jsonl.gz`,
    // event 1,816).
    g.set_backward_scratch(sm, [score_elems * sm_dsize, 0]);
    g.drop(up.v);
    let sm = T {
        v: sm,
        elems: score_elems,
        dsize: sm_dsize,
    };
    // `softmax(...).to(q.dtype)` in one expression: the fp32 output goes
    // when `.to` returns, the masked scores when the name is rebound.
    // `probs` is what the caller keeps (the returned `attn_weights`),
    // `operand` what `probs @ V` multiplies.
    let (probs, operand) = if style.dropout_before_cast {
        // BERT: dropout on the softmax output, then autocast's cast of it
        // for the product (saved by the product, not returned).
        let d = if style.dropout {
            dropout(g, sm, "attention probs dropout")
        } else {
            cast(g, sm, sm.dsize, "attention probs")
        };
        g.drop_all(&[sm.v, masked.v]);
        (d, cast(g, d, q.dsize, "attention probs: autocast cast"))
    } else {
        let smc = cast(g, sm, q.dsize, "attention probs to q dtype");
        g.drop_all(&[sm.v, masked.v]);
        let smc = if style.dropout {
            let d = dropout(g, smc, "attention probs dropout");
            g.drop(smc.v);
            d
        } else {
            smc
        };
        g.hold(smc.v);
        (smc, smc)
    };
    let out_elems = s.batch * s.heads * s.q_len * s.head_dim;
    let probs_in = cast(g, operand, product_dsize, "attention probs: autocast cast");
    g.drop(operand.v);
    let v_in = cast(g, vr, product_dsize, "attention values: autocast cast");
    // A strided value is copied for `bmm` the same way (the H200 trace of
    // BERT-base eager fp32 b16 L512: a 24 MiB copy before the product,
    // freed after it; `measurements/h200-bert-eager/`).
    let value_operand = (s.batch > 1 && style.strided.value).then(|| {
        g.op(
            "attention probs @ V: value copy",
            &[v_in.v],
            v_in.bytes(),
            Component::Transient,
            Saves::NOTHING,
        )
    });
    let out = g.op(
        "attention probs @ V",
        &[probs_in.v, v_in.v],
        out_elems * product_dsize,
        Component::Transient,
        Saves::inputs(&[probs_in.v, value_operand.unwrap_or(v_in.v)]),
    );
    // The value's gradient first, then the probabilities' (the H200 trace
    // of checkpointed Llama-3.2-1B eager amp training,
    // `measurements/h200-generalization/trace-segments-28.jsonl.gz`,
    // events 1,808 and 1,809: 16 MiB, then 512 MiB).
    g.mark_gemm(out, GradOrder::WeightFirst);
    g.drop_all(&[probs_in.v, v_in.v]);
    if let Some(copy) = value_operand {
        g.drop(copy);
    }
    let t = g.op(
        "attention output transpose",
        &[out],
        out_elems * product_dsize,
        Component::Transient,
        Saves::NOTHING,
    );
    // Backward: the transposed gradient is reshaped for `bmm`, which
    // copies it when the batch is above 1 (as the forward's operands) and
    // is a view at batch 1 (the H200 trace of Gemma-2-9B eager LoRA, b1
    // L4608, `measurements/h200-generalization/trace-segments-30.jsonl.gz`,
    // second job, event 5,599: no copy before the value's gradient; trace
    // 28, b2, event 1,806: a 16 MiB copy).
    if s.batch == 1 {
        g.mark_view_grads(t);
    }
    g.drop(out);
    // The repeated keys and values are locals of the function: freed on return.
    g.drop_all(&[kr.v, vr.v]);
    (
        T {
            v: t,
            elems: out_elems,
            dsize: product_dsize,
        },
        probs.v,
    )
}

/// The rotary tables of a forward call (`LlamaRotaryEmbedding` /
/// `EsmRotaryEmbedding.forward`, fp32 with autocast off): `freqs =
/// inv_freq @ positions`, `emb = cat(freqs, freqs)`, `cos = emb.cos() *
/// attention_scaling` (two tensors), the same for sin, then `.to(dtype)`;
/// the fp32 tensors live until the function returns (H200 allocation trace).
/// Returns (cos, sin) of `tokens x head_dim` in `dsize`, held by the caller.
pub fn rotary_tables(g: &mut Graph, tokens: u64, head_dim: u64, dsize: u64) -> (T, T) {
    g.at("rotary embedding cos/sin", None);
    let table = tokens * head_dim;
    let freqs = g.input(table / 2 * FP32, Component::Transient);
    // `inv_freq @ position_ids` is a batched matmul: in a fresh process
    // the model's first, which creates the cuBLAS workspace (the H200
    // traces: 32 MiB at `modeling_llama.py:122`, before any layer).
    g.gemm();
    let emb = g.input(table * FP32, Component::Transient);
    let mut scaled = [freqs; 2];
    for slot in &mut scaled {
        let raw = g.input(table * FP32, Component::Transient);
        *slot = g.input(table * FP32, Component::Transient);
        g.drop(raw);
    }
    let fp32 = |v| T {
        v,
        elems: table,
        dsize: FP32,
    };
    let cos = cast(g, fp32(scaled[0]), dsize, "rotary cos");
    let sin = cast(g, fp32(scaled[1]), dsize, "rotary sin");
    g.drop_all(&[scaled[0], scaled[1], freqs, emb]);
    (cos, sin)
}

/// Rotary embedding: `q * cos + rotate_half(q) * sin`, where `rotate_half`
/// is `cat(-x2, x1)`. `cos`/`sin` are shared (b, s, hd) tensors.
pub fn rotary(g: &mut Graph, x: T, cos: T, sin: T) -> T {
    let a = mul(g, x, cos, "rotary: x * cos");
    let rot = rotate_half(g, x);
    let b = mul(g, rot, sin, "rotary: rotate_half(x) * sin");
    g.drop(rot.v);
    let out = add(g, a, b, "rotary: sum");
    g.drop_all(&[a.v, b.v]);
    out
}

/// `rotate_half(x) = cat(-x2, x1)` with `x1`, `x2` the halves of `x`
/// (slices, views): the negated half, then the concatenation (the half
/// freed once it is copied in). `x` is not dropped. In backward `cat`
/// hands out views of its incoming gradient, the negation takes a
/// half-size gradient, and each slice a zeroed full-size one (the H200
/// trace of Llama-3.2-1B bf16 training,
/// `measurements/h200-generalization/trace-segments-28.jsonl.gz`, events
/// 1,162 to 1,168: 8, 4 and 8 MiB, the 4 MiB freed, 8 MiB, then the
/// incoming 8 MiB gradient freed).
pub fn rotate_half(g: &mut Graph, x: T) -> T {
    let half = x.bytes() / 2;
    let x1 = g.slice("rotary: rotate_half (first half)", x.v, half);
    let x2 = g.slice("rotary: rotate_half (second half)", x.v, half);
    let neg = g.op(
        "rotary: rotate_half",
        &[x2],
        half,
        Component::Transient,
        Saves::NOTHING,
    );
    g.drop(x2);
    let rot = g.op(
        "rotary: rotate_half",
        &[neg, x1],
        x.bytes(),
        Component::Transient,
        Saves::NOTHING,
    );
    g.mark_view_grads(rot);
    g.drop_all(&[neg, x1]);
    T { v: rot, ..x }
}
