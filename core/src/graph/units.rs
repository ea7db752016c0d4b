//! What data-parallel wrappers do to a program: parameters whose storage
//! comes and goes (FSDP2's unsharded parameters, `resize_` to zero and
//! back), gradients that are views of one buffer, and a backward pass that
//! tells the caller when it enters and leaves each layer (FSDP2's
//! pre-backward and post-backward hooks).

use super::{Graph, ValueState};
use crate::component::Component;
use crate::graph::Value;
use crate::trace::Tensor;

/// Recomputes checkpointed segment `segment` from its saved input and
/// returns the segment's output (see [`Graph::backward_recomputing`]).
pub type Recompute<'a> = &'a mut dyn FnMut(&mut Graph, u32, Value) -> Value;

/// Where a backward pass with unit events is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnitEvent {
    /// The loss's gradient exists; no node has run yet (hooks on the
    /// model's outputs fire here).
    Start,
    /// The first node of layer `n` is about to run (the gradient of the
    /// layer's output is complete).
    Enter(u32),
    /// The last node of layer `n` has run (the gradient of the layer's
    /// input is complete).
    Leave(u32),
    /// Every node has run (the engine's final callbacks).
    End,
}

impl Graph<'_> {
    /// A parameter (requiring a gradient) whose storage does not exist yet:
    /// an FSDP2 unit's unsharded parameter before its first gather.
    pub fn param_deferred(&mut self, bytes: u64) -> Value {
        self.push(ValueState {
            bytes,
            component: Component::Weights,
            storage: None,
            refs: 1,
            requires_grad: true,
            leaf_param: true,
            grad: None,
            grad_is_view: false,
            base: None,
        })
    }

    /// Allocates the storage of a value that has none (`alloc_storage`).
    pub fn materialise(&mut self, v: Value) {
        if self.st(v).storage.is_none() {
            let (bytes, component) = (self.st(v).bytes, self.st(v).component);
            let t = self.replay.alloc(bytes, component);
            self.st_mut(v).storage = Some(t);
        }
    }

    /// Frees the storage of a value that stays referenced (`free_storage`:
    /// `resize_(0)`; autograd's saved references see it again once it is
    /// materialised).
    pub fn free_storage(&mut self, v: Value) {
        if let Some(t) = self.st_mut(v).storage.take() {
            self.replay.free(t);
        }
    }

    /// Lets go of a tensor handed out by [`Graph::take_grad`].
    pub fn release_tensor(&mut self, t: Tensor) {
        self.drop_grad(t);
    }

    /// Makes `t` the gradient of every value in `values` (views of one
    /// buffer); the buffer is freed when the last of them lets go.
    pub fn share_grad_among(&mut self, values: &[Value], t: Tensor) {
        for (i, &v) in values.iter().enumerate() {
            if i > 0 {
                self.share_grad(t);
            }
            if let Some(old) = self.st_mut(v).grad.replace(t) {
                self.drop_grad(old);
            }
        }
        if values.is_empty() {
            self.replay.free(t);
        }
    }

    /// Runs backward from `loss` as [`Graph::backward_recomputing`] does
    /// (without `recompute`, checkpoints pass gradients through), telling
    /// `units` when the pass starts, enters and leaves each layer (by the
    /// layer the nodes were recorded in), and ends.
    pub fn backward_with_units(
        &mut self,
        loss: Value,
        mut recompute: Option<Recompute>,
        units: &mut dyn FnMut(&mut Graph, UnitEvent),
    ) {
        self.seed(loss);
        units(self, UnitEvent::Start);
        let mut current: Option<u32> = None;
        while let Some(layer) = self.nodes.last().map(|n| n.layer) {
            if layer != current {
                if let Some(left) = current {
                    units(self, UnitEvent::Leave(left));
                }
                if let Some(entered) = layer {
                    units(self, UnitEvent::Enter(entered));
                }
                current = layer;
            }
            let node = self.nodes.pop().expect("non-empty");
            let Some(segment) = node.checkpoint else {
                self.backward_node(node);
                continue;
            };
            let grad = self.st_mut(node.output).grad.take();
            let input = node.inputs[0].expect("checkpoint input");
            let held = super::Detached {
                output: node.output,
                saved: node.saved,
                extra: node.extra,
            };
            match recompute.as_mut() {
                Some(recompute) => {
                    let mark = self.recompute_for_backward(
                        segment,
                        input,
                        node.saving_ops,
                        grad,
                        *recompute,
                    );
                    while let Some(inner) = self.backward_run(mark) {
                        if let Some(grad) = inner.grad {
                            self.drop_grad(grad);
                        }
                        self.release_detached(inner.held);
                    }
                }
                None => {
                    if let Some(grad) = grad {
                        self.drop_grad(grad);
                    }
                }
            }
            self.release_detached(held);
        }
        if let Some(left) = current {
            units(self, UnitEvent::Leave(left));
        }
        units(self, UnitEvent::End);
        self.finish_accumulating();
    }
}
