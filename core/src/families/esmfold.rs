//! ESMFold inference as transformers 5.17 runs it (`EsmForProteinFolding`,
//! under `torch.no_grad()`), from `modeling_esmfold.py`.
//!
//! 1. **Stem**: ESM-2 3B in `stem_dtype` with `output_hidden_states=True`:
//!    every layer's input is kept; `torch.stack(..., dim=2)` of the 37
//!    hidden states, sliced and cast to fp32 (`esm_s.to(esm_s_combine.dtype)`),
//!    combined by a softmax-weighted matmul, then `esm_s_mlp`.
//! 2. **Trunk** (fp32), `no_recycles` passes (the config's `max_recycles`
//!    when `num_recycles` is not given, else `num_recycles + 1`). Each pass
//!    keeps `s_z_0`, the recycled pair (`recycle_z_norm` output plus the
//!    `recycle_disto` embedding) and the previous pass's `s_z`; the pass
//!    input `s_z_0 + recycle_z` goes when `trunk_iter` rebinds `z` (the
//!    callee's frame owns its arguments in Python 3.11+).
//!    Each of the 48 blocks: pair-to-sequence bias (kept for the block),
//!    gated sequence attention with pair bias (B x 32 x L x L logits, then
//!    `+ bias`, `masked_fill`, softmax: each a new tensor; the softmax is
//!    returned and kept by `y, _ = ...` until the block returns, as is the
//!    triangle mask), sequence MLP,
//!    sequence-to-pair (`q*k` and `q-k` outer products, `cat`, `o_proj`),
//!    triangular multiplicative updates outgoing and incoming (LayerNorm,
//!    gated projections a and b, contiguous copies for the batched matmul,
//!    LayerNorm of the permuted result via a contiguous copy, gate), two
//!    triangular attentions (LayerNorm, q/k/v, B x L x 4 x L x L logits and
//!    their softmax alive together; the ending-node one LayerNorms a
//!    transposed view through a contiguous copy) and the pair transition
//!    (LayerNorm, 128->512 linear, ReLU (not in place), 512->128 linear).
//!    `EsmFoldDropout` in eval still multiplies by a ones mask, allocating a
//!    full pair tensor after every triangle op.
//! 3. **Chunking** (`set_chunk_size(c)`): only the triangular attentions are
//!    chunked (`chunk_layer` over the B*L rows): per chunk, q/k/v of c rows,
//!    c x 4 x L x L logits and softmax, written into a zero-initialised
//!    output. Triangle multiplications, the pair transition and the rest
//!    run unchunked, which is why chunking stops helping long before the
//!    L^3 term is gone.
//! 4. **Structure module** (8 IPA blocks): `trunk2sm_z` and `layer_norm_z`
//!    copies of the pair, per block the pair bias and point-attention
//!    temporaries (q_pts - k_pts: 12 heads x 4 points x 3 per pair; the
//!    value-point product: 12 x 3 x 8 per pair), the distogram used for the
//!    next recycle's bins.
//! 5. **Heads**: distogram (64 bins, symmetrised), pTM logits and the
//!    aligned-error softmax over the pair.

use super::encoder;
use super::nn::{Ctx, FP32, INT64, T};
use super::ReplaySummary;
use crate::arch::EsmFoldArch;
use crate::component::Component;
use crate::error::Error;
use crate::graph::{Graph, Saves, Value};
use crate::runtime::RuntimeProfile;
use crate::trace::Replay;
use crate::workload::{Attention, LoadPath, Mode, Workload};
use alloc::vec::Vec;

/// Rejects workloads ESMFold cannot run.
pub fn validate(workload: &Workload) -> Result<(), Error> {
    if workload.mode == Mode::Training {
        return Err(Error::invalid(
            "workload.mode",
            "ESMFold training is not modelled",
            "\"inference\" for esmfold",
        ));
    }
    if workload.inference.batches > 1 {
        return Err(Error::invalid(
            "workload.inference.batches",
            "several ESMFold predictions in one process are not modelled",
            "1 for esmfold (estimate the longest protein)",
        ));
    }
    // Triangle attention allocates batch x L^3 x 16 bytes: keep it in u64.
    crate::error::check_range("workload.seq_len", workload.seq_len as u64, 1, MAX_RESIDUES)?;
    let residues = workload.batch as u64 * workload.seq_len as u64;
    if residues > MAX_RESIDUES {
        return Err(Error::invalid(
            "workload.batch x workload.seq_len",
            alloc::format!("{residues} residues per batch is too large for ESMFold"),
            "at most 65536 residues per batch",
        ));
    }
    Ok(())
}

/// Most residues (batch x length) ESMFold estimates accept.
pub const MAX_RESIDUES: u64 = 65_536;

/// One ESMFold forward in progress: the graph and the shapes.
struct Folder<'g, 'r> {
    g: &'g mut Graph<'r>,
    /// Pairs: B x L x L.
    pairs: u64,
    /// Pair width (128).
    cz: u64,
    /// Batch.
    b: u64,
    /// Residues.
    l: u64,
    /// Trunk chunk size for triangular attention.
    chunk: Option<u64>,
    /// Replay every chunk of a chunked triangular attention, not only the
    /// first [`REPLAYED_FULL_CHUNKS`] and the last
    /// ([`super::ReplayOptions::chunk_shortcut`] off).
    every_chunk: bool,
}

/// Full chunks of a chunked triangular attention that the replay runs
/// before it skips to the last chunk: from the second on, each chunk frees
/// the previous chunk's output into the blocks the chunk before freed, so
/// the chunks between repeat the replayed ones exactly
/// (`chunk_shortcut_matches_full_replay` in `core/tests/it/shortcuts.rs`
/// passes with two and fails with one; three keep a margin).
const REPLAYED_FULL_CHUNKS: u64 = 3;

impl Folder<'_, '_> {
    /// Allocates `bytes` for op `name`.
    fn alloc(&mut self, name: &'static str, bytes: u64, c: Component) -> Value {
        self.g.op(name, &[], bytes, c, Saves::NOTHING)
    }

    /// A transient over the pair with `width` fp32 channels per pair.
    fn pw(&mut self, name: &'static str, width: u64) -> Value {
        self.alloc(name, self.pairs * width * FP32, Component::PairTransient)
    }

    /// A full pair-sized transient (B x L x L x 128 fp32).
    fn pz(&mut self, name: &'static str) -> Value {
        self.pw(name, self.cz)
    }

    /// A new pair state (the representation itself).
    fn state(&mut self, name: &'static str) -> Value {
        self.alloc(
            name,
            self.pairs * self.cz * FP32,
            Component::PairRepresentation,
        )
    }

    fn drop(&mut self, vs: &[Value]) {
        self.g.drop_all(vs);
    }

    /// LayerNorm over the pair; a transposed view is first copied contiguous.
    fn pair_layer_norm(&mut self, name: &'static str, transposed: bool) -> Value {
        if transposed {
            let copy = self.pz("pair LayerNorm: contiguous copy of a transposed view");
            let out = self.pz(name);
            self.drop(&[copy]);
            out
        } else {
            self.pz(name)
        }
    }

    /// `z + dropout(update)`, where `EsmFoldDropout` in eval is `x * ones`
    /// (a new pair tensor). Consumes `update` and `z`'s program hold.
    fn residual(&mut self, z: Value, update: Value, name: &'static str) -> Value {
        let dropped = self.pz("pair dropout in eval (x * ones)");
        self.drop(&[update]);
        let sum = self.state(name);
        self.drop(&[dropped, z]);
        sum
    }

    /// `sigmoid(linear(z)) * mask * linear(z)`: one gated projection.
    fn gated_projection(&mut self) -> Value {
        let gl = self.pz("triangle multiplication: gate linear");
        let sg = self.pz("triangle multiplication: sigmoid");
        self.drop(&[gl]);
        let masked = self.pz("triangle multiplication: mask * gate");
        self.drop(&[sg]);
        let pl = self.pz("triangle multiplication: projection linear");
        let prod = self.pz("triangle multiplication: gate * projection");
        self.drop(&[masked, pl]);
        prod
    }

    /// `EsmFoldTriangleMultiplicativeUpdate.forward` (not chunked). Returns the update.
    fn triangle_multiplication(&mut self) -> Value {
        let zl = self.pz("triangle multiplication: layer_norm_in");
        let a = self.gated_projection();
        let b = self.gated_projection();
        // torch.matmul of permuted (non-contiguous) operands copies them.
        let ac = self.pz("triangle multiplication: matmul operand copy");
        let bc = self.pz("triangle multiplication: matmul operand copy");
        let p = self.pz("triangle multiplication: matmul");
        self.drop(&[ac, bc, a, b]);
        let x = self.pair_layer_norm("triangle multiplication: layer_norm_out", true);
        self.drop(&[p]);
        let xz = self.pz("triangle multiplication: linear_z");
        self.drop(&[x]);
        let gl = self.pz("triangle multiplication: linear_g");
        let g = self.pz("triangle multiplication: sigmoid(linear_g)");
        self.drop(&[gl]);
        let out = self.pz("triangle multiplication: output * gate");
        self.drop(&[xz, g, zl]);
        out
    }

    /// The attention of `rows` query rows over L keys, 4 heads of width 32
    /// (`EsmFoldAttention` without chunking, or one chunk of it).
    fn triangle_mha(&mut self, rows: u64, heads: u64) -> Value {
        let l = self.l;
        let per_row = l * self.cz * FP32;
        let q = self.alloc(
            "triangle attention: q",
            rows * per_row,
            Component::PairTransient,
        );
        let k = self.alloc(
            "triangle attention: k",
            rows * per_row,
            Component::PairTransient,
        );
        let v = self.alloc(
            "triangle attention: v",
            rows * per_row,
            Component::PairTransient,
        );
        let logits = self.alloc(
            "triangle attention: logits q.k (+ biases in place)",
            rows * heads * l * l * FP32,
            Component::PairTransient,
        );
        let probs = self.alloc(
            "triangle attention: softmax",
            rows * heads * l * l * FP32,
            Component::PairTransient,
        );
        self.drop(&[logits, q, k]);
        let o = self.alloc(
            "triangle attention: probs @ v",
            rows * per_row,
            Component::PairTransient,
        );
        self.drop(&[probs, v]);
        let gl = self.alloc(
            "triangle attention: gate linear",
            rows * per_row,
            Component::PairTransient,
        );
        let g = self.alloc(
            "triangle attention: sigmoid(gate)",
            rows * per_row,
            Component::PairTransient,
        );
        self.drop(&[gl]);
        let og = self.alloc(
            "triangle attention: output * gate",
            rows * per_row,
            Component::PairTransient,
        );
        self.drop(&[o, g]);
        let out = self.alloc(
            "triangle attention: linear_o",
            rows * per_row,
            Component::PairTransient,
        );
        self.drop(&[og]);
        out
    }

    /// `EsmFoldTriangleAttention.forward`, chunked over the B*L rows when a
    /// chunk size is set. Returns the update.
    fn triangle_attention(&mut self, ending: bool) -> Value {
        let heads = 4;
        let x = self.pair_layer_norm("triangle attention: layer_norm", ending);
        let mask_bias = self.pw("triangle attention: mask bias", 1);
        let tri_bias = self.pw("triangle attention: triangle bias linear", heads);
        let rows = self.b * self.l;
        let out = match self.chunk {
            None => self.triangle_mha(rows, heads),
            Some(c) => {
                // chunk_layer: the first chunk's output sizes the zero-filled
                // result, every chunk is copied into it. Its loop reads
                // `output_chunk = layer(**chunks)`, so a chunk's output is
                // freed only when the next chunk's output replaces it: each
                // chunk runs with the previous chunk's output live.
                let c = c.min(rows);
                let full = rows / c;
                let tail = rows % c;
                let replayed_full = if self.every_chunk {
                    full
                } else {
                    full.min(REPLAYED_FULL_CHUNKS)
                };
                let first = self.triangle_mha(c, heads);
                let out = self.pz("triangle attention: chunked output (new_zeros)");
                let mut previous = first;
                for _ in 1..replayed_full {
                    let next = self.triangle_mha(c, heads);
                    self.drop(&[previous]);
                    previous = next;
                }
                if tail > 0 {
                    let last = self.triangle_mha(tail, heads);
                    self.drop(&[previous]);
                    previous = last;
                }
                // The last chunk's output lives until chunk_layer returns.
                self.drop(&[previous]);
                out
            }
        };
        self.drop(&[x, mask_bias, tri_bias]);
        out
    }

    /// `EsmFoldTriangularSelfAttentionBlock.forward`; `z` is held by the caller.
    fn block(&mut self, block: u32) -> Value {
        let layer = Some(block);
        let (b, l) = (self.b, self.l);
        let seq_heads = 32;
        self.g.at("trunk: pair-to-sequence bias", layer);
        let ln = self.pz("pair_to_sequence: layernorm");
        let bias = self.pw("pair_to_sequence: bias (kept for the block)", seq_heads);
        self.drop(&[ln]);
        self.g.at("trunk: sequence attention with pair bias", layer);
        let a = self.pw("sequence attention: q.k logits", seq_heads);
        let ab = self.pw("sequence attention: logits + bias", seq_heads);
        self.drop(&[a]);
        let am = self.pw("sequence attention: masked_fill", seq_heads);
        self.drop(&[ab]);
        // `y, _ = self.seq_attention(...)`: the probabilities come back as
        // the second output and `_` holds them until the block returns.
        let probs = self.pw("sequence attention: softmax (kept by `_`)", seq_heads);
        self.drop(&[am]);
        let _ = b;
        self.g.at("trunk: sequence-to-pair", layer);
        let prod = self.pw("sequence_to_pair: q * k outer product", self.cz / 2);
        let diff = self.pw("sequence_to_pair: q - k outer difference", self.cz / 2);
        let cat = self.pz("sequence_to_pair: cat");
        self.drop(&[prod, diff]);
        let s2p = self.pz("sequence_to_pair: o_proj");
        self.drop(&[cat]);
        let z1 = self.state("trunk: pair + sequence_to_pair");
        self.drop(&[s2p]);
        let tri_mask = self.alloc(
            "trunk: triangle mask (int64)",
            self.pairs * INT64,
            Component::PairTransient,
        );
        self.g
            .at("trunk: triangle multiplication (outgoing)", layer);
        let t = self.triangle_multiplication();
        let z2 = self.residual(z1, t, "trunk: pair + triangle multiplication (outgoing)");
        self.g
            .at("trunk: triangle multiplication (incoming)", layer);
        let t = self.triangle_multiplication();
        let z3 = self.residual(z2, t, "trunk: pair + triangle multiplication (incoming)");
        self.g
            .at("trunk: triangle attention (starting node)", layer);
        let t = self.triangle_attention(false);
        let z4 = self.residual(z3, t, "trunk: pair + triangle attention (starting node)");
        self.g.at("trunk: triangle attention (ending node)", layer);
        let t = self.triangle_attention(true);
        let z5 = self.residual(z4, t, "trunk: pair + triangle attention (ending node)");
        self.g.at("trunk: pair transition", layer);
        let ln = self.pz("pair transition: layernorm");
        let h1 = self.pw("pair transition: linear 128->512", 4 * self.cz);
        self.drop(&[ln]);
        let r = self.pw("pair transition: relu", 4 * self.cz);
        self.drop(&[h1]);
        let h2 = self.pz("pair transition: linear 512->128");
        self.drop(&[r]);
        let out = self.state("trunk: pair + pair transition");
        self.drop(&[h2, z5]);
        // The block's locals go when it returns, in order: `bias`, `_`
        // (the attention probabilities), `tri_mask`.
        self.drop(&[bias, probs, tri_mask]);
        let _ = l;
        out
    }

    /// The structure module's pair-sized work for one recycle.
    fn structure_module(&mut self, s_z: Value) -> Value {
        self.g
            .at("structure module: trunk2sm_z and layer_norm_z", None);
        let _ = s_z;
        let z_sm = self.pz("structure module: trunk2sm_z");
        let z_ln = self.pz("structure module: layer_norm_z");
        let heads = 12;
        for block in 0..8u32 {
            self.g
                .at("structure module: invariant point attention", Some(block));
            let b = self.pw("IPA: pair bias linear_b", heads);
            let a = self.pw("IPA: q.k logits", heads);
            let diff = self.pw("IPA: q_pts - k_pts", heads * 4 * 3);
            let sq = self.pw("IPA: squared point distances", heads * 4 * 3);
            self.drop(&[diff]);
            let summed = self.pw("IPA: sum over xyz", heads * 4);
            self.drop(&[sq]);
            let weighted = self.pw("IPA: * head weights", heads * 4);
            self.drop(&[summed]);
            let pt = self.pw("IPA: point attention", heads);
            self.drop(&[weighted]);
            let a2 = self.pw("IPA: logits + point attention", heads);
            self.drop(&[a, pt]);
            let a3 = self.pw("IPA: logits + mask", heads);
            self.drop(&[a2]);
            let probs = self.pw("IPA: softmax", heads);
            self.drop(&[a3]);
            let o_pt = self.pw("IPA: probs x value points", heads * 3 * 8);
            self.drop(&[o_pt, probs, b]);
        }
        self.g
            .at("structure module: distogram for the next recycle", None);
        // The module's pair inputs go when it returns, before the
        // distogram of its positions (`EsmFoldingTrunk.distogram`).
        self.drop(&[z_sm, z_ln]);
        // `(CB[..., None, :, :] - CB[..., :, None, :]).pow(2).sum(-1)`.
        let diff = self.pw("distogram: CB differences", 3);
        let sq = self.pw("distogram: squared", 3);
        self.drop(&[diff]);
        let dists = self.pw("distogram: squared CB distances", 1);
        self.drop(&[sq]);
        // `torch.sum(dists > boundaries, dim=-1)`: the bool mask, then the
        // int64 output (the next recycle's bins), then the mask cast to
        // int64 for the reduction (the H100 trace's order).
        let mask = self.alloc(
            "distogram: dists > boundaries (bool)",
            self.pairs * 14,
            Component::PairTransient,
        );
        let bins = self.alloc(
            "trunk: recycle_bins = distogram(...)",
            self.pairs * INT64,
            Component::PairTransient,
        );
        let cast = self.alloc(
            "distogram: mask as int64 for the sum",
            self.pairs * 14 * INT64,
            Component::PairTransient,
        );
        self.drop(&[cast, mask, dists]);
        bins
    }
}

/// Recycling passes the trunk runs.
pub fn passes(arch: &EsmFoldArch, workload: &Workload) -> u32 {
    match workload.esmfold.num_recycles {
        None => arch.max_recycles,
        Some(n) => n + 1,
    }
}

/// Replays an ESMFold run.
pub fn replay(
    arch: &EsmFoldArch,
    workload: &Workload,
    runtime: &RuntimeProfile,
    replay: &mut Replay,
    options: super::ReplayOptions,
) -> Result<ReplaySummary, Error> {
    let mut g = Graph::for_runtime(replay, runtime);
    let stem_dsize = workload.esmfold.stem_dtype.bytes();
    let folding = folding_tensors(arch);
    let build_then_cast = workload.load == LoadPath::BuildThenCast && stem_dsize != FP32;
    if build_then_cast {
        // Built on the GPU in fp32: `EsmForProteinFolding.__init__` builds the
        // stem and calls `self.esm.half()` at once (fp16_esm), parameter by
        // parameter, before it builds the folding parts, which then fill some
        // of the freed fp32 holes.
        let mut scratch_replay = Replay::new(runtime.allocator, None);
        let mut scratch = Graph::new(&mut scratch_replay);
        scratch.record_params();
        encoder::build(&mut scratch, &arch.stem, FP32, false, None);
        let fp32_sizes = scratch.recorded_params();
        g.stage_fp32_construction(&fp32_sizes);
    }
    // Weights: the ESM-2 stem in stem_dtype, then the folding parts in fp32.
    let stem = encoder::build(&mut g, &arch.stem, stem_dsize, false, None);
    g.at("load weights: folding trunk and structure module", None);
    for &elems in &folding {
        g.param(elems * FP32, false);
    }
    let buffers = 8_448;
    g.param(buffers, false);
    #[cfg(feature = "diagnostics")]
    if build_then_cast && options.cache_emptied_after_load {
        g.replay.empty_cache();
        g.replay.reset_peaks();
    }
    let weight_bytes = stem.bytes + arch.folding_params * FP32 + buffers;
    let summary = ReplaySummary {
        params: stem.params + arch.folding_params,
        weight_bytes,
        ..ReplaySummary::default()
    };
    super::cublas_workspaces(&mut g, runtime, false);

    let b = workload.batch as u64;
    let l = workload.seq_len as u64;
    let h = arch.stem.hidden_size as u64;
    let cs = arch.sequence_state_dim as u64;
    let layers = arch.stem.num_layers as u64 + 1;
    // 1. The language-model stem with every hidden state kept.
    let mut cx = Ctx::plain(stem_dsize);
    let mut hidden: Vec<T> = Vec::new();
    let last = encoder::forward(
        &mut g,
        &mut cx,
        &arch.stem,
        &stem,
        b,
        l + 2,
        Attention::Sdpa,
        false,
        false,
        Some(&mut hidden),
        false,
        &mut None,
    );
    g.drop(last.v);
    g.at("stem: torch.stack(hidden_states, dim=2)", None);
    let stacked = g.op(
        "stem: torch.stack(hidden_states)",
        &[],
        b * (l + 2) * layers * h * stem_dsize,
        Component::Activations,
        Saves::NOTHING,
    );
    for t in hidden.drain(..) {
        g.drop(t.v);
    }
    // `esm_s.to(fp32)`: a copy from a half-precision stem, the same tensor
    // from an fp32 one.
    let esm_s = if stem_dsize == FP32 {
        stacked
    } else {
        let copy = g.op(
            "stem: esm_s.to(fp32)",
            &[],
            b * l * layers * h * FP32,
            Component::Activations,
            Saves::NOTHING,
        );
        g.drop(stacked);
        copy
    };
    // The combined states stay in `forward`'s local `esm_s` until the fold
    // returns (the H200 trace: `modeling_esmfold.py:2112`, live at the
    // trunk's peak).
    let combined = g.op(
        "stem: softmax(esm_s_combine) @ esm_s",
        &[],
        b * l * h * FP32,
        Component::Activations,
        Saves::NOTHING,
    );
    g.drop(esm_s);
    g.at("esm_s_mlp", None);
    let ln = g.op(
        "esm_s_mlp: layernorm",
        &[],
        b * l * h * FP32,
        Component::Transient,
        Saves::NOTHING,
    );
    let h1 = g.op(
        "esm_s_mlp: linear",
        &[],
        b * l * cs * FP32,
        Component::Transient,
        Saves::NOTHING,
    );
    g.drop(ln);
    let r = g.op(
        "esm_s_mlp: relu",
        &[],
        b * l * cs * FP32,
        Component::Transient,
        Saves::NOTHING,
    );
    g.drop(h1);
    let s_s_0 = g.op(
        "esm_s_mlp: linear (s_s_0)",
        &[],
        b * l * cs * FP32,
        Component::Activations,
        Saves::NOTHING,
    );
    g.drop(r);

    // 2. The trunk with recycling.
    let cz = arch.pairwise_state_dim as u64;
    let mut f = Folder {
        g: &mut g,
        pairs: b * l * l,
        cz,
        b,
        l,
        chunk: workload.esmfold.chunk_size.map(u64::from),
        every_chunk: !options.chunk_shortcut,
    };
    f.g.at("trunk: s_z_0 = zeros", None);
    let s_z_0 = f.state("trunk: s_z_0 (zeros)");
    let mut recycle_z = f.state("trunk: recycle_z (zeros_like)");
    let mut recycle_bins = f.alloc(
        "trunk: recycle_bins (int64)",
        b * l * l * INT64,
        Component::PairTransient,
    );
    let mut s_z: Option<Value> = None;
    f.g.replay.step_kind("recycle");
    for pass in 0..passes(arch, workload) {
        f.g.replay.step(Some(pass));
        f.g.at("trunk: recycle_z_norm + recycle_disto", None);
        let rz = f.pz("trunk: recycle_z_norm");
        f.g.relabel(rz, Component::PairRepresentation);
        f.drop(&[recycle_z]);
        // `recycle_z += self.recycle_disto(recycle_bins)`: the bins stay
        // in `recycle_bins` until the pass replaces them (the H200 trace:
        // `modeling_esmfold.py:1897`, live at the trunk's peak).
        let emb = f.pz("trunk: recycle_disto embedding");
        f.drop(&[emb]);
        let z_in = f.state("trunk: s_z_0 + recycle_z");
        f.g.at("trunk: relative position embedding", None);
        let diff = f.alloc(
            "trunk: relative positions (int64)",
            b * l * l * INT64,
            Component::PairTransient,
        );
        let pos = f.pz("trunk: relative position embedding");
        f.drop(&[diff]);
        let mut z = f.state("trunk: z + positional embedding");
        // `z = z + ...` in `trunk_iter` drops the last reference to the
        // argument `s_z_0 + recycle_z` (Python 3.11+ frames own their
        // arguments; the H200 snapshot has no such block at the peak).
        f.drop(&[pos, z_in]);
        for block in 0..arch.trunk_blocks {
            let next = f.block(block);
            f.drop(&[z]);
            z = next;
        }
        if let Some(old) = s_z.take() {
            f.drop(&[old]);
        }
        let bins = f.structure_module(z);
        // recycle_z = s_z; both names hold it.
        f.g.hold(z);
        recycle_z = z;
        s_z = Some(z);
        f.drop(&[rz]);
        f.drop(&[recycle_bins]);
        recycle_bins = bins;
    }
    f.drop(&[recycle_z, recycle_bins, s_z_0]);
    // 5. Heads over the final pair.
    f.g.replay.step(None);
    f.g.at("heads: distogram, pTM, aligned error", None);
    let bins = 64;
    let disto = f.pw("distogram head: logits", bins);
    let dt = f.pw("distogram head: logits + logits^T", bins);
    f.drop(&[disto]);
    let dist = f.pw("distogram head: / 2", bins);
    f.drop(&[dt]);
    let ptm = f.pw("pTM head: logits", bins);
    let probs = f.pw("pTM: softmax over bins", bins);
    let tm = f.pw("pTM: per-bin tm terms", bins);
    f.drop(&[tm]);
    let pae = f.pw("aligned error: softmax over bins", bins);
    let pae_e = f.pw("aligned error: expectation terms", bins);
    f.drop(&[pae_e, probs]);
    f.drop(&[dist, ptm, pae]);
    if let Some(z) = s_z {
        f.drop(&[z]);
    }
    g.drop_all(&[s_s_0, combined]);
    Ok(summary)
}

/// Parameter tensors of the folding parts (trunk blocks, esm_s_mlp, the
/// structure module and heads), as element counts in module order. Block
/// shapes follow `EsmFoldTriangularSelfAttentionBlock` (c_s = 1024, c_z =
/// 128); what is left of `folding_params` is spread over 64 KiB tensors
/// (the structure module's and heads' small linears).
fn folding_tensors(arch: &EsmFoldArch) -> Vec<u64> {
    let cs = arch.sequence_state_dim as u64;
    let cz = arch.pairwise_state_dim as u64;
    let h = arch.stem.hidden_size as u64;
    let mut v = Vec::new();
    // esm_s_mlp
    v.extend_from_slice(&[h, h, cs * h, cs, cs * cs, cs]);
    let lin = |v: &mut Vec<u64>, i: u64, o: u64, bias: bool| {
        v.push(i * o);
        if bias {
            v.push(o);
        }
    };
    for _ in 0..arch.trunk_blocks {
        v.extend_from_slice(&[cs, cs]); // layernorm_1
        v.extend_from_slice(&[cs, cs]); // sequence_to_pair.layernorm
        lin(&mut v, cs, cz, true);
        lin(&mut v, cz, cz, true);
        v.extend_from_slice(&[cz, cz]); // pair_to_sequence.layernorm
        lin(&mut v, cz, 32, false);
        lin(&mut v, cs, 3 * cs, false);
        lin(&mut v, cs, cs, true);
        lin(&mut v, cs, cs, true);
        for _ in 0..2 {
            for _ in 0..6 {
                lin(&mut v, cz, cz, true);
            }
            v.extend_from_slice(&[cz, cz, cz, cz]);
        }
        for _ in 0..2 {
            v.extend_from_slice(&[cz, cz]);
            lin(&mut v, cz, 4, false);
            for _ in 0..3 {
                lin(&mut v, cz, cz, false);
            }
            lin(&mut v, cz, cz, true);
            lin(&mut v, cz, cz, true);
        }
        v.extend_from_slice(&[cs, cs]);
        lin(&mut v, cs, 4 * cs, true);
        lin(&mut v, 4 * cs, cs, true);
        v.extend_from_slice(&[cz, cz]);
        lin(&mut v, cz, 4 * cz, true);
        lin(&mut v, 4 * cz, cz, true);
    }
    let counted: u64 = v.iter().sum();
    let mut rest = arch.folding_params.saturating_sub(counted);
    while rest > 0 {
        let t = rest.min(16_384);
        v.push(t);
        rest -= t;
    }
    v
}
