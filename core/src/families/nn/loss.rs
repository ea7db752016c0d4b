//! Losses: `F.cross_entropy` and HF's causal-LM loss.

use super::{cast, FP32, INT64, T};
use crate::component::Component;
use crate::graph::{Graph, Saves, Value};

/// `F.cross_entropy(logits, labels)` (torch's `CrossEntropyLoss`, as
/// classifiers and BERT's masked-LM head call it): `log_softmax` in the
/// logits' dtype, saving its output, then `nll_loss`, which autocast runs
/// in fp32 on a cast copy that it saves (the H200 trace of BERT amp
/// training: 238.5 MiB bf16 log-probabilities, then a 476.9 MiB fp32 copy
/// alive into backward). Returns the scalar loss; `logits` is not dropped.
pub fn cross_entropy(g: &mut Graph, autocast: bool, logits: T, rows: u64) -> Value {
    let labels = g.input(rows * INT64, Component::Transient);
    let lsm = g.op(
        "loss: log_softmax",
        &[logits.v],
        logits.bytes(),
        Component::Transient,
        Saves::output(),
    );
    let lsm = T { v: lsm, ..logits };
    let nll_input = if autocast && lsm.dsize != FP32 {
        let c = cast(g, lsm, FP32, "loss: nll_loss autocast cast to fp32");
        g.drop(lsm.v);
        c
    } else {
        lsm
    };
    // nll_loss saves its input (for its backward's shape and dtype).
    let loss = g.op(
        "loss: nll",
        &[nll_input.v],
        4,
        Component::Transient,
        Saves::inputs(&[nll_input.v, labels]),
    );
    g.drop_all(&[nll_input.v, labels]);
    loss
}

/// HF causal-LM loss over all tokens: `logits.float()`, then
/// `cross_entropy` (log_softmax saves its fp32 output). Returns the scalar
/// loss; `logits` is not dropped.
pub fn causal_lm_loss(g: &mut Graph, logits: T, rows: u64) -> T {
    let l32 = cast(g, logits, FP32, "loss: logits.float()");
    let labels = g.input(rows * INT64, Component::Transient);
    let lsm = g.op(
        "loss: log_softmax",
        &[l32.v],
        l32.elems * FP32,
        Component::Transient,
        Saves::output(),
    );
    let lsm = T {
        v: lsm,
        elems: l32.elems,
        dsize: FP32,
    };
    g.drop(l32.v);
    let loss = g.op(
        "loss: nll",
        &[lsm.v],
        4,
        Component::Transient,
        Saves::inputs(&[labels]),
    );
    g.drop_all(&[lsm.v, labels]);
    T {
        v: loss,
        elems: 1,
        dsize: FP32,
    }
}

/// `MSELoss` on a one-label regression head's (batch,) logits against fp32
/// labels (autocast runs it in fp32): saves both. Returns the scalar loss;
/// `logits` is not dropped.
pub fn mse_loss(g: &mut Graph, autocast: bool, logits: T) -> Value {
    let labels = g.input(logits.elems * FP32, Component::Transient);
    let input = if autocast && logits.dsize != FP32 {
        cast(g, logits, FP32, "loss: mse autocast cast to fp32")
    } else {
        logits
    };
    let loss = g.op(
        "loss: mse",
        &[input.v],
        4,
        Component::Transient,
        Saves::inputs(&[input.v, labels]),
    );
    if input.v != logits.v {
        g.drop(input.v);
    }
    g.drop(labels);
    loss
}
