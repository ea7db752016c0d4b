//! The workload panel: mode, batch, length and the workload's options.

use super::context::{state_memo, use_page};
use super::fields::{check_field, choice_field, number_field, parse_u32, said, select_field};
use crate::defaults;
use crate::protocol::Inputs;
use crate::state::AppState;
use crate::vocab::{self, options};
use headroom_core::arch::{Architecture, Dtype};
use headroom_core::parallel::{Strategy, MAX_WORLD_SIZE};
use headroom_core::readers::parse_workload;
use headroom_core::workload::{
    Attention, InferenceKind, LoadPath, Logits, Lora, MemoryFormat, Mode, Optimizer, Precision,
    Workload, MAX_INFERENCE_BATCHES,
};
use leptos::prelude::*;

/// What runs: mode, batch, length, dtype, attention and the rest.
#[component]
pub fn WorkloadPanel() -> impl IntoView {
    let page = use_page();
    let applies = Memo::new(move |_| page.state.with(|s| defaults::applies(&s.model.arch)));
    let w = move |f: fn(&Workload) -> String| move || page.state.with(|s| f(&s.workload));
    let mode = state_memo(page, |s| s.workload.mode);
    let training = move || mode.get() == Mode::Training;
    let length_label =
        Memo::new(move |_| page.state.with(|s| defaults::length_label(&s.model.arch)));

    // Views follow Memos of what they depend on, not the whole state: a
    // rebuilt field costs the page its layout and paint while a curve is
    // computed.
    let vision = state_memo(page, AppState::vision);
    let parallel_shown = state_memo(page, |s| {
        matches!(s.model.arch, Architecture::Decoder(_)) || !s.workload.parallel.is_single()
    });
    let length_fields = move || {
        let vision = vision.get();
        let (min, max) = if vision {
            (16, headroom_core::workload::MAX_IMAGE_SIZE)
        } else {
            (1, headroom_core::workload::MAX_SEQ_LEN)
        };
        let field = if vision {
            "workload.image_size"
        } else {
            "workload.seq_len"
        };
        let to_pos = move |s: &AppState| -> f64 {
            let (a, b, l) = (s.view.from as f64, s.view.to as f64, s.length() as f64);
            let t = if s.view.log_x {
                (l.ln() - a.ln()) / (b.ln() - a.ln())
            } else {
                (l - a) / (b - a)
            };
            (t.clamp(0.0, 1.0) * 1000.0).round()
        };
        view! {
            <div class="field length">
                <label for="seq-len">{move || format!("Length: {}", length_label.get())}</label>
                <div class="row">
                    <input
                        id="seq-slider"
                        data-testid="seq-slider"
                        type="range"
                        min="0"
                        max="1000"
                        aria-label=move || format!("{} (slider)", length_label.get())
                        prop:value=move || page.state.with(to_pos).to_string()
                        on:input=move |ev| {
                            let t = event_target_value(&ev).parse::<f64>().unwrap_or(0.0) / 1000.0;
                            let len = page.state.with_untracked(|s| {
                                let (a, b) = (s.view.from as f64, s.view.to as f64);
                                if s.view.log_x { (a.ln() + t * (b.ln() - a.ln())).exp() } else { a + t * (b - a) }
                            });
                            let len = len.round().max(1.0) as u32;
                            let _ = page.apply(|w| *w = w.with_length(vision, len));
                        }
                    />
                </div>
                {number_field(
                    "seq-len",
                    "exact",
                    min,
                    max,
                    move || page.state.with(|s| s.length().to_string()),
                    move |t| {
                        let v = parse_u32(field, t, min, max)?;
                        page.apply(|w| *w = w.with_length(vision, v))
                    },
                )}
            </div>
        }
    };

    view! {
        <fieldset class="group">
            <legend>"Workload"</legend>
            <HowYouRunIt/>
            {move || applies.get().training.then(|| choice_field(
                "mode", "Mode", options(Mode::ALL), |w| w.mode.key(),
                |w, k| if let Some(m) = Mode::from_key(k) { vocab::set_mode(w, m) },
            ))}
            {number_field("batch", "Batch size", 1, headroom_core::workload::MAX_BATCH, w(|w| w.batch.to_string()),
                move |t| { let v = parse_u32("workload.batch", t, 1, headroom_core::workload::MAX_BATCH)?; page.apply(|w| w.batch = v) })}
            {length_fields}
            {move || (!training()).then(|| dtype_field("Weight dtype", applies.get().quantised))}
            {move || applies.get().attention.then(|| choice_field(
                "attention", "Attention kernel", options(Attention::ALL), |w| w.attention.key(),
                |w, k| if let Some(a) = Attention::from_key(k) { w.attention = a },
            ))}
            {move || applies.get().padding.then(|| check_field(
                "padded", "Padded batch (an attention mask with zeros)",
                |w| w.padded, |w, on| w.padded = on,
            ))}
            {move || applies.get().memory_format.then(|| choice_field(
                "memory_format", "Memory format", options(MemoryFormat::ALL), |w| w.memory_format.key(),
                |w, k| if let Some(f) = MemoryFormat::from_key(k) { w.memory_format = f },
            ))}
            {move || (!training()).then(|| view! { <InferenceFields applies=applies/> })}
            {move || training().then(|| view! { <TrainingFields applies=applies/> })}
            {move || applies.get().esmfold.then(|| view! { <EsmFoldFields/> })}
            {move || parallel_shown.get().then(|| view! { <ParallelFields/> })}
            {choice_field(
                "load", "How weights were loaded", options(LoadPath::ALL), |w| w.load.key(),
                |w, k| if let Some(l) = LoadPath::from_key(k) { w.load = l },
            )}
        </fieldset>
    }
}

/// Generation or one forward pass, decode steps, KV cache, batches, logits.
#[component]
fn InferenceFields(applies: Memo<defaults::Applies>) -> impl IntoView {
    let page = use_page();
    let kind = Memo::new(move |_| page.state.with(|s| s.workload.inference.kind));
    let generation = move || applies.get().generation;
    view! {
        {move || generation().then(|| choice_field(
            "kind", "Inference", options(InferenceKind::ALL), |w| w.inference.kind.key(),
            |w, k| if let Some(kind) = InferenceKind::from_key(k) { w.inference.kind = kind },
        ))}
        {move || (generation() && kind.get() == InferenceKind::Generate).then(|| view! {
            {number_field("new-tokens", "New tokens (decode steps)", 0, headroom_core::workload::MAX_NEW_TOKENS,
                move || page.state.with(|s| s.workload.inference.new_tokens.to_string()),
                move |t| { let v = parse_u32("workload.inference.new_tokens", t, 0, headroom_core::workload::MAX_NEW_TOKENS)?; page.apply(|w| w.inference.new_tokens = v) })}
            {number_field("num-beams", "Beams (num_beams; 1 is greedy)", 1, headroom_core::workload::MAX_BEAMS,
                move || page.state.with(|s| s.workload.inference.num_beams.to_string()),
                move |t| { let v = parse_u32("workload.inference.num_beams", t, 1, headroom_core::workload::MAX_BEAMS)?; page.apply(|w| w.inference.num_beams = v) })}
            {choice_field(
                "kv-dtype", "KV-cache dtype", vocab::kv_dtype_options(),
                |w| vocab::kv_dtype_key(w.inference.kv_dtype),
                |w, k| if let Some(d) = vocab::kv_dtype_from_key(k) { w.inference.kv_dtype = d },
            )}
        })}
        {move || (generation() && kind.get() == InferenceKind::Forward).then(|| view! {
            {check_field("kv-cache", "Return a KV cache (use_cache=True)",
                |w| w.inference.kv_cache, |w, on| w.inference.kv_cache = on)}
        })}
        {move || applies.get().inference_batches.then(|| number_field(
            "inference-batches", "Batches run one after another", 1, MAX_INFERENCE_BATCHES,
            move || page.state.with(|s| s.workload.inference.batches.to_string()),
            move |t| { let v = parse_u32("workload.inference.batches", t, 1, MAX_INFERENCE_BATCHES)?; page.apply(|w| w.inference.batches = v) }))}
        {move || applies.get().logits.then(|| choice_field(
            "logits", "Logits", vocab::logits_options(generation()),
            |w| w.inference.logits.key(),
            |w, k| if let Some(l) = Logits::from_key(k) { w.inference.logits = l },
        ))}
    }
}

/// Optimizer, precision, steps, gradient accumulation, checkpointing, LoRA.
#[component]
fn TrainingFields(applies: Memo<defaults::Applies>) -> impl IntoView {
    let page = use_page();
    let lora_on = state_memo(page, |s| s.workload.training.lora.is_some());
    view! {
        {choice_field(
            "optimizer", "Optimizer", options(Optimizer::ALL),
            |w| w.training.optimizer.key(),
            |w, k| if let Some(o) = Optimizer::from_key(k) { w.training.optimizer = o },
        )}
        {choice_field(
            "precision", "Precision", options(Precision::ALL),
            |w| w.training.precision.key(),
            |w, k| if let Some(p) = Precision::from_key(k) { w.training.precision = p },
        )}
        {number_field("steps", "Optimizer steps", 1, headroom_core::workload::MAX_STEPS,
            move || page.state.with(|s| s.workload.training.steps.to_string()),
            move |t| { let v = parse_u32("workload.training.steps", t, 1, headroom_core::workload::MAX_STEPS)?; page.apply(|w| w.training.steps = v) })}
        {number_field("grad-accum", "Gradient accumulation steps", 1, headroom_core::workload::MAX_STEPS,
            move || page.state.with(|s| s.workload.training.gradient_accumulation_steps.to_string()),
            move |t| { let v = parse_u32("workload.training.gradient_accumulation_steps", t, 1, headroom_core::workload::MAX_STEPS)?; page.apply(|w| w.training.gradient_accumulation_steps = v) })}
        {move || applies.get().hf_training.then(|| view! {
            {check_field("grad-ckpt", "Gradient checkpointing",
                |w| w.training.grad_checkpointing, |w, on| w.training.grad_checkpointing = on)}
            // LoRA recipes checkpoint activations: switching LoRA on turns
            // checkpointing on too (the switch above shows it, and turns it off).
            {check_field("lora", "LoRA adapters (frozen base)",
                |w| w.training.lora.is_some(),
                |w, on| {
                    w.training.lora = on.then(|| Lora { rank: 16, alpha: Some(32.0), target_modules: Vec::new(), dropout: None });
                    w.training.grad_checkpointing |= on;
                })}
        })}
        {move || (applies.get().hf_training && lora_on.get()).then(|| view! {
            {dtype_field("Base weight dtype (LoRA)", applies.get().quantised)}
            {number_field("lora-rank", "LoRA rank", 1, 65_536,
                move || page.state.with(|s| s.workload.training.lora.as_ref().map_or(16, |l| l.rank).to_string()),
                move |t| { let v = parse_u32("workload.training.lora.rank", t, 1, 65_536)?; page.apply(|w| if let Some(l) = w.training.lora.as_mut() { l.rank = v }) })}
            <div class="field">
                <label for="lora-targets">"Target modules (comma separated; empty = q_proj, v_proj)"</label>
                <input id="lora-targets" data-testid="lora-targets" type="text"
                    prop:value=move || page.state.with(|s| s.workload.training.lora.as_ref().map(|l| l.target_modules.join(",")).unwrap_or_default())
                    on:change=move |ev| {
                        let list: Vec<String> = event_target_value(&ev).split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
                        let _ = page.apply(|w| if let Some(l) = w.training.lora.as_mut() { l.target_modules = list });
                    }/>
            </div>
        })}
    }
}

/// "How do you run it?": a framework and its own arguments as the user
/// wrote them (the JSON of `TrainingArguments.to_dict()`, a `LoraConfig`,
/// ...), read by the core's framework reader in the panels module; the
/// workload's fields then show the job they describe, the length kept.
#[component]
fn HowYouRunIt() -> impl IntoView {
    let page = use_page();
    let framework = RwSignal::new("hf_trainer".to_string());
    let area: NodeRef<leptos::html::Textarea> = NodeRef::new();
    let status = RwSignal::new(None::<Result<String, String>>);
    let apply = move |_| {
        let arguments = area.get_untracked().map(|a| a.value()).unwrap_or_default();
        let fields = [
            ("framework", framework.get_untracked().into()),
            ("arguments", arguments.into()),
        ];
        let runtime = page.runtime.get_untracked();
        let request = page.state.with_untracked(|s| {
            Inputs {
                arch: s.model.arch.clone(),
                workload: s.workload.clone(),
                runtime,
            }
            .to_json_with(&fields)
        });
        status.set(Some(Ok("Reading the arguments…".into())));
        leptos::task::spawn_local(async move {
            let outcome = async {
                let json = super::lazy::panels().await?.import_framework(&request)?;
                let value = serde_json::from_str(&json).map_err(|e| e.to_string())?;
                let workload = parse_workload(Some(&value)).map_err(|e| e.to_string())?;
                page.apply(|w| *w = workload)
            };
            let said = outcome.await.map(|()| {
                "Applied: the fields below show the job as the framework runs it.".to_string()
            });
            status.try_set(Some(said));
        });
    };
    view! {
        <details class="how-run" data-testid="how-run">
            <summary>"How do you run it? (Trainer, Lightning, timm, generate…)"</summary>
            {select_field("framework", "Framework", crate::import::FRAMEWORKS.to_vec(), move || framework.get(), move |v| framework.set(v))}
            <div class="field">
                <label for="framework-args">"Its arguments as JSON (optional): TrainingArguments.to_dict(), a LoraConfig, a BitsAndBytesConfig, a GenerationConfig, or Lightning's precision and accumulate_grad_batches"</label>
                <textarea id="framework-args" data-testid="framework-args" rows="3"
                    placeholder="{\"per_device_train_batch_size\": 4, \"bf16\": true, …}" node_ref=area></textarea>
            </div>
            <button type="button" data-testid="framework-apply" on:click=apply>"Apply"</button>
            <p class="status" role="status" data-testid="framework-status">
                {move || match status.get() {
                    Some(Ok(m)) => view! { <span class="ok">{m}</span> }.into_any(),
                    Some(Err(e)) => view! { <span class="error">{said(e)}</span> }.into_any(),
                    None => ().into_any(),
                }}
            </p>
        </details>
    }
}

/// The weights' dtype select (the frozen base's under LoRA).
fn dtype_field(label: &'static str, quantised: bool) -> AnyView {
    choice_field(
        "dtype",
        label,
        vocab::dtype_options(quantised),
        |w| w.dtype.key(),
        |w, k| {
            if let Some(d) = Dtype::from_key(k) {
                w.dtype = d
            }
        },
    )
}

/// GPUs per job and how the job is spread over them; FSDP2's resharding.
/// A combination the core refuses for this model (FSDP2 under autocast, a
/// world size that does not divide the heads) shows the core's message here.
#[component]
fn ParallelFields() -> impl IntoView {
    let page = use_page();
    let mode = state_memo(page, |s| s.workload.mode);
    let fsdp2 = state_memo(page, |s| s.workload.parallel.strategy == Strategy::Fsdp2);
    let spread = state_memo(page, |s| !s.workload.parallel.is_single());
    let refused = move || {
        page.state.with(
            |s| match headroom_core::families::validate(&s.model.arch, &s.workload) {
                Err(e)
                    if !s.workload.parallel.is_single()
                        || e.field()
                            .is_some_and(|f| f.starts_with("workload.parallel")) =>
                {
                    Some(crate::format::shown(&e.to_string(), 600))
                }
                _ => None,
            },
        )
    };
    view! {
        {number_field("world-size", "GPUs per job", 1, MAX_WORLD_SIZE,
            move || page.state.with(|s| s.workload.parallel.world_size.to_string()),
            move |t| { let v = parse_u32("workload.parallel.world_size", t, 1, MAX_WORLD_SIZE)?; page.apply(|w| w.parallel.world_size = v) })}
        {move || {
            let m = mode.get();
            choice_field(
                "strategy", "Spread over the GPUs", vocab::strategy_options(m),
                |w| w.parallel.strategy.key(),
                |w, k| if let Some(s) = Strategy::from_key(k) {
                    w.parallel.strategy = s;
                    if s == Strategy::None { w.parallel.world_size = 1 }
                },
            )
        }}
        {move || fsdp2.get().then(|| check_field(
            "reshard", "Reshard after forward (gather again in backward)",
            |w| w.parallel.reshard_after_forward, |w, on| w.parallel.reshard_after_forward = on,
        ))}
        <p class="error" role="alert" data-testid="parallel-error">{move || refused().map(said)}</p>
        {move || spread.get().then(|| view! {
            <p class="hint">"Batch is per GPU; the estimates are one GPU's (one rank's) peak."</p>
        })}
    }
}

/// ESMFold's stem dtype, trunk chunk size and recycles.
#[component]
fn EsmFoldFields() -> impl IntoView {
    let page = use_page();
    view! {
        {choice_field(
            "stem-dtype", "ESM-2 stem dtype", vocab::stem_dtype_options(),
            |w| w.esmfold.stem_dtype.key(),
            |w, k| if let Some(d) = Dtype::from_key(k) { w.esmfold.stem_dtype = d },
        )}
        {number_field("chunk-size", "Trunk chunk size (empty = unchunked)", 1, headroom_core::workload::MAX_SEQ_LEN,
            move || page.state.with(|s| s.workload.esmfold.chunk_size.map(|c| c.to_string()).unwrap_or_default()),
            move |t| {
                let v = if t.is_empty() { None } else { Some(parse_u32("workload.esmfold.chunk_size", t, 1, headroom_core::workload::MAX_SEQ_LEN)?) };
                page.apply(|w| w.esmfold.chunk_size = v)
            })}
        {number_field("recycles", "Recycles", 0, 64,
            move || page.state.with(|s| s.workload.esmfold.num_recycles.map(|c| c.to_string()).unwrap_or_default()),
            move |t| {
                let v = if t.is_empty() { None } else { Some(parse_u32("workload.esmfold.num_recycles", t, 0, 64)?) };
                page.apply(|w| w.esmfold.num_recycles = v)
            })}
    }
}
