//! `headroom-registry [--db FILE] [--listen ADDR] [--dist DIR]
//! [--uploads-per-minute N] [--seed DIR]`: the profile registry and the page, in one
//! process.

use clap::Parser;
use headroom_registry::{App, Config};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// The profile registry: receives `headroom upload`, stores
/// profiles in SQLite, lists them, and serves the page.
#[derive(Debug, Parser)]
#[command(name = "headroom-registry", version)]
struct Args {
    /// The SQLite database (created, with its folder, on first start).
    #[arg(long, default_value = "headroom-registry.sqlite")]
    db: PathBuf,
    /// Address to listen on (port 0: any free port; the line printed at
    /// start says which).
    #[arg(long, default_value = "127.0.0.1:8090")]
    listen: String,
    /// The built page (`trunk build`'s output).
    #[arg(long, default_value = "dist")]
    dist: PathBuf,
    /// Uploads a minute per client address (0: no limit).
    #[arg(long, default_value_t = 30)]
    uploads_per_minute: u32,
    /// On an empty database, store the profiles of this folder first (the
    /// committed ones: `calibration/profiles`).
    #[arg(long)]
    seed: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            let code = if e.use_stderr() { 64 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let config = Config {
        db: args.db,
        dist: args.dist,
        uploads_per_minute: args.uploads_per_minute,
    };
    let app = match App::open(&config) {
        Ok(app) => Arc::new(app),
        Err(e) => {
            eprintln!(
                "error: cannot open the database {}: {e}",
                config.db.display()
            );
            return ExitCode::from(1);
        }
    };
    if let Some(dir) = &args.seed {
        match app.seed(dir) {
            Ok(0) => {}
            Ok(n) => eprintln!("seeded {n} profile(s) from {}", dir.display()),
            Err(e) => {
                eprintln!("error: --seed: {e}");
                return ExitCode::from(1);
            }
        }
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start: {e}");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(async move {
        let listener = match tokio::net::TcpListener::bind(&args.listen).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("error: cannot listen on {}: {e}", args.listen);
                return ExitCode::from(1);
            }
        };
        let addr = match listener.local_addr() {
            Ok(a) => a,
            Err(e) => {
                eprintln!("error: cannot listen on {}: {e}", args.listen);
                return ExitCode::from(1);
            }
        };
        let page = if config.dist.join("index.html").is_file() {
            format!("the page from {}", config.dist.display())
        } else {
            format!("no page ({} has no index.html)", config.dist.display())
        };
        println!(
            "headroom-registry listening on http://{addr}/ (database {}, {page}; API under /api/v1/profiles)",
            config.db.display()
        );
        let _ = std::io::stdout().flush();
        // The page's compressed copies, written beside its files while the
        // registry already serves (each copy appears whole, by a rename;
        // until then the file goes out as it is).
        if config.dist.join("index.html").is_file() {
            let dist = config.dist.clone();
            std::thread::spawn(move || match headroom_registry::compress::precompress(&dist) {
                Ok(n) => eprintln!(
                    "compressed {n} file(s) of {} (brotli and gzip, beside each)",
                    dist.display()
                ),
                Err(e) => eprintln!(
                    "warning: could not compress the page's files ({e}); they are sent as they are"
                ),
            });
        }
        match headroom_registry::serve(listener, app).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(1)
            }
        }
    })
}
