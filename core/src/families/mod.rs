//! One module per model family. Each emits, op by op, the tensors a real
//! PyTorch run allocates and frees, into a [`Replay`].

pub mod cnn;
pub mod decoder;
pub mod encoder;
pub mod esmfold;
pub mod nn;
pub mod optim;
pub mod sharding;
pub mod vit;

use crate::arch::Architecture;
use crate::error::Error;
use crate::runtime::LibraryUse;
use crate::runtime::RuntimeProfile;
use crate::trace::Replay;
use crate::workload::{Head, InferenceKind, Logits, Mode, Workload};

/// What a family's replay reports besides the allocator trace.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReplaySummary {
    /// Parameters instantiated (adapters included).
    pub params: u64,
    /// Parameter and buffer bytes.
    pub weight_bytes: u64,
    /// Libraries the run loads.
    pub libraries: LibraryUse,
}

/// Rejects shapes and workloads a family cannot run, naming the field
/// (shapes are checked here too, for architectures built in code rather
/// than read from a spec).
pub fn validate(arch: &Architecture, workload: &Workload) -> Result<(), Error> {
    crate::arch::validate_arch(arch)?;
    if workload.mode == Mode::Training && !workload.dtype.is_float() {
        // `prepare_model_for_kbit_training` leaves every parameter that is
        // not quantized in fp32: the adapters train under autocast or in
        // fp32, never in pure bf16 or fp16.
        if !workload.training.precision.fp32_parameters() {
            return Err(Error::invalid(
                "workload.training.precision",
                "a quantized base's other parameters are fp32 (prepare_model_for_kbit_training)",
                "\"amp_bf16\", \"amp_fp16\" or \"fp32\"",
            ));
        }
        // LLM.int8 keeps each layer's inputs past checkpointing; a mixture
        // of experts' routed inputs are more than the replay's layer holds.
        if workload.dtype == crate::arch::Dtype::Int8
            && matches!(arch, Architecture::Decoder(d) if d.moe.is_some())
        {
            return Err(Error::unsupported(
                "`workload.dtype`: training on 8-bit weights of a mixture of experts is not modelled; \
                 4-bit (\"int4\" or \"int4_dq\") is",
            ));
        }
    }
    if workload.padded && !matches!(arch, Architecture::Decoder(_)) {
        return Err(Error::invalid(
            "workload.padded",
            "padded batches are modelled for decoder LLMs only",
            "false for this model",
        ));
    }
    // Beam search belongs to a decoder's generation; like the other
    // generation options it is not used by a training job or a forward.
    if workload.inference.num_beams > 1 && !matches!(arch, Architecture::Decoder(_)) {
        return Err(Error::invalid(
            "workload.inference.num_beams",
            "beam search is part of a decoder LLM's generation",
            "1 for this model",
        ));
    }
    // Every step's scores or logits returned: a decoder's greedy
    // generation of one batch (beam search's and a loop's are not modelled).
    let per_step = workload.inference.output_scores || workload.inference.output_logits;
    if per_step
        && workload.mode == Mode::Inference
        && workload.inference.kind == InferenceKind::Generate
    {
        let field = if workload.inference.output_scores {
            "workload.inference.output_scores"
        } else {
            "workload.inference.output_logits"
        };
        if !matches!(arch, Architecture::Decoder(_)) {
            return Err(Error::invalid(
                field,
                "returned scores and logits are part of a decoder LLM's generation",
                "false for this model",
            ));
        }
        if workload.inference.num_beams > 1 || workload.inference.batches > 1 {
            return Err(Error::invalid(
                field,
                "returned scores and logits are modelled for greedy generation of one batch",
                "false with num_beams or batches above 1",
            ));
        }
    }
    let head_modelled = match arch {
        Architecture::Encoder(_) => true,
        Architecture::Decoder(_) => workload.head == Head::SequenceClassification,
        _ => false,
    };
    if workload.head != Head::Lm && !head_modelled {
        let allowed = if matches!(arch, Architecture::Decoder(_)) {
            "\"lm\" or \"sequence_classification\" for a decoder LLM"
        } else {
            "\"lm\" for this model"
        };
        return Err(Error::invalid(
            "workload.head",
            alloc::format!(
                "a {} head is modelled on encoders (BERT, ESM-2), and a sequence classifier on decoder LLMs",
                workload.head.key()
            ),
            allowed,
        ));
    }
    if workload.head != Head::Lm
        && workload.mode == Mode::Inference
        && workload.inference.logits == Logits::None
    {
        return Err(Error::invalid(
            "workload.inference.logits",
            "\"none\" asks for no head, but workload.head names a classifier",
            "\"all\" or \"last\" with a classification head",
        ));
    }
    match arch {
        Architecture::Decoder(a) => decoder::validate(a, workload),
        Architecture::Encoder(_) => encoder::validate(workload),
        Architecture::Vit(_) | Architecture::Cnn(_) => vit::validate_vision(workload),
        Architecture::EsmFold(_) => esmfold::validate(workload),
    }?;
    sharding::validate(arch, workload)?;
    let field = match arch {
        Architecture::Vit(_) | Architecture::Cnn(_) => "workload.batch x workload.image_size",
        Architecture::EsmFold(_) => "workload.batch x workload.seq_len (residues)",
        _ => "workload.batch x workload.seq_len",
    };
    // The kinds together, so that everything live at once stays under the
    // bound; the message names the largest.
    let bounds = job_bounds(arch, workload);
    let total: f64 = bounds.iter().map(|(_, bytes)| bytes).sum();
    if total > MAX_JOB_BYTES {
        let (what, _) = bounds
            .iter()
            .fold(bounds[0], |big, b| if b.1 > big.1 { *b } else { big });
        return Err(Error::invalid(
            field,
            alloc::format!("{what} would take more than 2^60 bytes"),
            "a job whose tensors stay under 2^60 bytes (1 EiB): a shorter length or a smaller batch",
        ));
    }
    Ok(())
}

/// Bytes no job may reach: 2^60 (1 EiB, millions of times any GPU), the
/// sum of [`job_bounds`]. A replay keeps tensor sizes and running totals in
/// `u64`; under this bound none of them can overflow, whatever the shapes
/// within their ranges, and a replay without a card never needs more than
/// the allocator's `UNBOUNDED_CAPACITY` (2^61).
pub const MAX_JOB_BYTES: f64 = (1u64 << 60) as f64;

/// Upper bounds on the bytes of a job's largest kinds of tensors, each at
/// least what the replay allocates for it (in `f64`, so the bounds
/// themselves cannot overflow): what it is, and the bound.
fn job_bounds(arch: &Architecture, w: &Workload) -> [(&'static str, f64); 5] {
    let n = f64::from;
    // Beam search runs each prompt as `num_beams` rows.
    let batch = n(w.batch) * w.beams() as f64;
    let weights = (
        "the weights, gradients and optimizer state",
        arch.param_bound() * 32.0,
    );
    // Attention that materialises batch x heads x L x L scores: eager, and
    // fp32 (where SDPA can fall back to its math kernel).
    // (A LoRA base keeps the workload's dtype whatever the precision.)
    let fp32 = w.dtype == crate::arch::Dtype::Fp32
        || (w.mode == Mode::Training && w.training.precision == crate::workload::Precision::Fp32);
    let materialised = w.attention == crate::workload::Attention::Eager || fp32;
    // Per layer: scores, probabilities and their gradients (4 bytes each).
    // A transformer of `layers` blocks over `len` tokens: activations of
    // `width` values per token and block, logits over `vocab`, and scores,
    // probabilities and their gradients (4 bytes each) per block.
    let transformer = |len: f64, layers: f64, width: f64, vocab: f64, heads: f64| {
        let scores = batch * len * len * if materialised { heads * 16.0 } else { 8.0 };
        [
            weights,
            ("the activations", batch * len * layers * width * 256.0),
            ("the logits", batch * len * vocab * 64.0),
            ("the attention scores", scores * layers),
            ("the experts' weight copies", 0.0),
        ]
    };
    match arch {
        Architecture::Decoder(a) => {
            let generated = match (w.mode, w.inference.kind) {
                (Mode::Inference, crate::workload::InferenceKind::Generate) => {
                    n(w.inference.new_tokens)
                }
                _ => 0.0,
            };
            let len = n(w.seq_len) + generated;
            let moe = a.moe.map_or(0.0, |m| {
                n(m.experts_per_token) * n(m.expert_intermediate_size)
                    + n(m.shared_expert_intermediate_size)
                    + n(m.num_experts)
            });
            // Hidden states, MLP, experts, q/k/v and the KV cache.
            let width = n(a.hidden_size)
                + n(a.intermediate_size)
                + moe
                + (n(a.num_heads) + n(a.num_kv_heads) * 2.0) * n(a.head_dim);
            let (layers, vocab, heads) = (n(a.num_layers), n(a.vocab_size), n(a.num_heads));
            let mut bounds = transformer(len, layers, width, vocab, heads);
            // A decode step gathers each chosen expert's gate, up and down
            // weights once per token (`batched_mm`): batch x top-k copies,
            // both sets live at once (8 bytes a value bounds any dtype).
            if generated > 0.0 {
                if let Some(m) = a.moe {
                    bounds[4].1 = batch
                        * n(m.experts_per_token)
                        * n(m.expert_intermediate_size)
                        * n(a.hidden_size)
                        * 3.0
                        * 8.0;
                }
            }
            bounds
        }
        Architecture::Encoder(a) => {
            let width = n(a.hidden_size) * 4.0 + n(a.intermediate_size);
            let (layers, vocab, heads) = (n(a.num_layers), n(a.vocab_size), n(a.num_heads));
            transformer(n(w.seq_len), layers, width, vocab, heads)
        }
        Architecture::Vit(a) => {
            let len = a.tokens(w.length(true)) as f64;
            let width = n(a.hidden_size) * 4.0 + n(a.mlp_dim);
            let layers = n(a.num_layers);
            let heads = n(a.num_heads);
            // torchvision's attention always materialises its scores.
            let per_layer = batch * heads * len * len * 16.0;
            [
                weights,
                ("the activations", batch * len * layers * width * 256.0),
                ("the logits", batch * n(a.num_classes) * 64.0),
                ("the attention scores", per_layer * layers),
                ("the experts' weight copies", 0.0),
            ]
        }
        Architecture::EsmFold(a) => {
            let len = n(w.seq_len);
            let stem = n(a.stem.hidden_size) * 4.0 + n(a.stem.intermediate_size);
            [
                weights,
                (
                    "the language model's activations",
                    batch * len * n(a.stem.num_layers) * stem * 256.0,
                ),
                (
                    "the pair representation",
                    batch * len * len * n(a.pairwise_state_dim) * 256.0,
                ),
                // Unchunked triangle attention: 4 heads, L^3 scores.
                ("the triangle attention", batch * len * len * len * 64.0),
                ("the experts' weight copies", 0.0),
            ]
        }
        Architecture::Cnn(_) => {
            let side = n(w.length(true));
            // A feature map holds at most 64 values per input pixel
            // (MobileNetV2's widest: 24); a network keeps a few hundred.
            [
                weights,
                ("the feature maps", batch * side * side * 64.0 * 4.0 * 512.0),
                ("the logits", batch * (4u64 << 22) as f64 * 64.0),
                ("the attention scores", 0.0),
                ("the experts' weight copies", 0.0),
            ]
        }
    }
}

/// Which libraries the run loads.
pub fn libraries(arch: &Architecture, workload: &Workload, runtime: &RuntimeProfile) -> LibraryUse {
    LibraryUse {
        cublas: true,
        backward: workload.mode == Mode::Training || runtime.process_ran_backward,
        // ViT's patch embedding is an nn.Conv2d too.
        cudnn: matches!(arch, Architecture::Cnn(_) | Architecture::Vit(_)),
        nccl_ranks: if workload.parallel.is_single() {
            0
        } else {
            workload.parallel.world_size
        },
        int8_matmul: matches!(arch, Architecture::Decoder(_))
            && workload.dtype == crate::arch::Dtype::Int8,
    }
}

/// The cuBLASLt workspace: torch's default `CUBLASLT_WORKSPACE_SIZE`
/// (1,024 KiB), a block of the small pool that a fresh process's first
/// `addmm` with a bias (`gemm_and_bias`) takes right after the cuBLAS
/// workspace and never frees (every fresh-process trace of a model with
/// biased projections, `measurements/small-pool/README.md`).
pub const CUBLASLT_WORKSPACE_BYTES: u64 = 1 << 20;

/// The cuBLAS workspaces held through the run, each allocated by a handle's
/// first matmul and kept for the life of the process: the forward thread's,
/// and the autograd thread's once any backward has run. A process that ran
/// a backward pass before (`runtime.process_ran_backward`, the default)
/// holds both from the start; a fresh one creates the forward thread's at
/// its first matmul (a decoder's rotary `inv_freq @ position_ids`,
/// ResNet-50's `fc`) and, when training, the autograd thread's at the first
/// backward matmul, after that matmul's output (the H200 traces in
/// `measurements/h200-segments/` and `measurements/h200-generalization/`).
/// A fresh process also creates the cuBLASLt workspace at its first `addmm`
/// with a bias ([`CUBLASLT_WORKSPACE_BYTES`]); a process that ran earlier
/// jobs is not given one: in the public set's process, whose earlier jobs
/// had run backward passes, BERT's allocated peak did not count it
/// (`measurements/small-pool/README.md`).
pub fn cublas_workspaces(g: &mut crate::graph::Graph, runtime: &RuntimeProfile, training: bool) {
    use crate::component::Component::LibraryWorkspace;
    let bytes = runtime.cublas_workspace_bytes;
    if !runtime.process_ran_backward {
        g.defer_workspaces(
            bytes,
            if training { bytes } else { 0 },
            CUBLASLT_WORKSPACE_BYTES,
        );
        return;
    }
    g.at("cuBLAS workspace", None);
    // Held for the life of the process: never freed.
    let _forward = g.replay.alloc(bytes, LibraryWorkspace);
    g.at("cuBLAS workspace (autograd thread)", None);
    let _autograd = g.replay.alloc(bytes, LibraryWorkspace);
}

/// An inference job's batches, one after another: `batch` replays batch
/// `index` (0-based) and returns its output, which stays referenced until
/// the next batch's call returns (`out = model(x)` in a loop rebinds `out`
/// only then). A loop of several batches names them (`batch 2: fc`); once
/// a batch from the third on ends in the state one since the second ended
/// in, every later batch would replay one of those exactly, and the replay
/// stops (see [`optim::SteadyState`]; 1,000,000 batches cost a few).
pub(crate) fn inference_batches(
    g: &mut crate::graph::Graph,
    batches: u32,
    batch: &mut dyn FnMut(&mut crate::graph::Graph, u32) -> crate::graph::Value,
) {
    if batches > 1 {
        g.replay.step_kind("batch");
    }
    let mut steady = optim::SteadyState::default();
    let mut last_output = None;
    for index in 0..batches {
        if batches > 1 {
            g.replay.step(Some(index));
        }
        let output = batch(g, index);
        if let Some(last) = last_output.replace(output) {
            g.drop(last);
        }
        if steady.reached(g, index) {
            break;
        }
    }
    if let Some(last) = last_output {
        g.drop(last);
    }
}

/// How a replay runs. Its shortcuts are optimisations only: each gives
/// exactly the full replay's answer (`core/tests/it/shortcuts.rs` compares
/// them), so turning one off changes the time an estimate takes, never
/// the estimate. `cache_emptied_after_load` is not a shortcut: it says how
/// a measured job ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplayOptions {
    /// A decode step whose transients stay in the small pool replays its
    /// first layer in full and only the KV-cache updates of the others
    /// (on by default).
    pub decode_shortcut: bool,
    /// Training stops replaying steps once one (from the third on) ends in
    /// exactly the allocator state the step before it ended in: every
    /// later step would replay the same and reach the same peak (on by
    /// default; a 1,000-step job then costs about three steps). A job that
    /// empties its cache at a card's end never repeats a state: it is
    /// followed for [`optim::STEPS_PAST_THE_CARDS_END`] steps past its
    /// first release, the one case where this shortcut decides the answer
    /// (the note on `SteadyState` in [`optim`]).
    pub steady_state_shortcut: bool,
    /// A chunked ESMFold triangular attention replays its first three
    /// full chunks and its last one; the chunks between repeat the
    /// replayed ones' allocations in the same cached blocks (on by
    /// default).
    pub chunk_shortcut: bool,
    /// The job starts after `torch.cuda.empty_cache()` and
    /// `torch.cuda.reset_peak_memory_stats()` that follow the model's load,
    /// as the measurement harness starts every case (off by default). After
    /// a `build_then_cast` load (ESMFold's `__init__` builds the ESM-2 stem
    /// in fp32 and casts it; the harness builds every model on the GPU)
    /// only the segments the cast freed entirely are released: those it
    /// shared with kept weights stay, their holes free, and the first
    /// matmul's cuBLAS workspace lands in one (a 100 MiB segment with 68
    /// MiB free, `measurements/shared-process/trace-public-order.jsonl.gz`).
    /// Replayed with the `diagnostics` feature (`check`); the page has no
    /// measured jobs.
    pub cache_emptied_after_load: bool,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            decode_shortcut: true,
            steady_state_shortcut: true,
            chunk_shortcut: true,
            cache_emptied_after_load: false,
        }
    }
}

/// Replays the whole run (weights loaded, then the workload), shortcuts on.
pub fn replay(
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    replay: &mut Replay,
) -> Result<ReplaySummary, Error> {
    replay_with(arch, workload, runtime, replay, ReplayOptions::default())
}

/// [`replay`] with the given [`ReplayOptions`].
pub fn replay_with(
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    replay: &mut Replay,
    options: ReplayOptions,
) -> Result<ReplaySummary, Error> {
    replay.set_stop_at_steady_state(options.steady_state_shortcut);
    let mut summary = match arch {
        Architecture::Decoder(a) => decoder::replay(a, workload, runtime, replay, options),
        Architecture::Encoder(a) => encoder::replay(a, workload, runtime, replay),
        Architecture::Vit(a) => vit::replay(a, workload, runtime, replay),
        Architecture::EsmFold(a) => esmfold::replay(a, workload, runtime, replay, options),
        Architecture::Cnn(a) => cnn::replay(a, workload, runtime, replay),
    }?;
    summary.libraries = libraries(arch, workload, runtime);
    Ok(summary)
}
