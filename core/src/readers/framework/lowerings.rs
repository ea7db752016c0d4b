//! Each framework's arguments lowered to knobs ([`super::lower`] calls
//! these): the `Trainer`'s `TrainingArguments`, peft's `LoraConfig`,
//! `generate()`'s `GenerationConfig`, Lightning's and accelerate's
//! arguments, timm's `train.py` and a `BitsAndBytesConfig`.

use super::*;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

pub(super) fn lower_training_args(
    k: &mut Knobs,
    a: &Map<String, Value>,
    params: &str,
) -> Result<(), Error> {
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
            format!("`{optim}` is not modelled"),
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
                        return Err(crate::readers::known_keys::unknown_key(
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

pub(super) fn lower_lora(k: &mut Knobs, l: &Map<String, Value>) -> Result<(), Error> {
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

pub(super) fn lower_generation(k: &mut Knobs, g: &Map<String, Value>) -> Result<(), Error> {
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

pub(super) fn lower_lightning(
    k: &mut Knobs,
    a: &Map<String, Value>,
    params: &str,
) -> Result<(), Error> {
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

pub(super) fn lower_accelerate(
    k: &mut Knobs,
    a: &Map<String, Value>,
    params: &str,
) -> Result<(), Error> {
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

pub(super) fn lower_timm(k: &mut Knobs, a: &Map<String, Value>, params: &str) -> Result<(), Error> {
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

/// A `BitsAndBytesConfig` as the storage dtype of the weights; estimates
/// of quantized weights carry the wide range of an unmeasured group.
pub(super) fn lower_quantization(k: &mut Knobs, q: &Map<String, Value>) -> Result<(), Error> {
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
        (true, false) => {
            // `bnb_4bit_compute_dtype` (float32 when not given) is the
            // dtype each layer dequantizes to and multiplies in.
            let compute = str_arg(q, p, "bnb_4bit_compute_dtype")?.unwrap_or("float32");
            if !matches!(
                compute,
                "bfloat16" | "float16" | "torch.bfloat16" | "torch.float16"
            ) {
                return Err(Error::invalid(
                    &format!("{p}.bnb_4bit_compute_dtype"),
                    format!("`{compute}` compute is not modelled"),
                    "\"bfloat16\" or \"float16\" (what QLoRA recipes set)",
                ));
            }
            if bool_arg(q, p, "bnb_4bit_use_double_quant")?.unwrap_or(false) {
                "int4_dq"
            } else {
                "int4"
            }
        }
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
