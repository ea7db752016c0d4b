//! The panels module: the advice and timeline panels' bodies (their
//! computations, chart and exports, `crate::panels`) and the config.json
//! importer (`crate::import`) are a second wasm module, `headroom-panels`,
//! that the page fetches and instantiates the first time one of them is
//! asked for, so that the page loads without them. It
//! lies next to the page's own module; its URLs carry the page module's
//! name, so that a new build's page never runs an old panels module.

use js_sys::{Array, Function, Promise, Reflect};
use std::cell::RefCell;
use std::rc::Rc;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::HtmlElement;

/// The panels module's name: `headroom-panels.js` and
/// `headroom-panels_bg.wasm` (Trunk does not hash a module it does not
/// load itself).
pub const PANELS_MODULE: &str = "headroom-panels";

/// What the panels module does (`crate::panels` has each call's data).
pub trait PanelsModule {
    /// Shows the suggestions of the advice request in `container`.
    fn show_advice(
        &self,
        container: &HtmlElement,
        request: &str,
        fits_already: bool,
    ) -> Result<(), String>;
    /// Shows memory over the job of the request in `container`.
    fn show_timeline(
        &self,
        container: &HtmlElement,
        request: &str,
        theme: &str,
        file_stem: &str,
    ) -> Result<(), String>;
    /// A config.json's text as the JSON of the model it describes
    /// (`crate::import::model_from_config`, `model_json`), or why not.
    fn import_config(&self, source: &str, hub_id: Option<&str>) -> Result<String, String>;
    /// The workload a framework runs with the pasted arguments, as the
    /// workload's JSON (`crate::panels::import_framework`), or why not.
    fn import_framework(&self, request: &str) -> Result<String, String>;
    /// Unmounts the suggestions.
    fn close_advice(&self);
    /// Unmounts the timeline.
    fn close_timeline(&self);
}

thread_local! {
    static LOADED: RefCell<Option<Rc<dyn PanelsModule>>> = const { RefCell::new(None) };
    /// The module being fetched and instantiated: resolves to its exports.
    static LOADING: RefCell<Option<Promise>> = const { RefCell::new(None) };
}

/// Makes `module` the panels module (the browser tests' own).
pub fn set_loaded(module: Rc<dyn PanelsModule>) {
    LOADED.with(|m| *m.borrow_mut() = Some(module));
}

/// The panels module if it is loaded (to close a panel without loading it).
pub fn loaded() -> Option<Rc<dyn PanelsModule>> {
    LOADED.with(|m| m.borrow().clone())
}

/// The panels module, fetched and instantiated on the first call; a load
/// that failed is tried again on the next call.
pub async fn panels() -> Result<Rc<dyn PanelsModule>, String> {
    if let Some(module) = loaded() {
        return Ok(module);
    }
    let promise = LOADING.with(|p| p.borrow_mut().get_or_insert_with(start_loading).clone());
    match JsFuture::from(promise).await {
        Ok(exports) => {
            let module = loaded().unwrap_or_else(|| {
                let module: Rc<dyn PanelsModule> = Rc::new(Exports(exports));
                set_loaded(module.clone());
                module
            });
            Ok(module)
        }
        Err(e) => {
            LOADING.with(|p| p.borrow_mut().take());
            Err(format!(
                "the page could not load this panel's module: {}",
                describe(&e)
            ))
        }
    }
}

/// Imports the panels module's JS glue and instantiates its wasm.
fn start_loading() -> Promise {
    let Some((glue, _)) = crate::workers::module_urls() else {
        return Promise::reject(&"the page's own module was not found".into());
    };
    let Some((dir, page_module)) = glue.rsplit_once('/') else {
        return Promise::reject(&"the page's own module was not found".into());
    };
    let version = page_module.trim_end_matches(".js");
    let load = Function::new_with_args(
        "glue, wasm",
        "return import(glue).then(async (m) => { await m.default({ module_or_path: wasm }); return m; })",
    );
    let glue = format!("{dir}/{PANELS_MODULE}.js?for={version}");
    let wasm = format!("{dir}/{PANELS_MODULE}_bg.wasm?for={version}");
    load.call2(&JsValue::NULL, &glue.into(), &wasm.into())
        .and_then(JsCast::dyn_into::<Promise>)
        .unwrap_or_else(|e| Promise::reject(&e))
}

/// An exception's message.
fn describe(e: &JsValue) -> String {
    e.dyn_ref::<js_sys::Error>()
        .map(|e| String::from(e.message()))
        .or_else(|| e.as_string())
        .unwrap_or_else(|| "unknown error".into())
}

/// The loaded panels module's exports (`src/bin/headroom-panels.rs`).
struct Exports(JsValue);

impl Exports {
    /// Calls the export `name`: what it returned, or what it threw.
    fn call_for(&self, name: &str, args: &[JsValue]) -> Result<JsValue, String> {
        let function: Function = Reflect::get(&self.0, &name.into())
            .ok()
            .and_then(|f| f.dyn_into().ok())
            .ok_or_else(|| format!("the panels module has no `{name}`"))?;
        let args: Array = args.iter().collect();
        function
            .apply(&JsValue::NULL, &args)
            .map_err(|e| describe(&e))
    }

    fn call(&self, name: &str, args: &[JsValue]) -> Result<(), String> {
        self.call_for(name, args).map(drop)
    }
}

impl PanelsModule for Exports {
    fn show_advice(
        &self,
        container: &HtmlElement,
        request: &str,
        fits_already: bool,
    ) -> Result<(), String> {
        self.call(
            "show_advice",
            &[container.into(), request.into(), fits_already.into()],
        )
    }

    fn show_timeline(
        &self,
        container: &HtmlElement,
        request: &str,
        theme: &str,
        file_stem: &str,
    ) -> Result<(), String> {
        self.call(
            "show_timeline",
            &[
                container.into(),
                request.into(),
                theme.into(),
                file_stem.into(),
            ],
        )
    }

    fn import_config(&self, source: &str, hub_id: Option<&str>) -> Result<String, String> {
        let hub_id = hub_id.map_or(JsValue::UNDEFINED, JsValue::from);
        self.call_for("import_config", &[source.into(), hub_id])?
            .as_string()
            .ok_or_else(|| "the panels module gave no model".into())
    }

    fn import_framework(&self, request: &str) -> Result<String, String> {
        self.call_for("import_framework", &[request.into()])?
            .as_string()
            .ok_or_else(|| "the panels module gave no workload".into())
    }

    fn close_advice(&self) {
        let _ = self.call("close_advice", &[]);
    }

    fn close_timeline(&self) {
        let _ = self.call("close_timeline", &[]);
    }
}

/// Where a panel's module stands, for the panel to say so.
#[derive(Clone, Debug, PartialEq)]
pub enum ModuleState {
    /// Being fetched (or the panel's first call not made yet).
    Loading,
    /// It shows the panel.
    Ready,
    /// It could not be loaded or refused the call: why.
    Failed(String),
}
