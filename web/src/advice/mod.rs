//! A suggestion of the advice panel in the page's words: each setting it
//! changes as the form labels it (not the spec's keys), and the page's link
//! with the suggestion applied, which its Apply link opens. Only the
//! panels module calls these (the page's own module leaves them out).
//!
//! The feature's files: this one (native, tested natively), `panel.rs`
//! (the page's own module) and `body.rs` (the panels module).

/// The suggestions as the panels module shows them.
#[cfg(target_arch = "wasm32")]
pub mod body;
/// The panel on the page: the card's "does not fit" button and the
/// container the panels module fills.
#[cfg(target_arch = "wasm32")]
pub mod panel;

use crate::state::AppState;
use crate::vocab::Choice;
use headroom_core::workload::Workload;
use headroom_core::RuntimeProfile;

/// What `after` changes from `before`, one phrase per setting, in the
/// form's words ("gradient checkpointing", "batch size 4").
pub fn changes_in_words(
    before: (&Workload, &RuntimeProfile),
    after: (&Workload, &RuntimeProfile),
    vision: bool,
) -> Vec<String> {
    let ((b, b_rt), (a, a_rt)) = (before, after);
    let mut out = Vec::new();
    let mut say = |changed: bool, words: String| {
        if changed {
            out.push(words);
        }
    };
    say(
        a_rt.allocator.expandable_segments && !b_rt.allocator.expandable_segments,
        "expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)".into(),
    );
    let (bt, at) = (&b.training, &a.training);
    say(
        at.implementation != bt.implementation,
        format!("the {} optimizer kernel", at.implementation.key()),
    );
    say(
        a.attention != b.attention,
        format!("attention: {}", a.attention.label()),
    );
    say(
        a.memory_format != b.memory_format,
        format!("memory format: {}", a.memory_format.label()),
    );
    say(
        at.grad_checkpointing != bt.grad_checkpointing,
        format!(
            "gradient checkpointing {}",
            if at.grad_checkpointing { "on" } else { "off" }
        ),
    );
    say(a.dtype != b.dtype, format!("weights: {}", a.dtype.label()));
    say(
        at.precision != bt.precision,
        format!("precision: {}", at.precision.label()),
    );
    say(
        at.optimizer != bt.optimizer,
        format!("optimizer: {}", at.optimizer.label()),
    );
    say(
        at.lora != bt.lora,
        match &at.lora {
            Some(lora) => format!("LoRA adapters, rank {}", lora.rank),
            None => "full fine-tuning".into(),
        },
    );
    say(
        a.esmfold.chunk_size != b.esmfold.chunk_size,
        match a.esmfold.chunk_size {
            Some(c) => format!("trunk chunk size {c}"),
            None => "no chunking".into(),
        },
    );
    say(
        a.inference.kv_dtype != b.inference.kv_dtype,
        match a.inference.kv_dtype {
            Some(d) => format!("KV cache: {}", d.label()),
            None => "KV cache in the weights' dtype".into(),
        },
    );
    say(
        a.inference.num_beams != b.inference.num_beams,
        format!("beams: {}", a.inference.num_beams),
    );
    say(a.batch != b.batch, format!("batch size {}", a.batch));
    say(
        at.gradient_accumulation_steps != bt.gradient_accumulation_steps,
        format!(
            "{} gradient accumulation steps",
            at.gradient_accumulation_steps
        ),
    );
    let (a_len, b_len) = (a.length(vision), b.length(vision));
    say(
        a_len != b_len,
        format!(
            "{} {a_len}",
            if vision {
                "image size"
            } else {
                "sequence length"
            }
        ),
    );
    say(
        a.parallel != b.parallel,
        format!(
            "{} over {} GPUs",
            a.parallel.strategy.label(),
            a.parallel.world_size
        ),
    );
    out
}

/// The page's query (`query`, the address's `?...`) with the suggestion's
/// workload in place and the advice panel closed, or `None` where the link
/// cannot carry the suggestion: a runtime change (the page has no field for
/// the allocator's settings), or a workload the link does not read back
/// exactly.
pub fn applied_query(query: &str, after: &Workload, runtime_changed: bool) -> Option<String> {
    if runtime_changed {
        return None;
    }
    let (mut state, _) = AppState::from_query(query, &[]);
    // The profile as the link names it (the panels module does not know
    // which profiles the page bundles; the page checks it on opening).
    if let Some((_, profile)) = crate::query::parse(query.trim_start_matches(['?', '#']))
        .into_iter()
        .find(|(key, _)| key == "profile")
    {
        state.profile = profile;
    }
    state.workload = after.clone();
    state.panels.advise = None;
    let applied = state.to_query();
    let (read_back, _) = AppState::from_query(&applied, &[state.profile.as_str()]);
    (read_back.workload == *after).then_some(applied)
}

#[cfg(test)]
mod tests {
    use super::*;
    use headroom_core::parallel::Strategy;
    use headroom_core::workload::Mode;

    fn llama_training() -> AppState {
        let (state, notes) =
            AppState::from_query("model=llama-3.1-8b&mode=training&seq_len=4096&batch=4", &[]);
        assert!(notes.is_empty(), "{notes:?}");
        state
    }

    #[test]
    fn each_changed_setting_is_said_in_the_forms_words() {
        let state = llama_training();
        let before = state.workload.clone();
        let rt = RuntimeProfile::h200();
        let mut after = before.clone();
        after.training.grad_checkpointing = true;
        after.batch = 1;
        after.training.gradient_accumulation_steps = 4;
        let words = changes_in_words((&before, &rt), (&after, &rt), false);
        assert_eq!(
            words,
            [
                "gradient checkpointing on",
                "batch size 1",
                "4 gradient accumulation steps"
            ]
        );
        assert!(words.iter().all(|w| !w.contains("workload.")));
        let mut fsdp = before.clone();
        fsdp.parallel.strategy = Strategy::Fsdp2;
        fsdp.parallel.world_size = 8;
        assert_eq!(
            changes_in_words((&before, &rt), (&fsdp, &rt), false),
            ["FSDP2 over 8 GPUs"]
        );
        let mut expandable = rt.clone();
        expandable.allocator.expandable_segments = true;
        assert_eq!(
            changes_in_words((&before, &rt), (&before, &expandable), false).len(),
            1
        );
    }

    #[test]
    fn the_applied_link_opens_the_suggestion_and_keeps_the_rest() {
        let state = llama_training();
        let query = format!("{}&profile=registry-7&advise=rtx-4090", state.to_query());
        let mut after = state.workload.clone();
        after.training.grad_checkpointing = true;
        after.batch = 2;
        let applied = applied_query(&query, &after, false).expect("the link carries it");
        let (opened, notes) = AppState::from_query(&applied, &["registry-7"]);
        assert!(notes.is_empty(), "{notes:?}");
        assert_eq!(opened.workload, after);
        assert_eq!(opened.model, state.model);
        assert_eq!(opened.profile, "registry-7");
        assert_eq!(opened.panels.advise, None);
        assert_eq!(opened.workload.mode, Mode::Training);
        // The allocator setting has no field on the page: no link.
        assert_eq!(applied_query(&query, &after, true), None);
    }
}
