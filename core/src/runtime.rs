//! What lives outside PyTorch's allocator, and the allocator settings: the
//! coefficients a calibration profile supplies.
//!
//! Every default below is an H200 measurement from
//! `measurements/public/h200-public.jsonl`, line 1 (`runtime_overheads`,
//! torch 2.11.0+cu130, driver 580.159.04, `CUDA_MODULE_LOADING=LAZY`), and
//! the probes in `measurements/h200/overheads.json`.

use crate::error::Error;
use alloc::format;
use alloc::string::String;

/// Allocator settings (`PYTORCH_CUDA_ALLOC_CONF`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default))]
pub struct AllocatorConfig {
    /// `expandable_segments:True`.
    pub expandable_segments: bool,
    /// `max_split_size_mb`, in bytes; `None` is unlimited (the default).
    pub max_split_size: Option<u64>,
}
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
/// NCCL's memory for one rank's process group (communicator, its buffers
/// and kernels), outside torch's allocator: the GPU's `used` memory grows
/// by this much beyond torch's reserved bytes over `init_process_group`
/// and a first 4 KiB all-reduce, one rank, NCCL 2.28.9 with NVLS off
/// (`nccl_bytes` in `measurements/h200-parallel/measured-w1.jsonl`). The
/// same jobs' driver peaks exceed their reserved peaks by 1,385,758,720
/// bytes, 569,114,624 more than without a process group.
pub const H200_NCCL_COMMUNICATOR_BYTES: u64 = 585_105_408;
/// NCCL's buffers for each peer a rank connects to over NVLink: the
/// public two-rank FSDP2 case's driver-minus-reserved gap (1,687,814,144,
/// `measurements/public/h200x2-fsdp2-public.jsonl`) minus that of the
/// one-rank cases (1,385,758,720). A ring connects each rank to two
/// distinct peers from three ranks on (one at two); only one and two
/// ranks are measured.
pub const H200_NCCL_PEER_BYTES: u64 = 1_687_814_144 - 1_385_758_720;
/// Kernels loaded lazily by a real model's forward beyond the probe matmul
/// (norms, softmax, attention, elementwise): the outside-allocator overhead of
/// the inference cases in `h200-public.jsonl` (730,660,864) minus context and cuBLAS.
pub const H200_MODEL_KERNELS_BYTES: u64 =
    730_660_864 - H200_CUDA_CONTEXT_BYTES - H200_CUBLAS_LIBRARY_BYTES;

/// Scale on the cuDNN convolution workspaces of `families::cnn` (whose
/// sizes are the H200's, measured per convolution with cuDNN 9.19:
/// `measurements/h200-cudnn/`): 1 on the card they were measured on.
pub const H200_CUDNN_WORKSPACE_SCALE: f64 = 1.0;

/// The H200's multiprocessors and resident threads per multiprocessor, as
/// `torch.cuda.get_device_properties(0)` reports them on the calibration
/// machine (`measurements/h200-linear-backward/README.md`). Device
/// properties, not fitted.
pub const H200_MULTIPROCESSORS: u32 = 132;
/// See [`H200_MULTIPROCESSORS`].
pub const H200_THREADS_PER_MULTIPROCESSOR: u32 = 2048;

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
    /// NCCL communicator of one rank, outside torch's allocator, bytes
    /// (jobs on several GPUs only).
    pub nccl_communicator_bytes: u64,
    /// NCCL buffers per peer a rank connects to, bytes.
    pub nccl_peer_bytes: u64,
    /// Scale on the measured cuDNN convolution workspaces (see
    /// `families::cnn::forward_workspace`): 1 reproduces the H200 with
    /// cuDNN 9.19, 0 turns them off (e.g. `cudnn.benchmark` with a
    /// workspace limit).
    pub cudnn_workspace_scale: f64,
    /// The process has run a backward pass before this job (a notebook that
    /// trained, then evaluates): autograd's thread keeps its cuBLAS handle,
    /// kernels and 32 MiB workspace. Training jobs always have them.
    pub process_ran_backward: bool,
    /// Streaming multiprocessors of the GPU (`multiProcessorCount`): sizes
    /// the grid of PyTorch's reduction kernels, whose global-memory buffer
    /// (a bias gradient's `sum(0)`) the allocator serves.
    pub multiprocessors: u32,
    /// Resident threads per multiprocessor (`maxThreadsPerMultiProcessor`).
    pub threads_per_multiprocessor: u32,
    /// Allocator settings. In measurement files this is the string
    /// `"default"` or `"expandable_segments"`.
    #[cfg_attr(feature = "serde", serde(deserialize_with = "allocator_setting"))]
    pub allocator: AllocatorConfig,
}

/// Largest byte figure a runtime profile may carry: 1 TiB (no GPU is
/// near it; larger values are typos that would overflow the sums).
pub const MAX_RUNTIME_BYTES: u64 = 1 << 40;
/// Largest `multiprocessors`.
pub const MAX_MULTIPROCESSORS: u32 = 4096;
/// Largest `threads_per_multiprocessor`.
pub const MAX_THREADS_PER_MULTIPROCESSOR: u32 = 65536;
/// Largest `cudnn_workspace_scale`.
pub const MAX_CUDNN_WORKSPACE_SCALE: f64 = 16.0;

impl RuntimeProfile {
    /// Checks every figure, naming the field and its allowed range.
    pub fn validate(&self) -> Result<(), Error> {
        let bytes = [
            ("runtime.cuda_context_bytes", self.cuda_context_bytes),
            ("runtime.cublas_library_bytes", self.cublas_library_bytes),
            (
                "runtime.cublas_workspace_bytes",
                self.cublas_workspace_bytes,
            ),
            ("runtime.model_kernels_bytes", self.model_kernels_bytes),
            (
                "runtime.nccl_communicator_bytes",
                self.nccl_communicator_bytes,
            ),
            ("runtime.nccl_peer_bytes", self.nccl_peer_bytes),
            (
                "runtime.backward_library_bytes",
                self.backward_library_bytes,
            ),
            ("runtime.cudnn_library_bytes", self.cudnn_library_bytes),
        ];
        for (field, value) in bytes {
            if value > MAX_RUNTIME_BYTES {
                return Err(Error::invalid(
                    field,
                    format!("{value} bytes is too large"),
                    "bytes from 0 to 1099511627776 (1 TiB)",
                ));
            }
        }
        let scale = self.cudnn_workspace_scale;
        if !scale.is_finite() || !(0.0..=MAX_CUDNN_WORKSPACE_SCALE).contains(&scale) {
            return Err(Error::invalid(
                "runtime.cudnn_workspace_scale",
                format!("{scale} is out of range"),
                "a number from 0 to 16 (1 = as measured on the H200)",
            ));
        }
        if !(1..=MAX_MULTIPROCESSORS).contains(&self.multiprocessors) {
            return Err(Error::invalid(
                "runtime.multiprocessors",
                format!("{} is out of range", self.multiprocessors),
                "a whole number from 1 to 4096 (132 on an H200)",
            ));
        }
        if !(32..=MAX_THREADS_PER_MULTIPROCESSOR).contains(&self.threads_per_multiprocessor) {
            return Err(Error::invalid(
                "runtime.threads_per_multiprocessor",
                format!("{} is out of range", self.threads_per_multiprocessor),
                "a whole number from 32 to 65536 (2048 on an H200)",
            ));
        }
        if let Some(max) = self.allocator.max_split_size {
            if max > MAX_RUNTIME_BYTES {
                return Err(Error::invalid(
                    "runtime.allocator.max_split_size",
                    format!("{max} bytes is too large"),
                    "bytes up to 1099511627776 (1 TiB)",
                ));
            }
        }
        Ok(())
    }
}

impl Default for RuntimeProfile {
    fn default() -> Self {
        RuntimeProfile::h200()
    }
}

impl RuntimeProfile {
    /// The H200 profile measured for `measurements/public/` (torch 2.11, CUDA 13).
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
            nccl_communicator_bytes: H200_NCCL_COMMUNICATOR_BYTES,
            nccl_peer_bytes: H200_NCCL_PEER_BYTES,
            cudnn_workspace_scale: H200_CUDNN_WORKSPACE_SCALE,
            process_ran_backward: PROCESS_RAN_BACKWARD_DEFAULT,
            multiprocessors: H200_MULTIPROCESSORS,
            threads_per_multiprocessor: H200_THREADS_PER_MULTIPROCESSOR,
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
                "unknown setting `{other}`"
            ))),
        },
    }
}

/// Which libraries a run loads (decides the outside-allocator overhead).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LibraryUse {
    /// GEMMs through cuBLAS (every family).
    pub cublas: bool,
    /// A backward pass (second cuBLAS handle on the autograd thread).
    pub backward: bool,
    /// Convolutions through cuDNN.
    pub cudnn: bool,
    /// Ranks of the NCCL process group the job runs in (0: none).
    pub nccl_ranks: u32,
    /// bitsandbytes' LLM.int8 matmuls (8-bit weights): its own cuBLASLt
    /// int8 kernels and handle.
    pub int8_matmul: bool,
}

/// What bitsandbytes' LLM.int8 matmul adds outside the allocator the
/// first time it runs (its cuBLASLt int8 kernels and handle): 66 MiB,
/// measured on the H100 as the difference between 8-bit and 4-bit jobs of
/// the same model, alike in a `generate` and in a QLoRA training job
/// (69,206,016 B each, `measurements/qlora/h100-2026-12-07/`).
pub const INT8_MATMUL_LIBRARY_BYTES: u64 = 66 << 20;

/// Outside-allocator bytes for the libraries a run uses.
pub fn outside_allocator(runtime: &RuntimeProfile, libraries: LibraryUse) -> u64 {
    let mut bytes = runtime.cuda_context_bytes;
    if libraries.cublas {
        bytes += runtime.cublas_library_bytes + runtime.model_kernels_bytes;
    }
    if libraries.backward {
        bytes += runtime.backward_library_bytes;
    }
    if libraries.cudnn {
        bytes += runtime.cudnn_library_bytes;
    }
    if libraries.int8_matmul {
        bytes += INT8_MATMUL_LIBRARY_BYTES;
    }
    if libraries.nccl_ranks > 0 {
        let peers = (libraries.nccl_ranks as u64 - 1).min(2);
        bytes += runtime.nccl_communicator_bytes + peers * runtime.nccl_peer_bytes;
    }
    bytes
}
