//! Messages in the page's words: a message of the core (or of the page's
//! own checks) names the spec's field (`` `workload.batch` ``) and, where
//! a value did not parse, repeats serde's wording (`invalid type: string
//! "NaN", expected u64`). The page says the same with the label of its
//! field ("Batch size") and plain words ("“NaN” is not a whole number"),
//! and keeps the message as it was in a details line, for whoever writes
//! the spec or the link by hand.

use crate::format;

/// A message as the page shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Said {
    /// What the page says, in its labels.
    pub text: String,
    /// The message as the core wrote it, where the text differs.
    pub detail: Option<String>,
}

/// The page's label of each spec field it has an input for (the form's
/// own words), and of the fields a link or a spec may set.
const LABELS: &[(&str, &str)] = &[
    ("workload.batch", "Batch size"),
    ("workload.seq_len", "Sequence length"),
    ("workload.image_size", "Image size"),
    ("workload.mode", "Mode"),
    ("workload.dtype", "Weight dtype"),
    ("workload.attention", "Attention"),
    ("workload.memory_format", "Memory format"),
    ("workload.load", "How the weights are loaded"),
    ("workload.inference.kind", "Inference"),
    ("workload.inference.new_tokens", "New tokens"),
    ("workload.inference.num_beams", "Beams"),
    ("workload.inference.batches", "Batches in one process"),
    ("workload.inference.logits", "Logits"),
    ("workload.inference.kv_cache", "Return a KV cache"),
    ("workload.inference.kv_dtype", "KV cache dtype"),
    ("workload.training.optimizer", "Optimizer"),
    ("workload.training.precision", "Precision"),
    ("workload.training.steps", "Optimizer steps"),
    (
        "workload.training.gradient_accumulation_steps",
        "Gradient accumulation steps",
    ),
    (
        "workload.training.grad_checkpointing",
        "Gradient checkpointing",
    ),
    ("workload.training.lora", "LoRA adapters"),
    ("workload.training.lora.rank", "LoRA rank"),
    (
        "workload.training.lora.target_modules",
        "LoRA target modules",
    ),
    ("workload.parallel", "Several GPUs"),
    ("workload.parallel.strategy", "Strategy"),
    ("workload.parallel.world_size", "GPUs per job"),
    ("workload.parallel.param_dtype", "Parameter dtype (FSDP2)"),
    ("workload.esmfold.chunk_size", "Trunk chunk size"),
    ("workload.esmfold.num_recycles", "Recycles"),
    ("workload.esmfold.stem_dtype", "ESM-2 stem dtype"),
    ("model", "Model"),
];

/// The page's label of a spec field: its form's label, else the field's
/// last part in words (`model.hidden_size`: "Architecture field
/// hidden_size").
pub fn label(field: &str) -> String {
    if let Some((_, label)) = LABELS.iter().find(|(k, _)| *k == field) {
        return (*label).into();
    }
    let last = field.rsplit('.').next().unwrap_or(field);
    match field.split('.').next() {
        Some("model") => format!("Architecture field {last}"),
        Some("runtime") => format!("Runtime figure {last}"),
        _ => format!("The setting {}", last.replace('_', " ")),
    }
}

/// `message` in the page's words: each `` `field` `` of the spec named by
/// its label, serde's wording said plainly, a list of known presets left
/// to the details line.
pub fn plain(message: &str) -> Said {
    let mut text = String::new();
    let mut rest = message;
    while let Some(open) = rest.find('`') {
        let Some(len) = rest[open + 1..].find('`') else {
            break;
        };
        let quoted = &rest[open + 1..open + 1 + len];
        let before = &rest[..open];
        text.push_str(before);
        // A field the message is about, or one it mentions; a key quoted
        // from a link ("unknown key `x`", "did you mean `y`") stays as is.
        let quoted_from_link = before.ends_with("key ") || before.ends_with("mean ");
        if is_field(quoted) && rest[open + 2 + len..].starts_with(':') {
            text.push_str(&label(quoted));
        } else if is_field(quoted) && !quoted_from_link {
            text.push('“');
            text.push_str(&label(quoted));
            text.push('”');
        } else {
            text.push_str(&rest[open..open + 2 + len]);
        }
        rest = &rest[open + 2 + len..];
    }
    text.push_str(rest);
    if let Some(at) = text.find("; known presets include") {
        text.truncate(at);
        text.push_str("; search the model list for the presets");
    }
    let text = serde_words(&text).replace("an integer from", "a whole number from");
    let detail = (text != message).then(|| message.to_string());
    Said { text, detail }
}

/// Whether `quoted` is a spec field's dotted key.
fn is_field(quoted: &str) -> bool {
    quoted == "model"
        || ["workload.", "model.", "runtime."]
            .iter()
            .any(|p| quoted.starts_with(p))
            && quoted
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'.')
}

/// serde's `invalid type: X, expected Y` and `invalid value: X, expected
/// Y` said as "X is not Y" in plain words.
fn serde_words(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    loop {
        let found = ["invalid type: ", "invalid value: "]
            .iter()
            .filter_map(|p| rest.find(p).map(|at| (at, p.len())))
            .min();
        let Some((at, skip)) = found else { break };
        let after = &rest[at + skip..];
        let Some(comma) = after.find(", expected ") else {
            break;
        };
        let expected_start = comma + ", expected ".len();
        let expected_len = after[expected_start..]
            .find(';')
            .unwrap_or(after.len() - expected_start);
        out.push_str(&rest[..at]);
        out.push_str(&value_words(&after[..comma]));
        out.push_str(" is not ");
        out.push_str(expected_words(
            &after[expected_start..expected_start + expected_len],
        ));
        rest = &after[expected_start + expected_len..];
    }
    out.push_str(rest);
    out
}

/// serde's description of a value: `string "NaN"`, ``integer `-5` ``,
/// `null`, `map`.
fn value_words(unexpected: &str) -> String {
    let inner = |s: &str| s.trim_matches(|c| c == '`' || c == '"').to_string();
    match unexpected.split_once(' ') {
        Some(("string", s)) => format!("“{}”", format::shown(&inner(s), 40)),
        Some(("integer" | "boolean", v)) => inner(v),
        Some(("floating", v)) => inner(v.trim_start_matches("point ")),
        _ => match unexpected {
            "null" | "unit value" => "an empty value".into(),
            "map" => "an object".into(),
            "sequence" => "a list".into(),
            other => other.into(),
        },
    }
}

/// serde's description of what it expected, in words.
fn expected_words(expected: &str) -> &str {
    match expected {
        "u8" | "u16" | "u32" | "u64" | "usize" => "a whole number",
        "i8" | "i16" | "i32" | "i64" | "isize" => "an integer",
        "f32" | "f64" => "a number",
        "a boolean" => "true or false",
        "a string" => "text",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_is_named_by_its_label_and_serde_is_said_plainly() {
        let said = plain("ignored batch=NaN: `workload.batch`: invalid type: string \"NaN\", expected u64; allowed: an integer from 1 to 65536");
        assert_eq!(
            said.text,
            "ignored batch=NaN: Batch size: “NaN” is not a whole number; allowed: a whole number from 1 to 65536"
        );
        assert!(said.detail.unwrap().contains("`workload.batch`"));
        let said = plain("`workload.seq_len`: invalid value: integer `-5`, expected u64; allowed: an integer from 1 to 4194304");
        assert_eq!(
            said.text,
            "Sequence length: -5 is not a whole number; allowed: a whole number from 1 to 4194304"
        );
        let said = plain(
            "`workload.inference.kv_cache`: invalid type: floating point `1.5`, expected a boolean",
        );
        assert_eq!(said.text, "Return a KV cache: 1.5 is not true or false");
    }

    #[test]
    fn a_list_of_presets_is_left_to_the_details_line() {
        let said = plain("ignored model=foo: `model`: unknown preset `foo`; known presets include: llama-3.2-1b, gpt2, bert-base-uncased");
        assert_eq!(
            said.text,
            "ignored model=foo: Model: unknown preset `foo`; search the model list for the presets"
        );
        assert!(said.detail.unwrap().contains("gpt2"));
    }

    #[test]
    fn fields_without_a_form_label_are_named_in_words_and_values_stay_quoted() {
        assert_eq!(
            plain("`model.hidden_size`: must be a multiple of `num_attention_heads`").text,
            "Architecture field hidden_size: must be a multiple of `num_attention_heads`"
        );
        assert_eq!(
            label("workload.training.lora.dropout"),
            "The setting dropout"
        );
        // A field mentioned mid-sentence is named by its label too; a key
        // quoted from a link stays as the link wrote it.
        assert_eq!(
            plain(
                "`workload.training.precision`: FSDP2 computes in `workload.parallel.param_dtype`"
            )
            .text,
            "Precision: FSDP2 computes in “Parameter dtype (FSDP2)”"
        );
        let link =
            "ignored unknown key `workload.seqlen` in the link; did you mean `workload.seq_len`?";
        assert_eq!(plain(link).text, link);
        assert_eq!(plain(link).detail, None);
        // A message with nothing to change has no details line.
        assert_eq!(plain("the link is empty").detail, None);
    }

    #[test]
    fn every_label_differs_from_its_key_and_no_text_keeps_a_workload_key() {
        for (key, label) in LABELS {
            assert!(
                !label.contains('.') && !label.contains('_'),
                "{key}: {label}"
            );
            let said = plain(&format!("`{key}`: invalid type: map, expected u32"));
            assert!(!said.text.contains("workload."), "{}", said.text);
            assert!(!said.text.contains("invalid type"), "{}", said.text);
        }
    }
}
