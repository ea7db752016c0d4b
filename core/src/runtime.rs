//! What lives outside PyTorch's allocator, and the allocator settings: the
//! coefficients a calibration profile supplies.
//!
//! Every default below is an H200 measurement from
//! `shared/calibration/h200-public.jsonl`, line 1 (`runtime_overheads`,
//! torch 2.11.0+cu130, driver 580.159.04, `CUDA_MODULE_LOADING=LAZY`), and
//! the probes in `measurements/h200/overheads.json`.

use crate::allocator::AllocatorConfig;
use alloc::string::String;

/// `runtime_overheads.context` (650,969,088 B: context plus the first 2 MiB
/// small-pool segment) minus that 2 MiB segment, which the replay counts.
pub const H200_CUDA_CONTEXT_BYTES: u64 = 650_969_088 - (2 << 20);
/// cuBLAS handle and lazily loaded GEMM kernels outside torch's allocator:
/// `after_first_matmul` (820,838,400) minus `reserved_after_first_matmul`
/// (102,760,448) minus [`H200_CUDA_CONTEXT_BYTES`].
pub const H200_CUBLAS_LIBRARY_BYTES: u64 = 820_838_400 - 102_760_448 - H200_CUDA_CONTEXT_BYTES;
/// cuBLAS workspace per handle on Hopper (`CublasHandlePool.cpp`), allocated
/// through torch's allocator: 32 MiB. The 4096x4096 bf16 probe matmul's
/// reserved bytes (102,760,448 = 2 MiB + 3 x 32 MiB operands + 32 MiB) confirm it.
pub const H200_CUBLAS_WORKSPACE_BYTES: u64 = 32 << 20;
/// cuDNN handle and kernels: `after_first_conv` (829,227,008) minus
/// `after_first_matmul` (820,838,400).
pub const H200_CUDNN_LIBRARY_BYTES: u64 = 829_227_008 - 820_838_400;
/// The autograd engine runs backward on its own device thread, which gets its
/// own cuBLAS handle (and its own workspace in the allocator) plus kernels for
/// the backward ops. Outside-allocator overhead of training cases minus that
/// of inference cases in `h200-public.jsonl` (816,644,096 - 730,660,864).
/// The probes (`measurements/h200/overheads.json`) split it: 67,108,864 for
/// the second thread's cuBLAS handle, 8,388,608 for SDPA's backward kernels,
/// the rest for other backward and optimizer kernels.
pub const H200_BACKWARD_LIBRARY_BYTES: u64 = 816_644_096 - 730_660_864;
/// Kernels loaded lazily by a real model's forward beyond the probe matmul
/// (norms, softmax, attention, elementwise): the outside-allocator overhead of
/// the inference cases in `h200-public.jsonl` (730,660,864) minus context and cuBLAS.
pub const H200_MODEL_KERNELS_BYTES: u64 =
    730_660_864 - H200_CUDA_CONTEXT_BYTES - H200_CUBLAS_LIBRARY_BYTES;

/// cuDNN workspace of a convolution relative to its larger activation: 0.
/// The H200 probe of a first 3x3 fp32 convolution took nothing from torch's
/// allocator (`overheads.json`, chain `conv_fp32`: reserved +0), and
/// ResNet-50 and ResNet-18 inference match the H200 within 0.2% without a
/// workspace. Backward convolutions may use one (ResNet-50 training is 9%
/// under); a profile can set this fraction once a card measures it.
pub const H200_CUDNN_WORKSPACE_FRACTION: f64 = 0.0;

/// Default of [`RuntimeProfile::process_ran_backward`]: assume the process
/// may have run a backward pass before (notebooks train then evaluate; the
/// public H200 inference cases of BERT, ESM-2 and ResNet-50 ran in such
/// processes: 816-823 MB outside the allocator and two workspaces resident,
/// against 731 MB and one in a fresh process). It costs a dedicated
/// inference process about 120 MB of over-estimate (the autograd thread's
/// cuBLAS handle and kernels, `H200_BACKWARD_LIBRARY_BYTES`, plus its 32 MiB
/// workspace); the other way round would be an out-of-memory error. Set
/// `process_ran_backward: false` for a process that only ever runs inference.
pub const PROCESS_RAN_BACKWARD_DEFAULT: bool = true;

/// Memory outside the modelled allocations, and allocator settings.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default))]
pub struct RuntimeProfile {
    /// GPU this profile was measured on (informational).
    pub gpu: Option<String>,
    /// Total device memory of that GPU, bytes (informational).
    pub gpu_total_bytes: Option<u64>,
    /// CUDA context with lazy module loading, bytes.
    pub cuda_context_bytes: u64,
    /// cuBLAS handle and GEMM kernels, outside torch's allocator, bytes.
    pub cublas_library_bytes: u64,
    /// cuBLAS workspace per handle, inside torch's allocator, bytes.
    pub cublas_workspace_bytes: u64,
    /// Other lazily loaded kernels of a model's forward, bytes.
    pub model_kernels_bytes: u64,
    /// Backward-thread cuBLAS handle and backward kernels, bytes (training only).
    pub backward_library_bytes: u64,
    /// cuDNN handle and kernels, bytes (convolutional models only).
    pub cudnn_library_bytes: u64,
    /// cuDNN convolution workspace, as a fraction of the larger of the
    /// convolution's input and output (see `families::cnn::conv_workspace`).
    pub cudnn_workspace_fraction: f64,
    /// The process has run a backward pass before this job (a notebook that
    /// trained, then evaluates): autograd's thread keeps its cuBLAS handle,
    /// kernels and 32 MiB workspace. Training jobs always have them.
    pub process_ran_backward: bool,
    /// Allocator settings. In measurement files this is the string
    /// `"default"` or `"expandable_segments"`.
    #[cfg_attr(feature = "serde", serde(deserialize_with = "allocator_setting"))]
    pub allocator: AllocatorConfig,
}

impl Default for RuntimeProfile {
    fn default() -> Self {
        RuntimeProfile::h200()
    }
}

impl RuntimeProfile {
    /// The H200 profile measured for `shared/calibration` (torch 2.11, CUDA 13).
    pub fn h200() -> RuntimeProfile {
        RuntimeProfile {
            gpu: Some("NVIDIA H200".into()),
            gpu_total_bytes: Some(150_754_820_096),
            cuda_context_bytes: H200_CUDA_CONTEXT_BYTES,
            cublas_library_bytes: H200_CUBLAS_LIBRARY_BYTES,
            cublas_workspace_bytes: H200_CUBLAS_WORKSPACE_BYTES,
            model_kernels_bytes: H200_MODEL_KERNELS_BYTES,
            backward_library_bytes: H200_BACKWARD_LIBRARY_BYTES,
            cudnn_library_bytes: H200_CUDNN_LIBRARY_BYTES,
            cudnn_workspace_fraction: H200_CUDNN_WORKSPACE_FRACTION,
            process_ran_backward: PROCESS_RAN_BACKWARD_DEFAULT,
            allocator: AllocatorConfig::default(),
        }
    }
}

#[cfg(feature = "serde")]
fn allocator_setting<'de, D: serde::Deserializer<'de>>(d: D) -> Result<AllocatorConfig, D::Error> {
    use serde::de::Error as _;
    use serde::Deserialize;
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Setting {
        Name(String),
        Config(AllocatorConfig),
    }
    match Setting::deserialize(d)? {
        Setting::Config(c) => Ok(c),
        Setting::Name(name) => match name.as_str() {
            "default" | "" => Ok(AllocatorConfig::default()),
            "expandable_segments" | "expandable_segments:True" => Ok(AllocatorConfig {
                expandable_segments: true,
                max_split_size: None,
            }),
            other => Err(D::Error::custom(alloc::format!(
                "`runtime.allocator`: unknown setting `{other}`; allowed: \"default\", \"expandable_segments\" or an object {{expandable_segments, max_split_size}}"
            ))),
        },
    }
}
