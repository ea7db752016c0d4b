//! Optimizer steps as `torch.optim` runs them on CUDA (foreach
//! implementations, the default there), and training-loop plumbing shared
//! by the families.

use crate::estimate::Component;
use crate::graph::{Graph, Value};
use crate::trace::Tensor;
use crate::workload::Optimizer;
use alloc::vec::Vec;

/// A trainable parameter: its value and shape (rows x cols; cols = 1 for vectors).
#[derive(Clone, Copy, Debug)]
pub struct Trainable {
    /// The parameter.
    pub value: Value,
    /// Bytes per element.
    pub dsize: u64,
    /// Rows (first dims flattened).
    pub rows: u64,
    /// Columns (last dim), 1 for vectors.
    pub cols: u64,
}

impl Trainable {
    fn bytes(&self) -> u64 {
        self.rows * self.cols * self.dsize
    }
}

/// Optimizer state that persists across steps.
#[derive(Debug, Default)]
pub struct OptimizerState {
    tensors: Vec<Tensor>,
}

/// Allocates the optimizer state up front (a run resumed with its
/// optimizer state already on the GPU).
pub fn preallocate(
    g: &mut Graph,
    optimizer: Optimizer,
    params: &[Trainable],
    state: &mut OptimizerState,
) {
    g.at("optimizer state (resident)", None);
    for p in params {
        match optimizer {
            Optimizer::Adamw => {
                state
                    .tensors
                    .push(g.replay.alloc(p.bytes(), Component::OptimizerState));
                state
                    .tensors
                    .push(g.replay.alloc(p.bytes(), Component::OptimizerState));
            }
            Optimizer::SgdMomentum => state
                .tensors
                .push(g.replay.alloc(p.bytes(), Component::OptimizerState)),
            Optimizer::Sgd => {}
            Optimizer::Adafactor => {
                if p.cols > 1 {
                    state
                        .tensors
                        .push(g.replay.alloc(p.rows * 4, Component::OptimizerState));
                    state
                        .tensors
                        .push(g.replay.alloc(p.cols * 4, Component::OptimizerState));
                } else {
                    state
                        .tensors
                        .push(g.replay.alloc(p.bytes(), Component::OptimizerState));
                }
            }
        }
    }
}

/// One `optimizer.step()`; creates the state on the first call
/// (`_init_group`: per parameter, in order).
pub fn step(g: &mut Graph, optimizer: Optimizer, params: &[Trainable], state: &mut OptimizerState) {
    let first = state.tensors.is_empty();
    match optimizer {
        Optimizer::Adamw => {
            if first {
                g.at("optimizer: AdamW state init (exp_avg, exp_avg_sq)", None);
                for p in params {
                    state
                        .tensors
                        .push(g.replay.alloc(p.bytes(), Component::OptimizerState));
                    state
                        .tensors
                        .push(g.replay.alloc(p.bytes(), Component::OptimizerState));
                }
            }
            // _multi_tensor_adam: exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs),
            // one temporary per parameter, all alive until the update is done.
            g.at("optimizer: AdamW step (_foreach_sqrt temporaries)", None);
            let temps: Vec<Tensor> = params
                .iter()
                .map(|p| g.replay.alloc(p.bytes(), Component::OptimizerState))
                .collect();
            g.replay.free_all(temps);
        }
        Optimizer::SgdMomentum => {
            if first {
                // momentum_buffer = torch.clone(grad).detach() on the first step.
                g.at("optimizer: SGD momentum buffers", None);
                for p in params {
                    state
                        .tensors
                        .push(g.replay.alloc(p.bytes(), Component::OptimizerState));
                }
            }
        }
        Optimizer::Sgd => {}
        Optimizer::Adafactor => {
            if first {
                g.at("optimizer: Adafactor state init (row/col variances)", None);
                for p in params {
                    if p.cols > 1 {
                        state
                            .tensors
                            .push(g.replay.alloc(p.rows * 4, Component::OptimizerState));
                        state
                            .tensors
                            .push(g.replay.alloc(p.cols * 4, Component::OptimizerState));
                    } else {
                        state
                            .tensors
                            .push(g.replay.alloc(p.bytes(), Component::OptimizerState));
                    }
                }
            }
            // _multi_tensor_adafactor: var_estimate = row_var @ col_var for
            // every matrix at once (parameter-sized temporaries).
            g.at("optimizer: Adafactor step (variance estimates)", None);
            let temps: Vec<Tensor> = params
                .iter()
                .map(|p| {
                    g.replay
                        .alloc(p.rows * p.cols * 4, Component::OptimizerState)
                })
                .collect();
            g.replay.free_all(temps);
        }
    }
}
