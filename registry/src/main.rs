//! `headroom-registry [--db FILE] [--listen ADDR] [--dist DIR] [--open] ...`:
//! the profile registry and the page, in one process; and the operator's
//! commands on its database: `token add|list|revoke`, `pending`, `approve`,
//! `reject`, `backup`, `restore`.

use clap::{Parser, Subcommand};
use headroom_registry::db::{self, Db, DbError, Shown, Status};
use headroom_registry::server::Limits;
use headroom_registry::{App, Config};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// The profile registry: receives `headroom upload`, stores
/// profiles in SQLite, lists them, and serves the page.
#[derive(Debug, Parser)]
#[command(
    name = "headroom-registry",
    version,
    args_conflicts_with_subcommands = true
)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
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
    /// committed ones: `calibration/profiles`), approved.
    #[arg(long)]
    seed: Option<PathBuf>,
    /// No token and no review: anyone who reaches the port publishes at
    /// once (a team on a trusted network).
    #[arg(long)]
    open: bool,
    /// The address users reach the registry by, behind a proxy
    /// (`https://profiles.example`): the one browser origin that may POST.
    #[arg(long)]
    public_url: Option<String>,
    /// Profiles each token may store a UTC day.
    #[arg(long, default_value_t = 20)]
    uploads_per_day: u64,
    /// Bytes of profiles each token may store a UTC day.
    #[arg(long, default_value_t = 16 << 20)]
    bytes_per_day: u64,
    /// Seconds a client has to send a request's whole header.
    #[arg(long, default_value_t = 10)]
    header_timeout_s: u64,
    /// Seconds a connection may stay silent before it is closed.
    #[arg(long, default_value_t = 60)]
    idle_timeout_s: u64,
    /// Open connections per client address (IPv6: per /64).
    #[arg(long, default_value_t = 64)]
    connections_per_address: usize,
    /// Open connections in all.
    #[arg(long, default_value_t = 1024)]
    connections: usize,
}

/// The operator's commands (each on `--db FILE`, which must exist).
#[derive(Debug, Subcommand)]
enum Command {
    /// Upload tokens: `add NAME` prints a new one (once), `list`, `revoke NAME`.
    Token {
        #[command(subcommand)]
        action: TokenAction,
    },
    /// Lists the profiles waiting for review.
    Pending {
        /// The registry's database.
        #[arg(long)]
        db: PathBuf,
    },
    /// Lists a pending profile.
    Approve {
        /// The profile's id (from `pending`).
        id: i64,
        /// The registry's database.
        #[arg(long)]
        db: PathBuf,
    },
    /// Refuses a profile: never listed or served, and the same profile
    /// uploaded again stays refused.
    Reject {
        /// The profile's id.
        id: i64,
        /// The registry's database.
        #[arg(long)]
        db: PathBuf,
    },
    /// Copies the database to a new file while the registry serves.
    Backup {
        /// The registry's database.
        #[arg(long)]
        db: PathBuf,
        /// The backup file (must not exist).
        #[arg(long)]
        to: PathBuf,
    },
    /// Makes a backup the database `--db` (which must not exist: stop the
    /// registry and move its file away first).
    Restore {
        /// The backup file.
        #[arg(long)]
        from: PathBuf,
        /// Where the registry's database goes.
        #[arg(long)]
        db: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
enum TokenAction {
    /// Issues a token named NAME and prints it once (only its hash is kept).
    Add {
        /// Who holds it (a person, a lab): 1 to 64 letters, digits, `-`, `_`, `.`.
        name: String,
        /// The registry's database.
        #[arg(long)]
        db: PathBuf,
    },
    /// Lists the tokens: name, live or revoked, profiles uploaded.
    List {
        /// The registry's database.
        #[arg(long)]
        db: PathBuf,
    },
    /// Revokes the token named NAME (its profiles stay).
    Revoke {
        /// The token's name.
        name: String,
        /// The registry's database.
        #[arg(long)]
        db: PathBuf,
    },
}

fn token_name_ok(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

/// Runs an operator's command: the exit code.
fn operate(command: Command) -> ExitCode {
    let fail = |e: DbError| {
        eprintln!("error: {e}");
        ExitCode::from(1)
    };
    let open = |path: &PathBuf| Db::open_existing(path);
    let result: Result<(), DbError> = (|| match command {
        Command::Token { action } => match action {
            TokenAction::Add { name, db } => {
                if !token_name_ok(&name) {
                    return Err(DbError::Schema(format!(
                        "`{}`: not a token name; allowed: 1 to 64 letters, digits, `-`, `_` and `.`",
                        headroom_core::calibration::printable(&name, 80)
                    )));
                }
                let token = open(&db)?.add_token(&name)?;
                println!("{token}");
                eprintln!(
                    "token `{name}` added: give it to its holder (`headroom upload --token ...` or HEADROOM_TOKEN); it is shown this once, the registry keeps only its hash"
                );
                Ok(())
            }
            TokenAction::List { db } => {
                for (name, revoked, uploads) in open(&db)?.tokens()? {
                    println!(
                        "{name}\t{}\t{uploads} profile(s)",
                        if revoked { "revoked" } else { "live" }
                    );
                }
                Ok(())
            }
            TokenAction::Revoke { name, db } => {
                open(&db)?.revoke_token(&name)?;
                eprintln!("token `{name}` revoked");
                Ok(())
            }
        },
        Command::Pending { db } => {
            let (entries, _) = open(&db)?.list(None, Shown::Pending, 1000, 0)?;
            if entries.is_empty() {
                eprintln!("nothing waits for review");
            }
            for e in entries {
                println!(
                    "{}\t{}\t{}\t{} point(s)\tcreated {}",
                    e.id,
                    headroom_core::calibration::printable(&e.name, 200),
                    headroom_core::calibration::printable(&e.gpu, 128),
                    e.points,
                    e.created
                );
            }
            Ok(())
        }
        Command::Approve { id, db } | Command::Reject { id, db } if id < 1 => {
            let _ = db;
            Err(DbError::NotFound(format!(
                "no profile {id}; allowed: an id from `headroom-registry pending`"
            )))
        }
        Command::Approve { id, db } => {
            let before = open(&db)?.review(id, Status::Approved)?;
            eprintln!("profile {id}: {} -> approved (listed)", before.key());
            Ok(())
        }
        Command::Reject { id, db } => {
            let before = open(&db)?.review(id, Status::Rejected)?;
            eprintln!("profile {id}: {} -> rejected (not listed)", before.key());
            Ok(())
        }
        Command::Backup { db, to } => {
            open(&db)?.backup(&to)?;
            eprintln!("backed up {} to {}", db.display(), to.display());
            Ok(())
        }
        Command::Restore { from, db } => {
            db::restore(&from, &db)?;
            eprintln!("restored {} as {}", from.display(), db.display());
            Ok(())
        }
    })();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
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
    if let Some(command) = args.command {
        return operate(command);
    }
    if let Some(url) = &args.public_url {
        if headroom_registry::origin_of(url).is_none_or(|o| !o.starts_with("http")) {
            eprintln!(
                "error: --public-url `{}`: not a URL; allowed: http(s)://HOST[:PORT], the address users reach the registry by",
                headroom_core::calibration::printable(url, 200)
            );
            return ExitCode::from(64);
        }
    }
    let limits = Limits {
        header_timeout: Duration::from_secs(args.header_timeout_s.max(1)),
        idle_timeout: Duration::from_secs(args.idle_timeout_s.max(1)),
        per_address: args.connections_per_address.max(1),
        total: args.connections.max(1),
        ..Limits::default()
    };
    let config = Config {
        db: args.db,
        dist: args.dist,
        uploads_per_minute: args.uploads_per_minute,
        open: args.open,
        public_url: args.public_url.clone(),
        quota: db::Quota {
            uploads_per_day: args.uploads_per_day,
            bytes_per_day: args.bytes_per_day,
        },
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
    let code = runtime.block_on(async move {
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
        let mode = if config.open {
            "OPEN: anyone who reaches this port publishes, with no token and no review".to_string()
        } else {
            format!(
                "uploads need a token (`headroom-registry token add NAME`) and wait for review (`approve ID`); {} upload(s) and {} bytes a token a day",
                config.quota.uploads_per_day, config.quota.bytes_per_day
            )
        };
        println!(
            "headroom-registry listening on http://{addr}/ ({mode}; database {}, {page}; API under /api/v1/profiles)",
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
        match headroom_registry::serve(listener, app, limits).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(1)
            }
        }
    });
    // Database work still running after the grace period is not waited for
    // long: SQLite's transactions keep the file whole.
    runtime.shutdown_timeout(Duration::from_secs(1));
    code
}
