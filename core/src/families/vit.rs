//! torchvision's `VisionTransformer` (ViT-B/16, ViT-L/16), and timm's.
//!
//! Inference under `no_grad` takes `nn.MultiheadAttention`'s fast path
//! (`_native_multi_head_attention`: one packed in-projection, q/k/v split
//! into fresh tensors, SDPA, a merged-heads copy, out-projection). Training
//! takes `F.multi_head_attention_forward`: the packed projection is made
//! contiguous as (3, tokens, batch, width), then SDPA, then a
//! `permute(...).contiguous()` copy before the out-projection. LayerNorm
//! outputs are fp32 under autocast; `Dropout(p=0.0)` allocates nothing.
//!
//! timm's `VisionTransformer` (`VitLibrary::Timm`) runs the same kernels in
//! its blocks; its attention feeds views of the packed `qkv` projection to
//! SDPA and returns token-major outputs, so its norms never copy, and it
//! holds only the position-embedded input through the blocks (the H200
//! traces of timm ViT-B/16 and ViT-L/16 inference and ViT-B/16 amp
//! training, `measurements/real-jobs-2/trace-segments-8.jsonl.gz`; ViT-S/16
//! fp32 training, `trace-segments-11.jsonl.gz`).

use super::nn::{self, AttnShape, Ctx, Linear, Params, FP32, T};
use super::optim;
use super::ReplaySummary;
use crate::arch::{VitArch, VitLibrary};
use crate::component::Component;
use crate::error::Error;
use crate::graph::{Graph, Saves, Value};
use crate::runtime::RuntimeProfile;
use crate::trace::Replay;
use crate::workload::{Mode, Workload};
use alloc::vec::Vec;

/// Rejects workloads vision models cannot run.
pub fn validate_vision(workload: &Workload) -> Result<(), Error> {
    if workload.mode == Mode::Training && workload.training.lora.is_some() {
        return Err(Error::invalid(
            "workload.training.lora",
            "LoRA on vision models is not modelled",
            "null (full fine-tuning) for this model",
        ));
    }
    if workload.mode == Mode::Training && workload.training.grad_checkpointing {
        return Err(Error::invalid(
            "workload.training.grad_checkpointing",
            "torchvision models have no gradient_checkpointing_enable()",
            "false for vision models",
        ));
    }
    if !workload.dtype.is_float() {
        return Err(Error::invalid(
            "workload.dtype",
            "quantised vision models are not modelled",
            "fp32, fp16 or bf16",
        ));
    }
    Ok(())
}

#[derive(Clone, Copy)]
struct Block {
    ln1: Value,
    in_proj: Linear,
    out_proj: Linear,
    ln2: Value,
    fc1: Linear,
    fc2: Linear,
}

/// Replays a ViT run.
pub fn replay(
    a: &VitArch,
    workload: &Workload,
    runtime: &RuntimeProfile,
    replay: &mut Replay,
) -> Result<ReplaySummary, Error> {
    let mut g = Graph::for_runtime(replay, runtime);
    let training = workload.mode == Mode::Training;
    let dsize = nn::param_dsize(workload);
    let (h, m) = (a.hidden_size as u64, a.mlp_dim as u64);
    let mut params = Params::new(dsize, training);
    g.at("load weights", None);
    let patch = a.patch_size as u64;
    let conv = params.linear(&mut g, 3 * patch * patch, h);
    let cls = params.tensor(&mut g, h, 1);
    let pos = params.tensor(&mut g, a.tokens(a.image_size), h);
    let mut blocks = Vec::new();
    for _ in 0..a.num_layers {
        let ln1 = params.tensor(&mut g, 2 * h, 1);
        let in_proj = params.linear(&mut g, h, 3 * h);
        let out_proj = params.linear(&mut g, h, h);
        let ln2 = params.tensor(&mut g, 2 * h, 1);
        let fc1 = params.linear(&mut g, h, m);
        let fc2 = params.linear(&mut g, m, h);
        blocks.push(Block {
            ln1,
            in_proj,
            out_proj,
            ln2,
            fc1,
            fc2,
        });
    }
    let ln = params.tensor(&mut g, 2 * h, 1);
    let head = params.linear(&mut g, h, a.num_classes as u64);
    let summary = ReplaySummary {
        params: params.count,
        weight_bytes: params.bytes(),
        ..ReplaySummary::default()
    };
    super::cublas_workspaces(&mut g, runtime, workload.mode == Mode::Training);
    let b = workload.batch as u64;
    let image = workload.image_size.unwrap_or(a.image_size) as u64;
    let side = image / patch;
    let n = side * side + 1;
    let act_dsize = if training && workload.training.precision.autocast() {
        nn::BF16
    } else {
        dsize
    };
    let patch_conv = super::cnn::ConvCall {
        cin: 3,
        cout: h,
        k: patch,
        groups: 1,
        in_hw: image,
        out_hw: side,
        batch: b,
        dsize: act_dsize,
        fp16: nn::half_is_fp16(workload),
        channels_last: false,
    };
    let conv_workspace = (
        super::cnn::forward_workspace(runtime, &patch_conv),
        super::cnn::backward_workspace(runtime, &patch_conv),
    );
    let net = Net {
        timm: a.library == VitLibrary::Timm,
        conv_workspace,
        conv,
        cls,
        pos,
        blocks,
        ln,
        head,
        h,
        heads: a.num_heads as u64,
        pos_dsize: dsize,
        n,
        side,
        b,
        image,
    };
    // The caller's batch, made once and held for the whole run, in the
    // parameters' dtype (a convolution needs its input in its weight's
    // dtype; fp32 under autocast): 108 MiB of fp16 images for b128 at 384
    // px in the H200 trace (`measurements/h200-generalization/trace-snapshots-5.md`).
    g.at("input images", None);
    let image_bytes = b * 3 * image * image * dsize;
    let mut images = g.input(image_bytes, Component::Activations);
    if !training {
        let mut cx = Ctx::plain(dsize);
        super::inference_batches(&mut g, workload.inference.batches, &mut |g, index| {
            if index > 0 {
                // The next batch exists before the last one is released.
                g.at("input images", None);
                let next = g.input(image_bytes, Component::Activations);
                g.drop(images);
                images = next;
            }
            net.forward(g, &mut cx, false, images).v
        });
        g.drop(images);
        return Ok(summary);
    }
    optim::train_steps(&mut g, &workload.training, &params.list, |g, cx| {
        let logits = net.forward(g, cx, true, images);
        g.at("loss: cross entropy", None);
        let loss = nn::cross_entropy(g, cx.autocast, logits, b);
        g.drop(logits.v);
        loss
    });
    g.drop(images);
    Ok(summary)
}

struct Net {
    /// timm's model, not torchvision's.
    timm: bool,
    conv: Linear,
    cls: Value,
    pos: Value,
    blocks: Vec<Block>,
    ln: Value,
    head: Linear,
    h: u64,
    heads: u64,
    pos_dsize: u64,
    n: u64,
    side: u64,
    b: u64,
    image: u64,
    /// cuDNN workspace of `conv_proj`: forward, and backward (data, weight).
    conv_workspace: (u64, [u64; 2]),
}

/// `nn.LayerNorm` on the residual stream. In training
/// `nn.MultiheadAttention` (batch first, its slow path) returns its output
/// transposed, a view, and `x + input` takes that layout, as does every
/// sum after it; `native_layer_norm` then makes its input contiguous, a
/// copy alive until its output exists (the H200 trace of ViT-B/16 amp
/// training, `measurements/h200-generalization/trace-segments-32.jsonl.gz`,
/// events 36 to 39: a 73.88 MiB copy, the 73.88 MiB output, the copy
/// freed; at every norm but the first layer's `ln_1`). Autograd saves the
/// sum itself, not the copy, and the backward copies it again.
fn layer_norm_of_residual(
    g: &mut Graph,
    cx: &mut Ctx,
    x: T,
    weight: Value,
    hidden: u64,
    name: &'static str,
    transposed: bool,
) -> T {
    let copy = transposed.then(|| {
        g.op(
            "layer norm: input copy",
            &[x.v],
            x.bytes(),
            Component::Transient,
            Saves::NOTHING,
        )
    });
    let y = nn::layer_norm(g, cx, x, weight, hidden, name);
    if let Some(copy) = copy {
        g.drop(copy);
        // Its backward makes the same copy of the saved sum before the
        // input's gradient (events 367 to 372: the copy, the gradient,
        // then the copy freed).
        g.set_backward_temporaries(y.v, 1);
    }
    y
}

impl Net {
    fn forward(&self, g: &mut Graph, cx: &mut Ctx, training: bool, images: Value) -> T {
        let (b, h, n) = (self.b, self.h, self.n);
        g.hold(images);
        let images = T {
            v: images,
            elems: b * 3 * self.image * self.image,
            dsize: FP32,
        };
        g.at("patch embedding (conv_proj)", None);
        // A stride-p convolution is a linear map of each patch.
        let patches = T {
            elems: b * self.side * self.side * self.conv.in_features,
            ..images
        };
        let x = nn::linear_by(
            g,
            cx,
            patches,
            &self.conv,
            "patch embedding (conv_proj)",
            nn::Kernel::Convolution,
        );
        // conv_proj is an nn.Conv2d: cuDNN's workspace (see `cnn`).
        g.set_backward_kernels(x.v, self.conv_workspace.1);
        g.at("patch embedding (conv_proj): cuDNN workspace", None);
        g.scratch([self.conv_workspace.0, 0]);
        g.drop(images.v);
        g.at("class token + positions", None);
        // `torch.cat` promotes to the wider dtype: the fp32 class token
        // makes the concatenation fp32 under autocast (the H200 trace).
        let cat_dsize = x.dsize.max(self.pos_dsize);
        let patches_out = x.v;
        let with_cls = g.op(
            "torch.cat([class_token, x])",
            &[patches_out, self.cls],
            b * n * h * cat_dsize,
            Component::Transient,
            Saves::NOTHING,
        );
        if !self.timm {
            // `_process_input`'s permuted view, rebound to the concatenation.
            g.drop(patches_out);
        }
        let with_cls = T {
            v: with_cls,
            elems: b * n * h,
            dsize: cat_dsize,
        };
        let posv = T {
            v: self.pos,
            elems: n * h,
            dsize: self.pos_dsize,
        };
        let mut x = nn::add(g, with_cls, posv, "input + pos_embedding");
        if self.timm {
            // `_pos_embed` rebinds its `x` from the concatenation to the sum,
            // and `forward_features` its own from the patch embedding's
            // output once `_pos_embed` returns (the timm traces: the sum
            // allocated, the concatenation freed, then the patch output).
            g.drop(with_cls.v);
            g.drop(patches_out);
        }
        // torchvision: `VisionTransformer.forward`'s `x` (the concatenation)
        // and `Encoder.forward`'s `input` (with positions) are locals alive
        // until the encoder returns (the H200 trace keeps both through every
        // layer). timm: `forward_features`' `x` (with positions) until
        // `self.blocks(x)` returns.
        let encoder_input = x.v;
        g.hold(encoder_input);
        for (l, blk) in self.blocks.iter().enumerate() {
            let layer = Some(l as u32);
            g.at("ln_1", layer);
            // torchvision's training attention returns a transposed view.
            let transposed = training && !self.timm;
            let y = layer_norm_of_residual(g, cx, x, blk.ln1, h, "ln_1", transposed && l > 0);
            g.at("self_attention", layer);
            let a = self.attention(g, cx, y, blk, training, layer);
            g.drop(y.v);
            let x2 = nn::add(g, a, x, "residual add (attention)");
            g.drop(a.v);
            g.at("ln_2", layer);
            let y2 = layer_norm_of_residual(g, cx, x2, blk.ln2, h, "ln_2", transposed);
            g.at("mlp: fc1", layer);
            let f = nn::linear(g, cx, y2, &blk.fc1, "mlp: fc1");
            g.at("mlp: gelu", layer);
            let act = nn::unary_saving_input(g, f, "mlp: gelu", f.dsize);
            g.drop(f.v);
            g.at("mlp: fc2", layer);
            let d = nn::linear(g, cx, act, &blk.fc2, "mlp: fc2");
            g.drop(act.v);
            // `y = self.ln_2(x); y = self.mlp(y)`: the norm's output is the
            // local `y` until the MLP returns.
            g.drop(y2.v);
            let out = nn::add(g, x2, d, "residual add (mlp)");
            g.drop_all(&[x2.v, d.v]);
            g.drop(x.v);
            x = out;
        }
        if self.timm {
            // `x = self.blocks(x)`: the blocks' input goes before the norm
            // (the timm traces: freed, then the norm's output allocated).
            g.drop(encoder_input);
        }
        g.at("final ln", None);
        let transposed = training && !self.timm;
        let y = layer_norm_of_residual(g, cx, x, self.ln, h, "final ln", transposed);
        g.drop(x.v);
        if !self.timm {
            g.drop(encoder_input);
            g.drop(with_cls.v);
        }
        // `x = x[:, 0]` is a view: the norm's output lives until `heads`
        // returns and `x` is rebound (the H200 trace of ViT-B/16 amp
        // training, `trace-segments-32.jsonl.gz`, events 360 and 361: the
        // head's weight cast, then the 73.88 MiB norm output freed).
        let cls = g.slice("class token x[:, 0]", y.v, b * h * y.dsize);
        g.drop(y.v);
        let cls = T {
            v: cls,
            elems: b * h,
            dsize: y.dsize,
        };
        g.at("heads", None);
        let logits = nn::linear(g, cx, cls, &self.head, "heads");
        g.drop(cls.v);
        logits
    }

    fn attention(
        &self,
        g: &mut Graph,
        cx: &mut Ctx,
        y: T,
        blk: &Block,
        training: bool,
        layer: Option<u32>,
    ) -> T {
        let (b, h, n) = (self.b, self.h, self.n);
        // Training takes nn.MultiheadAttention's general path, which
        // transposes the batch-first input before `in_proj`.
        let kernel = if training && !self.timm {
            nn::Kernel::GemmOfTransposedInput
        } else {
            nn::Kernel::Gemm
        };
        let proj = nn::linear_by(g, cx, y, &blk.in_proj, "self_attention: in_proj", kernel);
        let ds = proj.dsize;
        let third = T {
            elems: b * n * h,
            ..proj
        };
        let (q, k, v) = if training && self.timm {
            // timm: `qkv.reshape(B, N, 3, H, D).permute(2, 0, 3, 1, 4)
            // .unbind(0)`, views of the projection straight into SDPA. In
            // backward the three gradients are stacked into one tensor,
            // which the permute's backward copies to the projection's
            // layout (the timm ViT-S/16 fp32 trace, events 192 to 197).
            let permuted = g.slice("attn: qkv.reshape().permute()", proj.v, proj.bytes());
            g.drop(proj.v);
            let [q, k, v] = g
                .unbind::<3>("attn: q/k/v unbind", permuted, third.bytes())
                .map(|v| T { v, ..third });
            g.drop(permuted);
            (q, k, v)
        } else if training {
            // unflatten(-1, (3, E)).unsqueeze(0).transpose(0, -2).squeeze(-2).contiguous()
            let packed = g.op(
                "self_attention: q/k/v contiguous",
                &[proj.v],
                proj.bytes(),
                Component::Transient,
                Saves::NOTHING,
            );
            g.drop(proj.v);
            // `q, k, v = proj[0], proj[1], proj[2]`: views, each of whose
            // backward (`SelectBackward`) makes a zeroed gradient of the
            // packed size (the H200 trace of ViT-B/16 amp training,
            // `trace-segments-32.jsonl.gz`, events 414 to 433: SDPA's three
            // 36.94 MiB gradients, then 110.81 MiB blocks summed).
            let [q, k, v] = [(); 3].map(|_| T {
                v: g.slice("self_attention: q/k/v view", packed, third.bytes()),
                ..third
            });
            g.drop(packed);
            (q, k, v)
        } else {
            // Inference takes `_native_multi_head_attention`'s SDPA path:
            // `qkv.chunk(3, -1)` views go straight to the kernel, and the
            // projection lives until the function returns (the H200 traces
            // of ViT-B/16 fp16 b128 r384 and fp32 b512 inference: in_proj,
            // the attention output, out_proj, then the attention output and
            // the projection freed).
            for _ in 0..3 {
                g.hold(proj.v);
            }
            (
                T { v: proj.v, ..third },
                T { v: proj.v, ..third },
                T { v: proj.v, ..third },
            )
        };
        let _ = layer;
        let shape = AttnShape {
            batch: b,
            heads: self.heads,
            kv_heads: self.heads,
            q_len: n,
            kv_len: n,
            head_dim: h / self.heads,
        };
        let attn = nn::sdpa(g, cx, q, k, v, shape);
        g.drop_all(&[q.v, k.v, v.v]);
        // Merging the heads is free in inference (the kernel's output is
        // token-major, so the fast path's `transpose(1, 2).reshape` is a
        // view). In training,
        // `attn_output.permute(2, 0, 1, 3).contiguous()` is free when the
        // flash kernel ran (half precision: its output takes the query's
        // token-major layout) and a copy when the memory-efficient kernel
        // did (fp32: a batch-major output), saved by `out_proj`: 12 x 36.9
        // MiB from `multi_head_attention_forward` in the H200 trace of
        // ViT-B/16 fp32 training b64 (`trace-snapshots-6.md`), none in the
        // bf16 traces.
        let merged = if !training || ds != FP32 || self.timm {
            attn
        } else {
            let merged = g.op(
                "self_attention: merge heads",
                &[attn.v],
                attn.bytes(),
                Component::Transient,
                Saves::NOTHING,
            );
            g.drop(attn.v);
            T {
                v: merged,
                elems: b * n * h,
                dsize: ds,
            }
        };
        let out = nn::linear(g, cx, merged, &blk.out_proj, "self_attention: out_proj");
        g.drop(merged.v);
        if !training {
            g.drop(proj.v);
            return out;
        }
        if self.timm {
            // `proj`'s output is token-major: no transposed view.
            return out;
        }
        // `attn_output.view(L, N, E)` returned as `.transpose(1, 0)`: a
        // view, whose gradient arrives batch-major and is copied for
        // `out_proj`'s backward (the H200 trace of ViT-B/16 amp training,
        // `trace-segments-32.jsonl.gz`, events 404 and 405: a 36.94 MiB
        // copy, the incoming gradient freed, then `out_proj`'s gradients).
        let transposed = g.slice("self_attention: transpose(1, 0)", out.v, out.bytes());
        g.drop(out.v);
        T {
            v: transposed,
            ..out
        }
    }
}
