//! Components: what each allocated byte is for (weights, gradients, KV
//! cache, ...). The replay tags every allocation with one; the estimate's
//! breakdown sums them.

/// Where bytes go. The first [`Component::IN_ALLOCATOR`] variants are
/// tensors inside PyTorch's allocator; the rest are outside it or slack.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[repr(u8)]
pub enum Component {
    /// Parameters and buffers (and autocast's low-precision weight copies).
    Weights = 0,
    /// Parameter gradients.
    Gradients,
    /// Optimizer state (moments, momentum buffers) and its step temporaries.
    OptimizerState,
    /// Keys and values kept for generation.
    KvCache,
    /// Activations kept alive: saved for backward, hidden states, outputs.
    Activations,
    /// Short-lived tensors of one op (MLP intermediates, logits, softmax).
    Transient,
    /// ESMFold's pair representation (L x L x 128) and what is kept of it.
    PairRepresentation,
    /// ESMFold's transients over the pair representation (triangle ops).
    PairTransient,
    /// Library workspaces inside torch's allocator (cuBLAS: 32 MiB per handle).
    LibraryWorkspace,
    /// CUDA context (outside the allocator).
    CudaContext,
    /// Library handles and lazily loaded kernels (outside the allocator).
    Libraries,
    /// Reserved by the allocator but not allocated: cache and fragmentation.
    AllocatorSlack,
}

impl Component {
    /// Components that are tensors in torch's allocator.
    pub const IN_ALLOCATOR: usize = 9;

    /// Every component, in breakdown order.
    pub const ALL: [Component; 12] = [
        Component::CudaContext,
        Component::Libraries,
        Component::Weights,
        Component::Gradients,
        Component::OptimizerState,
        Component::KvCache,
        Component::Activations,
        Component::PairRepresentation,
        Component::PairTransient,
        Component::Transient,
        Component::LibraryWorkspace,
        Component::AllocatorSlack,
    ];

    pub(crate) const INDEXED: [Component; Component::IN_ALLOCATOR] = [
        Component::Weights,
        Component::Gradients,
        Component::OptimizerState,
        Component::KvCache,
        Component::Activations,
        Component::Transient,
        Component::PairRepresentation,
        Component::PairTransient,
        Component::LibraryWorkspace,
    ];

    /// Label for tables and charts.
    pub fn label(self) -> &'static str {
        match self {
            Component::Weights => "weights",
            Component::Gradients => "gradients",
            Component::OptimizerState => "optimizer state",
            Component::KvCache => "KV cache",
            Component::Activations => "saved activations",
            Component::Transient => "transient workspace",
            Component::PairRepresentation => "pair representation",
            Component::PairTransient => "pair transients",
            Component::LibraryWorkspace => "cuBLAS workspace",
            Component::CudaContext => "CUDA context",
            Component::Libraries => "library kernels & handles",
            Component::AllocatorSlack => "allocator slack",
        }
    }

    /// Stable key for JSON, CSV and URLs.
    pub fn key(self) -> &'static str {
        match self {
            Component::Weights => "weights",
            Component::Gradients => "gradients",
            Component::OptimizerState => "optimizer_state",
            Component::KvCache => "kv_cache",
            Component::Activations => "activations",
            Component::Transient => "transient",
            Component::PairRepresentation => "pair_representation",
            Component::PairTransient => "pair_transient",
            Component::LibraryWorkspace => "library_workspace",
            Component::CudaContext => "cuda_context",
            Component::Libraries => "libraries",
            Component::AllocatorSlack => "allocator_slack",
        }
    }
}
