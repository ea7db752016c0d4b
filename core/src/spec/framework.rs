//! Jobs described as their authors wrote them: `workload.framework` and the
//! frameworks' own arguments, lowered to the spec's knobs.
//!
//! A workload may name the framework that runs it (`"framework":
//! "hf_trainer"`) and carry that framework's own arguments as the framework
//! writes them: a `TrainingArguments` dict (`training_args`), a peft
//! `LoraConfig` dict (`lora_config`), a `GenerationConfig` dict
//! (`generation_config`), Lightning's `Trainer` arguments (`lightning`),
//! `Accelerator`'s (`accelerate`), timm `train.py`'s (`timm`) and a
//! `BitsAndBytesConfig` dict (`quantization_config`). [`lower`] rewrites
//! such a workload into the knobs the rest of the spec reader knows
//! (`training.precision`, `training.implementation`, `training.use_cache`,
//! ...), so that one job written either way is one estimate, to the byte.
//!
//! Three rules, in this order:
//! 1. an argument the framework was given sets its knob; where the spec
//!    also sets that knob, the two must agree, or the spec is refused
//!    naming both;
//! 2. a knob the spec sets and no argument speaks of is kept as written;
//! 3. any other knob a framework decides takes the framework's own default
//!    (the `Trainer`'s fused AdamW and `use_cache=False`, a plain loop's
//!    `use_cache=True` on a decoder, ...), each listed with its source in
//!    docs/spec.md.
//!
//! Every argument a framework knows is listed here as read (it changes
//! memory and sets a knob), ignored (it does not change the GPU memory of
//! the job), or refused unless left at its default (it changes memory in a
//! way headroom does not model); a key the framework does not know is an
//! error naming it and the closest known key.

use crate::arch::Architecture;
use crate::error::Error;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use serde_json::{Map, Value};

/// The frameworks `workload.framework` names.
pub const FRAMEWORKS: &[&str] = &[
    "torch",
    "hf_trainer",
    "accelerate",
    "lightning",
    "timm",
    "hf_generate",
    "hf_pipeline",
    "sentence_transformers",
];

/// The workload keys this module reads (and removes).
pub const KEYS: &[&str] = &[
    "framework",
    "training_args",
    "lora_config",
    "generation_config",
    "lightning",
    "accelerate",
    "timm",
    "quantization_config",
];

/// What lowering decided beyond the workload's knobs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Lowered {
    /// The job is an inference process of its own (a framework's inference
    /// entry point, or any framework-described inference job): unless the
    /// runtime says otherwise, no backward ran in it.
    pub fresh_inference_process: bool,
}

/// How a framework argument is used.
enum Use {
    /// Read: it sets a knob.
    Read,
    /// Read and ignored: it does not change the job's GPU memory.
    Ignored,
    /// Refused unless at its default (null, false, 0, empty): what it does
    /// to memory is not modelled, for this reason.
    RefusedUnlessDefault(&'static str),
}

/// Whether `workload` names a framework or carries a framework's arguments.
pub fn is_framework_workload(workload: &Value) -> bool {
    workload
        .as_object()
        .is_some_and(|w| KEYS.iter().any(|k| w.contains_key(*k)))
}

/// Lowers a workload that names a framework or carries a framework's
/// arguments into knobs (rules in the module's doc). `arch` is the model's.
/// The returned workload holds no key of [`KEYS`].
pub fn lower(workload: &Value, arch: &Architecture) -> Result<(Value, Lowered), Error> {
    let Some(input) = workload.as_object() else {
        return Ok((workload.clone(), Lowered::default()));
    };
    let mut knobs = Knobs {
        w: input.clone(),
        decoder: matches!(arch, Architecture::Decoder(_)),
    };
    for key in KEYS {
        knobs.w.remove(*key);
    }
    let framework = match input.get("framework") {
        None | Some(Value::Null) => None,
        Some(Value::String(name)) if FRAMEWORKS.contains(&name.as_str()) => Some(name.as_str()),
        Some(other) => {
            return Err(Error::invalid(
                "workload.framework",
                format!("{other} is not a framework headroom knows"),
                &crate::keys::one_of(FRAMEWORKS),
            ))
        }
    };
    let args = |key: &str| -> Result<Option<&Map<String, Value>>, Error> {
        match input.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(m)) => Ok(Some(m)),
            Some(_) => Err(Error::invalid(
                &format!("workload.{key}"),
                "is not a JSON object",
                "the framework's arguments as an object (its `to_dict()`)",
            )),
        }
    };
    let training_args = args("training_args")?;
    let lora_config = args("lora_config")?;
    let generation_config = args("generation_config")?;
    let lightning = args("lightning")?;
    let accelerate = args("accelerate")?;
    let timm = args("timm")?;
    let quantization = args("quantization_config")?;

    // Each framework's own arguments belong to it.
    for (key, present, owner) in [
        ("training_args", training_args.is_some(), "hf_trainer"),
        ("lightning", lightning.is_some(), "lightning"),
        ("accelerate", accelerate.is_some(), "accelerate"),
        ("timm", timm.is_some(), "timm"),
    ] {
        if present && framework != Some(owner) {
            return Err(Error::invalid(
                &format!("workload.{key}"),
                format!(
                    "belongs to `\"framework\": \"{owner}\"`, and the workload's framework is {}",
                    framework.map_or("not given".to_string(), |f| format!("`{f}`"))
                ),
                &format!("`\"framework\": \"{owner}\"` with it, or no `{key}`"),
            ));
        }
    }
    if generation_config.is_some()
        && !matches!(framework, Some("hf_generate" | "hf_pipeline") | None)
    {
        return Err(Error::invalid(
            "workload.generation_config",
            "is read by `generate()`",
            "`\"framework\": \"hf_generate\"` or `\"hf_pipeline\"` with it",
        ));
    }

    let mut lowered = Lowered::default();
    match framework {
        Some("hf_trainer") => knobs.mode("training", "hf_trainer")?,
        // Lightning's `fit` and an accelerate loop train unless told.
        Some("lightning" | "accelerate") => knobs.default(&["mode"], Value::from("training")),
        Some("timm") => {
            if !matches!(arch, Architecture::Cnn(_) | Architecture::Vit(_)) {
                return Err(wrong_family(
                    "timm",
                    "vision models (ResNets, MobileNetV2, ViTs)",
                ));
            }
            knobs.default(&["mode"], Value::from("training"));
        }
        Some("hf_generate" | "hf_pipeline") => {
            if !knobs.decoder {
                return Err(wrong_family(
                    framework.unwrap_or_default(),
                    "decoder LLMs (text generation)",
                ));
            }
            knobs.mode("inference", framework.unwrap_or_default())?;
            knobs.default(&["inference", "kind"], Value::from("generate"));
            knobs.default(&["inference", "logits"], Value::from("last"));
            knobs.default(&["inference", "kv_cache"], Value::Bool(true));
        }
        Some("sentence_transformers") => {
            if !matches!(arch, Architecture::Encoder(_)) {
                return Err(wrong_family(
                    "sentence_transformers",
                    "encoders (BERT, ESM-2)",
                ));
            }
            knobs.mode("inference", "sentence_transformers")?;
            // `SentenceTransformer.encode`: `batch_size=32`, the model in
            // its loaded dtype (fp32 unless `model_kwargs` says otherwise),
            // the transformer's hidden states pooled (no head).
            knobs.default(&["batch"], Value::from(32));
            knobs.default(&["dtype"], Value::from("fp32"));
            knobs.default(&["inference", "kind"], Value::from("forward"));
            knobs.default(&["inference", "logits"], Value::from("none"));
        }
        _ => {}
    }
    if let Some(q) = quantization {
        lower_quantization(&mut knobs, q)?;
    }
    if let Some(l) = lora_config {
        lower_lora(&mut knobs, l)?;
    }
    if let Some(g) = generation_config {
        lower_generation(&mut knobs, g)?;
    }
    if matches!(framework, Some("hf_generate" | "hf_pipeline")) {
        // Only `min_new_tokens` adds the minimum-length processors.
        knobs.default(&["inference", "logits_processors"], Value::Bool(false));
    }
    // The mode as the arguments left it (a `lora_config` trains).
    let training = knobs.get(&["mode"]).and_then(Value::as_str) == Some("training");
    if framework.is_some() && !training {
        lowered.fresh_inference_process = true;
    }

    if training {
        // A framework runs many steps: three stand for them (see
        // [`steps_for`]).
        if framework.is_some() {
            knobs.default(&["training", "steps"], Value::from(steps_for(u64::MAX)));
        }
        let lora = knobs
            .get(&["training", "lora"])
            .is_some_and(|l| !l.is_null());
        // The parameters' dtype when the spec says it; otherwise fp32, as
        // `from_config` builds a model and `from_pretrained(dtype=
        // torch.float32)` loads one (LoRA's frozen base keeps the spec's
        // default, bf16).
        let stated_dtype = knobs
            .get(&["dtype"])
            .and_then(Value::as_str)
            .map(String::from);
        let params = match (&stated_dtype, lora) {
            (Some(d), _) => d.clone(),
            (None, true) => "bf16".to_string(),
            (None, false) => "fp32".to_string(),
        };
        match framework {
            Some("hf_trainer") => {
                lower_training_args(&mut knobs, training_args.unwrap_or(&Map::new()), &params)?
            }
            Some("lightning") => {
                lower_lightning(&mut knobs, lightning.unwrap_or(&Map::new()), &params)?
            }
            Some("accelerate") => {
                lower_accelerate(&mut knobs, accelerate.unwrap_or(&Map::new()), &params)?
            }
            Some("timm") => lower_timm(&mut knobs, timm.unwrap_or(&Map::new()), &params)?,
            Some("torch") => {
                // A plain loop: no autocast unless it writes one (say
                // `training.precision`), `torch.optim`'s foreach default.
                let plain = plain_precision(&params, "workload.dtype")?;
                knobs.default(&["training", "precision"], Value::from(plain));
            }
            _ => {}
        }
        // FSDP2 under the Trainer and accelerate: their mixed precision is
        // FSDP2's own ([`crate::search::fsdp2_mixed_precision`]).
        let fsdp2 = knobs.get(&["parallel", "strategy"]).and_then(Value::as_str) == Some("fsdp2");
        if fsdp2 && matches!(framework, Some("hf_trainer" | "accelerate")) {
            let dtype = match knobs
                .get(&["training", "precision"])
                .and_then(Value::as_str)
            {
                Some("amp_bf16") => Some("bf16"),
                Some("amp_fp16") => Some("fp16"),
                _ => None,
            };
            if let Some(dtype) = dtype {
                if let Some(training) = knobs.parent_mut(&["training"]) {
                    training.insert("precision".into(), Value::from("fp32"));
                }
                knobs.state(
                    &["parallel", "param_dtype"],
                    Value::from(dtype),
                    "the framework's FSDP2 mixed precision",
                )?;
                knobs.state(
                    &["parallel", "reduce_dtype"],
                    Value::from(dtype),
                    "the framework's FSDP2 mixed precision",
                )?;
            }
        }
        // Outside the `Trainer`, a decoder's forward keeps its config's
        // `use_cache=True` and returns a cache that lives through backward.
        if matches!(framework, Some("torch" | "lightning" | "accelerate")) && knobs.decoder {
            knobs.default(&["training", "use_cache"], Value::Bool(true));
        }
    } else {
        for (key, given) in [
            ("training_args", training_args.is_some()),
            ("lightning", lightning.is_some()),
            ("accelerate", accelerate.is_some()),
        ] {
            if given {
                return Err(Error::invalid(
                    &format!("workload.{key}"),
                    "are training arguments, and the workload's mode is inference",
                    "`\"mode\": \"training\"`, or no training arguments",
                ));
            }
        }
        if let Some(t) = timm {
            lower_timm(&mut knobs, t, "fp32")?;
        }
    }
    Ok((Value::Object(knobs.w), lowered))
}

fn wrong_family(framework: &str, runs: &str) -> Error {
    Error::invalid(
        "workload.framework",
        format!("`{framework}` runs {runs}, and this model is not one"),
        "a framework that runs this model: `torch`, `accelerate`, `lightning` or `hf_trainer`",
    )
}

/// The workload's knobs as JSON, and the two ways to set one.
struct Knobs {
    w: Map<String, Value>,
    decoder: bool,
}

impl Knobs {
    fn get(&self, path: &[&str]) -> Option<&Value> {
        let (last, parents) = path.split_last()?;
        let mut map = &self.w;
        for key in parents {
            map = map.get(*key)?.as_object()?;
        }
        map.get(*last)
    }

    /// The object at `parents`, made when absent (a `null` stays `null`:
    /// the caller's knob then conflicts).
    fn parent_mut(&mut self, parents: &[&str]) -> Option<&mut Map<String, Value>> {
        let mut map = &mut self.w;
        for key in parents {
            let slot = map
                .entry(String::from(*key))
                .or_insert_with(|| Value::Object(Map::new()));
            map = slot.as_object_mut()?;
        }
        Some(map)
    }

    /// A framework's default: set only where the spec says nothing.
    fn default(&mut self, path: &[&str], value: Value) {
        if self.get(path).is_some() {
            return;
        }
        if let Some((last, parents)) = path.split_last() {
            if let Some(map) = self.parent_mut(parents) {
                map.insert(String::from(*last), value);
            }
        }
    }

    /// What a framework argument (`source`) says: set, or checked against
    /// the knob the spec already sets.
    fn state(&mut self, path: &[&str], value: Value, source: &str) -> Result<(), Error> {
        let knob = format!("workload.{}", path.join("."));
        match self.get(path) {
            Some(given) if same(given, &value) => Ok(()),
            Some(given) => Err(Error::invalid(
                &knob,
                format!("is {given}, and `{source}` makes it {value}"),
                "the same value in both, or only one of them",
            )),
            None => {
                let (last, parents) = path.split_last().unwrap_or((&"", &[]));
                match self.parent_mut(parents) {
                    Some(map) => {
                        map.insert(String::from(*last), value);
                        Ok(())
                    }
                    None => Err(Error::invalid(
                        &knob,
                        format!("is null, and `{source}` sets it"),
                        "an object, or no knob",
                    )),
                }
            }
        }
    }

    /// The mode a framework runs in.
    fn mode(&mut self, mode: &str, framework: &str) -> Result<(), Error> {
        self.state(
            &["mode"],
            Value::from(mode),
            &format!("framework {framework}"),
        )
    }
}

/// Equal as knobs: numbers by value, lists of names as sets.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            let mut x: Vec<String> = x.iter().map(Value::to_string).collect();
            let mut y: Vec<String> = y.iter().map(Value::to_string).collect();
            x.sort_unstable();
            y.sort_unstable();
            x == y
        }
        _ => a == b,
    }
}

/// Null, false, zero or empty: an argument left at its default.
fn is_default(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

/// Checks every key of `args` (at `prefix`) against `table`: unknown keys
/// and refused non-default values are errors.
fn check_arguments(
    args: &Map<String, Value>,
    prefix: &str,
    table: &[(&str, Use)],
) -> Result<(), Error> {
    for (key, value) in args {
        match table.iter().find(|(k, _)| k == key) {
            None => {
                return Err(super::known_keys::unknown_key(
                    prefix,
                    key,
                    table.iter().map(|(k, _)| *k),
                ))
            }
            Some((_, Use::RefusedUnlessDefault(why))) if !is_default(value) => {
                return Err(Error::unsupported(format!(
                    "`{prefix}.{key}` = {value}: {why}"
                )))
            }
            Some(_) => {}
        }
    }
    Ok(())
}

fn bool_arg(args: &Map<String, Value>, prefix: &str, key: &str) -> Result<Option<bool>, Error> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(Error::invalid(
            &format!("{prefix}.{key}"),
            "is not true or false",
            "true or false",
        )),
    }
}

fn count_arg(args: &Map<String, Value>, prefix: &str, key: &str) -> Result<Option<i64>, Error> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_i64().map(Some).ok_or_else(|| {
            Error::invalid(
                &format!("{prefix}.{key}"),
                "is not a whole number",
                "a whole number",
            )
        }),
    }
}

fn positive_arg(args: &Map<String, Value>, prefix: &str, key: &str) -> Result<Option<u64>, Error> {
    match count_arg(args, prefix, key)? {
        None => Ok(None),
        Some(n) if n >= 1 => Ok(Some(n as u64)),
        Some(n) => Err(Error::invalid(
            &format!("{prefix}.{key}"),
            format!("{n} is not a positive count"),
            "a whole number from 1",
        )),
    }
}

fn str_arg<'a>(
    args: &'a Map<String, Value>,
    prefix: &str,
    key: &str,
) -> Result<Option<&'a str>, Error> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(Error::invalid(
            &format!("{prefix}.{key}"),
            "is not a string",
            "a string",
        )),
    }
}

/// Optimizer steps to replay for a run of `max_steps`: the third step's peak
/// repeats in every later one (the optimizer state exists from the second
/// on, and with gradient accumulation the third finds the second's
/// layout: timm's ViT-B/16 accumulating two micro-batches peaks 2.3 MB
/// higher in step 3 than in step 2, and no higher in step 4), so three
/// stand for any longer run, as the measured framework jobs ran.
fn steps_for(max_steps: u64) -> u64 {
    max_steps.min(3)
}

/// Mixed precision as a framework applies it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Autocast {
    /// No autocast.
    Off,
    /// `torch.autocast(bfloat16)`.
    Bf16,
    /// `torch.autocast(float16)` with a `GradScaler`.
    Fp16,
}

/// `training.precision` for parameters of dtype `params` under `autocast`
/// (`source` names the argument). LoRA's fp32 adapters on a frozen base
/// run under autocast as [`crate::workload::Lora`] describes.
fn precision_of(
    params: &str,
    autocast: Autocast,
    lora: bool,
    source: &str,
) -> Result<&'static str, Error> {
    match (autocast, lora) {
        // Adapters over a quantized base without autocast run in fp32.
        (Autocast::Off, true) if matches!(params, "int4" | "int8") => Ok("fp32"),
        (Autocast::Off, _) => plain_precision(params, source),
        (Autocast::Bf16, true) => Ok("amp_bf16"),
        (Autocast::Fp16, true) => Ok("amp_fp16"),
        (Autocast::Bf16, false) => match params {
            "fp32" => Ok("amp_bf16"),
            // Autocast over bf16 parameters casts nothing: bf16 training.
            "bf16" => Ok("bf16"),
            _ => Err(Error::unsupported(format!(
                "`{source}`: bf16 autocast over {params} parameters is not modelled"
            ))),
        },
        (Autocast::Fp16, false) => match params {
            "fp32" => Ok("amp_fp16"),
            _ => Err(Error::unsupported(format!(
                "`{source}`: fp16 mixed precision needs fp32 parameters (torch's GradScaler refuses to unscale {params} gradients)"
            ))),
        },
    }
}

/// Training without autocast in the parameters' own dtype.
fn plain_precision(params: &str, source: &str) -> Result<&'static str, Error> {
    match params {
        "fp32" => Ok("fp32"),
        "bf16" => Ok("bf16"),
        "fp16" => Ok("fp16"),
        other => Err(Error::invalid(
            source,
            format!("training {other} parameters is not modelled"),
            "fp32, bf16 or fp16 parameters (quantized bases train LoRA adapters)",
        )),
    }
}

/// `TrainingArguments` of transformers 5.17, every `init` field.
const TRAINING_ARGS: &[(&str, Use)] = &[
    ("per_device_train_batch_size", Use::Read),
    ("max_steps", Use::Read),
    ("optim", Use::Read),
    ("optim_args", Use::Read),
    ("gradient_accumulation_steps", Use::Read),
    ("bf16", Use::Read),
    ("fp16", Use::Read),
    ("gradient_checkpointing", Use::Read),
    ("gradient_checkpointing_kwargs", Use::Read),
    ("use_cache", Use::Read),
    ("label_smoothing_factor", Use::RefusedUnlessDefault("the label smoother's log-softmax over the logits is not modelled")),
    ("torch_compile", Use::RefusedUnlessDefault("a compiled job is outside the model (it replays eager PyTorch)")),
    ("use_liger_kernel", Use::RefusedUnlessDefault("Liger's fused kernels are not modelled")),
    ("neftune_noise_alpha", Use::RefusedUnlessDefault("NEFTune's noise on the embeddings is not modelled")),
    ("fsdp", Use::RefusedUnlessDefault("the Trainer's FSDP is not modelled; describe the job with `workload.parallel` (`fsdp2`)")),
    ("deepspeed", Use::RefusedUnlessDefault("DeepSpeed is not modelled")),
    ("use_cpu", Use::RefusedUnlessDefault("a job on the CPU uses no GPU memory")),
    ("optim_target_modules", Use::RefusedUnlessDefault("GaLore and APOLLO optimizers are not modelled")),
    ("parallelism_config", Use::RefusedUnlessDefault("the Trainer's parallelism config is not modelled; describe the job with `workload.parallel`")),
    ("output_dir", Use::Ignored),
    ("num_train_epochs", Use::Ignored),
    ("learning_rate", Use::Ignored),
    ("lr_scheduler_type", Use::Ignored),
    ("lr_scheduler_kwargs", Use::Ignored),
    ("warmup_steps", Use::Ignored),
    ("weight_decay", Use::Ignored),
    ("adam_beta1", Use::Ignored),
    ("adam_beta2", Use::Ignored),
    ("adam_epsilon", Use::Ignored),
    ("average_tokens_across_devices", Use::Ignored),
    ("max_grad_norm", Use::Ignored),
    ("bf16_full_eval", Use::Ignored),
    ("fp16_full_eval", Use::Ignored),
    ("tf32", Use::Ignored),
    ("torch_compile_backend", Use::Ignored),
    ("torch_compile_mode", Use::Ignored),
    ("liger_kernel_config", Use::Ignored),
    ("torch_empty_cache_steps", Use::Ignored),
    ("auto_find_batch_size", Use::Ignored),
    ("logging_strategy", Use::Ignored),
    ("logging_steps", Use::Ignored),
    ("logging_first_step", Use::Ignored),
    ("log_on_each_node", Use::Ignored),
    ("logging_nan_inf_filter", Use::Ignored),
    ("include_num_input_tokens_seen", Use::Ignored),
    ("log_level", Use::Ignored),
    ("log_level_replica", Use::Ignored),
    ("disable_tqdm", Use::Ignored),
    ("report_to", Use::Ignored),
    ("run_name", Use::Ignored),
    ("project", Use::Ignored),
    ("trackio_space_id", Use::Ignored),
    ("trackio_bucket_id", Use::Ignored),
    ("trackio_static_space_id", Use::Ignored),
    ("eval_strategy", Use::Ignored),
    ("eval_steps", Use::Ignored),
    ("eval_delay", Use::Ignored),
    ("per_device_eval_batch_size", Use::Ignored),
    ("prediction_loss_only", Use::Ignored),
    ("eval_on_start", Use::Ignored),
    ("eval_do_concat_batches", Use::Ignored),
    ("eval_use_gather_object", Use::Ignored),
    ("eval_accumulation_steps", Use::Ignored),
    ("include_for_metrics", Use::Ignored),
    ("batch_eval_metrics", Use::Ignored),
    ("save_only_model", Use::Ignored),
    ("save_strategy", Use::Ignored),
    ("save_steps", Use::Ignored),
    ("save_on_each_node", Use::Ignored),
    ("save_total_limit", Use::Ignored),
    ("enable_jit_checkpoint", Use::Ignored),
    ("push_to_hub", Use::Ignored),
    ("hub_token", Use::Ignored),
    ("hub_private_repo", Use::Ignored),
    ("hub_model_id", Use::Ignored),
    ("hub_strategy", Use::Ignored),
    ("hub_always_push", Use::Ignored),
    ("hub_revision", Use::Ignored),
    ("load_best_model_at_end", Use::Ignored),
    ("metric_for_best_model", Use::Ignored),
    ("greater_is_better", Use::Ignored),
    ("ignore_data_skip", Use::Ignored),
    ("restore_callback_states_from_checkpoint", Use::Ignored),
    ("full_determinism", Use::Ignored),
    ("seed", Use::Ignored),
    ("data_seed", Use::Ignored),
    ("accelerator_config", Use::Ignored),
    ("dataloader_drop_last", Use::Ignored),
    ("dataloader_num_workers", Use::Ignored),
    ("dataloader_pin_memory", Use::Ignored),
    ("dataloader_persistent_workers", Use::Ignored),
    ("dataloader_prefetch_factor", Use::Ignored),
    ("dataloader_multiprocessing_context", Use::Ignored),
    ("dataloader_in_order", Use::Ignored),
    ("remove_unused_columns", Use::Ignored),
    ("label_names", Use::Ignored),
    ("train_sampling_strategy", Use::Ignored),
    ("length_column_name", Use::Ignored),
    ("ddp_find_unused_parameters", Use::Ignored),
    ("ddp_bucket_cap_mb", Use::Ignored),
    ("ddp_broadcast_buffers", Use::Ignored),
    ("ddp_static_graph", Use::Ignored),
    ("ddp_backend", Use::Ignored),
    ("ddp_timeout", Use::Ignored),
    ("fsdp_config", Use::Ignored),
    ("debug", Use::Ignored),
    ("skip_memory_metrics", Use::Ignored),
    ("do_train", Use::Ignored),
    ("do_eval", Use::Ignored),
    ("do_predict", Use::Ignored),
    ("resume_from_checkpoint", Use::Ignored),
    ("local_rank", Use::Ignored),
];

/// The `Trainer`'s `optim` names headroom models, as `optimizer` and
/// `implementation` (transformers 5.17 `trainer_optimizer.py`:
/// `adamw_torch_fused` adds `fused=True` to `torch.optim.AdamW`, `sgd` is
/// `torch.optim.SGD` with `optim_args`' momentum, `adafactor` is
/// transformers' `Adafactor`).
const TRAINER_OPTIMIZERS: &[(&str, &str, &str)] = &[
    ("adamw_torch_fused", "adamw", "fused"),
    ("adamw_torch", "adamw", "foreach"),
    ("sgd", "sgd", "foreach"),
    ("adafactor", "adafactor", "foreach"),
];

fn lower_training_args(k: &mut Knobs, a: &Map<String, Value>, params: &str) -> Result<(), Error> {
    let p = "workload.training_args";
    check_arguments(a, p, TRAINING_ARGS)?;
    let src = |key: &str| format!("{p}.{key}");
    if let Some(b) = positive_arg(a, p, "per_device_train_batch_size")? {
        k.state(
            &["batch"],
            Value::from(b),
            &src("per_device_train_batch_size"),
        )?;
    } else {
        // `TrainingArguments`' default.
        k.default(&["batch"], Value::from(8));
    }
    if let Some(n) = count_arg(a, p, "max_steps")? {
        if n >= 1 {
            k.state(
                &["training", "steps"],
                Value::from(steps_for(n as u64)),
                &src("max_steps"),
            )?;
        }
    }
    if let Some(n) = positive_arg(a, p, "gradient_accumulation_steps")? {
        k.state(
            &["training", "gradient_accumulation_steps"],
            Value::from(n),
            &src("gradient_accumulation_steps"),
        )?;
    }
    // The default `optim` on torch 2.8 and later.
    let optim = str_arg(a, p, "optim")?.unwrap_or("adamw_torch_fused");
    let Some(&(_, optimizer, implementation)) = TRAINER_OPTIMIZERS
        .iter()
        .find(|(name, _, _)| *name == optim)
    else {
        let names: Vec<&str> = TRAINER_OPTIMIZERS.iter().map(|(n, _, _)| *n).collect();
        return Err(Error::invalid(
            &src("optim"),
            format!("`{optim}` is not modelled (bitsandbytes' 8-bit and paged optimizers, among others, are not yet)"),
            &crate::keys::one_of(&names),
        ));
    };
    let source = if a.contains_key("optim") {
        src("optim")
    } else {
        "the Trainer's default optim".to_string()
    };
    if optimizer == "sgd" {
        // `optim_args="momentum=0.9"`; SGD's default momentum is 0.
        let momentum = optim_arg(a, p, "momentum")?.unwrap_or(0.0);
        k.state(&["training", "optimizer"], Value::from("sgd"), &source)?;
        k.state(
            &["training", "momentum"],
            Value::from(momentum),
            &src("optim_args"),
        )?;
    } else {
        k.state(&["training", "optimizer"], Value::from(optimizer), &source)?;
    }
    if a.contains_key("optim") {
        k.state(
            &["training", "implementation"],
            Value::from(implementation),
            &source,
        )?;
    } else {
        k.default(&["training", "implementation"], Value::from(implementation));
    }
    let bf16 = bool_arg(a, p, "bf16")?;
    let fp16 = bool_arg(a, p, "fp16")?;
    let autocast = match (bf16, fp16) {
        (Some(true), Some(true)) => {
            return Err(Error::invalid(
                &src("bf16"),
                "and `fp16` are both true",
                "at most one of `bf16` and `fp16`",
            ))
        }
        (Some(true), _) => Some(Autocast::Bf16),
        (_, Some(true)) => Some(Autocast::Fp16),
        (Some(false), _) | (_, Some(false)) => Some(Autocast::Off),
        (None, None) => None,
    };
    let lora = k.get(&["training", "lora"]).is_some_and(|l| !l.is_null());
    match autocast {
        Some(autocast) => {
            let precision = precision_of(params, autocast, lora, &src("bf16"))?;
            k.state(
                &["training", "precision"],
                Value::from(precision),
                &src(if fp16 == Some(true) { "fp16" } else { "bf16" }),
            )?;
        }
        None => {
            let precision = precision_of(params, Autocast::Off, lora, "workload.dtype")?;
            k.default(&["training", "precision"], Value::from(precision));
        }
    }
    if let Some(gc) = bool_arg(a, p, "gradient_checkpointing")? {
        k.state(
            &["training", "grad_checkpointing"],
            Value::Bool(gc),
            &src("gradient_checkpointing"),
        )?;
    }
    match a.get("gradient_checkpointing_kwargs") {
        None | Some(Value::Null) => {}
        Some(Value::Object(kw)) => {
            for (key, value) in kw {
                match (key.as_str(), value) {
                    ("use_reentrant", Value::Bool(false)) => {}
                    ("use_reentrant", _) => {
                        return Err(Error::unsupported(format!(
                            "`{p}.gradient_checkpointing_kwargs.use_reentrant` = {value}: reentrant checkpointing is not modelled (transformers 5.17's default is false)"
                        )))
                    }
                    _ => {
                        return Err(super::known_keys::unknown_key(
                            &src("gradient_checkpointing_kwargs"),
                            key,
                            ["use_reentrant"].into_iter(),
                        ))
                    }
                }
            }
        }
        Some(_) => {
            return Err(Error::invalid(
                &src("gradient_checkpointing_kwargs"),
                "is not an object",
                "null or {\"use_reentrant\": false}",
            ))
        }
    }
    // `Trainer.__init__`: `model.config.use_cache = args.use_cache`.
    let use_cache = bool_arg(a, p, "use_cache")?;
    match use_cache {
        Some(u) if k.decoder => k.state(
            &["training", "use_cache"],
            Value::Bool(u),
            &src("use_cache"),
        )?,
        _ if k.decoder => k.default(&["training", "use_cache"], Value::Bool(false)),
        _ => {}
    }
    Ok(())
}

/// A number in `optim_args` (`"momentum=0.9,nesterov=True"`).
fn optim_arg(a: &Map<String, Value>, p: &str, name: &str) -> Result<Option<f64>, Error> {
    let Some(text) = str_arg(a, p, "optim_args")? else {
        return Ok(None);
    };
    for pair in text.split(',') {
        let mut kv = pair.splitn(2, '=');
        let (key, value) = (
            kv.next().unwrap_or("").trim(),
            kv.next().unwrap_or("").trim(),
        );
        if key == name {
            return value.parse::<f64>().map(Some).map_err(|_| {
                Error::invalid(
                    &format!("{p}.optim_args"),
                    format!("`{name}={value}` is not a number"),
                    "`name=value` pairs separated by commas",
                )
            });
        }
    }
    Ok(None)
}

/// peft 0.21 `LoraConfig` (and `PeftConfig`) fields.
const LORA_CONFIG: &[(&str, Use)] = &[
    ("r", Use::Read),
    ("lora_alpha", Use::Read),
    ("target_modules", Use::Read),
    ("lora_dropout", Use::Read),
    ("peft_type", Use::Read),
    ("bias", Use::Read),
    (
        "inference_mode",
        Use::RefusedUnlessDefault("adapters in inference mode train nothing"),
    ),
    (
        "use_dora",
        Use::RefusedUnlessDefault("DoRA's weight-norm decomposition is not modelled"),
    ),
    (
        "modules_to_save",
        Use::RefusedUnlessDefault(
            "fully trained extra modules beside the adapters are not modelled",
        ),
    ),
    (
        "layers_to_transform",
        Use::RefusedUnlessDefault("adapters on a subset of layers are not modelled"),
    ),
    (
        "rank_pattern",
        Use::RefusedUnlessDefault("per-module ranks are not modelled"),
    ),
    (
        "exclude_modules",
        Use::RefusedUnlessDefault("excluded modules are not modelled"),
    ),
    (
        "target_parameters",
        Use::RefusedUnlessDefault("adapters on parameters (MoE experts) are not modelled"),
    ),
    (
        "trainable_token_indices",
        Use::RefusedUnlessDefault("trainable tokens are not modelled"),
    ),
    (
        "use_qalora",
        Use::RefusedUnlessDefault("QA-LoRA is not modelled"),
    ),
    (
        "layer_replication",
        Use::RefusedUnlessDefault("replicated layers are not modelled"),
    ),
    (
        "lora_bias",
        Use::RefusedUnlessDefault("a bias on lora_B is not modelled"),
    ),
    (
        "megatron_config",
        Use::RefusedUnlessDefault("Megatron's parallel layers are not modelled"),
    ),
    (
        "alora_invocation_tokens",
        Use::RefusedUnlessDefault("activated LoRA is not modelled"),
    ),
    (
        "use_bdlora",
        Use::RefusedUnlessDefault("BD-LoRA is not modelled"),
    ),
    ("task_type", Use::Ignored),
    ("base_model_name_or_path", Use::Ignored),
    ("revision", Use::Ignored),
    ("auto_mapping", Use::Ignored),
    ("peft_version", Use::Ignored),
    ("fan_in_fan_out", Use::Ignored),
    ("use_rslora", Use::Ignored),
    ("init_lora_weights", Use::Ignored),
    ("layers_pattern", Use::Ignored),
    ("alpha_pattern", Use::Ignored),
    ("megatron_core", Use::Ignored),
    ("loftq_config", Use::Ignored),
    ("eva_config", Use::Ignored),
    ("corda_config", Use::Ignored),
    ("lora_ga_config", Use::Ignored),
    ("velora_config", Use::Ignored),
    ("qalora_group_size", Use::Ignored),
    ("monteclora_config", Use::Ignored),
    ("runtime_config", Use::Ignored),
    ("arrow_config", Use::Ignored),
    ("kasa_config", Use::Ignored),
    ("ensure_weight_tying", Use::Ignored),
];

fn lower_lora(k: &mut Knobs, l: &Map<String, Value>) -> Result<(), Error> {
    let p = "workload.lora_config";
    check_arguments(l, p, LORA_CONFIG)?;
    if let Some(kind) = str_arg(l, p, "peft_type")? {
        if kind != "LORA" {
            return Err(Error::invalid(
                &format!("{p}.peft_type"),
                format!("`{kind}` is not LoRA"),
                "\"LORA\"",
            ));
        }
    }
    if let Some(bias) = str_arg(l, p, "bias")? {
        if bias != "none" {
            return Err(Error::unsupported(format!(
                "`{p}.bias` = \"{bias}\": trained biases beside the adapters are not modelled (peft's default is \"none\")"
            )));
        }
    }
    if k.get(&["mode"]).and_then(Value::as_str) == Some("inference") {
        return Err(Error::invalid(
            p,
            "adapters are trained",
            "a training workload, or no `lora_config`",
        ));
    }
    k.default(&["mode"], Value::from("training"));
    if matches!(k.get(&["training", "lora"]), Some(Value::Null)) {
        return Err(Error::invalid(
            "workload.training.lora",
            "is null, and `workload.lora_config` trains adapters",
            "the same adapters in both, or only one of them",
        ));
    }
    // peft's defaults: r=8, lora_alpha=8, lora_dropout=0.0.
    let rank = positive_arg(l, p, "r")?.unwrap_or(8);
    k.state(
        &["training", "lora", "rank"],
        Value::from(rank),
        &format!("{p}.r"),
    )?;
    let targets: Vec<Value> = match l.get("target_modules") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) if s == "all-linear" || is_module_name(s) => {
            alloc::vec![Value::from(s.as_str())]
        }
        Some(Value::String(s)) => return Err(Error::invalid(
            &format!("{p}.target_modules"),
            format!("`{s}` is a pattern peft matches against module paths; headroom reads names"),
            "\"all-linear\", a module name, or a list of module names (`[\"q_proj\", \"v_proj\"]`)",
        )),
        Some(Value::Array(names))
            if names.iter().all(|n| n.as_str().is_some_and(is_module_name)) =>
        {
            names.clone()
        }
        Some(_) => {
            return Err(Error::invalid(
                &format!("{p}.target_modules"),
                "is not a list of module names",
                "\"all-linear\", a module name, or a list of module names",
            ))
        }
    };
    if !targets.is_empty() || k.get(&["training", "lora", "target_modules"]).is_none() {
        k.state(
            &["training", "lora", "target_modules"],
            Value::Array(targets),
            &format!("{p}.target_modules"),
        )?;
    }
    if let Some(alpha) = l.get("lora_alpha").filter(|a| !a.is_null()) {
        k.state(
            &["training", "lora", "alpha"],
            alpha.clone(),
            &format!("{p}.lora_alpha"),
        )?;
    }
    if let Some(dropout) = l.get("lora_dropout").filter(|d| !d.is_null()) {
        let ok = dropout.as_f64().is_some_and(|d| (0.0..1.0).contains(&d));
        if !ok {
            return Err(Error::invalid(
                &format!("{p}.lora_dropout"),
                format!("{dropout} is not a probability below 1"),
                "a number from 0 to below 1",
            ));
        }
        k.state(
            &["training", "lora", "dropout"],
            dropout.clone(),
            &format!("{p}.lora_dropout"),
        )?;
    }
    Ok(())
}

fn is_module_name(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// transformers 5.17 `GenerationConfig().to_dict()` keys.
const GENERATION_CONFIG: &[(&str, Use)] = &[
    ("max_new_tokens", Use::Read),
    ("max_length", Use::Read),
    ("min_new_tokens", Use::Read),
    ("min_length", Use::Read),
    ("num_beams", Use::Read),
    ("output_scores", Use::Read),
    ("output_logits", Use::Read),
    ("return_dict_in_generate", Use::Read),
    ("use_cache", Use::Read),
    ("num_return_sequences", Use::Read),
    ("num_beam_groups", Use::Read),
    ("cache_implementation", Use::Read),
    (
        "penalty_alpha",
        Use::RefusedUnlessDefault("contrastive search is not modelled"),
    ),
    (
        "prefill_chunk_size",
        Use::RefusedUnlessDefault("a chunked prefill is not modelled"),
    ),
    (
        "output_attentions",
        Use::RefusedUnlessDefault("returned attention maps are not modelled"),
    ),
    (
        "output_hidden_states",
        Use::RefusedUnlessDefault("returned hidden states are not modelled"),
    ),
    (
        "low_memory",
        Use::RefusedUnlessDefault("sequential beam search is not modelled"),
    ),
    (
        "prompt_lookup_num_tokens",
        Use::RefusedUnlessDefault("prompt-lookup decoding is not modelled"),
    ),
    (
        "dola_layers",
        Use::RefusedUnlessDefault("DoLa decoding is not modelled"),
    ),
    (
        "guidance_scale",
        Use::RefusedUnlessDefault("classifier-free guidance (a second batch) is not modelled"),
    ),
    (
        "constraints",
        Use::RefusedUnlessDefault("constrained beam search is not modelled"),
    ),
    (
        "force_words_ids",
        Use::RefusedUnlessDefault("constrained beam search is not modelled"),
    ),
    (
        "continuous_batching_config",
        Use::RefusedUnlessDefault("continuous batching is not modelled"),
    ),
    ("do_sample", Use::Ignored),
    ("temperature", Use::Ignored),
    ("top_k", Use::Ignored),
    ("top_p", Use::Ignored),
    ("top_h", Use::Ignored),
    ("min_p", Use::Ignored),
    ("typical_p", Use::Ignored),
    ("epsilon_cutoff", Use::Ignored),
    ("eta_cutoff", Use::Ignored),
    ("repetition_penalty", Use::Ignored),
    ("encoder_repetition_penalty", Use::Ignored),
    ("length_penalty", Use::Ignored),
    ("no_repeat_ngram_size", Use::Ignored),
    ("encoder_no_repeat_ngram_size", Use::Ignored),
    ("bad_words_ids", Use::Ignored),
    ("renormalize_logits", Use::Ignored),
    ("forced_bos_token_id", Use::Ignored),
    ("forced_eos_token_id", Use::Ignored),
    ("remove_invalid_values", Use::Ignored),
    ("exponential_decay_length_penalty", Use::Ignored),
    ("suppress_tokens", Use::Ignored),
    ("begin_suppress_tokens", Use::Ignored),
    ("sequence_bias", Use::Ignored),
    ("token_healing", Use::Ignored),
    ("watermarking_config", Use::Ignored),
    ("diversity_penalty", Use::Ignored),
    ("early_stopping", Use::Ignored),
    ("max_time", Use::Ignored),
    ("stop_strings", Use::Ignored),
    ("pad_token_id", Use::Ignored),
    ("bos_token_id", Use::Ignored),
    ("eos_token_id", Use::Read),
    ("decoder_start_token_id", Use::Ignored),
    ("is_assistant", Use::Ignored),
    ("num_assistant_tokens", Use::Ignored),
    ("num_assistant_tokens_schedule", Use::Ignored),
    ("assistant_confidence_threshold", Use::Ignored),
    ("assistant_early_exit", Use::Ignored),
    ("assistant_ensemble_weight", Use::Ignored),
    ("assistant_lookbehind", Use::Ignored),
    ("target_lookbehind", Use::Ignored),
    ("max_matching_ngram_size", Use::Ignored),
    ("speculation_type", Use::Ignored),
    ("use_mtp", Use::Ignored),
    ("max_cache_len", Use::Ignored),
    ("cache_config", Use::Ignored),
    ("compile_config", Use::Ignored),
    ("disable_compile", Use::Ignored),
    ("transformers_version", Use::Ignored),
    ("_from_model_config", Use::Ignored),
];

fn lower_generation(k: &mut Knobs, g: &Map<String, Value>) -> Result<(), Error> {
    let p = "workload.generation_config";
    check_arguments(g, p, GENERATION_CONFIG)?;
    let src = |key: &str| format!("{p}.{key}");
    k.mode("inference", "generate()")?;
    k.default(&["inference", "kind"], Value::from("generate"));
    k.default(&["inference", "logits"], Value::from("last"));
    let prompt = k.get(&["seq_len"]).and_then(Value::as_u64);
    let new_tokens = match (
        positive_arg(g, p, "max_new_tokens")?,
        positive_arg(g, p, "max_length")?,
    ) {
        (Some(n), _) => Some((n, "max_new_tokens")),
        (None, Some(total)) => match prompt {
            Some(prompt) if total > prompt => Some((total - prompt, "max_length")),
            _ => {
                return Err(Error::invalid(
                    &src("max_length"),
                    format!("{total} leaves no new token after the prompt (`workload.seq_len`)"),
                    "`max_new_tokens`, or a `max_length` above the prompt's length",
                ))
            }
        },
        (None, None) => None,
    };
    match new_tokens {
        Some((n, key)) => k.state(&["inference", "new_tokens"], Value::from(n), &src(key))?,
        None if k.get(&["inference", "new_tokens"]).is_none() => {
            return Err(Error::missing(
                &src("max_new_tokens"),
                "the tokens generate() makes (every one is replayed; a job that stops at an EOS earlier peaks no higher)",
            ))
        }
        None => {}
    }
    let min_new = count_arg(g, p, "min_new_tokens")?.unwrap_or(0) > 0;
    let min_length = match (count_arg(g, p, "min_length")?, prompt) {
        (Some(m), Some(prompt)) => m > 0 && m as u64 > prompt,
        _ => false,
    };
    // `generate()` adds the minimum-length processors when a minimum is
    // asked and an end-of-sequence token exists (every released model's
    // config has one; `"eos_token_id": null` says this one has none).
    let has_eos = !matches!(g.get("eos_token_id"), Some(Value::Null));
    k.state(
        &["inference", "logits_processors"],
        Value::Bool((min_new || min_length) && has_eos),
        &src("min_new_tokens"),
    )?;
    if let Some(beams) = positive_arg(g, p, "num_beams")? {
        k.state(
            &["inference", "num_beams"],
            Value::from(beams),
            &src("num_beams"),
        )?;
    }
    for (key, why) in [
        ("num_return_sequences", "more returned sequences than beams"),
        ("num_beam_groups", "diverse (group) beam search"),
    ] {
        if positive_arg(g, p, key)?.is_some_and(|n| n > 1) {
            return Err(Error::unsupported(format!(
                "`{p}.{key}` above 1: {why} is not modelled"
            )));
        }
    }
    if let Some(cache) = str_arg(g, p, "cache_implementation")? {
        if cache != "dynamic" {
            return Err(Error::unsupported(format!(
                "`{p}.cache_implementation` = \"{cache}\": only the dynamic cache (the default) is modelled"
            )));
        }
    }
    let returned = bool_arg(g, p, "return_dict_in_generate")?.unwrap_or(false);
    for key in ["output_scores", "output_logits"] {
        if let Some(keep) = bool_arg(g, p, key)? {
            // Without `return_dict_in_generate` nothing is collected.
            k.state(
                &["inference", key],
                Value::Bool(keep && returned),
                &src(key),
            )?;
        }
    }
    if let Some(cache) = bool_arg(g, p, "use_cache")? {
        k.state(
            &["inference", "kv_cache"],
            Value::Bool(cache),
            &src("use_cache"),
        )?;
    }
    Ok(())
}

/// Lightning 2.6 `Trainer.__init__` arguments.
const LIGHTNING: &[(&str, Use)] = &[
    ("precision", Use::Read),
    ("accumulate_grad_batches", Use::Read),
    ("max_steps", Use::Read),
    ("strategy", Use::Read),
    ("accelerator", Use::Read),
    ("devices", Use::Ignored),
    ("num_nodes", Use::Ignored),
    ("logger", Use::Ignored),
    ("callbacks", Use::Ignored),
    ("fast_dev_run", Use::Ignored),
    ("max_epochs", Use::Ignored),
    ("min_epochs", Use::Ignored),
    ("min_steps", Use::Ignored),
    ("max_time", Use::Ignored),
    ("limit_train_batches", Use::Ignored),
    ("limit_val_batches", Use::Ignored),
    ("limit_test_batches", Use::Ignored),
    ("limit_predict_batches", Use::Ignored),
    ("overfit_batches", Use::Ignored),
    ("val_check_interval", Use::Ignored),
    ("check_val_every_n_epoch", Use::Ignored),
    ("num_sanity_val_steps", Use::Ignored),
    ("log_every_n_steps", Use::Ignored),
    ("enable_checkpointing", Use::Ignored),
    ("enable_progress_bar", Use::Ignored),
    ("enable_model_summary", Use::Ignored),
    ("gradient_clip_val", Use::Ignored),
    ("gradient_clip_algorithm", Use::Ignored),
    ("deterministic", Use::Ignored),
    ("benchmark", Use::Ignored),
    ("inference_mode", Use::Ignored),
    ("use_distributed_sampler", Use::Ignored),
    ("profiler", Use::Ignored),
    ("detect_anomaly", Use::Ignored),
    ("barebones", Use::Ignored),
    (
        "plugins",
        Use::RefusedUnlessDefault("precision and checkpoint plugins are not modelled"),
    ),
    ("sync_batchnorm", Use::Ignored),
    ("reload_dataloaders_every_n_epochs", Use::Ignored),
    ("default_root_dir", Use::Ignored),
    ("enable_autolog_hparams", Use::Ignored),
    ("model_registry", Use::Ignored),
];

/// Lightning's precision names (`_PRECISION_INPUT`) and their aliases, as
/// autocast and the parameters' dtype.
const LIGHTNING_PRECISIONS: &[(&str, Option<&str>, Autocast)] = &[
    ("32-true", Some("fp32"), Autocast::Off),
    ("32", Some("fp32"), Autocast::Off),
    ("bf16-mixed", None, Autocast::Bf16),
    ("bf16", None, Autocast::Bf16),
    ("16-mixed", None, Autocast::Fp16),
    ("16", None, Autocast::Fp16),
    ("bf16-true", Some("bf16"), Autocast::Off),
    ("16-true", Some("fp16"), Autocast::Off),
];

fn lower_lightning(k: &mut Knobs, a: &Map<String, Value>, params: &str) -> Result<(), Error> {
    let p = "workload.lightning";
    check_arguments(a, p, LIGHTNING)?;
    let precision = match a.get("precision") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => Some(n.to_string()),
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => {
            return Err(Error::invalid(
                &format!("{p}.precision"),
                "is not a precision name",
                "\"bf16-mixed\", \"16-mixed\", \"32-true\", \"bf16-true\" or \"16-true\"",
            ))
        }
    };
    let names: Vec<&str> = LIGHTNING_PRECISIONS.iter().map(|(n, _, _)| *n).collect();
    let lora = k.get(&["training", "lora"]).is_some_and(|l| !l.is_null());
    match precision.as_deref() {
        None => {
            // `precision=None` is "32-true".
            let plain = precision_of(params, Autocast::Off, lora, "workload.dtype")?;
            k.default(&["training", "precision"], Value::from(plain));
        }
        Some(name) => {
            let Some(&(_, cast_to, autocast)) =
                LIGHTNING_PRECISIONS.iter().find(|(n, _, _)| *n == name)
            else {
                return Err(Error::invalid(
                    &format!("{p}.precision"),
                    format!("`{name}` is not modelled (64-bit and Transformer Engine are not)"),
                    &crate::keys::one_of(&names),
                ));
            };
            // "-true" precisions cast the module; "-mixed" keep its dtype.
            let params = cast_to.unwrap_or(params);
            let value = precision_of(params, autocast, lora, &format!("{p}.precision"))?;
            k.state(
                &["training", "precision"],
                Value::from(value),
                &format!("{p}.precision"),
            )?;
        }
    }
    if let Some(n) = positive_arg(a, p, "accumulate_grad_batches")? {
        k.state(
            &["training", "gradient_accumulation_steps"],
            Value::from(n),
            &format!("{p}.accumulate_grad_batches"),
        )?;
    }
    if let Some(n) = count_arg(a, p, "max_steps")? {
        if n >= 1 {
            k.state(
                &["training", "steps"],
                Value::from(steps_for(n as u64)),
                &format!("{p}.max_steps"),
            )?;
        }
    }
    if let Some(strategy) = str_arg(a, p, "strategy")? {
        if strategy != "auto" {
            return Err(Error::unsupported(format!(
                "`{p}.strategy` = \"{strategy}\": describe several GPUs with `workload.parallel`"
            )));
        }
    }
    if str_arg(a, p, "accelerator")? == Some("cpu") {
        return Err(Error::unsupported(format!(
            "`{p}.accelerator` = \"cpu\": a job on the CPU uses no GPU memory"
        )));
    }
    Ok(())
}

/// accelerate 1.15 `Accelerator.__init__` arguments.
const ACCELERATE: &[(&str, Use)] = &[
    ("mixed_precision", Use::Read),
    ("gradient_accumulation_steps", Use::Read),
    (
        "cpu",
        Use::RefusedUnlessDefault("a job on the CPU uses no GPU memory"),
    ),
    (
        "deepspeed_plugin",
        Use::RefusedUnlessDefault("DeepSpeed is not modelled"),
    ),
    (
        "deepspeed_plugins",
        Use::RefusedUnlessDefault("DeepSpeed is not modelled"),
    ),
    (
        "fsdp_plugin",
        Use::RefusedUnlessDefault("describe FSDP with `workload.parallel` (`fsdp2`)"),
    ),
    (
        "torch_tp_plugin",
        Use::RefusedUnlessDefault("describe tensor parallelism with `workload.parallel`"),
    ),
    (
        "megatron_lm_plugin",
        Use::RefusedUnlessDefault("Megatron-LM is not modelled"),
    ),
    (
        "parallelism_config",
        Use::RefusedUnlessDefault("describe several GPUs with `workload.parallel`"),
    ),
    ("dynamo_backend", Use::Read),
    (
        "dynamo_plugin",
        Use::RefusedUnlessDefault("a compiled job is outside the model"),
    ),
    ("device_placement", Use::Ignored),
    ("split_batches", Use::Ignored),
    ("rng_types", Use::Ignored),
    ("log_with", Use::Ignored),
    ("project_dir", Use::Ignored),
    ("project_config", Use::Ignored),
    ("gradient_accumulation_plugin", Use::Ignored),
    ("step_scheduler_with_optimizer", Use::Ignored),
    ("kwargs_handlers", Use::Ignored),
];

fn lower_accelerate(k: &mut Knobs, a: &Map<String, Value>, params: &str) -> Result<(), Error> {
    let p = "workload.accelerate";
    check_arguments(a, p, ACCELERATE)?;
    if let Some(backend) = str_arg(a, p, "dynamo_backend")? {
        if !backend.eq_ignore_ascii_case("no") {
            return Err(Error::unsupported(format!(
                "`{p}.dynamo_backend` = \"{backend}\": a compiled job is outside the model"
            )));
        }
    }
    let lora = k.get(&["training", "lora"]).is_some_and(|l| !l.is_null());
    match str_arg(a, p, "mixed_precision")? {
        None => {
            let plain = precision_of(params, Autocast::Off, lora, "workload.dtype")?;
            k.default(&["training", "precision"], Value::from(plain));
        }
        Some(mode) => {
            let autocast = match mode {
                "no" => Autocast::Off,
                "bf16" => Autocast::Bf16,
                "fp16" => Autocast::Fp16,
                other => {
                    return Err(Error::invalid(
                        &format!("{p}.mixed_precision"),
                        format!("`{other}` is not modelled"),
                        "\"no\", \"bf16\" or \"fp16\"",
                    ))
                }
            };
            let value = precision_of(params, autocast, lora, &format!("{p}.mixed_precision"))?;
            k.state(
                &["training", "precision"],
                Value::from(value),
                &format!("{p}.mixed_precision"),
            )?;
        }
    }
    if let Some(n) = positive_arg(a, p, "gradient_accumulation_steps")? {
        k.state(
            &["training", "gradient_accumulation_steps"],
            Value::from(n),
            &format!("{p}.gradient_accumulation_steps"),
        )?;
    }
    Ok(())
}

/// timm `train.py` arguments (as `args` holds them, dashes as
/// underscores): those that change memory, and the common ones that do not.
const TIMM: &[(&str, Use)] = &[
    ("batch_size", Use::Read),
    ("img_size", Use::Read),
    ("channels_last", Use::Read),
    ("amp", Use::Read),
    ("amp_dtype", Use::Read),
    ("opt", Use::Read),
    ("momentum", Use::Read),
    ("grad_accum_steps", Use::Read),
    ("grad_checkpointing", Use::Read),
    ("model", Use::Ignored),
    (
        "model_ema",
        Use::RefusedUnlessDefault("the EMA copy of the weights is not modelled"),
    ),
    (
        "torchscript",
        Use::RefusedUnlessDefault("a scripted model is outside the model"),
    ),
    (
        "torchcompile",
        Use::RefusedUnlessDefault("a compiled job is outside the model"),
    ),
    (
        "num_classes",
        Use::RefusedUnlessDefault("a head other than the preset's 1,000 classes is not modelled"),
    ),
    ("lr", Use::Ignored),
    ("epochs", Use::Ignored),
    ("weight_decay", Use::Ignored),
    ("sched", Use::Ignored),
    ("warmup_epochs", Use::Ignored),
    ("warmup_lr", Use::Ignored),
    ("min_lr", Use::Ignored),
    ("opt_eps", Use::Ignored),
    ("opt_betas", Use::Ignored),
    ("clip_grad", Use::Ignored),
    ("clip_mode", Use::Ignored),
    ("smoothing", Use::Ignored),
    ("drop", Use::Ignored),
    ("drop_path", Use::Ignored),
    ("mixup", Use::Ignored),
    ("cutmix", Use::Ignored),
    ("aa", Use::Ignored),
    ("reprob", Use::Ignored),
    ("hflip", Use::Ignored),
    ("color_jitter", Use::Ignored),
    ("seed", Use::Ignored),
    ("workers", Use::Ignored),
    ("pin_mem", Use::Ignored),
    ("log_interval", Use::Ignored),
    ("output", Use::Ignored),
    ("experiment", Use::Ignored),
    ("pretrained", Use::Ignored),
    ("data_dir", Use::Ignored),
    ("dataset", Use::Ignored),
];

/// timm's optimizer names (`create_optimizer_v2`): `sgd` and `nesterov`
/// are SGD with Nesterov momentum, `momentum` SGD with momentum, `adamw`
/// and `adam` `torch.optim`'s (the same state).
const TIMM_OPTIMIZERS: &[(&str, &str)] = &[
    ("sgd", "sgd"),
    ("nesterov", "sgd"),
    ("momentum", "sgd"),
    ("adamw", "adamw"),
    ("adam", "adamw"),
];

fn lower_timm(k: &mut Knobs, a: &Map<String, Value>, params: &str) -> Result<(), Error> {
    let p = "workload.timm";
    check_arguments(a, p, TIMM)?;
    if let Some(b) = positive_arg(a, p, "batch_size")? {
        k.state(&["batch"], Value::from(b), &format!("{p}.batch_size"))?;
    }
    if let Some(s) = positive_arg(a, p, "img_size")? {
        k.state(&["image_size"], Value::from(s), &format!("{p}.img_size"))?;
    }
    match bool_arg(a, p, "channels_last")? {
        Some(cl) => {
            let format = if cl { "channels_last" } else { "contiguous" };
            k.state(
                &["memory_format"],
                Value::from(format),
                &format!("{p}.channels_last"),
            )?;
        }
        None => k.default(&["memory_format"], Value::from("contiguous")),
    }
    if k.get(&["mode"]).and_then(Value::as_str) != Some("training") {
        return Ok(());
    }
    let names: Vec<&str> = TIMM_OPTIMIZERS.iter().map(|(n, _)| *n).collect();
    // train.py's defaults: `--opt sgd`, `--momentum 0.9`.
    let opt = str_arg(a, p, "opt")?.unwrap_or("sgd");
    let Some(&(_, optimizer)) = TIMM_OPTIMIZERS.iter().find(|(n, _)| *n == opt) else {
        return Err(Error::invalid(
            &format!("{p}.opt"),
            format!("`{opt}` is not modelled"),
            &crate::keys::one_of(&names),
        ));
    };
    let opt_source = if a.contains_key("opt") {
        format!("{p}.opt")
    } else {
        "timm's default opt".to_string()
    };
    if a.contains_key("opt") {
        k.state(
            &["training", "optimizer"],
            Value::from(optimizer),
            &opt_source,
        )?;
    } else {
        k.default(&["training", "optimizer"], Value::from(optimizer));
    }
    if optimizer == "sgd" {
        let momentum = match a.get("momentum") {
            None | Some(Value::Null) => 0.9,
            Some(v) => v.as_f64().ok_or_else(|| {
                Error::invalid(
                    &format!("{p}.momentum"),
                    "is not a number",
                    "a number from 0 to 1",
                )
            })?,
        };
        if a.contains_key("momentum") {
            k.state(
                &["training", "momentum"],
                Value::from(momentum),
                &format!("{p}.momentum"),
            )?;
        } else {
            k.default(&["training", "momentum"], Value::from(momentum));
        }
    }
    let lora = false;
    match bool_arg(a, p, "amp")? {
        None => {
            let plain = precision_of(params, Autocast::Off, lora, "workload.dtype")?;
            k.default(&["training", "precision"], Value::from(plain));
        }
        Some(amp) => {
            // `--amp-dtype float16` (the default) runs a `GradScaler`.
            let autocast = match (amp, str_arg(a, p, "amp_dtype")?.unwrap_or("float16")) {
                (false, _) => Autocast::Off,
                (true, "float16") => Autocast::Fp16,
                (true, "bfloat16") => Autocast::Bf16,
                (true, other) => {
                    return Err(Error::invalid(
                        &format!("{p}.amp_dtype"),
                        format!("`{other}` is not an autocast dtype"),
                        "\"float16\" or \"bfloat16\"",
                    ))
                }
            };
            let value = precision_of(params, autocast, lora, &format!("{p}.amp"))?;
            k.state(
                &["training", "precision"],
                Value::from(value),
                &format!("{p}.amp"),
            )?;
        }
    }
    if let Some(n) = positive_arg(a, p, "grad_accum_steps")? {
        k.state(
            &["training", "gradient_accumulation_steps"],
            Value::from(n),
            &format!("{p}.grad_accum_steps"),
        )?;
    }
    if let Some(gc) = bool_arg(a, p, "grad_checkpointing")? {
        k.state(
            &["training", "grad_checkpointing"],
            Value::Bool(gc),
            &format!("{p}.grad_checkpointing"),
        )?;
    }
    Ok(())
}

/// transformers 5.17 `BitsAndBytesConfig.to_dict()` keys.
const QUANTIZATION_CONFIG: &[(&str, Use)] = &[
    ("load_in_4bit", Use::Read),
    ("load_in_8bit", Use::Read),
    ("_load_in_4bit", Use::Read),
    ("_load_in_8bit", Use::Read),
    ("quant_method", Use::Read),
    (
        "llm_int8_enable_fp32_cpu_offload",
        Use::RefusedUnlessDefault("CPU offload is not modelled"),
    ),
    ("llm_int8_threshold", Use::Ignored),
    ("llm_int8_skip_modules", Use::Ignored),
    ("llm_int8_has_fp16_weight", Use::Ignored),
    ("bnb_4bit_quant_type", Use::Ignored),
    ("bnb_4bit_use_double_quant", Use::Ignored),
    ("bnb_4bit_compute_dtype", Use::Ignored),
    ("bnb_4bit_quant_storage", Use::Ignored),
];

/// A `BitsAndBytesConfig` as the storage dtype of the weights; estimates
/// of quantized weights carry the wide range of an unmeasured group.
fn lower_quantization(k: &mut Knobs, q: &Map<String, Value>) -> Result<(), Error> {
    let p = "workload.quantization_config";
    check_arguments(q, p, QUANTIZATION_CONFIG)?;
    if let Some(method) = str_arg(q, p, "quant_method")? {
        if method != "bitsandbytes" {
            return Err(Error::invalid(
                &format!("{p}.quant_method"),
                format!("`{method}` is not modelled"),
                "\"bitsandbytes\"",
            ));
        }
    }
    let four = bool_arg(q, p, "load_in_4bit")?
        .or(bool_arg(q, p, "_load_in_4bit")?)
        .unwrap_or(false);
    let eight = bool_arg(q, p, "load_in_8bit")?
        .or(bool_arg(q, p, "_load_in_8bit")?)
        .unwrap_or(false);
    let dtype = match (four, eight) {
        (true, true) => {
            return Err(Error::invalid(
                &format!("{p}.load_in_4bit"),
                "and `load_in_8bit` are both true",
                "one of them",
            ))
        }
        (true, false) => "int4",
        (false, true) => "int8",
        (false, false) => {
            return Err(Error::invalid(
                &format!("{p}.load_in_4bit"),
                "neither `load_in_4bit` nor `load_in_8bit` is true",
                "one of them true",
            ))
        }
    };
    k.state(
        &["dtype"],
        Value::from(dtype),
        &format!("{p}.load_in_{}", if four { "4bit" } else { "8bit" }),
    )
}
