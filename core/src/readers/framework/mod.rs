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

mod arguments;
mod lowerings;
use arguments::*;
use lowerings::*;

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
                let plain = precision_of(&params, Autocast::Off, lora, "workload.dtype")?;
                knobs.default(&["training", "precision"], Value::from(plain));
            }
            _ => {}
        }
        // A framework runs many steps: three stand for them (see
        // [`steps_for`]), unless its arguments said fewer (`max_steps`),
        // which the lowering above set.
        if framework.is_some() {
            knobs.default(&["training", "steps"], Value::from(steps_for(u64::MAX)));
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
                return Err(crate::readers::known_keys::unknown_key(
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
        (Autocast::Off, true) if matches!(params, "int4" | "int4_dq" | "int8") => Ok("fp32"),
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
