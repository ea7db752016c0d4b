//! What runs: inference or training, batch, length, precision, options.
//!
//! The serde form is the `workload` object of a measurement case in
//! `measurements/public/` (extra fields allowed), so any measured case can be
//! estimated unchanged. Every enum here has one key per variant
//! (`key`/`from_key`/`KEYS`, see [`crate::keys`]).

use crate::arch::Dtype;
use crate::error::{check_range, Error};
use crate::keys::keyed;
use crate::parallel::ParallelOptions;
use alloc::string::String;
use alloc::vec::Vec;

/// Inference or training.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Mode {
    /// Forward passes under `torch.no_grad()`.
    #[default]
    Inference,
    /// Forward, backward and optimizer steps.
    Training,
}

/// Attention kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Attention {
    /// `scaled_dot_product_attention`: no s x s matrix kept.
    #[default]
    Sdpa,
    /// Materialised softmax(QK^T) per layer.
    Eager,
}

/// How inference runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum InferenceKind {
    /// Prefill with a KV cache, then `new_tokens` decode steps.
    #[default]
    Generate,
    /// One forward pass, no cache.
    Forward,
}

/// Which positions get logits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Logits {
    /// Only the last position (`logits_to_keep=1`).
    #[default]
    Last,
    /// Every position.
    All,
    /// No head: hidden states only.
    None,
}

keyed! { Mode { Inference => "inference", Training => "training" } }
keyed! { Attention { Sdpa => "sdpa", Eager => "eager" } }
keyed! { InferenceKind { Generate => "generate", Forward => "forward" } }
keyed! { Logits { Last => "last", All => "all", None => "none" } }

/// The task head on top of an encoder (the `AutoModelFor...` class).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Head {
    /// The preset's own head: BERT's masked-LM head (`BertForMaskedLM`);
    /// none on ESM-2 (`EsmModel`, its training loss a mean of the hidden
    /// states); the causal-LM head of decoders.
    #[default]
    Lm,
    /// `AutoModelForSequenceClassification`: one label per sequence from
    /// the first token (BERT's pooler, then a linear classifier; ESM's
    /// dense, tanh and projection), cross-entropy over `num_labels`.
    SequenceClassification,
    /// `AutoModelForTokenClassification`: a linear classifier over every
    /// token's hidden state, cross-entropy over `num_labels` per token.
    TokenClassification,
}

keyed! { Head { Lm => "lm", SequenceClassification => "sequence_classification", TokenClassification => "token_classification" } }

/// Most labels of a classification head (`workload.num_labels`).
pub const MAX_LABELS: u64 = 1_000_000;

/// Inference options.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default))]
pub struct InferenceOptions {
    /// Generate or a plain forward.
    pub kind: InferenceKind,
    /// Which positions get logits.
    pub logits: Logits,
    /// Keep a KV cache (generation always does).
    pub kv_cache: bool,
    /// Decode steps after the prefill.
    pub new_tokens: u32,
    /// KV-cache dtype; `None` means the weights' compute dtype.
    pub kv_dtype: Option<Dtype>,
    /// Batches the process runs one after another (a loop over a dataset:
    /// each batch's input made while the last one is still referenced, as
    /// `images = torch.randn(...)` rebinds a name); 1 by default. From the
    /// second on, the cuBLAS workspace the first batch's first matmul
    /// created is held, and the cache the first left is reused.
    pub batches: u32,
    /// Beam search (`generate(num_beams=...)`): every prompt runs as this
    /// many rows of the batch, and after each step every layer's cache is
    /// gathered into the chosen beams' order; 1 (the default) is greedy.
    /// Decoder generation only.
    pub num_beams: u32,
    /// `generate(return_dict_in_generate=True, output_scores=True)`: every
    /// step's processed scores, (rows, vocabulary) fp32, returned in a
    /// tuple and so held to the end. Greedy decoder generation, one batch.
    pub output_scores: bool,
    /// `output_logits=True`: every step's fp32 last-position logits, held
    /// to the end alike.
    pub output_logits: bool,
    /// Generation's minimum-length logits processors run each step
    /// (`min_new_tokens` given and the config has an `eos_token_id`, as the
    /// harness forces `new_tokens`): the default. Without them a step's
    /// scores are its fp32 logits themselves.
    pub logits_processors: bool,
}

impl Default for InferenceOptions {
    fn default() -> Self {
        InferenceOptions {
            kind: InferenceKind::Generate,
            logits: Logits::Last,
            kv_cache: true,
            new_tokens: 16,
            kv_dtype: None,
            batches: 1,
            num_beams: 1,
            output_scores: false,
            output_logits: false,
            logits_processors: true,
        }
    }
}

/// Optimizers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Optimizer {
    /// `torch.optim.AdamW` (foreach): two fp32-or-param-dtype moments.
    #[default]
    Adamw,
    /// Plain SGD (`momentum=0`): no state. Key `"sgd_plain"`.
    Sgd,
    /// SGD with momentum (0.9): one buffer per parameter. Key `"sgd"`, as
    /// the measurement format defines it (alias `"sgd_momentum"`).
    SgdMomentum,
    /// Adafactor: factored second moments (rows + columns), no first moment.
    Adafactor,
    /// bitsandbytes' `AdamW8bit`: both moments in 8 bits, blockwise (an
    /// fp32 absmax per 256 values); parameters under 4,096 values keep
    /// fp32 moments. Updates in place.
    Adamw8bit,
    /// bitsandbytes' `PagedAdamW8bit`: [`Optimizer::Adamw8bit`] whose
    /// moments of parameters of 100,000 values or more live in CUDA
    /// unified memory, outside PyTorch's allocator.
    PagedAdamw8bit,
    /// bitsandbytes' `PagedAdamW32bit`: fp32 moments, paged as
    /// [`Optimizer::PagedAdamw8bit`]'s.
    PagedAdamw32bit,
}

keyed! {
    Optimizer {
        Adamw => "adamw",
        Sgd => "sgd_plain",
        SgdMomentum => "sgd" | "sgd_momentum",
        Adafactor => "adafactor",
        Adamw8bit => "adamw_8bit",
        PagedAdamw8bit => "paged_adamw_8bit",
        PagedAdamw32bit => "paged_adamw_32bit",
    }
}

/// How `torch.optim` runs the update on CUDA (its `foreach` and `fused`
/// arguments).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum OptimizerImpl {
    /// The default of `torch.optim` on CUDA: `_foreach_*` ops over every
    /// parameter at once (AdamW's `_foreach_sqrt` makes a parameter-sized
    /// temporary for each).
    #[default]
    Foreach,
    /// `fused=True` (AdamW and SGD; HF `Trainer`'s default `adamw_torch_fused`
    /// on torch 2.8 and later): one kernel, no temporaries; each parameter's
    /// `step` counter is a tensor on the GPU.
    Fused,
    /// `foreach=False`: one parameter at a time (AdamW's temporaries exist
    /// for one parameter only).
    ForLoop,
}

keyed! { OptimizerImpl { Foreach => "foreach", Fused => "fused", ForLoop => "for_loop" } }

/// Training precision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Precision {
    /// fp32 parameters under `torch.autocast(bfloat16)`.
    #[default]
    AmpBf16,
    /// fp32 parameters under `torch.autocast(float16)` with a
    /// `torch.amp.GradScaler` (HF `Trainer(fp16=True)`, Lightning
    /// `precision="16-mixed"`, timm's `--amp`).
    AmpFp16,
    /// bf16 parameters, no autocast.
    Bf16,
    /// fp16 parameters (`model.half()`), no autocast.
    Fp16,
    /// fp32 everywhere.
    Fp32,
}

keyed! { Precision { AmpBf16 => "amp_bf16", AmpFp16 => "amp_fp16", Bf16 => "bf16", Fp16 => "fp16", Fp32 => "fp32" } }

impl Precision {
    /// Matmuls run under `torch.autocast` on 2-byte copies of fp32 weights.
    pub const fn autocast(self) -> bool {
        matches!(self, Precision::AmpBf16 | Precision::AmpFp16)
    }

    /// The parameters (and so gradients and optimizer state) are fp32.
    pub const fn fp32_parameters(self) -> bool {
        matches!(
            self,
            Precision::AmpBf16 | Precision::AmpFp16 | Precision::Fp32
        )
    }

    /// The 2-byte activations are IEEE fp16 rather than bf16.
    pub const fn half_is_fp16(self) -> bool {
        matches!(self, Precision::AmpFp16 | Precision::Fp16)
    }
}

/// LoRA adapters on a frozen base.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct Lora {
    /// Adapter rank.
    pub rank: u32,
    /// Scaling numerator (does not change memory).
    #[cfg_attr(feature = "serde", serde(default))]
    pub alpha: Option<f64>,
    /// Module names adapted, e.g. `q_proj`, `v_proj`; empty means q and v.
    #[cfg_attr(feature = "serde", serde(default))]
    pub target_modules: Vec<String>,
    /// Dropout on the adapter input (0 keeps no extra tensor).
    #[cfg_attr(feature = "serde", serde(default))]
    pub dropout: Option<f64>,
}

/// Training options.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default))]
pub struct TrainingOptions {
    /// Optimizer.
    pub optimizer: Optimizer,
    /// How the optimizer runs its update.
    pub implementation: OptimizerImpl,
    /// Optimizer steps (the peak of step 2 onwards includes optimizer state).
    pub steps: u32,
    /// Micro-batches of `batch` each whose gradients one optimizer step
    /// applies (HF `gradient_accumulation_steps`, Lightning
    /// `accumulate_grad_batches`): from the second on, every forward and
    /// backward runs with the gradients held.
    pub gradient_accumulation_steps: u32,
    /// Precision.
    pub precision: Precision,
    /// HF `gradient_checkpointing_enable()`: keep only block inputs, recompute in backward.
    pub grad_checkpointing: bool,
    /// LoRA adapters; `None` trains every parameter.
    pub lora: Option<Lora>,
    /// The optimizer state is already on the GPU when the job starts (a run
    /// resumed from a checkpoint, or a later case in one process as in
    /// `measurements/public/`); otherwise the first step creates it while the
    /// freed activations are still cached, which lays memory out differently.
    pub optimizer_state_resident: bool,
    /// The training forward runs with `use_cache=True` (the default of
    /// transformers' decoder configs unless the caller passes
    /// `use_cache=False`): every layer's keys and values are copied into a
    /// cache that the outputs keep through backward.
    pub use_cache: bool,
}

impl Default for TrainingOptions {
    fn default() -> Self {
        TrainingOptions {
            optimizer: Optimizer::Adamw,
            implementation: OptimizerImpl::Foreach,
            steps: 2,
            gradient_accumulation_steps: 1,
            precision: Precision::AmpBf16,
            grad_checkpointing: false,
            lora: None,
            optimizer_state_resident: false,
            use_cache: false,
        }
    }
}

/// ESMFold options.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default))]
pub struct EsmFoldOptions {
    /// dtype of the ESM-2 stem (`fp16` in HF and the reference code).
    pub stem_dtype: Dtype,
    /// Trunk chunk size (`set_chunk_size`); `None` runs unchunked.
    pub chunk_size: Option<u32>,
    /// Recycles; `None` means the config's `max_recycles`.
    pub num_recycles: Option<u32>,
}

impl Default for EsmFoldOptions {
    fn default() -> Self {
        EsmFoldOptions {
            stem_dtype: Dtype::Fp16,
            chunk_size: None,
            num_recycles: None,
        }
    }
}

/// How the weights reached the GPU before the job; decides the holes the
/// allocator starts with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LoadPath {
    /// Loaded on the CPU and moved (or built on the GPU in its own dtype
    /// and `empty_cache()`d): a compact allocator holding only the weights.
    #[default]
    Compact,
    /// Built on the GPU in fp32 then cast (`.half()`), no `empty_cache()`:
    /// the fp32 copies stay cached as free segments.
    BuildThenCast,
}

keyed! { LoadPath { Compact => "compact", BuildThenCast => "build_then_cast" } }

/// How a convolutional model's weights and images are laid out
/// (`model.to(memory_format=...)`); transformers ignore it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum MemoryFormat {
    /// `torch.contiguous_format` (NCHW), the default of torchvision and timm:
    /// cuDNN's tensor-core kernels copy each input and output to NHWC.
    #[default]
    Contiguous,
    /// `torch.channels_last` (NHWC): the kernels read the tensors as they are.
    ChannelsLast,
}

keyed! { MemoryFormat { Contiguous => "contiguous", ChannelsLast => "channels_last" } }

/// A workload.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default))]
pub struct Workload {
    /// Inference or training.
    pub mode: Mode,
    /// Sequences (or images) per batch.
    pub batch: u32,
    /// Tokens or residues per sequence (ignored by vision models).
    pub seq_len: u32,
    /// Image edge in pixels (vision models only).
    pub image_size: Option<u32>,
    /// Weight dtype for inference (training derives it from the precision).
    pub dtype: Dtype,
    /// Attention kernel.
    pub attention: Attention,
    /// Inference options (used when `mode` is inference).
    pub inference: InferenceOptions,
    /// Training options (used when `mode` is training).
    pub training: TrainingOptions,
    /// ESMFold options (used by ESMFold only).
    pub esmfold: EsmFoldOptions,
    /// How the weights were loaded.
    pub load: LoadPath,
    /// Memory format of a convolutional model and its images.
    pub memory_format: MemoryFormat,
    /// How the job is spread over several GPUs (`batch` is per rank).
    pub parallel: ParallelOptions,
    /// The batch is padded: its `attention_mask` holds zeros (sequences of
    /// different lengths). transformers then builds a (batch, 1, q, kv)
    /// boolean mask per call and, for SDPA, repeats grouped keys and values
    /// to every query head; SDPA turns the mask into an additive bias and
    /// runs its memory-efficient kernel. Decoders only.
    pub padded: bool,
    /// The task head (encoders): the preset's language-model head, or a
    /// sequence or token classifier.
    pub head: Head,
    /// Labels of a classification head (`config.num_labels`, 2 by
    /// default); `None` with the language-model head.
    pub num_labels: Option<u32>,
}

impl Default for Workload {
    fn default() -> Self {
        Workload {
            mode: Mode::Inference,
            batch: 1,
            seq_len: 1024,
            image_size: None,
            dtype: Dtype::Bf16,
            attention: Attention::Sdpa,
            inference: InferenceOptions::default(),
            training: TrainingOptions::default(),
            esmfold: EsmFoldOptions::default(),
            load: LoadPath::Compact,
            memory_format: MemoryFormat::Contiguous,
            parallel: ParallelOptions::default(),
            padded: false,
            head: Head::Lm,
            num_labels: None,
        }
    }
}

/// Largest batch accepted.
pub const MAX_BATCH: u64 = 65_536;
/// Largest sequence length accepted (tokens or residues).
pub const MAX_SEQ_LEN: u64 = 4_194_304;
/// Largest image edge accepted, in pixels.
pub const MAX_IMAGE_SIZE: u64 = 8_192;
/// Most decode steps accepted.
pub const MAX_NEW_TOKENS: u64 = 1_048_576;
/// Most tokens (batch x sequence length) in one step: keeps every tensor
/// size far inside `u64` (logits of a 4M-entry vocabulary included).
pub const MAX_TOKENS_PER_STEP: u64 = 1 << 28;
/// Most beams accepted (`workload.inference.num_beams`).
pub const MAX_BEAMS: u64 = 1_024;
/// Most training steps accepted.
pub const MAX_STEPS: u64 = 1_000;
/// Most inference batches accepted (replays stop once the batches repeat,
/// so a long loop costs a few batches).
pub const MAX_INFERENCE_BATCHES: u64 = 1_000_000;

impl Workload {
    /// Checks ranges; every error names the field and its allowed range.
    pub fn validate(&self) -> Result<(), Error> {
        check_range("workload.batch", self.batch as u64, 1, MAX_BATCH)?;
        check_range("workload.seq_len", self.seq_len as u64, 1, MAX_SEQ_LEN)?;
        check_range(
            "workload.inference.num_beams",
            self.inference.num_beams as u64,
            1,
            MAX_BEAMS,
        )?;
        let beams = self.beams();
        let tokens = self.batch as u64 * beams * self.seq_len as u64;
        if tokens > MAX_TOKENS_PER_STEP {
            let field = if beams > 1 {
                "workload.batch x workload.inference.num_beams x workload.seq_len"
            } else {
                "workload.batch x workload.seq_len"
            };
            return Err(Error::invalid(
                field,
                alloc::format!("{tokens} tokens per step is too large"),
                "at most 268435456 tokens per step",
            ));
        }
        if let Some(size) = self.image_size {
            check_range("workload.image_size", size as u64, 16, MAX_IMAGE_SIZE)?;
        }
        check_range(
            "workload.inference.new_tokens",
            self.inference.new_tokens as u64,
            0,
            MAX_NEW_TOKENS,
        )?;
        check_range(
            "workload.inference.batches",
            self.inference.batches as u64,
            1,
            MAX_INFERENCE_BATCHES,
        )?;
        if self.mode == Mode::Training {
            check_range(
                "workload.training.steps",
                self.training.steps as u64,
                1,
                MAX_STEPS,
            )?;
            check_range(
                "workload.training.gradient_accumulation_steps",
                self.training.gradient_accumulation_steps as u64,
                1,
                MAX_STEPS,
            )?;
            let micro_batches =
                self.training.steps as u64 * self.training.gradient_accumulation_steps as u64;
            if micro_batches > MAX_STEPS {
                return Err(Error::invalid(
                    "workload.training.steps x workload.training.gradient_accumulation_steps",
                    alloc::format!("{micro_batches} micro-batches"),
                    "at most 1000 micro-batches (steps x accumulation steps)",
                ));
            }
            if self.training.gradient_accumulation_steps > 1
                && self.parallel.strategy != crate::parallel::Strategy::None
            {
                return Err(Error::invalid(
                    "workload.training.gradient_accumulation_steps",
                    "accumulation on several GPUs is not modelled",
                    "1 with `workload.parallel` (1 to 1000 on one GPU)",
                ));
            }
            if let Some(lora) = &self.training.lora {
                check_range("workload.training.lora.rank", lora.rank as u64, 1, 65_536)?;
            }
            if self.training.implementation == OptimizerImpl::Fused
                && self.training.optimizer == Optimizer::Adafactor
            {
                return Err(Error::invalid(
                    "workload.training.implementation",
                    "torch's Adafactor has no fused implementation",
                    "\"foreach\" or \"for_loop\" for Adafactor; \"fused\" for AdamW and SGD",
                ));
            }
        }
        if let Some(chunk) = self.esmfold.chunk_size {
            check_range("workload.esmfold.chunk_size", chunk as u64, 1, MAX_SEQ_LEN)?;
        }
        if let Some(recycles) = self.esmfold.num_recycles {
            check_range("workload.esmfold.num_recycles", recycles as u64, 0, 64)?;
        }
        if !self.esmfold.stem_dtype.is_float() {
            return Err(Error::invalid(
                "workload.esmfold.stem_dtype",
                alloc::format!("`{}` is not a float format", self.esmfold.stem_dtype.name()),
                "fp32, fp16 or bf16",
            ));
        }
        self.validate_head()?;
        self.parallel.validate(self.mode == Mode::Training)?;
        if self.mode == Mode::Training && !self.dtype.is_float() && self.training.lora.is_none() {
            return Err(Error::invalid(
                "workload.dtype",
                alloc::format!(
                    "full training of `{}` weights is not possible",
                    self.dtype.name()
                ),
                "fp32, fp16 or bf16 (quantised weights train only with LoRA)",
            ));
        }
        Ok(())
    }

    /// A classification head's labels: 1 to [`MAX_LABELS`], and only with a
    /// classification head.
    fn validate_head(&self) -> Result<(), Error> {
        match (self.head, self.num_labels) {
            (Head::Lm, Some(_)) => Err(Error::invalid(
                "workload.num_labels",
                "labels need a classification head",
                "no num_labels with head \"lm\"; or head \"sequence_classification\" or \"token_classification\"",
            )),
            (_, Some(labels)) => check_range("workload.num_labels", labels as u64, 1, MAX_LABELS),
            _ => Ok(()),
        }
    }

    /// Labels of the classification head (2, transformers' default, when
    /// not given).
    pub fn labels(&self) -> u64 {
        u64::from(self.num_labels.unwrap_or(2))
    }

    /// Rows each prompt runs as: `num_beams` when a generation searches
    /// beams, else 1.
    pub fn beams(&self) -> u64 {
        if self.mode == Mode::Inference && self.inference.kind == InferenceKind::Generate {
            u64::from(self.inference.num_beams.max(1))
        } else {
            1
        }
    }

    /// The length on the workload's x axis: image size for vision, else seq_len.
    pub fn length(&self, vision: bool) -> u32 {
        if vision {
            self.image_size.unwrap_or(224)
        } else {
            self.seq_len
        }
    }

    /// A copy with the x-axis length replaced.
    pub fn with_length(&self, vision: bool, length: u32) -> Workload {
        let mut w = self.clone();
        if vision {
            w.image_size = Some(length);
        } else {
            w.seq_len = length;
        }
        w
    }
}
