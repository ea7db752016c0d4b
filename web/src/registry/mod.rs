//! The profile registry as the page reads it: where it is (this page's
//! origin, or a `registry=URL` link), its listing of profiles, which catalog
//! card each profile was measured on, and a registry profile's id in links
//! (`profile=registry-7`).
//!
//! Everything here comes from a server the page does not control: the
//! listing is read only up to [`MAX_LISTING_BYTES`], each text field kept to
//! [`MAX_FIELD_CHARS`] characters (and shown through `format::shown`), an
//! entry that is not one is skipped and counted, and an answer that is not
//! a listing is an error naming what is wrong.
//!
//! The feature's files: this one (native, tested natively) and
//! `panel.rs` (what the page does with the registry).

/// The registry on the page: its profiles in the calibration panel, the
/// GPU table's marks, a linked profile fetched.
#[cfg(target_arch = "wasm32")]
pub mod panel;

use crate::format;
use headroom_core::gpus::{self, Gpu};
use serde_json::Value;

/// The link's key of the registry's address.
pub const LINK_KEY: &str = "registry";

/// A registry profile's id (in the page's state and links) is this prefix
/// and the registry's number of the profile.
pub const PROFILE_PREFIX: &str = "registry-";

/// Longest registry address a link may give, in characters.
pub const MAX_BASE_CHARS: usize = 200;

/// Most profiles listed (the registry's newest).
pub const LISTING_LIMIT: u32 = 500;

/// Largest listing read, bytes (an entry is about 800).
pub const MAX_LISTING_BYTES: u64 = 2 << 20;

/// Most characters kept of each text of a listed profile.
pub const MAX_FIELD_CHARS: usize = 160;

/// How far a profile's GPU memory may be from a card's usable memory for
/// the profile to count as that card's, as a fraction (a card's memory
/// moves by a few hundred MiB with the driver and with ECC).
const CARD_MEMORY_TOLERANCE: f64 = 0.1;

/// A registry's address from a link: `http://` or `https://`, a host, and an
/// optional path, without query, fragment or user name; trailing `/` removed.
pub fn parse_base(text: &str) -> Result<String, String> {
    let allowed = "allowed: an http:// or https:// address such as http://gpu-box:8090";
    let count = text.chars().count();
    if count > MAX_BASE_CHARS {
        return Err(format!(
            "an address of {} characters, over the {MAX_BASE_CHARS} this page reads; {allowed}",
            format::int(count as u64)
        ));
    }
    let rest = text
        .strip_prefix("http://")
        .or_else(|| text.strip_prefix("https://"))
        .ok_or_else(|| format!("not an http:// or https:// address; {allowed}"))?;
    let ok_char = |c: char| c.is_ascii_alphanumeric() || "-._~:/[]%".contains(c);
    if let Some(c) = rest.chars().find(|&c| !ok_char(c)) {
        return Err(format!(
            "the address holds `{}`, which a registry's address has no use for; {allowed}",
            format::shown(&c.to_string(), 1)
        ));
    }
    if rest.split('/').next().is_none_or(str::is_empty) {
        return Err(format!("the address names no host; {allowed}"));
    }
    Ok(text.trim_end_matches('/').to_string())
}

/// The page's id of the registry's profile `number`.
pub fn profile_id(number: u64) -> String {
    format!("{PROFILE_PREFIX}{number}")
}

/// The registry's number of the profile `id` names (`registry-7`: 7), if
/// it names one.
pub fn profile_number(id: &str) -> Option<u64> {
    let digits = id.strip_prefix(PROFILE_PREFIX)?;
    let plain = !digits.is_empty()
        && digits.len() <= 18
        && !digits.starts_with('0')
        && digits.bytes().all(|b| b.is_ascii_digit());
    if !plain {
        return None;
    }
    digits.parse().ok()
}

/// The listing's address at `base` (empty: this page's origin).
pub fn listing_url(base: &str) -> String {
    format!("{base}/api/v1/profiles?limit={LISTING_LIMIT}")
}

/// The address of the profile `number` at `base`.
pub fn profile_url(base: &str, number: u64) -> String {
    format!("{base}/api/v1/profiles/{number}")
}

/// How notes name the registry at `base`.
pub fn label(base: &str) -> String {
    if base.is_empty() {
        "this page's registry".into()
    } else {
        format!("the registry at {}", format::shown(base, 80))
    }
}

/// Why an answer from the registry could not be used.
#[derive(Clone, Debug, PartialEq)]
pub enum FetchError {
    /// No answer (no such host, refused, timed out, CORS), with the
    /// browser's words.
    Unreachable(String),
    /// An answer with an HTTP error status.
    Status(u16),
    /// An answer larger than the page reads, with the limit in bytes.
    TooLarge(u64),
    /// An answer that is not UTF-8 text.
    NotText,
}

impl FetchError {
    /// The reason, as a note's clause.
    pub fn describe(&self) -> String {
        match self {
            FetchError::Unreachable(why) => {
                format!("it could not be reached ({})", format::shown(why, 120))
            }
            FetchError::Status(404) => "it answered 404, not found".into(),
            FetchError::Status(code) => format!("it answered HTTP {code}"),
            FetchError::TooLarge(max) => format!(
                "its answer is larger than the {} bytes this page reads",
                format::int(*max)
            ),
            FetchError::NotText => "its answer is not UTF-8 text".into(),
        }
    }
}

/// The note shown when the registry a link names could not be listed.
pub fn unlisted_note(base: &str, why: &str) -> String {
    format!("{} could not be listed: {why}", label(base))
}

/// The note shown when `skipped` entries of the registry's listing are not
/// profiles.
pub fn skipped_note(base: &str, skipped: usize) -> String {
    format!(
        "{} entries of the listing of {} are not profiles and are left out",
        format::int(skipped as u64),
        label(base)
    )
}

/// The note shown when the link's registry profile `number` could not be
/// applied.
pub fn fallback_note(number: u64, base: &str, why: &str) -> String {
    format!(
        "the link's profile #{number} from {} was not applied: {why}; the estimate uses the built-in H200 coefficients",
        label(base)
    )
}

/// One profile of the registry's listing.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    /// The registry's number of the profile.
    pub number: u64,
    /// Its name.
    pub name: String,
    /// The GPU's name as the driver gives it.
    pub gpu: String,
    /// The catalog card it is, if the catalog has it ([`card_for`]).
    pub card: Option<&'static Gpu>,
    /// Driver version.
    pub driver: String,
    /// CUDA version.
    pub cuda: String,
    /// torch version.
    pub torch: String,
    /// Measured points.
    pub points: Option<u64>,
    /// Median absolute error of the measured points with the fitted
    /// runtime, a fraction.
    pub median_error: Option<f64>,
    /// When the profile was fitted.
    pub created: String,
}

impl Entry {
    /// Its facts in one line: GPU, driver, torch and CUDA, points, fit
    /// quality, date.
    pub fn facts(&self) -> String {
        let shown = |t: &str| format::shown(t, MAX_FIELD_CHARS);
        let mut parts = vec![
            shown(&self.gpu),
            format!("driver {}", shown(&self.driver)),
            format!("torch {}", shown(&self.torch)),
            format!("CUDA {}", shown(&self.cuda)),
        ];
        if let Some(n) = self.points {
            parts.push(format!("{} points", format::int(n)));
        }
        if let Some(e) = self.median_error {
            parts.push(format!("median error {:.1}% after the fit", e * 100.0));
        }
        let date = self.created.get(..10).unwrap_or(&self.created);
        parts.push(shown(date));
        parts.join(" · ")
    }
}

/// The registry's listing, as far as it could be read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Listing {
    /// Its profiles, newest first.
    pub entries: Vec<Entry>,
    /// Entries that are not profiles (no id, not an object), skipped.
    pub skipped: usize,
}

impl Listing {
    /// The profiles measured on the card `gpu_id`, or every profile for
    /// an empty id.
    pub fn for_card<'a>(&'a self, gpu_id: &'a str) -> impl Iterator<Item = &'a Entry> + 'a {
        self.entries
            .iter()
            .filter(move |e| gpu_id.is_empty() || e.card.is_some_and(|c| c.id == gpu_id))
    }

    /// The catalog cards with a profile, with how many, in catalog order.
    pub fn cards(&self) -> Vec<(&'static Gpu, usize)> {
        gpus::CATALOG
            .iter()
            .map(|g| (g, self.for_card(g.id).count()))
            .filter(|(_, n)| *n > 0)
            .collect()
    }
}

fn text(obj: &serde_json::Map<String, Value>, key: &str) -> String {
    obj.get(key)
        .and_then(Value::as_str)
        .unwrap_or("?")
        .chars()
        .take(MAX_FIELD_CHARS)
        .collect()
}

fn entry(value: &Value) -> Option<Entry> {
    let obj = value.as_object()?;
    let number = obj.get("id")?.as_u64().filter(|&n| n > 0)?;
    let median_error = obj
        .get("summary")
        .and_then(|s| s.get("after"))
        .and_then(|a| a.get("median_abs_err"))
        .and_then(Value::as_f64)
        .filter(|e| (0.0..=10.0).contains(e));
    let gpu = text(obj, "gpu");
    let card = obj
        .get("gpu_total_bytes")
        .and_then(Value::as_u64)
        .and_then(|bytes| card_for(&gpu, bytes));
    Some(Entry {
        number,
        name: text(obj, "name"),
        gpu,
        card,
        driver: text(obj, "driver"),
        cuda: text(obj, "cuda"),
        torch: text(obj, "torch"),
        points: obj.get("points").and_then(Value::as_u64),
        median_error,
        created: text(obj, "created"),
    })
}

/// Reads the registry's answer to [`listing_url`].
pub fn parse_listing(text: &str) -> Result<Listing, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| {
        format!(
            "its answer is not JSON ({})",
            format::shown(&e.to_string(), 120)
        )
    })?;
    let items = value
        .get("profiles")
        .and_then(Value::as_array)
        .ok_or("its answer is not a profile listing: it has no `profiles` list")?;
    let mut listing = Listing::default();
    for item in items.iter().take(LISTING_LIMIT as usize) {
        match entry(item) {
            Some(e) => listing.entries.push(e),
            None => listing.skipped += 1,
        }
    }
    Ok(listing)
}

/// The words of a GPU name that tell the model apart (`h200`, `a100`,
/// `3060`, `mi300x`): those with a digit, other than sizes (`80gb`).
fn model_words(name: &str) -> Vec<String> {
    name.split(|c: char| !c.is_ascii_alphanumeric())
        .map(str::to_ascii_lowercase)
        .filter(|w| w.bytes().any(|b| b.is_ascii_digit()) && !w.ends_with("gb"))
        .collect()
}

/// The catalog card that a GPU named `name` (as the driver names it:
/// `NVIDIA H200`, `NVIDIA A100-SXM4-80GB`) with `total_bytes` of memory (as
/// CUDA reports it) is: a card whose model words the name holds, whose
/// usable memory is within 10% of it, the nearest of those.
pub fn card_for(name: &str, total_bytes: u64) -> Option<&'static Gpu> {
    let words = model_words(name);
    let distance = |g: &Gpu| g.usable_bytes.abs_diff(total_bytes);
    gpus::CATALOG
        .iter()
        .filter(|g| {
            let card_words = model_words(g.name);
            !card_words.is_empty() && card_words.iter().all(|w| words.contains(w))
        })
        .filter(|g| distance(g) as f64 <= g.usable_bytes as f64 * CARD_MEMORY_TOLERANCE)
        .min_by_key(|g| distance(g))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_from_links_are_checked() {
        assert_eq!(
            parse_base("http://127.0.0.1:8090/").unwrap(),
            "http://127.0.0.1:8090"
        );
        assert_eq!(
            parse_base("https://gpu-box.lan/headroom").unwrap(),
            "https://gpu-box.lan/headroom"
        );
        assert_eq!(
            parse_base("http://[::1]:8090").unwrap(),
            "http://[::1]:8090"
        );
        for (bad, why) in [
            ("javascript:alert(1)", "not an http"),
            ("ftp://host", "not an http"),
            ("//host", "not an http"),
            ("http://", "no host"),
            ("http:///x", "no host"),
            ("http://user:pw@host", "`@`"),
            ("http://host/?x=1", "`?`"),
            ("http://host/#x", "`#`"),
            ("http://host\"><script>", "`\"`"),
            ("http://ho st", "` `"),
            ("http://h\u{202e}ost", "\\u{202e}"),
        ] {
            let e = parse_base(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
        let long = format!("http://{}", "a".repeat(MAX_BASE_CHARS));
        assert!(parse_base(&long).unwrap_err().contains("207 characters"));
    }

    #[test]
    fn registry_profile_ids_round_trip_and_nothing_else_reads_as_one() {
        assert_eq!(profile_id(7), "registry-7");
        assert_eq!(profile_number("registry-7"), Some(7));
        assert_eq!(
            profile_number(&profile_id(u64::MAX / 100)),
            Some(u64::MAX / 100)
        );
        for other in [
            "h200",
            "loaded",
            "registry-",
            "registry-0",
            "registry-07",
            "registry-7x",
            "registry--7",
            "registry-1234567890123456789",
            "registry-+7",
        ] {
            assert_eq!(profile_number(other), None, "{other}");
        }
        // A bundled profile's file name never reads as a registry id.
        for (id, _) in crate::calib::bundled_files() {
            assert_eq!(profile_number(id), None, "{id}");
        }
    }

    #[test]
    fn addresses_of_the_api() {
        assert_eq!(listing_url(""), "/api/v1/profiles?limit=500");
        assert_eq!(profile_url("http://h:1", 7), "http://h:1/api/v1/profiles/7");
        assert_eq!(label(""), "this page's registry");
        assert_eq!(label("http://h:1"), "the registry at http://h:1");
    }

    const LISTED: &str = r#"{"profiles": [
        {"id": 7, "url": "/api/v1/profiles/7", "name": "NVIDIA H200, torch 2.11.0+cu130, driver 580.159.04",
         "gpu": "NVIDIA H200", "gpu_total_bytes": 150109880320, "compute_capability": "9.0",
         "driver": "580.159.04", "cuda": "13.0", "torch": "2.11.0+cu130", "transformers": "5.17.0",
         "collector_version": "0.1.0", "points": 5,
         "fit": {"basis": "torch_reserved", "points_used": 5, "points_skipped": 2, "residual_std_bytes": 4594630},
         "summary": {"before": {"cases": 5, "median_abs_err": 0.0072}, "after": {"cases": 5, "median_abs_err": 0.0069}},
         "created": "2026-11-30T06:13:54Z"},
        {"id": 3, "name": "<img src=x onerror=alert(1)>", "gpu": "NVIDIA A100-SXM4-80GB", "gpu_total_bytes": 84974239744,
         "summary": {"after": {"median_abs_err": "NaN"}}},
        {"id": "4"}, [], {"id": 0}, {"name": "no id"}
    ], "total": 6, "limit": 500, "offset": 0}"#;

    #[test]
    fn a_listing_is_read_and_what_is_not_a_profile_is_counted() {
        let listing = parse_listing(LISTED).unwrap();
        assert_eq!(listing.skipped, 4);
        let [h200, a100] = &listing.entries[..] else {
            panic!("{listing:?}")
        };
        assert_eq!(h200.number, 7);
        assert_eq!(h200.card.map(|g| g.id), Some("h200"));
        assert_eq!(
            h200.facts(),
            "NVIDIA H200 · driver 580.159.04 · torch 2.11.0+cu130 · CUDA 13.0 · 5 points · median error 0.7% after the fit · 2026-11-30"
        );
        assert_eq!(a100.name, "<img src=x onerror=alert(1)>");
        assert_eq!(a100.card.map(|g| g.id), Some("a100-80gb"));
        assert_eq!(a100.median_error, None);
        assert_eq!(
            a100.facts(),
            "NVIDIA A100-SXM4-80GB · driver ? · torch ? · CUDA ? · ?"
        );
        let cards: Vec<(&str, usize)> = listing.cards().iter().map(|(g, n)| (g.id, *n)).collect();
        assert_eq!(cards, [("a100-80gb", 1), ("h200", 1)]);
        assert_eq!(listing.for_card("").count(), 2);
        assert_eq!(
            listing
                .for_card("h200")
                .map(|e| e.number)
                .collect::<Vec<_>>(),
            [7]
        );
        assert_eq!(listing.for_card("rtx-4090").count(), 0);
    }

    #[test]
    fn answers_that_are_not_listings_are_named() {
        for (bad, why) in [
            ("", "not JSON"),
            ("<!DOCTYPE html><title>x</title>", "not JSON"),
            ("{\"profiles\": [", "not JSON"),
            ("[1, 2]", "no `profiles` list"),
            ("{\"profiles\": {}}", "no `profiles` list"),
            (
                &format!("{}1{}", "[".repeat(200), "]".repeat(200)),
                "not JSON",
            ),
        ] {
            let e = parse_listing(bad).unwrap_err();
            assert!(e.contains(why), "{bad:.40}: {e}");
        }
    }

    #[test]
    fn long_fields_are_cut_and_a_long_listing_is_cut_at_its_limit() {
        let long = "x".repeat(10_000);
        let one = format!(r#"{{"id": 1, "name": "{long}", "gpu": "{long}"}}"#);
        let many = vec![one; LISTING_LIMIT as usize + 5].join(",");
        let listing = parse_listing(&format!(r#"{{"profiles": [{many}]}}"#)).unwrap();
        assert_eq!(listing.entries.len(), LISTING_LIMIT as usize);
        assert_eq!(listing.entries[0].name.chars().count(), MAX_FIELD_CHARS);
        assert!(listing.entries[0].facts().chars().count() < 400);
    }

    #[test]
    fn gpu_names_as_drivers_give_them_find_their_card() {
        let gib = 1u64 << 30;
        let card = |name: &str, bytes: u64| card_for(name, bytes).map(|g| g.id);
        assert_eq!(card("NVIDIA H200", 150_109_880_320), Some("h200"));
        assert_eq!(card("NVIDIA A100-SXM4-80GB", 79 * gib), Some("a100-80gb"));
        assert_eq!(card("NVIDIA A100-PCIE-40GB", 39 * gib), Some("a100-40gb"));
        assert_eq!(
            card("NVIDIA GeForce RTX 4090", 23 * gib + gib / 2),
            Some("rtx-4090")
        );
        assert_eq!(card("NVIDIA A10", 22 * gib), Some("a10"));
        assert_eq!(card("NVIDIA L40S", 44 * gib), Some("l40s"));
        assert_eq!(card("NVIDIA L4", 22 * gib), Some("l4"));
        assert_eq!(
            card("NVIDIA RTX 6000 Ada Generation", 47 * gib),
            Some("rtx-6000-ada")
        );
        // Same words, other memory: another card (a laptop 3060, the Turing
        // RTX 6000); a card the catalog lacks; a name without model words.
        assert_eq!(card("NVIDIA GeForce RTX 3060 Laptop GPU", 6 * gib), None);
        assert_eq!(card("Quadro RTX 6000", 24 * gib), None);
        assert_eq!(card("NVIDIA GH200 480GB", 95 * gib), None);
        assert_eq!(card("NVIDIA", 80 * gib), None);
        assert_eq!(card("", 0), None);
    }

    #[test]
    fn fetch_failures_read_as_a_reason() {
        let note = fallback_note(9, "http://h:1", &FetchError::Status(404).describe());
        assert_eq!(
            note,
            "the link's profile #9 from the registry at http://h:1 was not applied: it answered 404, not found; the estimate uses the built-in H200 coefficients"
        );
        assert!(FetchError::Unreachable("Failed to fetch".into())
            .describe()
            .contains("could not be reached (Failed to fetch)"));
        assert!(FetchError::TooLarge(MAX_LISTING_BYTES)
            .describe()
            .contains("2,097,152 bytes"));
        assert_eq!(FetchError::Status(503).describe(), "it answered HTTP 503");
        assert_eq!(
            skipped_note("", 4),
            "4 entries of the listing of this page's registry are not profiles and are left out"
        );
        assert_eq!(
            unlisted_note("", "its answer is not JSON (EOF)"),
            "this page's registry could not be listed: its answer is not JSON (EOF)"
        );
    }
}
