//! cuDNN's workspaces per convolution: the blocks each forward,
//! data-gradient and weight-gradient kernel takes from torch's caching
//! allocator for the length of its call, by kind of convolution, layout
//! and precision, as the H200 measured them (`measurements/h200-cudnn/`,
//! `measurements/channels-last/`), scaled by
//! `runtime.cudnn_workspace_scale`.

use super::nchw_backward;
use crate::families::nn::FP32;
use crate::runtime::RuntimeProfile;

/// A convolution's shape as cuDNN sees it: batch and bytes per element.
#[derive(Clone, Copy, Debug)]
pub struct ConvCall {
    /// Input channels.
    pub cin: u64,
    /// Output channels.
    pub cout: u64,
    /// Kernel edge.
    pub k: u64,
    /// Groups (depthwise: = cin).
    pub groups: u64,
    /// Input height/width.
    pub in_hw: u64,
    /// Output height/width.
    pub out_hw: u64,
    /// Batch.
    pub batch: u64,
    /// Bytes per activation element.
    pub dsize: u64,
    /// 2-byte elements are IEEE fp16 (`model.half()`, fp16 autocast)
    /// rather than bf16.
    pub fp16: bool,
    /// Tensors in `torch.channels_last` (NHWC) rather than NCHW.
    pub channels_last: bool,
}

impl ConvCall {
    fn output_bytes(&self) -> u64 {
        self.batch * self.cout * self.out_hw * self.out_hw * self.dsize
    }
    fn strided(&self) -> bool {
        self.out_hw < self.in_hw
    }

    /// A patch embedding: non-overlapping k x k patches with stride k
    /// (ViT's `conv_proj`). Its blocks: [`forward_workspace`] and
    /// [`patchify_weight_gradient_workspace`].
    fn is_patchify(&self) -> bool {
        self.k > 1 && self.out_hw * self.k == self.in_hw
    }

    /// A network's first convolution, on the image's 3 channels (ResNet's
    /// 7x7/2, MobileNetV2's 3x3/2), not a patch embedding.
    fn is_stem(&self) -> bool {
        !self.cin.is_multiple_of(CUDNN_HALF_CHANNEL_ALIGN) && !self.is_patchify()
    }
}

// Every ResNet-50 convolution measured on the H200 (`measurements/h200-cudnn/
// conv_workspaces.jsonl`: batch 32-256, 224 and 512 px, fp32 and bf16,
// cuDNN 9.19) takes, for the length of its kernel, one block the size of a
// copy of its input plus a copy of its output (backward: of its output
// gradient): stem fp32 b64 244,093,952 B = 38,535,168 + 205,520,896 + 37,888;
// 3x3 layer1 102,908,416 = 2 x 51,380,224 + 147,968; 1x1/2 layer3
// 154,141,184 = 102,760,448 + 51,380,224 + 512; backward 3x3/2 layer2
// 66,880,000 = 51,380,224 + 12,845,056 + 2.7 MB. These are the layout
// transforms of the tensor-core kernels; the allocation traces
// (`measurements/h200-segments/training-segments.jsonl`) show each as one
// block (a 148 MiB segment for the bf16 stem, 50 MiB for a layer1 3x3).
// 1x1 stride-1 convolutions on larger maps run as plain GEMMs on the
// tensors in place: no copy forward (512 B), and backward only the split-K
// partial weight gradients below.

/// See `ConvCall::halving_gemm_copies`: input channels, map edge and
/// smallest batch measured to take the copies.
pub const CUDNN_HALVING_1X1_CIN: u64 = 1024;
/// See [`CUDNN_HALVING_1X1_CIN`].
pub const CUDNN_HALVING_1X1_EDGE: u64 = 14;
/// See [`CUDNN_HALVING_1X1_CIN`].
pub const CUDNN_HALVING_1X1_MIN_BATCH: u64 = 64;

/// 1x1 stride-1 convolutions on maps of this edge or smaller use the
/// transforming kernels too (layer4 7x7 fp32: 32,113,152 B = 6,422,528 +
/// 25,690,112; none at 14x14 and 16x16).
pub const CUDNN_1X1_SMALL_EDGE: u64 = 7;
/// 1x1 stride-1 backward on larger maps: split-K partial weight gradients
/// in fp32, this many (layer2, 128x512 weights: 16,777,216 B = 64 x 262,144)...
pub const CUDNN_BWD_1X1_SPLITS: u64 = 64;
/// ...capped (layer3, 256x1024 weights: 34,210,304 B).
pub const CUDNN_BWD_1X1_CAP: u64 = 32 << 20;
/// Half-precision copies pad channels to a multiple of this: the bf16
/// stem's block is 155,189,248 B = 64 x 8 x 224 x 224 x 2 (3 channels
/// padded to 8) + 102,760,448 + 1 MiB; fp32 copies keep 3 channels.
pub const CUDNN_HALF_CHANNEL_ALIGN: u64 = 8;

/// ResNet's stem in fp16 (not bf16) pads its 3 channels to 4: the fp16 b256
/// block at 224 px is 513,827,344 B, that is 102,760,448 (256 x 4 x 224 x
/// 224 x 2) and 411,041,792 (the output) and 25,088 (the 64 x 4 x 7 x 7
/// filter) and 16, in timm's inference trace
/// (`measurements/inference-batches/`) and at every batch (16 to 256),
/// image (224, 288) and layout of the sweep
/// `measurements/h200-cudnn/stem_sweep.jsonl`, forward and weight gradient.
/// ViT's fp16 patch embedding pads to 8 as bf16 does.
pub const CUDNN_FP16_STEM_CHANNEL_ALIGN: u64 = 4;

/// The kernel edge of ResNet's stem (7x7/2); MobileNetV2's is 3x3/2.
pub const RESNET_STEM_KERNEL: u64 = 7;

/// fp32 1x1/2 convolutions on maps of this edge or larger copy only their
/// input (layer2.0.downsample, 56x56: 206,045,696 B = 205,520,896 + 524,800
/// at b64, the same at b256 and 512 px; at 28x28 and 14x14 input and output).
pub const CUDNN_FP32_1X1_STRIDED_INPUT_ONLY_EDGE: u64 = 56;

fn scaled(runtime: &RuntimeProfile, bytes: u64) -> u64 {
    (runtime.cudnn_workspace_scale * bytes as f64) as u64
}

impl ConvCall {
    /// A half-precision 1x1/1 convolution halving 1024 channels on 14x14
    /// maps, at batch 64 or more: cuDNN picks a transforming kernel that
    /// copies its input and output (ResNet-50's `layer4.0.conv1`, bf16:
    /// 36.75, 74 and 148 MiB at batch 64, 128 and 256, none at batch 32 or
    /// in fp32, where its 1024 -> 256 neighbours take none;
    /// `measurements/h200-cudnn/conv_workspaces_resnet50_sweep.jsonl`, and
    /// the trace `measurements/h200-generalization/trace-segments-14.jsonl`).
    fn halving_gemm_copies(&self) -> bool {
        self.k == 1
            && self.dsize == 2
            && self.cin == CUDNN_HALVING_1X1_CIN
            && self.cout * 2 == self.cin
            && self.out_hw == CUDNN_HALVING_1X1_EDGE
            && self.batch >= CUDNN_HALVING_1X1_MIN_BATCH
    }

    fn in_place_gemm(&self) -> bool {
        self.k == 1 && !self.strided() && self.out_hw > CUDNN_1X1_SMALL_EDGE
    }

    /// The filter as the transforming kernels copy it (channels padded as
    /// the input's): 3x3 layer1 bf16 73,728 B of the trace's 51,454,099.
    fn filter_copy_bytes(&self) -> u64 {
        self.cout * self.padded_cin() * self.k * self.k * self.dsize
    }

    fn padded_cin(&self) -> u64 {
        if self.dsize != 2 {
            return self.cin;
        }
        let align = if self.fp16 && self.k == RESNET_STEM_KERNEL && self.is_stem() {
            CUDNN_FP16_STEM_CHANNEL_ALIGN
        } else {
            CUDNN_HALF_CHANNEL_ALIGN
        };
        self.cin.div_ceil(align) * align
    }

    /// The input as the transforming kernels copy it.
    fn input_copy_bytes(&self) -> u64 {
        self.batch * self.padded_cin() * self.in_hw * self.in_hw * self.dsize
    }
}

/// The block a convolution's forward takes from the caching allocator
/// after its output exists: copies of its input and output, or nothing
/// for a 1x1/1 GEMM. Grouped (depthwise) convolutions take none (not
/// measured; MobileNetV2 training matches the H200 without).
pub fn forward_workspace(runtime: &RuntimeProfile, c: &ConvCall) -> u64 {
    if c.groups > 1 {
        return 0;
    }
    // MobileNetV2's 3x3/2 stem runs on its tensors in NCHW (every dtype,
    // batch and image of `measurements/h200-cudnn/stem_sweep.jsonl`), and
    // in half-precision `channels_last`; fp32 `channels_last` copies its
    // input (below).
    if c.is_stem() && c.k < RESNET_STEM_KERNEL && (!c.channels_last || c.dsize == 2) {
        return 0;
    }
    if c.channels_last {
        return channels_last_forward_workspace(runtime, c);
    }
    if let Some([forward, _]) = measured_fp32_patchify(c).or_else(|| fp32_patchify_large_batch(c)) {
        return scaled(runtime, forward);
    }
    if c.in_place_gemm() && !c.halving_gemm_copies() {
        return 0;
    }
    if c.k == 1 && c.cin <= CUDNN_1X1_STRIDED_COPY_FREE_CIN {
        return 0;
    }
    if c.k == 1 && c.dsize == FP32 && c.in_hw >= CUDNN_FP32_1X1_STRIDED_INPUT_ONLY_EDGE {
        return scaled(
            runtime,
            c.input_copy_bytes() + c.filter_copy_bytes() + CUDNN_PLAN_HEADER,
        );
    }
    if c.dsize == 2 && c.is_patchify() && c.input_copy_bytes() > CUDNN_PATCHIFY_COPY_LIMIT {
        return 0;
    }
    let filter = if c.k > 1 { c.filter_copy_bytes() } else { 0 };
    scaled(
        runtime,
        c.input_copy_bytes() + c.output_bytes() + filter + CUDNN_PLAN_HEADER,
    )
}

/// An fp32 patch embedding's (NCHW, 16x16/16) forward and weight-gradient
/// blocks as cuDNN chose them per shape in the H200 sweep
/// (`measurements/h200-cudnn/stem_sweep.jsonl`): (output channels, image,
/// batch, [forward, weight gradient]). No rule of the tensors' sizes gives
/// them (ViT-S/16's 384 channels take 316.25 MiB for the weight gradient
/// at b128, ViT-B/16's 768 take 174.5); larger batches take
/// [`fp32_patchify_large_batch`], other shapes the general rule.
const CUDNN_FP32_PATCHIFY_BLOCKS: [(u64, u64, u64, [u64; 2]); 20] = [
    (768, 224, 16, [0, 25_625_088]),
    (768, 224, 32, [0, 48_234_496]),
    (768, 224, 64, [93_061_632, 93_061_632]),
    (768, 224, 128, [182_977_024, 182_977_024]),
    (768, 224, 256, [209_715_200, 362_807_808]),
    (768, 288, 16, [0, 40_305_152]),
    (768, 288, 32, [0, 77_594_624]),
    (768, 288, 64, [151_781_888, 151_781_888]),
    (768, 288, 128, [300_417_536, 300_417_536]),
    (768, 288, 256, [343_932_928, 597_688_832]),
    (384, 224, 16, [0, 19_235_328]),
    (384, 224, 32, [0, 37_748_736]),
    (384, 224, 64, [72_221_184, 72_221_184]),
    (384, 224, 128, [142_868_992, 331_612_672]),
    (384, 224, 256, [207_618_048, 473_956_352]),
    (384, 288, 16, [0, 31_457_280]),
    (384, 288, 32, [0, 60_817_408]),
    (384, 288, 64, [118_358_528, 118_358_528]),
    (384, 288, 128, [235_143_680, 423_887_360]),
    (384, 288, 256, [341_835_776, 658_505_728]),
];

/// The measured blocks of an fp32 NCHW patch embedding, when the sweep
/// has its shape.
fn measured_fp32_patchify(c: &ConvCall) -> Option<[u64; 2]> {
    if c.dsize != FP32 || c.channels_last || !c.is_patchify() || c.k != 16 {
        return None;
    }
    CUDNN_FP32_PATCHIFY_BLOCKS
        .iter()
        .find(|&&(cout, image, batch, _)| (cout, image, batch) == (c.cout, c.in_hw, c.batch))
        .map(|&(_, _, _, blocks)| blocks)
}

/// From this batch on, an fp32 NCHW 16x16/16 patch embedding's forward
/// copies its input and filter, each with the image's 3 channels padded to
/// [`CUDNN_FP32_PATCHIFY_CHANNEL_ALIGN`], and no output, and its weight
/// gradient copies the input, output gradient and filter, and at some
/// widths keeps split-K partials ([`fp32_patchify_large_batch`]). The H200 sweep at 384 to 1,024 images
/// (`measurements/h200-cudnn/stem_sweep_large_batches.jsonl`, 224 and 288
/// px, 384 and 768 channels) and the table's batch-256 rows
/// ([`CUDNN_FP32_PATCHIFY_BLOCKS`]) take exactly these copies in forward
/// (ViT-S/16 at 224 px and 512 images: 411,041,792 B of input, the 1.5 MiB
/// filter in a 2 MiB block); below 256 images cuDNN picks other kernels.
pub const CUDNN_FP32_PATCHIFY_LARGE_BATCH: u64 = 256;

/// The channel multiple an fp32 patch embedding's copies pad the image's
/// channels to (3 -> 4): the forward blocks of
/// [`CUDNN_FP32_PATCHIFY_LARGE_BATCH`] are 4-channel copies to the byte.
pub const CUDNN_FP32_PATCHIFY_CHANNEL_ALIGN: u64 = 4;

/// The fp32 split-K partial sums of the (4-channel) filter that cuDNN's
/// weight-gradient kernel keeps for an fp32 NCHW patch embedding of
/// [`CUDNN_FP32_PATCHIFY_LARGE_BATCH`] images or more, by output channels:
/// 120 at ViT-S/16's 384 (188,743,680 B beyond the copies, from 128
/// images to 1,024 at 224 and 288 px,
/// `measurements/h200-cudnn/stem_sweep_large_batches.jsonl`), none at
/// ViT-B/16's 768; other widths were not measured and take none.
pub const CUDNN_FP32_PATCHIFY_WGRAD_PARTIALS: [(u64, u64); 1] = [(384, 120)];

/// The forward and weight-gradient blocks of an fp32 NCHW 16x16/16 patch
/// embedding of at least [`CUDNN_FP32_PATCHIFY_LARGE_BATCH`] images, by
/// rule: the copies, and for the weight gradient
/// [`CUDNN_FP32_PATCHIFY_WGRAD_PARTIALS`].
fn fp32_patchify_large_batch(c: &ConvCall) -> Option<[u64; 2]> {
    if c.dsize != FP32
        || c.channels_last
        || !c.is_patchify()
        || c.k != 16
        || c.batch < CUDNN_FP32_PATCHIFY_LARGE_BATCH
    {
        return None;
    }
    let channels =
        c.cin.div_ceil(CUDNN_FP32_PATCHIFY_CHANNEL_ALIGN) * CUDNN_FP32_PATCHIFY_CHANNEL_ALIGN;
    let input = c.batch * channels * c.in_hw * c.in_hw * FP32;
    let filter = c.cout * channels * c.k * c.k * FP32;
    let partials = CUDNN_FP32_PATCHIFY_WGRAD_PARTIALS
        .iter()
        .find(|&&(cout, _)| cout == c.cout)
        .map_or(0, |&(_, partials)| partials);
    Some([
        input + filter + CUDNN_PLAN_HEADER,
        input + c.output_bytes() + filter * (1 + partials) + CUDNN_PLAN_HEADER,
    ])
}

/// A half-precision patch embedding's forward copies its input (channels
/// padded to 8), output and filter, as the other transforming kernels do,
/// while the input's copy is at most this many bytes, and takes nothing
/// above. The H200 sweep of ViT-B/16's `conv_proj`
/// (`measurements/h200-cudnn/stem_sweep.jsonl`, fp16 and bf16 alike): the
/// copies at 224 px for batches 16 to 256 (input copies up to 205,520,896
/// B; b128: 144,703,488, the trace of amp training asks 144,441,360 =
/// 102,760,448 + 38,535,168 + 3,145,728 + 16,
/// `measurements/h200-generalization/trace-segments-32.jsonl.gz`, event 4)
/// and at 288 px up to batch 128 (169,869,312); nothing at 288 px batch 256
/// (339,738,624) or 384 px batch 128 (301,989,888, the trace of fp16
/// inference, `trace-segments-5.jsonl`). The bound lies between 205.5 and
/// 302 MB; 2^28 B is taken.
pub const CUDNN_PATCHIFY_COPY_LIMIT: u64 = 1 << 28;

/// The weight gradient of a half-precision patch embedding (its images
/// need no gradient): as the ResNet stem's, copies of the input (padded to
/// 8 channels) and of the output gradient, the filter in half and in fp32,
/// and fp32 split-K partial sums of the filter, as many as
/// [`CUDNN_PATCHIFY_WGRAD_PARTIALS`] says for the GEMM's rows (batch x
/// patches). The trace of ViT-B/16 amp training b128 at 224 px asks
/// 169,607,168 B = 102,760,448 + 38,535,168 + 3,145,728 + 6,291,456 + 3 x
/// 6,291,456 (`trace-segments-32.jsonl.gz`, event 1,323); the sweep's
/// blocks agree at every batch and both image sizes, to block rounding.
fn patchify_weight_gradient_workspace(c: &ConvCall) -> u64 {
    let rows = c.batch * c.out_hw * c.out_hw;
    let partials = CUDNN_PATCHIFY_WGRAD_PARTIALS
        .iter()
        .find(|&&(most_rows, _)| rows <= most_rows)
        .map_or(0, |&(_, partials)| partials);
    let filter = c.cout * c.padded_cin() * c.k * c.k;
    c.input_copy_bytes() + c.output_bytes() + filter * (2 + FP32) + partials * filter * FP32
}

/// The split-K partial sums cuDNN keeps for a half-precision patch
/// embedding's weight gradient, by the GEMM's rows (batch x patches): up
/// to the first bound, the count beside it, and so on; none above the
/// last. Measured (`stem_sweep.jsonl`, ViT-B/16): 2 at 3,136 to 20,736
/// rows (224 px b16 to b64, 288 px b16 to b64), 3 at 25,088 to 50,176
/// (224 px b128 and b256, 288 px b128), none at 82,944 (288 px b256).
/// cuDNN's heuristics set the steps somewhere between the measured rows.
pub const CUDNN_PATCHIFY_WGRAD_PARTIALS: [(u64, u64); 2] = [(20_736, 2), (50_176, 3)];

/// In `channels_last` the kernels read NHWC tensors as they are: no layout
/// copies (`measurements/channels-last/conv_workspaces_*_sweep_cl.jsonl`:
/// every ResNet-18 and ResNet-50 convolution at batch 32 to 256, bf16 and
/// fp32, takes no forward block of its tensors' size), except where the
/// kernel cuDNN picks needs another layout:
/// - an input whose channels are not a multiple of
///   [`CUDNN_HALF_CHANNEL_ALIGN`] (the stem's 3) is copied, padded in half
///   precision (bf16 b32: 25,690,112 B = 32 x 8 x 224 x 224 x 2, plus the
///   filter's 50,176);
/// - the half-precision 1x1/2 convolution on at most
///   [`CUDNN_1X1_STRIDED_COPY_FREE_CIN`] channels, which in NCHW runs
///   without copies, runs on NCHW copies of its input and output (ResNet-18's
///   `layer2.0.downsample`, bf16 b32: 18.38 MiB = 12.25 + 6.125).
///
/// Blocks of at most 8 MiB some shapes take (fp32 3x3 on 14x14 maps at
/// batch 64; bf16 3x3 on 7x7 maps at batch 128) are left out.
fn channels_last_forward_workspace(runtime: &RuntimeProfile, c: &ConvCall) -> u64 {
    if !c.cin.is_multiple_of(CUDNN_HALF_CHANNEL_ALIGN) {
        return scaled(
            runtime,
            c.input_copy_bytes() + c.filter_copy_bytes() + CUDNN_PLAN_HEADER,
        );
    }
    if c.k == 1 && c.strided() && c.dsize == 2 && c.cin <= CUDNN_1X1_STRIDED_COPY_FREE_CIN {
        return scaled(
            runtime,
            c.input_copy_bytes() + c.output_bytes() + CUDNN_PLAN_HEADER,
        );
    }
    0
}

/// 1x1/2 convolutions with at most this many input channels run without
/// copies in NCHW: ResNet-18's `layer2.0.downsample` (64 -> 128) takes no
/// workspace in the H200 traces, bf16 b128 on 56x56 maps
/// (`measurements/h200-generalization/trace-segments-3.jsonl`) and fp32 b64
/// on 112x112 (`measurements/channels-last/trace-segments-fp32.jsonl`), nor
/// in the fp32 b64 sweep (`measurements/h200-cudnn/`), where those with 128
/// and 256 input channels (and ResNet-50's with 256) take their copies.
/// cuDNN's heuristics pick the kernel; this is the one such choice measured.
pub const CUDNN_1X1_STRIDED_COPY_FREE_CIN: u64 = 64;

/// Bytes a transforming kernel's workspace request carries beyond its
/// copies: the bf16 allocation trace asks for exactly 147 B more (3x3
/// layer1: 51,454,099 B = 2 x 25,690,112 + 73,728 + 147; 1x1/2 layer2
/// 154,140,819 = 102,760,448 + 51,380,224 + 147), so the block rounds up to
/// the next 512 B (the fp32 sizes above end in +512 the same way).
pub const CUDNN_PLAN_HEADER: u64 = 147;

/// The blocks a convolution's backward takes, one after the other, after
/// its gradients exist: the data-gradient kernel's (none for the stem,
/// whose input needs no gradient), then the weight-gradient kernel's.
///
/// In NCHW, for a shape the H200 sweep measured, both as measured
/// ([`measured_nchw_backward`]); for other shapes by rule: the copies of
/// the input, output gradient and filter, the weight-gradient kernel's
/// with [`CUDNN_WGRAD_EXTRA`] beyond them, and for a 1x1/1 GEMM no copies,
/// only [`CUDNN_BWD_1X1_SPLITS`] partial sums. In `channels_last` no
/// convolution takes copies, only the measured partial sums of a 3x3/1
/// weight gradient ([`split_k_bytes`]; none where not measured).
pub fn backward_workspace(runtime: &RuntimeProfile, c: &ConvCall) -> [u64; 2] {
    if c.groups > 1 {
        return [0; 2];
    }
    if c.is_stem() {
        return [0, scaled(runtime, stem_weight_gradient_workspace(c))];
    }
    if c.channels_last {
        return [0, scaled(runtime, split_k_bytes(c).unwrap_or(0))];
    }
    if c.is_patchify() && c.dsize == 2 && !c.channels_last {
        return [0, scaled(runtime, patchify_weight_gradient_workspace(c))];
    }
    if let Some([_, weight]) = measured_fp32_patchify(c).or_else(|| fp32_patchify_large_batch(c)) {
        return [0, scaled(runtime, weight)];
    }
    if let Some(blocks) = measured_nchw_backward(c) {
        return blocks.map(|bytes| scaled(runtime, bytes));
    }
    if c.in_place_gemm() {
        let partials = CUDNN_BWD_1X1_SPLITS * c.cin * c.cout * FP32;
        return [scaled(runtime, partials.min(CUDNN_BWD_1X1_CAP)), 0];
    }
    // As forward: the filter is copied too (ResNet-18 bf16 b128, layer4
    // 3x3: the data gradient asks 17,563,664 B = 2 x 6,422,528 + 4,718,592
    // + 16; `measurements/h200-generalization/trace-segments-3.jsonl`).
    let filter = if c.k > 1 { c.filter_copy_bytes() } else { 0 };
    let copies = c.input_copy_bytes() + c.output_bytes() + filter + CUDNN_PLAN_HEADER;
    [
        scaled(runtime, copies),
        scaled(runtime, copies + CUDNN_WGRAD_EXTRA),
    ]
}

/// The precision a convolution's kernels run in, as the table of measured
/// blocks keys it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SplitKPrecision {
    /// bf16 tensors (autocast or `model.bfloat16()`).
    Bf16,
    /// IEEE fp16 tensors.
    Fp16,
    /// fp32 tensors.
    Fp32,
}

/// The block cuDNN's weight-gradient kernel takes for a `channels_last`
/// 3x3/1 convolution (its split-K partial sums, nothing else), as measured
/// on the H200: what the same shape's NCHW weight-gradient block holds
/// beyond its copies, less [`CUDNN_NCHW_WGRAD_HEADER`] (the same kernel
/// reduces the same GEMM; all 288 3x3/1 rows of the shape sweep agree to
/// the byte), from the table [`measured_nchw_backward`] reads; `None` for
/// other shapes and shapes not measured.
///
/// How many partial sums cuDNN keeps is its heuristics' choice for the
/// weight-gradient GEMM (cout by cin x k x k, reduced over K), a step
/// function of K per shape with no common rule across shapes
/// (`docs/decisions/cudnn-per-shape-workspaces.md`). Other shapes keep
/// other partial sums in `channels_last` than in NCHW (747 of the 832
/// NCHW 1x1/1 rows of the sweep differ from their `channels_last` twins by
/// more than 1 MiB); the sweep's `channels_last` rows of them are not read
/// into the model, which gives them none.
pub fn split_k_bytes(c: &ConvCall) -> Option<u64> {
    if c.k != 3 || c.stride() != 1 {
        return None;
    }
    match nchw_cells(c)?[1] {
        (CopyKind::InputOutput, beyond) => beyond.checked_sub(CUDNN_NCHW_WGRAD_HEADER),
        _ => None,
    }
}

/// Bytes an NCHW 3x3/1 weight-gradient request carries beyond its copies
/// and the partial sums its `channels_last` twin asks for (every such row
/// of `measurements/h200-cudnn/wgrad_shapes_sweep.jsonl`).
pub const CUDNN_NCHW_WGRAD_HEADER: u64 = 16;

impl ConvCall {
    fn split_k_precision(&self) -> SplitKPrecision {
        match (self.dsize, self.fp16) {
            (FP32, _) => SplitKPrecision::Fp32,
            (_, true) => SplitKPrecision::Fp16,
            _ => SplitKPrecision::Bf16,
        }
    }

    fn stride(&self) -> u64 {
        self.in_hw.div_ceil(self.out_hw.max(1))
    }

    /// The bytes of the layout copies a measured block holds.
    fn copy_bytes(&self, kind: CopyKind) -> u64 {
        let filter = if self.k > 1 {
            self.filter_copy_bytes()
        } else {
            0
        };
        match kind {
            CopyKind::None => 0,
            CopyKind::InputOutput => self.input_copy_bytes() + self.output_bytes() + filter,
            CopyKind::Input => self.input_copy_bytes() + filter,
            CopyKind::Output => self.output_bytes() + filter,
        }
    }
}

/// Which layout copies a measured backward block holds, in the order
/// `nchw_backward.rs` numbers them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CopyKind {
    /// None: the kernel reads the tensors as they are (a 1x1/1 GEMM).
    None,
    /// The input, the output (gradient) and, for k > 1, the filter.
    InputOutput,
    /// The input and, for k > 1, the filter.
    Input,
    /// The output (gradient) and, for k > 1, the filter.
    Output,
}

/// The blocks cuDNN's data-gradient and weight-gradient kernels take for
/// an NCHW convolution of this shape and precision, as the H200 sweeps
/// measured them (`nchw_backward::NCHW_BACKWARD`, generated from
/// `measurements/h200-cudnn/wgrad_shapes_sweep.jsonl` and
/// `wgrad_shapes_sweep_more.jsonl` by `nchw_backward_table.py`; batches 16
/// to 512 in steps of about 1.5x): on the measured map nearest the call's, at
/// the measured batch at or below the call's (or the smallest), each block
/// the layout copies it held, of the call's own tensors, plus the bytes
/// beyond them (split-K partial sums and the kernel's plan); `None` for a
/// shape not measured.
///
/// Which kernel cuDNN picks, and so which copies and how many partial sums
/// it keeps, is its heuristics' choice per shape, precision and size,
/// with no rule that holds across ResNet's shapes: a 1x1/1 GEMM on a 14x14
/// map takes no copies at one width and copies of its input and output
/// gradient at another, and its weight gradient from 0.5 to 224 MiB of
/// partial sums (`docs/decisions/cudnn-per-shape-workspaces.md`).
pub fn measured_nchw_backward(c: &ConvCall) -> Option<[u64; 2]> {
    if c.channels_last {
        return None;
    }
    Some(nchw_cells(c)?.map(|(kind, beyond)| c.copy_bytes(kind) + beyond))
}

/// The measured NCHW blocks of the call's shape (whatever its layout):
/// which copies each holds and the bytes beyond them.
fn nchw_cells(c: &ConvCall) -> Option<[(CopyKind, u64); 2]> {
    if c.groups != 1 {
        return None;
    }
    let (precision, stride) = (c.split_k_precision(), c.stride());
    let (_, batches) = nchw_backward::NCHW_BACKWARD
        .iter()
        .filter(|&&(cin, cout, k, s, _, p, _)| {
            (
                u64::from(cin),
                u64::from(cout),
                u64::from(k),
                u64::from(s),
                p,
            ) == (c.cin, c.cout, c.k, stride, precision)
        })
        .map(|(.., edge, _, batches)| (u64::from(*edge).abs_diff(c.in_hw), batches))
        .min_by_key(|&(distance, _)| distance)?;
    let measured = nchw_backward::BATCHES
        .iter()
        .rposition(|&batch| batch <= c.batch)
        .unwrap_or(0);
    Some(batches[measured].map(|packed| {
        let kind = match packed >> nchw_backward::EXTRA_BITS {
            0 => CopyKind::None,
            1 => CopyKind::InputOutput,
            2 => CopyKind::Input,
            _ => CopyKind::Output,
        };
        (
            kind,
            u64::from(packed & ((1 << nchw_backward::EXTRA_BITS) - 1)),
        )
    }))
}

/// The split-K partial weight gradients of the stem's weight-gradient
/// kernel: 6,021,120 B (120 fp32 copies of the 64 x 4 x 7 x 7 filter, or 60
/// of the 64 x 8 x 7 x 7 one) and 144 B, the same in every stem block the
/// H200 traces show, whatever the batch, image, dtype or layout
/// (`measurements/channels-last/trace-segments*.jsonl`,
/// `measurements/h200-generalization/trace-segments-14.jsonl`).
pub const CUDNN_STEM_WGRAD_PARTIALS: u64 = 6_021_264;

/// fp32 weight-gradient copies pad the stem's 3 input channels to this many
/// (half precision: [`CUDNN_HALF_CHANNEL_ALIGN`]).
pub const CUDNN_FP32_WGRAD_CHANNEL_ALIGN: u64 = 4;

/// The block the stem's weight-gradient kernel takes (the stem's input
/// needs no gradient, so there is no data-gradient block).
///
/// ResNet's 7x7 stem: its input copied with the channels padded, the
/// output gradient copied (NCHW, and fp32 `channels_last`; half-precision
/// `channels_last` reads it as it is), the filter copied (in half precision
/// also an fp32 copy), and the split-K partials. The H200 traces ask, NCHW
/// bf16 b256: 622,734,480 B, which is 205,520,896 and 411,041,792 and
/// 6,171,792; `channels_last` bf16 b256: 211,692,688 (205,520,896 and
/// 6,171,792); fp32 b64 at 448 px, both layouts: 1,033,675,920
/// (205,520,896, that is 64 x 4 x 448 x 448 x 4, and 822,083,584 and
/// 6,071,440); fp32 b64 at 224 px: 262,972,560. In fp16 the channels pad
/// to 4 and the kernel keeps 7 partials ([`CUDNN_FP16_STEM_WGRAD_PARTIALS`]):
/// amp fp16 b64 128,877,679 B in timm's ResNet-152 trace
/// (`measurements/inference-batches/`), the same in the sweep
/// `measurements/h200-cudnn/stem_sweep.jsonl` at batches 64 and 256.
///
/// MobileNetV2's 3x3 stem (the same sweep): none in fp32; in half
/// precision the NCHW copies of the input (padded to 8) and the output
/// gradient, only the output gradient in bf16 `channels_last`, neither in
/// fp16 `channels_last`, and about [`CUDNN_3X3_STEM_WGRAD_EXTRA`] beyond
/// the copies.
fn stem_weight_gradient_workspace(c: &ConvCall) -> u64 {
    let output = c.output_bytes();
    if c.k < RESNET_STEM_KERNEL {
        return match (c.dsize, c.channels_last, c.fp16) {
            (FP32, _, _) => 0,
            (_, false, _) => c.input_copy_bytes() + output + CUDNN_3X3_STEM_WGRAD_EXTRA,
            (_, true, false) => output + CUDNN_3X3_STEM_WGRAD_EXTRA,
            (_, true, true) => CUDNN_3X3_STEM_WGRAD_EXTRA,
        };
    }
    let cin = if c.dsize == 2 {
        c.padded_cin()
    } else {
        c.cin.div_ceil(CUDNN_FP32_WGRAD_CHANNEL_ALIGN) * CUDNN_FP32_WGRAD_CHANNEL_ALIGN
    };
    let input = c.batch * cin * c.in_hw * c.in_hw * c.dsize;
    let output = if c.channels_last && c.dsize == 2 {
        0
    } else {
        output
    };
    let filter = c.cout * cin * c.k * c.k;
    let filters = if c.dsize == 2 {
        filter * (2 + FP32)
    } else {
        filter * FP32
    };
    let partials = if c.fp16 {
        CUDNN_FP16_STEM_WGRAD_PARTIALS * filter * FP32
    } else {
        CUDNN_STEM_WGRAD_PARTIALS
    };
    input + output + filters + partials
}

/// fp32 copies of the filter that ResNet's fp16 stem's weight-gradient
/// kernel keeps as split-K partials (351,232 B for the 64 x 4 x 7 x 7
/// filter; the sweep shows 3 at batch 16).
pub const CUDNN_FP16_STEM_WGRAD_PARTIALS: u64 = 7;

/// MobileNetV2's half-precision 3x3 stem's weight-gradient block beyond
/// its copies: 2,097,152 B at batch 64 to 256 in NCHW and bf16
/// `channels_last` (1.1 to 1.8 MB at 16 and 32; fp16 `channels_last` 0.3
/// to 3.2 MB), `measurements/h200-cudnn/stem_sweep.jsonl`.
pub const CUDNN_3X3_STEM_WGRAD_EXTRA: u64 = 2 << 20;

/// The weight-gradient kernel's block beyond the copies: layer2.0.downsample
/// bf16 b64 takes 154,140,672 B (147 MiB, the copies) for its data gradient,
/// then 155,714,560 B (148.5 MiB) for its weight gradient
/// (`measurements/h200-segments/training-segments.jsonl`): 1.5 MiB more.
pub const CUDNN_WGRAD_EXTRA: u64 = 1_573_888;
