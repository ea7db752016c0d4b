//! The panels module: the advice and timeline panels and the config.json
//! importer, which the page fetches and instantiates the first time one of
//! them is asked for
//! (`headroom_web::panels`, `headroom_web::app::lazy`).

#[cfg(target_arch = "wasm32")]
mod exports {
    use wasm_bindgen::prelude::wasm_bindgen;
    use web_sys::HtmlElement;

    /// `headroom_web::panels::show_advice`.
    #[wasm_bindgen]
    pub fn show_advice(container: HtmlElement, request: &str, fits_already: bool) {
        headroom_web::panels::show_advice(container, request, fits_already);
    }

    /// `headroom_web::panels::show_timeline`.
    #[wasm_bindgen]
    pub fn show_timeline(container: HtmlElement, request: &str, theme: &str, file_stem: &str) {
        headroom_web::panels::show_timeline(container, request, theme, file_stem);
    }

    /// `headroom_web::panels::import_config` (throws why not).
    #[wasm_bindgen]
    pub fn import_config(source: &str, hub_id: Option<String>) -> Result<String, String> {
        headroom_web::panels::import_config(source, hub_id.as_deref())
    }

    /// `headroom_web::panels::import_framework` (throws why not).
    #[wasm_bindgen]
    pub fn import_framework(request: &str) -> Result<String, String> {
        headroom_web::panels::import_framework(request)
    }

    /// `headroom_web::panels::close_advice`.
    #[wasm_bindgen]
    pub fn close_advice() {
        headroom_web::panels::close_advice();
    }

    /// `headroom_web::panels::close_timeline`.
    #[wasm_bindgen]
    pub fn close_timeline() {
        headroom_web::panels::close_timeline();
    }
}

/// The page calls the module's exports; instantiating it does nothing else.
#[cfg(target_arch = "wasm32")]
fn main() {}

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    eprintln!("headroom-panels is the page's second wasm module: run ./scripts/serve.sh");
}
