//! The Hugging Face Hub ids of the presets: a model's id as its users
//! copy it from the Hub (`Qwen/Qwen2.5-7B-Instruct`) finds the preset of
//! the same shapes. Instruct, chat and base variants share their model's
//! shapes (`-Instruct`, `-it`, `-Chat`, `-Base` after the name, and
//! Meta's `Meta-` before it, are read past); timm's ids match with any
//! pretrained tag (`.augreg_in21k`).

use super::{all, same_id, Preset};

/// The publishers whose ids name their preset: under these organisations
/// a model's name (past its variant suffix, see [`canonical`]) is the
/// preset's id, compared as [`super::find`] compares ids (without case,
/// `-`, `_` or `.`): `Qwen/Qwen2.5-7B` is `qwen2.5-7b`,
/// `timm/vit_base_patch16_224` is `vit-base-patch16-224`,
/// `facebook/esm2_t33_650M_UR50D` is `esm2-t33-650m` (`_ur50d` read past).
const PUBLISHERS: &[&str] = &[
    "meta-llama",
    "qwen",
    "mistralai",
    "google",
    "google-bert",
    "openai-community",
    "microsoft",
    "facebook",
    "timm",
];

/// Published names that are not their preset's id: `name preset` per line.
const RENAMED: &str = "\
mixtral-8x7b-v0.1 mixtral-8x7b
mixtral-8x7b-instruct-v0.1 mixtral-8x7b
mistral-7b-instruct-v0.3 mistral-7b-v0.3
mistral-nemo-base-2407 mistral-nemo-12b
mistral-nemo-instruct-2407 mistral-nemo-12b
mobilenetv2_100 mobilenet-v2";

/// Whether `text` has the form of a Hub id: `organisation/name`, each part
/// of letters, digits, `-`, `_` and `.`, at most 96 characters each (the
/// Hub's own limit).
pub fn is_hub_id(text: &str) -> bool {
    let part = |s: &str| {
        (1..=96).contains(&s.len())
            && !s.starts_with('.')
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    };
    text.split_once('/')
        .is_some_and(|(org, name)| part(org) && part(name))
}

/// A lower-case Hub id as compared: `(organisation, name)` without a
/// timm pretrained tag, Meta's `meta-` and a variant suffix (`-instruct`,
/// `-it`, `-chat`, `-base`).
fn canonical(id: &str) -> Option<(&str, &str)> {
    let (org, mut name) = id.split_once('/')?;
    if org == "timm" {
        name = name.split('.').next().unwrap_or(name);
    }
    name = name.strip_prefix("meta-").unwrap_or(name);
    for suffix in ["-instruct", "-it", "-chat", "-base"] {
        if let Some(base) = name.strip_suffix(suffix).filter(|b| !b.is_empty()) {
            name = base;
            break;
        }
    }
    Some((org, name))
}

/// The preset whose Hub id `text` is (without case; surrounding spaces, a
/// `https://huggingface.co/` prefix and, for timm, a pretrained tag after
/// `.` ignored), or `None`: an id of one of the [`PUBLISHERS`] whose
/// name, or its [`RENAMED`] preset, finds a preset.
pub fn find_by_hub_id(text: &str) -> Option<Preset> {
    find_by_hub_id_in(text, &all()).cloned()
}

/// [`find_by_hub_id`] among `presets` (the page's list, built once).
pub fn find_by_hub_id_in<'a>(text: &str, presets: &'a [Preset]) -> Option<&'a Preset> {
    let id = text.trim();
    let id = id
        .strip_prefix("https://huggingface.co/")
        .unwrap_or(id)
        .trim_end_matches('/');
    if !is_hub_id(id) {
        return None;
    }
    let lower = id.to_ascii_lowercase();
    let (org, name) = canonical(&lower)?;
    if !PUBLISHERS.contains(&org) {
        return None;
    }
    let name = RENAMED
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or(name);
    let name = name.strip_suffix("_ur50d").unwrap_or(name);
    presets.iter().find(|p| same_id(p.id, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// timm's ids, with their pretrained tags (every other publisher's ids
    /// are the integration test's data, `core/tests/it/presets.rs`, read
    /// through specs).
    #[test]
    fn timm_ids_with_their_tags_find_their_preset() {
        let published = [
            (
                "timm/vit_small_patch16_224.augreg_in21k_ft_in1k",
                "vit-small-patch16-224",
            ),
            (
                "timm/vit_large_patch16_224.augreg_in21k_ft_in1k",
                "vit-large-patch16-224",
            ),
            ("timm/resnet18.a1_in1k", "resnet-18"),
            ("timm/resnet34.a1_in1k", "resnet-34"),
            ("timm/resnet50.a1_in1k", "resnet-50"),
            ("timm/resnet101.a1h_in1k", "resnet-101"),
            ("timm/resnet152.a1h_in1k", "resnet-152"),
            ("timm/mobilenetv2_100.ra_in1k", "mobilenet-v2"),
        ];
        for (hub, preset) in published {
            assert!(is_hub_id(hub), "{hub}");
            assert_eq!(find_by_hub_id(hub).map(|p| p.id), Some(preset), "{hub}");
        }
        for line in RENAMED.lines() {
            let preset = line.split(' ').nth(1).unwrap();
            assert!(super::super::find(preset).is_ok(), "{line}");
        }
    }

    #[test]
    fn an_id_as_users_paste_it_finds_its_preset() {
        let id = |t: &str| find_by_hub_id(t).map(|p| p.id);
        assert_eq!(
            id("meta-llama/Meta-Llama-3.1-8B-Instruct"),
            Some("llama-3.1-8b")
        );
        assert_eq!(id("google/gemma-2-9b-it"), Some("gemma-2-9b"));
        assert_eq!(id("Qwen/Qwen3-8B-Base"), Some("qwen3-8b"));
        assert_eq!(id("Qwen/Qwen1.5-MoE-A2.7B-Chat"), Some("qwen1.5-moe-a2.7b"));
        assert_eq!(id("Qwen/Qwen2.5-7B-Instruct"), Some("qwen2.5-7b"));
        assert_eq!(id("  qwen/qwen2.5-7b-instruct "), Some("qwen2.5-7b"));
        assert_eq!(
            id("https://huggingface.co/meta-llama/Llama-3.1-8B/"),
            Some("llama-3.1-8b")
        );
        assert_eq!(
            id("timm/vit_base_patch16_224.augreg2_in21k_ft_in1k"),
            Some("vit-base-patch16-224")
        );
        // Not a preset, a preset's name under another publisher, or not
        // an id at all.
        assert_eq!(id("Qwen/Qwen2.5-Coder-7B"), None);
        assert_eq!(id("someone/Llama-3.1-8B"), None);
        assert_eq!(id("llama"), None);
        assert_eq!(id("a/b/c"), None);
        assert_eq!(id("meta-llama/Llama-3.1-8B.x"), None);
        assert!(!is_hub_id("org/"));
        assert!(!is_hub_id("../etc"));
    }
}
