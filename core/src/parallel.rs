//! How a job is spread over several GPUs: the `workload.parallel` object of
//! a spec or measurement case.
//!
//! `batch` stays per rank; an estimate is the peak of one rank. The
//! strategies and what each changes on a rank:
//!
//! - `ddp`: `DistributedDataParallel`: a full replica plus the reducer's
//!   gradient buckets.
//! - `fsdp2`: `fully_shard` per decoder layer, then the root: sharded fp32
//!   parameters, gradients and optimizer state; each layer's parameters
//!   gathered in `param_dtype` around its forward and backward; gradients
//!   reduce-scattered in `reduce_dtype`.
//! - `zero1`: DDP with `ZeroRedundancyOptimizer`: optimizer state sharded.
//! - `tp`: tensor-parallel inference as transformers' `tp_plan="auto"`
//!   shards a decoder.

use crate::arch::Dtype;
use crate::error::{check_range, Error};
use crate::keys::keyed;

/// How the job is spread over its GPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Strategy {
    /// One GPU (or independent copies of the job).
    #[default]
    None,
    /// `DistributedDataParallel`.
    Ddp,
    /// `fully_shard` (FSDP2).
    Fsdp2,
    /// DDP with `ZeroRedundancyOptimizer` (ZeRO stage 1).
    Zero1,
    /// Tensor parallelism for inference (`tp_plan="auto"`).
    Tp,
}

keyed! {
    Strategy {
        None => "none",
        Ddp => "ddp",
        Fsdp2 => "fsdp2",
        Zero1 => "zero1",
        Tp => "tp",
    }
}

/// Most GPUs one job may span.
pub const MAX_WORLD_SIZE: u64 = 4_096;

/// `workload.parallel`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default))]
pub struct ParallelOptions {
    /// The strategy.
    pub strategy: Strategy,
    /// Ranks (GPUs) in the job; `batch` is per rank.
    pub world_size: u32,
    /// FSDP2: free each layer's gathered parameters after its forward and
    /// gather them again in backward (the default), or keep them.
    pub reshard_after_forward: bool,
    /// FSDP2: dtype of the gathered parameters the layers compute with.
    pub param_dtype: Dtype,
    /// FSDP2: dtype gradients are reduce-scattered in.
    pub reduce_dtype: Dtype,
    /// DDP and ZeRO-1: the reducer's bucket size in MiB (the first bucket
    /// is 1 MiB).
    pub bucket_cap_mb: u32,
    /// DDP and ZeRO-1: `.grad` tensors are views of the buckets.
    pub gradient_as_bucket_view: bool,
}

impl Default for ParallelOptions {
    fn default() -> Self {
        ParallelOptions {
            strategy: Strategy::None,
            world_size: 1,
            reshard_after_forward: true,
            param_dtype: Dtype::Bf16,
            reduce_dtype: Dtype::Fp32,
            bucket_cap_mb: 25,
            gradient_as_bucket_view: false,
        }
    }
}

impl ParallelOptions {
    /// True when the job spans one GPU without any strategy (the model's
    /// single-GPU path, unchanged).
    pub fn is_single(&self) -> bool {
        self.strategy == Strategy::None
    }

    /// Checks ranges and combinations; every error names the field.
    pub fn validate(&self, training: bool) -> Result<(), Error> {
        check_range(
            "workload.parallel.world_size",
            self.world_size as u64,
            1,
            MAX_WORLD_SIZE,
        )?;
        match self.strategy {
            Strategy::None if self.world_size != 1 => Err(Error::invalid(
                "workload.parallel.strategy",
                alloc::format!(
                    "`none` runs on one GPU, but `world_size` is {}",
                    self.world_size
                ),
                "ddp, fsdp2 or zero1 for training, tp for inference, or world_size 1",
            )),
            Strategy::Ddp | Strategy::Fsdp2 | Strategy::Zero1 if !training => Err(Error::invalid(
                "workload.parallel.strategy",
                alloc::format!(
                    "`{}` shards training state; this job is inference",
                    self.strategy.key()
                ),
                "tp or none for inference",
            )),
            Strategy::Tp if training => Err(Error::invalid(
                "workload.parallel.strategy",
                "`tp` is modelled for inference only",
                "ddp, fsdp2 or zero1 for training",
            )),
            _ => {
                for (field, dtype) in [
                    ("workload.parallel.param_dtype", self.param_dtype),
                    ("workload.parallel.reduce_dtype", self.reduce_dtype),
                ] {
                    if !dtype.is_float() {
                        return Err(Error::invalid(
                            field,
                            alloc::format!("`{}` is not a float format", dtype.name()),
                            "fp32, fp16 or bf16",
                        ));
                    }
                }
                check_range(
                    "workload.parallel.bucket_cap_mb",
                    self.bucket_cap_mb as u64,
                    1,
                    65_536,
                )?;
                Ok(())
            }
        }
    }
}
