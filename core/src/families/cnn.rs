//! Convolutional networks as torchvision builds them (ResNet v1.5,
//! MobileNetV2), inference and training at any batch and image size.
//!
//! Each network is first unrolled into a list of [`Layer`]s with their
//! shapes; the same list gives the parameter count and drives the replay.
//! Per layer: the convolution output (and, in training, its saved input),
//! BatchNorm's output (eval: a new tensor; training: a new tensor plus
//! per-channel saved mean and inverse std), in-place ReLU (saves its output),
//! max-pooling with its int64 indices, in-place residual `+=` (ResNet) or an
//! out-of-place sum (MobileNetV2).
//!
//! The "compute account" of convolutions (cuDNN workspaces): each
//! convolution asks cuDNN for the workspace of the algorithm its heuristics
//! pick and gets it from torch's caching allocator for the length of the
//! call, after its output exists. The sizes follow the H200 measurement of
//! every ResNet-50 convolution (cuDNN 9.19, torch 2.11;
//! `measurements/h200-cudnn/`), by kind of convolution, scaled by
//! `runtime.cudnn_workspace_scale` (see [`forward_workspace`] and
//! [`backward_workspace`]); outside the allocator, cuDNN's handle and
//! kernels are `runtime.cudnn_library_bytes`.

use super::nn::{Ctx, BF16, FP32, INT64, T};
use super::optim;
use super::ReplaySummary;
use crate::arch::CnnArch;
use crate::component::Component;
use crate::error::Error;
use crate::graph::{GradOrder, Graph, Saves, Value};
use crate::runtime::RuntimeProfile;
use crate::trace::Replay;
use crate::workload::{MemoryFormat, Mode, Workload};
use alloc::vec::Vec;

pub use crate::arch::cnn::{layers, params, Layer};

mod cudnn_workspaces;
mod nchw_backward;

pub use cudnn_workspaces::*;

/// Replays a CNN run.
pub fn replay(
    arch: &CnnArch,
    workload: &Workload,
    runtime: &RuntimeProfile,
    replay: &mut Replay,
) -> Result<ReplaySummary, Error> {
    let training = workload.mode == Mode::Training;
    let dsize = super::nn::param_dsize(workload);
    let act_dsize = if training && workload.training.precision.autocast() {
        BF16
    } else {
        dsize
    };
    let image = workload.image_size.unwrap_or(224) as u64;
    let net = layers(arch, image);
    let mut g = Graph::for_runtime(replay, runtime);
    g.at("load weights", None);
    // Parameters and BatchNorm buffers, in module order.
    let mut params = super::nn::Params::new(dsize, training);
    let mut weights: Vec<Value> = Vec::new();
    // Convolution weights whose memory layout `channels_last` changes (k x k
    // kernels; a 1x1 kernel is already channels-last).
    let mut kxk_weights: Vec<Value> = Vec::new();
    let mut buffers = 0u64;
    for l in &net {
        match *l {
            Layer::Conv {
                cin,
                cout,
                k,
                groups,
                ..
            } => {
                let weight = params.tensor(&mut g, cout, cin / groups * k * k);
                if k > 1 {
                    kxk_weights.push(weight);
                }
                weights.push(weight);
            }
            Layer::BatchNorm { c } => {
                weights.push(params.tensor(&mut g, c, 1));
                params.tensor(&mut g, c, 1);
                // running_mean, running_var (fp32) and num_batches_tracked (int64).
                g.param(2 * c * FP32, false);
                g.param(INT64, false);
                buffers += 2 * c * FP32 + INT64;
            }
            Layer::Head { features, classes } => {
                weights.push(params.tensor(&mut g, classes, features));
                params.tensor(&mut g, classes, 1);
            }
            _ => {}
        }
    }
    let channels_last = workload.memory_format == MemoryFormat::ChannelsLast;
    if channels_last {
        // `model.to(memory_format=torch.channels_last)` after `.to("cuda")`
        // copies every weight whose layout changes, one at a time, freeing
        // the old block (`measurements/channels-last/trace-segments.jsonl`:
        // 2.25 MiB allocated, 2.25 MiB freed, ...).
        g.at("load weights: to channels_last", None);
        for &weight in &kxk_weights {
            g.relayout_param(weight);
        }
    }
    let summary = ReplaySummary {
        params: params.count,
        weight_bytes: params.bytes() + buffers,
        ..ReplaySummary::default()
    };
    super::cublas_workspaces(&mut g, runtime, workload.mode == Mode::Training);
    let b = workload.batch as u64;
    let run = Run {
        net: &net,
        weights: &weights,
        b,
        image,
        act_dsize,
        fp16: super::nn::half_is_fp16(workload),
        channels_last,
        runtime,
    };
    // The caller's batch; training reuses it every step.
    let image_bytes = b * 3 * image * image * dsize;
    let mut images = new_images(&mut g, image_bytes, channels_last, None);
    if !training {
        let mut cx = Ctx::plain(dsize);
        super::inference_batches(&mut g, workload.inference.batches, &mut |g, index| {
            if index > 0 {
                images = new_images(g, image_bytes, channels_last, Some(images));
            }
            run.forward(g, &mut cx, images).v
        });
        g.drop(images);
        return Ok(summary);
    }
    optim::train_steps(&mut g, &workload.training, &params.list, |g, cx| {
        let logits = run.forward(g, cx, images);
        g.at("loss: cross entropy", None);
        let loss = super::nn::cross_entropy(g, cx.autocast, logits, b);
        g.drop(logits.v);
        loss
    });
    g.drop(images);
    Ok(summary)
}

/// A batch of images (`torch.randn(b, 3, image, image)`), in the
/// parameters' dtype (a convolution needs its input in its weight's dtype;
/// fp32 under autocast), replacing `last`: the new batch exists before the
/// name is rebound and the last one released. In `channels_last`,
/// `images.contiguous(memory_format=torch.channels_last)` then copies it
/// to NHWC and releases the NCHW batch.
fn new_images(g: &mut Graph, bytes: u64, channels_last: bool, last: Option<Value>) -> Value {
    g.at("input images", None);
    let mut images = g.input(bytes, Component::Activations);
    if let Some(last) = last {
        g.drop(last);
    }
    if channels_last {
        g.at("input images: to channels_last", None);
        let copy = g.input(bytes, Component::Activations);
        g.drop(images);
        images = copy;
    }
    images
}

struct Run<'a> {
    net: &'a [Layer],
    weights: &'a [Value],
    b: u64,
    image: u64,
    act_dsize: u64,
    /// 2-byte activations are fp16 rather than bf16.
    fp16: bool,
    channels_last: bool,
    runtime: &'a RuntimeProfile,
}

impl Run<'_> {
    /// The weight a convolution or the classifier computes with: under
    /// autocast, the cached bf16 copy of the fp32 weight (saved for
    /// backward, so it lives until its gradient is computed); `true` when
    /// the caller must drop an uncached copy.
    fn weight_for(&self, g: &mut Graph, cx: &mut Ctx, weight: Value, elems: u64) -> (Value, bool) {
        if !cx.autocast {
            return (weight, false);
        }
        let (copy, uncached) = super::nn::autocast_weight(g, cx, weight, elems, FP32);
        (copy.v, uncached)
    }

    fn forward(&self, g: &mut Graph, cx: &mut Ctx, images: Value) -> T {
        let b = self.b;
        g.hold(images);
        let mut x = if cx.autocast {
            let c = g.op(
                "autocast: input cast to bf16",
                &[images],
                b * 3 * self.image * self.image * BF16,
                Component::Transient,
                Saves::NOTHING,
            );
            g.drop(images);
            T {
                v: c,
                elems: b * 3 * self.image * self.image,
                dsize: BF16,
            }
        } else {
            T {
                v: images,
                elems: b * 3 * self.image * self.image,
                dsize: FP32,
            }
        };
        let mut w = self.weights.iter();
        let mut block_input: Option<T> = None;
        let mut main: Option<T> = None;
        let mut layer = 0u32;
        let mut channels = 3u64;
        for l in self.net {
            match *l {
                Layer::Conv {
                    cin,
                    cout,
                    k,
                    groups,
                    out_hw,
                    in_hw,
                } => {
                    layer += 1;
                    channels = cout;
                    let weight = *w.next().expect("conv weight");
                    g.at("convolution", Some(layer));
                    let (weight, drop_copy) =
                        self.weight_for(g, cx, weight, cout * cin / groups * k * k);
                    let out_elems = b * cout * out_hw * out_hw;
                    let call = ConvCall {
                        cin,
                        cout,
                        k,
                        groups,
                        in_hw,
                        out_hw,
                        batch: b,
                        dsize: self.act_dsize,
                        fp16: self.fp16,
                        channels_last: self.channels_last,
                    };
                    let saved: &[Value] = if g.requires_grad(weight) {
                        &[x.v, weight]
                    } else {
                        &[weight]
                    };
                    let v = g.op(
                        "convolution",
                        &[x.v, weight],
                        out_elems * self.act_dsize,
                        Component::Transient,
                        Saves::inputs(saved),
                    );
                    g.set_backward_kernels(v, backward_workspace(self.runtime, &call));
                    g.at("convolution: cuDNN workspace", Some(layer));
                    g.scratch([forward_workspace(self.runtime, &call), 0]);
                    g.drop(x.v);
                    if drop_copy {
                        g.drop(weight);
                    }
                    x = T {
                        v,
                        elems: out_elems,
                        dsize: self.act_dsize,
                    };
                }
                Layer::BatchNorm { c } => {
                    let weight = *w.next().expect("bn weight");
                    g.at("batch norm", Some(layer));
                    let v = g.op(
                        "batch norm",
                        &[x.v, weight],
                        x.bytes(),
                        Component::Transient,
                        Saves::inputs(&[x.v, weight]).and_buffer(2 * c * FP32),
                    );
                    g.drop(x.v);
                    x = T { v, ..x };
                }
                Layer::Relu => g.inplace("relu (in place)", x.v, true),
                // torchvision's `ReLU6(inplace=True)`. Without autograd it
                // allocates nothing (the H200 trace of MobileNetV2 fp32
                // inference b128: nothing between a batch norm and the next
                // convolution, `measurements/inference-batches/`). Training
                // holds a separate output: MobileNetV2's three training
                // cases allocate 1.4-1.6 GB more than in-place outputs would
                // (`measurements/h200-generalization/`; not traced).
                Layer::Relu6 if !g.grad_mode => g.inplace("relu6 (in place)", x.v, false),
                Layer::Relu6 => {
                    g.at("relu6", Some(layer));
                    let v = g.op(
                        "relu6",
                        &[x.v],
                        x.bytes(),
                        Component::Transient,
                        Saves::inputs(&[x.v]),
                    );
                    g.drop(x.v);
                    x = T { v, ..x };
                }
                Layer::MaxPool { out_hw } => {
                    g.at("max pool", Some(layer));
                    // Saves its input and int64 indices of the output's shape.
                    let out_elems = b * channels * out_hw * out_hw;
                    let v = g.op(
                        "max pool",
                        &[x.v],
                        out_elems * x.dsize,
                        Component::Transient,
                        Saves::inputs(&[x.v]).and_buffer(out_elems * INT64),
                    );
                    g.drop(x.v);
                    x = T {
                        v,
                        elems: out_elems,
                        dsize: x.dsize,
                    };
                }
                Layer::BlockStart => {
                    g.hold(x.v);
                    block_input = Some(x);
                }
                Layer::BranchStart => {
                    main = Some(x);
                    let input = block_input.expect("block input");
                    g.hold(input.v);
                    x = input;
                }
                Layer::BlockEnd { inplace } => {
                    let identity = match main.take() {
                        // Downsample branch: `x` is downsample(input), main path waits.
                        Some(m) => {
                            let ds = x;
                            x = m;
                            ds
                        }
                        None => {
                            let input = block_input.expect("block input");
                            g.hold(input.v);
                            input
                        }
                    };
                    g.at("residual add", Some(layer));
                    if inplace {
                        // out += identity: no allocation; grads flow to both.
                        g.inplace_add("residual add (in place)", x.v, identity.v);
                        g.drop(identity.v);
                    } else {
                        let sum = super::nn::add(g, x, identity, "residual add");
                        g.drop_all(&[x.v, identity.v]);
                        x = sum;
                    }
                    if let Some(input) = block_input.take() {
                        g.drop(input.v);
                    }
                }
                Layer::BlockEndNoResidual => {
                    if let Some(input) = block_input.take() {
                        g.drop(input.v);
                    }
                }
                Layer::Head { features, classes } => {
                    let weight = *w.next().expect("fc weight");
                    g.at("avgpool + fc", None);
                    let pooled = g.op(
                        "adaptive avg pool",
                        &[x.v],
                        b * features * x.dsize,
                        Component::Transient,
                        Saves::NOTHING,
                    );
                    g.drop(x.v);
                    // Autocast casts the weight inside `fc`, after the pool:
                    // backward runs the cast's node first (the H200 trace of
                    // ResNet-18 amp training b128: the fp32 weight gradient,
                    // then the pool's gradient).
                    let (weight, drop_copy) = self.weight_for(g, cx, weight, classes * features);
                    let saved: &[Value] = if g.requires_grad(weight) {
                        &[pooled, weight]
                    } else {
                        &[weight]
                    };
                    let out_dsize = if cx.autocast { BF16 } else { x.dsize };
                    let logits = g.op(
                        "fc",
                        &[pooled, weight],
                        b * classes * out_dsize,
                        Component::Transient,
                        Saves::inputs(saved),
                    );
                    // The output, then the cuBLAS workspace, then (an
                    // `addmm` of more than one row) the cuBLASLt one: the
                    // ResNet-18 amp b256 trace.
                    if b > 1 {
                        g.lt_gemm();
                    } else {
                        g.gemm();
                    }
                    // `addmm`: a fresh process's autograd thread creates its
                    // cuBLAS workspace at this node's backward (the trace:
                    // 32 MiB right after the loss's gradient).
                    g.mark_gemm(logits, GradOrder::InputFirst);
                    g.drop(pooled);
                    if drop_copy {
                        g.drop(weight);
                    }
                    x = T {
                        v: logits,
                        elems: b * classes,
                        dsize: out_dsize,
                    };
                }
            }
        }
        x
    }
}
