//! Training steps: forward, loss, backward (recomputing checkpointed
//! layers; FSDP2's per-layer gathers and reductions), optimizer step.

use super::{layer_input_dsize, Call, KvCache, Model};
use crate::arch::Dtype;
use crate::families::nn::{self, Ctx, BF16, FP32, T};
use crate::families::optim::{self, OptimizerState, Trainable};
use crate::families::sharding::{self, UnitId};
use crate::graph::{Graph, UnitEvent, Value};
use crate::parallel::Strategy;
use crate::workload::{Logits, Precision, Workload};
use alloc::vec::Vec;

pub(super) fn train(g: &mut Graph, model: &Model, workload: &Workload, b: u64, s: u64, gpt2: bool) {
    let t = &workload.training;
    let parallel = &workload.parallel;
    let mut state = OptimizerState::default();
    // DDP (and ZeRO-1, which runs on DDP): the reducer's buckets; ZeRO-1
    // updates only this rank's partition of the parameters.
    let data_parallel = matches!(parallel.strategy, Strategy::Ddp | Strategy::Zero1);
    let optimized = match parallel.strategy {
        Strategy::Zero1 => {
            sharding::zero1_partition(&model.w.trainable, parallel.world_size as u64)
        }
        _ => model.w.trainable.clone(),
    };
    let mut buckets = if data_parallel {
        g.leaf_grads_copied_out = parallel.gradient_as_bucket_view;
        sharding::ddp_initial_bucket(g, &model.w.trainable)
    } else {
        Vec::new()
    };
    if t.optimizer_state_resident {
        optim::preallocate(g, t, &optimized, &mut state);
    }
    let mut steady = optim::SteadyState::default();
    let mut scaler = optim::GradScaler::for_precision(t.precision);
    for step in 0..t.steps {
        g.replay.step(Some(step));
        if data_parallel && step == 0 {
            g.record_grad_ready_order();
        }
        if data_parallel && step == 1 {
            // The reducer rebuilds its buckets at the second forward, in the
            // order the first backward made the gradients ready: the old
            // one is released (no `.grad` views it after
            // `zero_grad(set_to_none=True)`), then the new ones are
            // allocated (the H200 trace of ZeRO-1 b4 L1024: the 4.94 GB
            // bucket freed, then 64 MiB and 40 MiB buckets).
            g.replay.free_all(buckets.drain(..));
            let ready = g.take_grad_ready_order();
            buckets = sharding::ddp_buckets(
                g,
                &in_ready_order(&model.w.trainable, &ready),
                parallel.bucket_cap_mb as u64 * (1 << 20),
            );
        }
        // Gradient accumulation: every micro-batch's backward adds into the
        // `.grad` the ones before it left (see [`Graph::backward`]); the
        // micro-batches after the second repeat it once the state settles
        // (`optim::SteadyState`).
        let mut micro_steady = optim::SteadyState::default();
        for micro in 0..t.gradient_accumulation_steps {
            forward_backward(g, model, workload, b, s, gpt2, &mut scaler);
            if micro_steady.reached(g, micro) {
                break;
            }
        }
        g.at("optimizer step", None);
        optim::GradScaler::step_with(&mut scaler, g, |g| {
            optim::step(g, t, &optimized, &mut state)
        });
        g.at("zero_grad(set_to_none=True)", None);
        g.zero_grad();
        if steady.reached(g, step) {
            break;
        }
    }
}

/// One forward, loss and backward of a micro-batch (a whole step without
/// gradient accumulation): gradients land in `.grad`, added into those an
/// earlier micro-batch left.
#[allow(clippy::too_many_arguments)]
fn forward_backward(
    g: &mut Graph,
    model: &Model,
    workload: &Workload,
    b: u64,
    s: u64,
    gpt2: bool,
    scaler: &mut Option<optim::GradScaler>,
) {
    let t = &workload.training;
    let parallel = &workload.parallel;
    g.grad_mode = true;
    let mut cx = if model.fsdp.is_some() {
        let mut cx = Ctx::plain(parallel.param_dtype.bytes());
        cx.fp16 = parallel.param_dtype == Dtype::Fp16;
        cx
    } else if t.lora.is_some() {
        // LoRA's base is frozen in the workload's dtype; `amp_bf16` and
        // `amp_fp16` put its fp32 adapters under autocast. A quantized
        // base's other parameters are fp32 (`prepare_model_for_kbit_training`),
        // so the precision's context applies to them as to a full model.
        let mut cx = if workload.dtype.is_float() {
            Ctx::plain(BF16)
        } else {
            Ctx::for_precision(t.precision)
        };
        cx.fp16 = workload.dtype == Dtype::Fp16 || t.precision == Precision::AmpFp16;
        cx.lora_autocast = t.precision.autocast();
        cx.lora_dropout = t
            .lora
            .as_ref()
            .and_then(|l| l.dropout)
            .is_some_and(|p| p > 0.0);
        cx
    } else {
        Ctx::for_precision(t.precision)
    };
    let call = Call {
        batch: b,
        tokens: s,
        logits: Logits::All,
        checkpointing: t.grad_checkpointing,
        gpt2_dropout: gpt2,
        decode: false,
        generate: false,
    };
    let mut rope = None;
    let mut no_cache = None;
    // `use_cache=True` (the config default): the forward fills a
    // DynamicCache that the returned outputs hold until they are dropped.
    // transformers turns the cache off under gradient checkpointing.
    let mut train_cache = if t.use_cache && !t.grad_checkpointing {
        Some(KvCache {
            layers: Vec::new(),
            dtype: if cx.autocast || cx.compute_dsize == BF16 {
                Dtype::Bf16
            } else {
                Dtype::Fp32
            },
        })
    } else {
        None
    };
    let mut masks = Vec::new();
    let outputs = model.forward(g, &mut cx, &call, &mut train_cache, &mut rope, &mut masks);
    let mask = masks.first().copied();
    let logits = outputs.logits;
    let loss = match model.classify {
        None => {
            g.at("loss: cross entropy over all tokens", None);
            nn::causal_lm_loss(g, logits, b * s)
        }
        Some(1) => {
            g.at("loss: mean squared error (one label)", None);
            let loss = nn::mse_loss(g, cx.autocast, logits);
            T {
                v: loss,
                elems: 1,
                dsize: FP32,
            }
        }
        Some(_) => {
            g.at("loss: cross entropy over the sequences", None);
            let loss = nn::cross_entropy(g, cx.autocast, logits, b);
            T {
                v: loss,
                elems: 1,
                dsize: FP32,
            }
        }
    };
    // `forward` computed the loss from `labels` and returns.
    outputs.release_locals(g);
    // FSDP2's root post-forward runs as `model.forward` returns, after
    // the loss: the last layer's all-gather output goes.
    if let Some(f) = &model.fsdp {
        f.borrow_mut().root_post_forward(g);
    }
    g.drop(logits.v);
    // `loss = model(...).loss`: the outputs, and the cache they hold,
    // go as soon as the loss is taken (autograd keeps what it saved).
    if let Some(c) = train_cache.take() {
        for l in c.layers {
            g.drop_all(&[l.keys, l.values]);
        }
    }
    cx.exit_autocast(g);
    let scaled = scaler.as_mut().map(|s| s.scale(g, loss.v));
    let from = scaled.unwrap_or(loss.v);
    g.at("backward", None);
    let mut recompute = |g: &mut Graph, segment: u32, input: Value| {
        // Recompute the layer with saving, then backward through it.
        let x = T {
            v: input,
            elems: b * s * model.a.hidden_size as u64,
            dsize: layer_input_dsize(&cx, model),
        };
        g.at("backward: recompute checkpointed layer", Some(segment));
        cx.cache_weight_casts = false;
        model
            .layer(
                g,
                &mut cx,
                segment as usize,
                x,
                &call,
                rope,
                &mut no_cache,
                mask,
            )
            .v
    };
    match &model.fsdp {
        None => g.backward_recomputing(from, &mut recompute),
        Some(f) => {
            // FSDP2's hooks: the root's pre-backward prefetches the last
            // layer; each layer is gathered as backward reaches it and
            // its gradients reduced as backward leaves it; the root's
            // reduction runs in the engine's final callback.
            g.backward_with_units(from, Some(&mut recompute), &mut |g, event| {
                let mut f = f.borrow_mut();
                match event {
                    UnitEvent::Start => f.root_pre_backward(g),
                    UnitEvent::Enter(l) => f.pre_backward(g, l as usize),
                    UnitEvent::Leave(l) => f.post_backward(g, UnitId::Layer(l as usize)),
                    UnitEvent::End => f.end_backward(g),
                }
            });
        }
    }
    if let Some((cos, sin)) = rope {
        g.drop_all(&[cos.v, sin.v]);
    }
    for m in masks {
        g.drop(m.v);
    }
    g.drop(loss.v);
    if let Some(scaled) = scaled {
        g.drop(scaled);
    }
    g.grad_mode = false;
}

/// The trainable parameters in the order their gradients became ready;
/// any that backward never reached follow in reverse registration order
/// (the reducer's initial order).
fn in_ready_order(trainable: &[Trainable], ready: &[Value]) -> Vec<Trainable> {
    let mut ordered: Vec<Trainable> = ready
        .iter()
        .filter_map(|v| trainable.iter().find(|p| p.value == *v).copied())
        .collect();
    for p in trainable.iter().rev() {
        if !ready.contains(&p.value) {
            ordered.push(*p);
        }
    }
    ordered
}
