//! Mounts the calculator page.

#[cfg(target_arch = "wasm32")]
fn main() {
    // The page's curve workers load this same module: they have no window
    // and only answer requests (`headroom_web::workers`).
    if web_sys::window().is_some() {
        headroom_web::app::mount();
    }
}

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    eprintln!("headroom-web is a browser app: run ./scripts/serve.sh");
}
