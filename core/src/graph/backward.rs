//! The autograd engine: nodes run in reverse order, gradients allocated,
//! accumulated, shared by additions and freed; checkpoint boundaries and
//! their recompute.

use super::{CheckpointHit, Detached, GradOrder, Graph, Node, SavedTensorHooks, Value};
use crate::component::Component;
use crate::trace::Tensor;
use alloc::vec::Vec;

impl Graph<'_> {
    fn holders(&self, grad: Tensor) -> u32 {
        1 + self
            .shared_grads
            .iter()
            .find(|(t, _)| *t == grad)
            .map_or(0, |&(_, extra)| extra)
    }

    pub(super) fn share_grad(&mut self, grad: Tensor) {
        match self.shared_grads.iter_mut().find(|(t, _)| *t == grad) {
            Some((_, extra)) => *extra += 1,
            None => self.shared_grads.push((grad, 1)),
        }
    }

    /// A holder lets go of a gradient; the last one frees it.
    pub(super) fn drop_grad(&mut self, grad: Tensor) {
        match self.shared_grads.iter().position(|(t, _)| *t == grad) {
            Some(i) if self.shared_grads[i].1 > 1 => self.shared_grads[i].1 -= 1,
            Some(i) => {
                let _last_holder = self.shared_grads.swap_remove(i);
            }
            None => self.replay.free(grad),
        }
    }

    /// Nodes recorded so far (a mark for [`Graph::backward_run`]).
    pub fn mark(&self) -> usize {
        self.nodes.len()
    }

    /// A checkpointed segment's forward starts (non-reentrant
    /// checkpointing): grad mode stays on and the ops that save tensors
    /// are counted, none kept, until [`Graph::checkpoint`] closes it.
    /// Outside grad mode it changes nothing.
    pub fn begin_checkpoint(&mut self) {
        debug_assert_eq!(self.hooks, SavedTensorHooks::Off, "checkpoints do not nest");
        if self.grad_mode {
            self.hooks = SavedTensorHooks::Placeholders { saving_ops: 0 };
        }
    }

    /// Records a checkpoint boundary: `output` was computed from `input`
    /// without saving anything; backward will stop here (see [`CheckpointHit`]).
    /// After [`Graph::begin_checkpoint`] it closes the segment and keeps
    /// its count of saving ops for the recompute's early stop.
    pub fn checkpoint(&mut self, segment: u32, input: Value, output: Value) {
        let saving_ops = match core::mem::replace(&mut self.hooks, SavedTensorHooks::Off) {
            SavedTensorHooks::Placeholders { saving_ops } => Some(saving_ops),
            _ => None,
        };
        let kept = core::mem::take(&mut self.kept_outside_hooks);
        if !self.grad_mode || !self.requires_grad(input) {
            for v in kept {
                self.release(v);
            }
            return;
        }
        self.st_mut(output).requires_grad = true;
        self.retain(input);
        let mut saved = [Some(input), None, None, None, None];
        for (i, v) in kept.into_iter().enumerate() {
            match saved.get_mut(i + 1) {
                Some(slot) => *slot = Some(v),
                // More than a boundary holds: let the rest go (not seen in
                // a decoder layer, whose 8-bit linears read four inputs).
                None => self.release(v),
            }
        }
        self.nodes.push(Node {
            inputs: [Some(input), None, None],
            saved,
            checkpoint: Some(segment),
            saving_ops,
            ..Node::new("checkpoint", self.layer, output)
        });
    }

    /// An op of a checkpointed segment keeps `v` as a plain attribute of
    /// its autograd context rather than through `save_for_backward`
    /// (bitsandbytes' `MatMul8bitLt` keeps its input in `ctx.tensors`):
    /// checkpointing's hooks never see it, so it lives until the segment's
    /// backward. Outside a segment's forward, nothing to do (the op's node
    /// saves it, or its recompute's copy goes with the recompute).
    pub fn keep_outside_hooks(&mut self, v: Value) {
        if matches!(self.hooks, SavedTensorHooks::Placeholders { .. })
            && !self.kept_outside_hooks.contains(&v)
        {
            self.retain(v);
            self.kept_outside_hooks.push(v);
        }
    }

    /// A checkpointed segment's forward or recompute is running: ops save
    /// through the hooks.
    pub fn in_checkpoint(&self) -> bool {
        self.hooks != SavedTensorHooks::Off
    }

    /// Runs `recompute` for a checkpoint boundary: with the segment's
    /// count of saving ops, recomputation stops after the last of them
    /// (early stop); without, the segment runs whole.
    fn recompute_segment(
        &mut self,
        hit_segment: u32,
        input: Value,
        saving_ops: Option<u32>,
        recompute: &mut dyn FnMut(&mut Graph, u32, Value) -> Value,
    ) -> Value {
        self.hooks = match saving_ops {
            Some(0) => SavedTensorHooks::Stopped,
            Some(n) => SavedTensorHooks::Recompute { saving_ops_left: n },
            None => SavedTensorHooks::Off,
        };
        self.recomputing = true;
        let out = recompute(self, hit_segment, input);
        self.recomputing = false;
        debug_assert!(
            matches!(
                self.hooks,
                SavedTensorHooks::Stopped | SavedTensorHooks::Off
            ),
            "a recompute saved fewer tensors than its forward: {:?}",
            self.hooks
        );
        self.hooks = SavedTensorHooks::Off;
        out
    }

    /// Recomputes a checkpointed segment for backward, hands it the
    /// boundary's gradient `grad`, and returns the mark to run backward
    /// down to. With the segment's count of saving ops (non-reentrant
    /// checkpointing) the recompute starts only when backward unpacks a
    /// saved tensor: the segment's last ops that saved nothing (a residual
    /// addition) run their backward first. The segment is rehearsed to
    /// find them (every node recorded, nothing allocated), their backward
    /// runs, the rehearsal is dropped, and the recompute's matching nodes
    /// take the gradients they left. The H200 trace of checkpointed
    /// Llama-3.2-1B amp training (`measurements/h200-parallel/traces/
    /// llama1b_zero1_w1_amp_bf16_b4_L1024_ckpt1.trace.json.gz`, event
    /// 2,673): the residual addition's 16 MiB bf16 cast of the fp32
    /// gradient for `down_proj`'s output is allocated before the
    /// recompute's first allocation (the input norm's, event 2,674).
    pub(super) fn recompute_for_backward(
        &mut self,
        segment: u32,
        input: Value,
        saving_ops: Option<u32>,
        grad: Option<Tensor>,
        recompute: &mut dyn FnMut(&mut Graph, u32, Value) -> Value,
    ) -> usize {
        let mark = self.mark();
        let (grad, tail, carried) = match (saving_ops, grad) {
            (Some(_), Some(grad)) => self.rehearse_tail(segment, input, grad, recompute),
            (_, grad) => (grad, 0, Vec::new()),
        };
        let out = self.recompute_segment(segment, input, saving_ops, recompute);
        debug_assert!(
            carried
                .iter()
                .all(|&(at, _, _)| mark + at < self.nodes.len() - tail),
            "the recompute recorded other nodes than its rehearsal"
        );
        for _ in 0..tail {
            let node = self.nodes.pop().expect("the rehearsed tail");
            self.release_saved(&node);
        }
        for (at, g, is_view) in carried {
            let v = self.nodes[mark + at].output;
            let state = self.st_mut(v);
            state.grad = Some(g);
            state.grad_is_view = is_view;
        }
        if let Some(grad) = grad {
            self.set_grad(out, grad);
        }
        self.drop(out);
        mark
    }

    /// Records `recompute` without running it, runs backward through the
    /// trailing nodes that saved nothing and drops the rest. Returns the
    /// boundary's gradient if no node took it, the count of those nodes,
    /// and each gradient they left: the index (from the mark) of the
    /// rehearsed node whose output holds it, and whether it is a view.
    fn rehearse_tail(
        &mut self,
        segment: u32,
        input: Value,
        grad: Tensor,
        recompute: &mut dyn FnMut(&mut Graph, u32, Value) -> Value,
    ) -> (Option<Tensor>, usize, Vec<(usize, Tensor, bool)>) {
        let mark = self.mark();
        self.hooks = SavedTensorHooks::Rehearsal;
        self.recomputing = true;
        let out = recompute(self, segment, input);
        self.recomputing = false;
        self.hooks = SavedTensorHooks::Off;
        let tail = self.nodes[mark..]
            .iter()
            .rev()
            .take_while(|n| n.saved.iter().all(Option::is_none) && n.extra.is_none())
            .count();
        let mut grad = Some(grad);
        if tail > 0 {
            self.set_grad(out, grad.take().expect("held"));
            for _ in 0..tail {
                let node = self.nodes.pop().expect("a rehearsed node");
                self.backward_node(node);
            }
        }
        let mut carried = Vec::new();
        for at in (0..self.nodes.len() - mark).rev() {
            let v = self.nodes[mark + at].output;
            if let Some(g) = self.st_mut(v).grad.take() {
                carried.push((at, g, self.st(v).grad_is_view));
            }
        }
        while self.nodes.len() > mark {
            let node = self.nodes.pop().expect("a rehearsed node");
            self.release_saved(&node);
        }
        if let Some(g) = self.st_mut(out).grad.take() {
            grad = Some(g);
        }
        self.drop(out);
        (grad, tail, carried)
    }

    /// Runs backward from `loss` through every recorded node (no checkpoints).
    pub fn backward(&mut self, loss: Value) {
        self.seed(loss);
        while let Some(hit) = self.backward_run(0) {
            // Without a recompute callback a checkpoint passes gradients straight through.
            if let Some(g) = hit.grad {
                self.drop_grad(g);
            }
            self.release_detached(hit.held);
        }
        self.finish_accumulating();
    }

    /// Runs backward from `loss` with non-reentrant gradient checkpointing:
    /// at each checkpoint boundary (last segment first) `recompute(graph,
    /// segment, input)` runs the segment's forward again from its saved
    /// input, in grad mode, and returns its output; the boundary's gradient
    /// flows into that output, backward runs through the recomputed nodes,
    /// and what they and the boundary held is released before the next
    /// segment.
    pub fn backward_recomputing(
        &mut self,
        loss: Value,
        recompute: &mut dyn FnMut(&mut Graph, u32, Value) -> Value,
    ) {
        self.seed(loss);
        while let Some(hit) = self.backward_run(0) {
            let mark = self.recompute_for_backward(
                hit.segment,
                hit.input,
                hit.saving_ops,
                hit.grad,
                recompute,
            );
            while let Some(inner) = self.backward_run(mark) {
                if let Some(grad) = inner.grad {
                    self.drop_grad(grad);
                }
                self.release_detached(inner.held);
            }
            self.release_detached(hit.held);
        }
        self.finish_accumulating();
    }

    /// Seeds the gradient of `loss` with ones, starting a backward pass.
    pub fn seed(&mut self, loss: Value) {
        self.set_aside_earlier_grads();
        let seed_bytes = self.bytes(loss);
        let seed = self.replay.alloc(seed_bytes, Component::Transient);
        self.st_mut(loss).grad = Some(seed);
        self.gemm();
    }

    /// Runs recorded nodes in reverse down to `mark`; stops at a checkpoint
    /// boundary and returns it.
    pub fn backward_run(&mut self, mark: usize) -> Option<CheckpointHit> {
        while self.nodes.len() > mark {
            let node = self.nodes.pop().expect("non-empty");
            if let Some(segment) = node.checkpoint {
                let grad = self.st_mut(node.output).grad.take();
                let input = node.inputs[0].expect("checkpoint input");
                return Some(CheckpointHit {
                    segment,
                    input,
                    grad,
                    saving_ops: node.saving_ops,
                    held: Detached {
                        output: node.output,
                        saved: node.saved,
                        extra: node.extra,
                    },
                });
            }
            self.backward_node(node);
        }
        None
    }

    pub(super) fn backward_node(&mut self, node: Node) {
        self.replay.op(node.name, node.layer);
        if node.in_place {
            match node.inputs[0] {
                // `target += other`: both hold the one gradient.
                Some(other) => {
                    let grad = self.st(node.output).grad;
                    if let (Some(g), true) = (grad, self.st(other).requires_grad) {
                        self.share_grad(g);
                        if self.st(other).grad.is_some() {
                            self.accumulate(other, g);
                        } else {
                            self.st_mut(other).grad = Some(g);
                        }
                    }
                    self.contribution_done(other);
                }
                // `relu_`: its backward (`threshold_backward`) writes a
                // fresh gradient for the producer, then the incoming
                // gradient and the saved output are released (the H200
                // trace of ResNet-18 amp training: a 6.12 MiB allocation,
                // then two 6.12 MiB frees, at each in-place ReLU).
                None => {
                    if let Some(incoming) = self.st_mut(node.output).grad.take() {
                        let bytes = self.st(node.output).bytes;
                        let fresh = self.replay.alloc(bytes, Component::Transient);
                        self.drop_grad(incoming);
                        self.st_mut(node.output).grad = Some(fresh);
                    }
                }
            }
            for s in node.saved.iter().flatten() {
                self.release(*s);
            }
            return;
        }
        let grad_out = self.st_mut(node.output).grad.take();
        // Gradients for inputs that already hold one: the engine adds them
        // once the node has run (`InputBuffer::accumulate`), after the
        // node's own gradient output and saved tensors are released.
        let mut accumulated: [Option<(Value, Tensor)>; 3] = [None; 3];
        let out_bytes = self.st(node.output).bytes;
        if grad_out.is_some() {
            if node.backward_workspace > 0 {
                self.replay
                    .touch(node.backward_workspace, Component::Transient);
            }
            let mut temporaries = [None; 4];
            if let Some(first) = node.inputs[0] {
                let bytes = self.st(first).bytes;
                for t in temporaries
                    .iter_mut()
                    .take(usize::from(node.backward_temporaries))
                {
                    *t = Some(self.replay.alloc(bytes, Component::Transient));
                }
            }
            let order = match node.gemm {
                Some(GradOrder::WeightFirst) => [1, 0, 2],
                _ if node.other_grad_first => [1, 0, 2],
                _ => [0, 1, 2],
            };
            for (slot, &i) in order.iter().enumerate() {
                let Some(input) = node.inputs[i] else {
                    continue;
                };
                let s = self.st(input);
                if !s.requires_grad || (node.stacked && s.grad.is_some()) {
                    // A later view of `unbind` writes into the stack the
                    // first one made.
                    continue;
                }
                let (leaf, bytes) = (s.leaf_param, s.bytes);
                let component = if leaf {
                    Component::Gradients
                } else {
                    Component::Transient
                };
                let passed = match grad_out {
                    Some(out) if node.addition && !leaf && bytes == out_bytes => {
                        self.share_grad(out);
                        Some(out)
                    }
                    Some(out) if node.grads_are_views => {
                        self.share_grad(out);
                        Some(out)
                    }
                    _ => None,
                };
                let g = match passed {
                    Some(out) => out,
                    None => {
                        let wide = node.wide_grads.get(i).copied().unwrap_or(0);
                        let computed =
                            (wide > 0).then(|| self.replay.alloc(wide, Component::Transient));
                        let g = self.replay.alloc(bytes, component);
                        if let Some(t) = computed {
                            self.replay.free(t);
                        }
                        g
                    }
                };
                if node.gemm.is_some() {
                    self.autograd_gemm();
                }
                if leaf {
                    self.note_grad_ready(input);
                }
                let copied_out = leaf && self.leaf_grads_copied_out;
                let s = self.st_mut(input);
                if copied_out {
                    self.drop_grad(g);
                } else if s.grad.is_some() {
                    accumulated[slot] = Some((input, g));
                } else {
                    s.grad = Some(g);
                    s.grad_is_view = node.gemm.is_some() || node.grads_are_views;
                }
                match node.backward_scratch.get(i) {
                    Some(&bytes) if node.scratch_per_input && bytes > 0 => {
                        self.replay.touch(bytes, Component::Transient);
                    }
                    _ => {}
                }
            }
            for t in temporaries.into_iter().rev().flatten() {
                self.replay.free(t);
            }
            if !node.scratch_per_input && node.backward_row_sums > 0 {
                let [product, workspace] = node.backward_scratch;
                let product = self.replay.alloc(product, Component::Transient);
                let sums = self
                    .replay
                    .alloc(node.backward_row_sums, Component::Transient);
                let delta = self
                    .replay
                    .alloc(node.backward_row_sums, Component::Transient);
                self.replay.free(sums);
                self.replay.free(product);
                self.replay.touch(workspace, Component::Transient);
                self.replay.free(delta);
            } else if !node.scratch_per_input {
                for bytes in node.backward_scratch {
                    if bytes > 0 {
                        self.replay.touch(bytes, Component::Transient);
                    }
                }
            }
        }
        // The broadcast operand's full-size gradient comes out of the
        // backward function; the engine then reduces it to the operand's
        // shape (`validate_outputs`' `sum_to`).
        let [full, reduction] = node.backward_nested;
        let full =
            (grad_out.is_some() && full > 0).then(|| self.replay.alloc(full, Component::Transient));
        if node.recomputed {
            // A checkpoint hands each recomputed tensor over once: the
            // backward function's unpacked copy is the last reference,
            // gone when the function returns, before the engine reduces
            // broadcast gradients and lets go of the incoming one.
            self.release_saved(&node);
        }
        if grad_out.is_some() && reduction > 0 {
            self.replay.touch(reduction, Component::Transient);
        }
        if let Some(t) = full {
            self.replay.free(t);
        }
        if let Some(g) = grad_out {
            self.drop_grad(g);
        }
        if !node.recomputed {
            self.release_saved(&node);
        }
        for (input, new) in accumulated.into_iter().flatten() {
            self.accumulate(input, new);
        }
        if !self.earlier_grads.is_empty() {
            for input in node.inputs.into_iter().flatten() {
                self.contribution_done(input);
            }
        }
    }

    /// A node's saved tensors and buffer are let go of.
    fn release_saved(&mut self, node: &Node) {
        if let Some(t) = node.extra {
            self.replay.free(t);
        }
        for s in node.saved.iter().flatten() {
            self.release(*s);
        }
    }

    /// `InputBuffer::accumulate`: adds `new` into the gradient `input`
    /// holds, in place when that gradient has no other holder and is not
    /// a view, else into a fresh sum (`old_var + var`), freeing both (the
    /// new gradient is never the one added into: PyTorch does that only
    /// for sparse gradients). Views are matrix multiplies' gradients (see
    /// `ValueState::grad_is_view`). A tied embedding's two gradients (the
    /// head's, then the lookup's) are summed into a fresh tensor when the
    /// head multiplied by the parameter itself (the H200 traces of BERT
    /// fp32, GPT-2 bf16 and Llama-3.2-1B fp32 training: a vocabulary-sized
    /// sum, then both operands freed), in place when it multiplied by
    /// autocast's cast of it (GPT-2 amp: the cast's backward made a fresh
    /// fp32 gradient). A norm's output read by two projections gets two
    /// views, summed into a fresh tensor (the H200 traces of Llama bf16
    /// training, full and LoRA, `trace-segments-28.jsonl.gz` and
    /// `trace-segments-6.jsonl` in `measurements/h200-generalization/`:
    /// after `gate_proj`'s backward a sum the size of the norm's output,
    /// then both gradients freed).
    fn accumulate(&mut self, input: Value, new: Tensor) {
        let old = self
            .st(input)
            .grad
            .expect("accumulating into a held gradient");
        let state = self.st(input);
        if self.holders(old) == 1 && !state.grad_is_view {
            self.drop_grad(new);
        } else {
            let state = self.st(input);
            let component = if state.leaf_param {
                Component::Gradients
            } else {
                Component::Transient
            };
            let sum = self.replay.alloc(state.bytes, component);
            self.st_mut(input).grad = Some(sum);
            self.st_mut(input).grad_is_view = false;
            self.drop_grad(old);
            self.drop_grad(new);
        }
    }

    /// Gradient accumulation, as `AccumulateGrad` does it: a leaf parameter
    /// that already holds a `.grad` when a backward starts keeps it, and
    /// the gradient this backward makes for it (summed over its
    /// contributions first, as in a first backward: a tied embedding's
    /// two) is added into it in place once its last contribution arrived,
    /// then freed. The held gradients are set aside here and the
    /// contributions each awaits counted from the recorded nodes.
    fn set_aside_earlier_grads(&mut self) {
        self.earlier_grads.clear();
        if !self.values.iter().any(|v| v.leaf_param && v.grad.is_some()) {
            return;
        }
        self.earlier_grads.resize(self.values.len(), None);
        for (i, v) in self.values.iter_mut().enumerate() {
            if let (true, Some(grad)) = (v.leaf_param, v.grad.take()) {
                self.earlier_grads[i] = Some((grad, 0));
                v.grad_is_view = false;
            }
        }
        for node in &self.nodes {
            for input in node.inputs.iter().flatten() {
                if let Some((_, pending)) = &mut self.earlier_grads[input.index as usize] {
                    *pending += 1;
                }
            }
        }
    }

    /// A node that takes `input` has run: once the last one has, the new
    /// gradient is added into the one set aside.
    fn contribution_done(&mut self, input: Value) {
        let index = input.index as usize;
        let Some(Some((_, pending))) = self.earlier_grads.get_mut(index) else {
            return;
        };
        *pending = pending.saturating_sub(1);
        if *pending == 0 {
            self.fold_into_earlier(index);
        }
    }

    /// `variable.grad += new_grad` (in place), then the new one goes.
    fn fold_into_earlier(&mut self, index: usize) {
        let Some((earlier, _)) = self.earlier_grads[index].take() else {
            return;
        };
        if let Some(new) = self.values[index].grad.take() {
            self.drop_grad(new);
        }
        self.values[index].grad = Some(earlier);
        self.values[index].grad_is_view = false;
    }

    /// The end of a backward pass: a held gradient whose awaited
    /// contributions never came (their nodes were recorded and not run)
    /// takes the new one now.
    pub(super) fn finish_accumulating(&mut self) {
        for index in 0..self.earlier_grads.len() {
            self.fold_into_earlier(index);
        }
        self.earlier_grads.clear();
    }

    /// Starts recording the order in which parameters' gradients become
    /// ready (see [`Graph::take_grad_ready_order`]).
    pub fn record_grad_ready_order(&mut self) {
        self.grad_ready_order = Some(alloc::vec::Vec::new());
    }

    /// The parameters in the order their gradients became ready since
    /// [`Graph::record_grad_ready_order`] (each placed at its last
    /// contribution: a tied embedding's gradient is ready after the lookup's
    /// backward, not the head's), and stops recording.
    pub fn take_grad_ready_order(&mut self) -> alloc::vec::Vec<Value> {
        self.grad_ready_order.take().unwrap_or_default()
    }

    fn note_grad_ready(&mut self, param: Value) {
        if let Some(order) = self.grad_ready_order.as_mut() {
            order.retain(|&v| v != param);
            order.push(param);
        }
    }

    /// Removes the most recent node without running its backward, handing
    /// back what it held (a checkpoint boundary, resumed by the caller).
    pub fn pop_node(&mut self) -> Option<Detached> {
        let node = self.nodes.pop()?;
        Some(Detached {
            output: node.output,
            saved: node.saved,
            extra: node.extra,
        })
    }

    /// Releases what a popped node held.
    pub fn release_detached(&mut self, d: Detached) {
        if let Some(t) = d.extra {
            self.replay.free(t);
        }
        for s in d.saved.iter().flatten() {
            self.release(*s);
        }
    }

    /// Moves a value's gradient out (for chaining checkpointed segments).
    pub fn take_grad(&mut self, v: Value) -> Option<Tensor> {
        self.st_mut(v).grad.take()
    }

    /// Sets a value's gradient.
    pub fn set_grad(&mut self, v: Value, g: Tensor) {
        self.st_mut(v).grad = Some(g);
    }

    /// Gradient bytes held as `.grad` by leaf parameters.
    pub fn has_grad(&self, v: Value) -> bool {
        self.st(v).grad.is_some()
    }

    /// `optimizer.zero_grad(set_to_none=True)`: frees every `.grad`, and any
    /// gradient left on non-leaf values.
    pub fn zero_grad(&mut self) {
        for i in 0..self.values.len() {
            if let Some(g) = self.values[i].grad.take() {
                self.drop_grad(g);
            }
            self.values[i].grad_is_view = false;
        }
    }

    /// Drops every recorded node without running backward (no-grad exit, or
    /// an exception), releasing what they saved.
    pub fn discard_nodes(&mut self, mark: usize) {
        while self.nodes.len() > mark {
            let node = self.nodes.pop().expect("non-empty");
            if let Some(t) = node.extra {
                self.replay.free(t);
            }
            for s in node.saved.iter().flatten() {
                self.release(*s);
            }
        }
    }
}
