//! Mounts the calculator page.

#[cfg(target_arch = "wasm32")]
fn main() {
    headroom_web::app::mount();
}

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    eprintln!("headroom-web is a browser app: run ./scripts/serve.sh");
}
