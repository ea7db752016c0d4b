//! What data parallelism adds to one rank's replay: FSDP2's sharded state,
//! its per-layer gathers and gradient reduction on their own streams, and
//! DDP's gradient buckets (also ZeRO-1's, whose optimizer state is sharded).
//!
//! Followed from torch 2.11's `torch/distributed/fsdp/_fully_shard/` and
//! `torch/nn/parallel/distributed.py`, and from the H200 allocation traces
//! in `measurements/h200-parallel/`.

use crate::allocator::Stream;
use crate::component::Component;
use crate::graph::{Graph, Value};
use crate::trace::Tensor;
use alloc::vec::Vec;

use super::optim::Trainable;
use crate::arch::{Architecture, MlpKind, NormKind};
use crate::error::Error;
use crate::parallel::Strategy;
use crate::workload::{Mode, Workload};
use alloc::format;

/// Which jobs the strategies are modelled for: decoder LLMs (tensor
/// parallelism: Llama-style decoders with a dense gated MLP), FSDP2 with
/// the sharded parameters in fp32 or bf16 and its `param_dtype` for
/// compute (no autocast on top), full fine-tuning; tensor-parallel head
/// counts, MLP width and an untied head's vocabulary divisible by the
/// world size.
pub fn validate(arch: &Architecture, workload: &Workload) -> Result<(), Error> {
    let parallel = &workload.parallel;
    if parallel.is_single() {
        return Ok(());
    }
    let Architecture::Decoder(d) = arch else {
        return Err(Error::invalid(
            "workload.parallel.strategy",
            format!(
                "`{}` is modelled for decoder LLMs only",
                parallel.strategy.key()
            ),
            "none for this model",
        ));
    };
    let training = workload.mode == Mode::Training;
    match parallel.strategy {
        Strategy::Fsdp2 if training && workload.training.precision.autocast() => {
            Err(Error::invalid(
                "workload.training.precision",
                "FSDP2 computes in `workload.parallel.param_dtype`; autocast on top is not modelled",
                "fp32, bf16 or fp16 (the sharded parameters' dtype)",
            ))
        }
        Strategy::Fsdp2 if workload.training.lora.is_some() => Err(Error::invalid(
            "workload.training.lora",
            "FSDP2 with LoRA adapters is not modelled",
            "null (full fine-tuning) with FSDP2, or strategy ddp",
        )),
        Strategy::Tp => {
            if d.moe.is_some()
                || d.mlp != MlpKind::Gated
                || d.norm == NormKind::LayerNorm
                || d.fused_projections
            {
                return Err(Error::invalid(
                    "workload.parallel.strategy",
                    "`tp` is modelled for Llama-style decoders (dense gated MLP, RMSNorm, separate q/k/v projections)",
                    "none or another model",
                ));
            }
            let n = parallel.world_size;
            let mut shapes = alloc::vec![
                ("attention heads", d.num_heads),
                ("key-value heads", d.num_kv_heads),
                ("MLP width", d.intermediate_size),
            ];
            if !d.tie_word_embeddings {
                shapes.push(("vocabulary", d.vocab_size));
            }
            for (what, count) in shapes {
                if count % n != 0 {
                    return Err(Error::invalid(
                        "workload.parallel.world_size",
                        format!("{n} ranks do not divide the model's {count} {what}"),
                        "a world size that divides the heads, key-value heads, MLP width and vocabulary",
                    ));
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// FSDP2's all-gather copy-in stream: the flat cast of this rank's shards
/// and the all-gather output (the collective itself runs on the all-gather
/// stream, which allocates nothing).
pub const ALL_GATHER_COPY_IN_STREAM: Stream = Stream::side(1);
/// FSDP2's reduce-scatter stream: each unit's reduced gradient shard.
pub const REDUCE_SCATTER_STREAM: Stream = Stream::side(2);

/// One `fully_shard` unit (a decoder layer, or the root: embedding, final
/// norm and an untied head).
#[derive(Clone, Debug, Default)]
pub struct Unit {
    /// The unsharded parameters the layer computes with (`param_dtype`,
    /// `world * ceil(rows / world)` rows: padding included), in
    /// registration order; their storage exists only while gathered.
    pub params: Vec<Trainable>,
    /// The sharded parameters (`orig_dtype`), in the same order; the
    /// optimizer updates these.
    pub shards: Vec<Trainable>,
    /// Whether the unsharded storage is allocated now.
    gathered: bool,
    /// The all-gather output, while it is kept.
    gather_buffer: Option<Tensor>,
}

impl Unit {
    /// Elements of the unit's flat all-gather input on one rank: each
    /// parameter's dim-0 shard padded to `ceil(rows / world)` rows.
    fn shard_numel(&self, world: u64) -> u64 {
        self.params
            .iter()
            .map(|p| p.rows.div_ceil(world) * p.cols)
            .sum()
    }
}

/// FSDP2 knobs that change a rank's memory.
#[derive(Clone, Copy, Debug)]
pub struct Fsdp2Options {
    /// Ranks in the job.
    pub world: u64,
    /// Bytes per element of the gathered parameters (`param_dtype`).
    pub param_dsize: u64,
    /// Bytes per element of the sharded parameters (their dtype before
    /// `param_dtype`: the precision's).
    pub orig_dsize: u64,
    /// Bytes per element gradients are reduced in (`reduce_dtype`).
    pub reduce_dsize: u64,
    /// Free each layer's gathered parameters after its forward.
    pub reshard_after_forward: bool,
}

/// The FSDP2 state of one rank: the units and the buffers in flight.
#[derive(Clone, Debug)]
pub struct Fsdp2 {
    /// Knobs.
    pub options: Fsdp2Options,
    /// The root unit (never resharded after forward).
    pub root: Unit,
    /// One unit per decoder layer.
    pub layers: Vec<Unit>,
    /// The last reduce-scatter input, kept until the next unit's reduction
    /// (`ReduceScatterState`) or the end of backward.
    reduce_input: Option<Tensor>,
    /// The all-gather output of the previous forward unit, freed after the
    /// next unit's copy-in (`AllGatherState`).
    forward_gather: Option<Tensor>,
}

/// Which unit an event is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnitId {
    /// The root module.
    Root,
    /// Decoder layer `n`.
    Layer(usize),
}

impl Fsdp2 {
    /// The state before the first step: units as built, nothing gathered.
    pub fn new(options: Fsdp2Options, root: Unit, layers: Vec<Unit>) -> Fsdp2 {
        Fsdp2 {
            options,
            root,
            layers,
            reduce_input: None,
            forward_gather: None,
        }
    }

    fn unit(&mut self, id: UnitId) -> &mut Unit {
        match id {
            UnitId::Root => &mut self.root,
            UnitId::Layer(n) => &mut self.layers[n],
        }
    }

    /// `FSDPParamGroup.unshard` + `wait_for_unshard`: the unit's
    /// parameters in `param_dtype`. With one rank the group skips the
    /// all-gather and each parameter is cast (`to(param_dtype)`) into a
    /// temporary that is copied into the unsharded storage and freed when
    /// the loop moves on (the H200 trace: temporary, storage, previous
    /// temporary freed). With several ranks the flat all-gather output
    /// (padded shards of every rank, on the all-gather stream) is split
    /// into the unsharded storages on the compute stream.
    fn gather(&mut self, g: &mut Graph, id: UnitId, forward: bool) {
        let options = self.options;
        if self.unit(id).gathered {
            return;
        }
        if options.world == 1 {
            let unit = self.unit(id);
            let params = unit.params.clone();
            unit.gathered = true;
            let mut previous: Option<Tensor> = None;
            for p in &params {
                let cast = g
                    .replay
                    .alloc(p.rows * p.cols * options.param_dsize, Component::Weights);
                if let Some(t) = previous.replace(cast) {
                    g.replay.free(t);
                }
                g.materialise(p.value);
            }
            if let Some(t) = previous {
                g.replay.free(t);
            }
            return;
        }
        self.issue_gather(g, id);
        // Forward keeps the previous unit's output until this copy-in is
        // done; backward frees each output right after its copy-out.
        if let Some(previous) = self.forward_gather.take() {
            g.replay.free(previous);
        }
        let unit = self.unit(id);
        let buffer = unit.gather_buffer.take();
        unit.gathered = true;
        for p in unit.params.clone() {
            g.materialise(p.value);
        }
        if let Some(buffer) = buffer {
            if forward {
                self.forward_gather = Some(buffer);
            } else {
                g.replay.free(buffer);
            }
        }
    }

    /// The all-gather itself (several ranks), on the copy-in stream: this
    /// rank's shards cast into one flat `param_dtype` buffer, the output
    /// of every rank's shards (the input is a view of its slice), the cast
    /// buffer released when `foreach_all_gather` returns.
    fn issue_gather(&mut self, g: &mut Graph, id: UnitId) {
        let options = self.options;
        let unit = self.unit(id);
        if options.world == 1 || unit.gathered || unit.gather_buffer.is_some() {
            return;
        }
        let shard_bytes = unit.shard_numel(options.world) * options.param_dsize;
        let cast = g
            .replay
            .alloc_on(shard_bytes, Component::Weights, ALL_GATHER_COPY_IN_STREAM);
        let buffer = g.replay.alloc_on(
            shard_bytes * options.world,
            Component::Weights,
            ALL_GATHER_COPY_IN_STREAM,
        );
        g.replay.free(cast);
        self.unit(id).gather_buffer = Some(buffer);
    }

    /// `reshard`: frees the unit's unsharded storage.
    fn reshard(&mut self, g: &mut Graph, id: UnitId) {
        let unit = self.unit(id);
        if !unit.gathered {
            return;
        }
        unit.gathered = false;
        for p in unit.params.clone() {
            g.free_storage(p.value);
        }
    }

    /// The root's pre-forward: gathers the root.
    pub fn root_pre_forward(&mut self, g: &mut Graph) {
        g.at("FSDP2: gather root (embedding, final norm)", None);
        self.gather(g, UnitId::Root, true);
    }

    /// A layer's pre-forward.
    pub fn pre_forward(&mut self, g: &mut Graph, layer: usize) {
        g.at("FSDP2: gather layer", Some(layer as u32));
        self.gather(g, UnitId::Layer(layer), true);
    }

    /// A layer's post-forward: reshards unless `reshard_after_forward` is off.
    pub fn post_forward(&mut self, g: &mut Graph, layer: usize) {
        if self.options.reshard_after_forward {
            self.reshard(g, UnitId::Layer(layer));
        }
    }

    /// The root's post-forward: the last all-gather output is released
    /// (the root itself stays gathered for backward).
    pub fn root_post_forward(&mut self, g: &mut Graph) {
        if let Some(buffer) = self.forward_gather.take() {
            g.replay.free(buffer);
        }
    }

    /// The root's pre-backward (the loss's gradient reaches the model's
    /// output): prefetches the last layer's all-gather.
    pub fn root_pre_backward(&mut self, g: &mut Graph) {
        if let Some(last) = self.layers.len().checked_sub(1) {
            g.at("FSDP2: prefetch last layer", Some(last as u32));
            self.issue_gather(g, UnitId::Layer(last));
        }
    }

    /// A layer's pre-backward: its parameters (gathered again unless they
    /// were kept), then the previous layer's all-gather (backward prefetch).
    pub fn pre_backward(&mut self, g: &mut Graph, layer: usize) {
        g.at("FSDP2: gather layer for backward", Some(layer as u32));
        self.gather(g, UnitId::Layer(layer), false);
        if layer > 0 {
            self.issue_gather(g, UnitId::Layer(layer - 1));
        }
    }

    /// A unit's post-backward: reshard, then `foreach_reduce`: the flat
    /// reduce-scatter input in `reduce_dtype` on the compute stream
    /// (padded gradients copied in; the previous unit's input released
    /// just before), the unsharded gradients cleared (last first), and the
    /// output shard on the reduce-scatter stream, whose views become the
    /// sharded gradients.
    pub fn post_backward(&mut self, g: &mut Graph, id: UnitId) {
        let options = self.options;
        g.at("FSDP2: reduce-scatter gradients", None);
        self.reshard(g, id);
        if let Some(previous) = self.reduce_input.take() {
            g.replay.free(previous);
        }
        let unit = self.unit(id);
        let shard_numel = unit.shard_numel(options.world);
        let params = unit.params.clone();
        let shards = unit.shards.clone();
        let input = g.replay.alloc(
            shard_numel * options.world * options.reduce_dsize,
            Component::Gradients,
        );
        for p in params.iter().rev() {
            if let Some(grad) = g.take_grad(p.value) {
                g.release_tensor(grad);
            }
        }
        let output = g.replay.alloc_on(
            shard_numel * options.reduce_dsize,
            Component::Gradients,
            REDUCE_SCATTER_STREAM,
        );
        let values: Vec<Value> = shards.iter().map(|s| s.value).collect();
        // Gradients reduced in another dtype than the parameters' are cast
        // into a new shard (`_to_dtype_if_needed`) and the output freed.
        let grads = if options.reduce_dsize == options.orig_dsize {
            output
        } else {
            let cast = g.replay.alloc_on(
                shard_numel * options.orig_dsize,
                Component::Gradients,
                REDUCE_SCATTER_STREAM,
            );
            g.replay.free(output);
            cast
        };
        g.share_grad_among(&values, grads);
        self.reduce_input = Some(input);
    }

    /// The end of backward: the root's reduction, then the last
    /// reduce-scatter input released.
    pub fn end_backward(&mut self, g: &mut Graph) {
        self.post_backward(g, UnitId::Root);
        if let Some(previous) = self.reduce_input.take() {
            g.replay.free(previous);
        }
    }
}

/// DDP's first bucket: one flat buffer for every trainable parameter
/// (`find_unused_parameters=False`: one bucket size limit, unbounded, until
/// the rebuild at the second forward), allocated when DDP is constructed.
pub fn ddp_initial_bucket(g: &mut Graph, trainable: &[Trainable]) -> Vec<Tensor> {
    g.at("DDP: gradient bucket", None);
    let bytes: u64 = trainable.iter().map(|p| p.rows * p.cols * p.dsize).sum();
    alloc::vec![g.replay.alloc(bytes, Component::Gradients)]
}

/// DDP's reducer buckets after the rebuild at the second forward: every
/// trainable parameter's gradient has a slot in one flat bucket of the
/// parameters' dtype, filled in the order the gradients became ready in
/// the first backward (`ready_order`, as the reducer records it); the
/// first bucket holds up to 1 MiB (`_DEFAULT_FIRST_BUCKET_BYTES`), the
/// others up to `bucket_cap_mb`, and a bucket closes with the parameter
/// that reaches its cap, so small parameters ride with the next large one
/// (the H200 trace of ZeRO-1 on Llama-3.2-1B: a layer's `input_layernorm`
/// weight lands in the bucket of the next layer's `down_proj`, and layer
/// 0's in the embedding's: 1,050,681,344 bytes, 8 KiB over the embedding,
/// too large for the free 1,050,673,152-byte blocks beside it). Kept for
/// the rest of the run (the allocated peak is the single-GPU job's plus
/// one flat copy of every gradient).
pub fn ddp_buckets(g: &mut Graph, ready_order: &[Trainable], bucket_cap_bytes: u64) -> Vec<Tensor> {
    const FIRST_BUCKET_BYTES: u64 = 1 << 20;
    let mut buckets = Vec::new();
    let mut cap = FIRST_BUCKET_BYTES;
    let mut filled = 0;
    g.at("DDP: gradient buckets", None);
    for p in ready_order {
        let bytes = p.rows * p.cols * p.dsize;
        filled += bytes;
        if filled >= cap {
            buckets.push(g.replay.alloc(filled, Component::Gradients));
            filled = 0;
            cap = bucket_cap_bytes;
        }
    }
    if filled > 0 {
        buckets.push(g.replay.alloc(filled, Component::Gradients));
    }
    buckets
}

/// ZeroRedundancyOptimizer's partition: parameters sorted by size, largest
/// first, each given to the rank holding the fewest elements so far; the
/// parameters this rank (the one given the largest) updates, in that
/// sorted order, which its local optimizer keeps (the H200 trace of ZeRO-1
/// on Llama-3.2-1B: AdamW's state is created for the 1,002 MiB embedding
/// first, then the 64 MiB MLP weights, then the 16 MiB projections). Rank 0
/// takes the first, largest parameter, so its share is the largest of any
/// rank under this greedy rule; the estimate is its peak.
pub fn zero1_partition(trainable: &[Trainable], world: u64) -> Vec<Trainable> {
    let mut order_by_size: Vec<usize> = (0..trainable.len()).collect();
    let numel = |p: &Trainable| p.rows * p.cols;
    order_by_size.sort_by(|&a, &b| numel(&trainable[b]).cmp(&numel(&trainable[a])));
    let mut loads = alloc::vec![0u64; world as usize];
    let mut owner = alloc::vec![0usize; trainable.len()];
    for &i in &order_by_size {
        let rank = (0..loads.len())
            .min_by_key(|&r| loads[r])
            .expect("at least one rank");
        loads[rank] += numel(&trainable[i]);
        owner[i] = rank;
    }
    order_by_size
        .into_iter()
        .filter(|&i| owner[i] == 0)
        .map(|i| trainable[i])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Graph;
    use crate::trace::Replay;

    #[test]
    fn zero1_keeps_its_partition_largest_first() {
        let mut replay = Replay::new(Default::default(), None);
        let mut g = Graph::new(&mut replay);
        let param = |g: &mut Graph, rows: u64, cols: u64| Trainable {
            value: g.input(rows * cols * 4, crate::component::Component::Weights),
            dsize: 4,
            rows,
            cols,
        };
        let small = param(&mut g, 1, 2048);
        let large = param(&mut g, 8192, 2048);
        let middle = param(&mut g, 2048, 2048);
        let one_rank = zero1_partition(&[small, large, middle], 1);
        let rows: Vec<u64> = one_rank.iter().map(|p| p.rows).collect();
        assert_eq!(rows, [8192, 2048, 1]);
        // Two ranks: rank 0 takes the largest, rank 1 the other two.
        let rank0 = zero1_partition(&[small, large, middle], 2);
        assert_eq!(rank0.len(), 1);
        assert_eq!(rank0[0].rows, 8192);
    }
}
