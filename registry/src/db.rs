//! The profile store: one SQLite file in WAL mode, one table.
//!
//! Each upload is one `BEGIN IMMEDIATE` transaction (the idempotency look-up
//! and the insert together), committed with `synchronous = FULL`, so a
//! profile whose `201` went out is on disk, and a process killed half-way
//! leaves no partial row. Nothing about the uploader is stored: the row is
//! the profile (as the collector's schema re-serialises it), the columns the
//! listing shows (taken from it) and the `Idempotency-Key` (a hash of the
//! body).

use headroom_core::calibration::Profile;
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use serde::Serialize;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// The schema this registry writes (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = 1;

const SCHEMA: &str = "
CREATE TABLE profiles (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    idempotency_key    TEXT UNIQUE,
    name               TEXT NOT NULL,
    gpu                TEXT NOT NULL,
    gpu_total_bytes    INTEGER NOT NULL,
    compute_capability TEXT,
    driver             TEXT,
    cuda               TEXT,
    torch              TEXT,
    transformers       TEXT,
    collector_version  TEXT NOT NULL,
    points             INTEGER NOT NULL,
    fit                TEXT NOT NULL,
    summary            TEXT NOT NULL,
    created            TEXT NOT NULL,
    body               TEXT NOT NULL
);
CREATE INDEX profiles_gpu ON profiles (gpu);
";

/// What went wrong in the store.
#[derive(Debug)]
pub enum DbError {
    /// The `Idempotency-Key` belongs to another profile (its id).
    Conflict(i64),
    /// SQLite failed.
    Sqlite(rusqlite::Error),
    /// The file is not this registry's database.
    Schema(String),
}

impl std::fmt::Display for DbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DbError::Conflict(id) => write!(f, "the key belongs to profile {id}"),
            DbError::Sqlite(e) => write!(f, "{e}"),
            DbError::Schema(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for DbError {}

impl From<rusqlite::Error> for DbError {
    fn from(e: rusqlite::Error) -> Self {
        DbError::Sqlite(e)
    }
}

/// What an upload did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stored {
    /// A new row.
    Created(i64),
    /// The same profile under the same key was stored before: that row.
    Replayed(i64),
}

/// One profile as the listing shows it.
#[derive(Clone, Debug, Serialize)]
pub struct Entry {
    /// Row id.
    pub id: i64,
    /// `/api/v1/profiles/{id}`.
    pub url: String,
    /// The profile's name.
    pub name: String,
    /// `gpu.name`.
    pub gpu: String,
    /// `gpu.total_bytes`.
    pub gpu_total_bytes: i64,
    /// `gpu.compute_capability`.
    pub compute_capability: Option<String>,
    /// NVIDIA driver version.
    pub driver: Option<String>,
    /// CUDA version of the PyTorch build.
    pub cuda: Option<String>,
    /// PyTorch version.
    pub torch: Option<String>,
    /// transformers version.
    pub transformers: Option<String>,
    /// Collector that fitted it.
    pub collector_version: String,
    /// Measured points.
    pub points: i64,
    /// The profile's `fit` (basis, points used and skipped, residual).
    pub fit: Value,
    /// The profile's `summary` (error before and after the fit).
    pub summary: Value,
    /// The profile's `created`.
    pub created: String,
}

/// The store: a writer and a reader connection to one file.
pub struct Db {
    path: PathBuf,
    writer: Mutex<Connection>,
    reader: Mutex<Connection>,
}

fn lock(m: &Mutex<Connection>) -> MutexGuard<'_, Connection> {
    // A panic mid-transaction rolled it back when the transaction dropped.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn connect(path: &Path) -> Result<Connection, DbError> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(10))?;
    Ok(conn)
}

/// What an SQLite file at the registry's path holds.
#[derive(Debug, PartialEq, Eq)]
enum Ownership {
    /// This registry's schema.
    Ours,
    /// No table and no schema version: new, or empty.
    Empty,
}

/// Reads (changes nothing) whether the file at `path` is this registry's
/// database or an empty one; anything else is refused.
fn owned_or_empty(conn: &Connection, path: &Path) -> Result<Ownership, DbError> {
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    match version {
        0 => {
            let tables: i64 = conn.query_row(
                "SELECT count(*) FROM sqlite_schema WHERE type = 'table'",
                [],
                |r| r.get(0),
            )?;
            if tables > 0 {
                return Err(DbError::Schema(format!(
                    "{}: an SQLite database of something else (it has tables, none of them this registry's); it was left as it was",
                    path.display()
                )));
            }
            Ok(Ownership::Empty)
        }
        SCHEMA_VERSION => Ok(Ownership::Ours),
        v => Err(DbError::Schema(format!(
            "{}: schema version {v}, this registry reads {SCHEMA_VERSION}; it was left as it was",
            path.display()
        ))),
    }
}

impl Db {
    /// Opens (creating it and its folder if needed) the database at `path`.
    pub fn open(path: &Path) -> Result<Db, DbError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| {
                DbError::Schema(format!("cannot create the folder {}: {e}", dir.display()))
            })?;
        }
        let mut writer = connect(path)?;
        // Whose file is it? Asked before anything is changed: another
        // program's SQLite file is refused as it was found (switching it
        // to WAL first would change it).
        owned_or_empty(&writer, path)?;
        let mode: String = writer.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(DbError::Schema(format!(
                "{}: SQLite could not switch to WAL mode (it says `{mode}`)",
                path.display()
            )));
        }
        writer.pragma_update(None, "synchronous", "FULL")?;
        let tx = writer.transaction_with_behavior(TransactionBehavior::Immediate)?;
        // Again inside the write transaction: another process may have
        // created the schema since.
        if owned_or_empty(&tx, path)? == Ownership::Empty {
            tx.execute_batch(SCHEMA)?;
            tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
        }
        tx.commit()?;
        let reader = connect(path)?;
        reader.pragma_update(None, "query_only", true)?;
        Ok(Db {
            path: path.to_path_buf(),
            writer: Mutex::new(writer),
            reader: Mutex::new(reader),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stores a validated profile whose canonical JSON is `body`, in one
    /// transaction. With a `key` already used: the same body is the same
    /// upload retried ([`Stored::Replayed`]), another body a
    /// [`DbError::Conflict`].
    pub fn insert(
        &self,
        profile: &Profile,
        body: &str,
        key: Option<&str>,
    ) -> Result<Stored, DbError> {
        let mut conn = lock(&self.writer);
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        if let Some(key) = key {
            let found: Option<(i64, String)> = tx
                .query_row(
                    "SELECT id, body FROM profiles WHERE idempotency_key = ?1",
                    [key],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?;
            if let Some((id, stored)) = found {
                return if stored == body {
                    Ok(Stored::Replayed(id))
                } else {
                    Err(DbError::Conflict(id))
                };
            }
        }
        tx.execute(
            "INSERT INTO profiles (idempotency_key, name, gpu, gpu_total_bytes, compute_capability,
                 driver, cuda, torch, transformers, collector_version, points, fit, summary,
                 created, body)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
            params![
                key,
                profile.name,
                profile.gpu.name,
                i64::try_from(profile.gpu.total_bytes).unwrap_or(i64::MAX),
                profile.gpu.compute_capability,
                profile.driver,
                profile.cuda,
                profile.torch,
                profile.transformers,
                profile.collector_version,
                i64::try_from(profile.points.len()).unwrap_or(i64::MAX),
                to_json(&profile.fit),
                to_json(&profile.summary),
                profile.created,
                body,
            ],
        )?;
        let id = tx.last_insert_rowid();
        tx.commit()?;
        Ok(Stored::Created(id))
    }

    /// Profiles whose GPU name contains `gpu` (ASCII case-insensitive), newest
    /// first, and how many match in all.
    pub fn list(
        &self,
        gpu: Option<&str>,
        limit: i64,
        offset: i64,
    ) -> Result<(Vec<Entry>, i64), DbError> {
        let conn = lock(&self.reader);
        let filter = "?1 IS NULL OR instr(lower(gpu), lower(?1)) > 0";
        let total: i64 = conn.query_row(
            &format!("SELECT count(*) FROM profiles WHERE {filter}"),
            [gpu],
            |r| r.get(0),
        )?;
        let mut stmt = conn.prepare(&format!(
            "SELECT id, name, gpu, gpu_total_bytes, compute_capability, driver, cuda, torch,
                    transformers, collector_version, points, fit, summary, created
             FROM profiles WHERE {filter} ORDER BY id DESC LIMIT ?2 OFFSET ?3"
        ))?;
        let rows = stmt.query_map(params![gpu, limit, offset], |r| {
            let id: i64 = r.get(0)?;
            let fit: String = r.get(11)?;
            let summary: String = r.get(12)?;
            Ok(Entry {
                id,
                url: profile_url(id),
                name: r.get(1)?,
                gpu: r.get(2)?,
                gpu_total_bytes: r.get(3)?,
                compute_capability: r.get(4)?,
                driver: r.get(5)?,
                cuda: r.get(6)?,
                torch: r.get(7)?,
                transformers: r.get(8)?,
                collector_version: r.get(9)?,
                points: r.get(10)?,
                fit: serde_json::from_str(&fit).unwrap_or(Value::Null),
                summary: serde_json::from_str(&summary).unwrap_or(Value::Null),
                created: r.get(13)?,
            })
        })?;
        let entries = rows.collect::<Result<Vec<_>, _>>()?;
        Ok((entries, total))
    }

    /// The stored profile `id` (its JSON), if there is one.
    pub fn get(&self, id: i64) -> Result<Option<String>, DbError> {
        let conn = lock(&self.reader);
        Ok(conn
            .query_row("SELECT body FROM profiles WHERE id = ?1", [id], |r| {
                r.get(0)
            })
            .optional()?)
    }

    /// How many profiles are stored.
    pub fn count(&self) -> Result<i64, DbError> {
        let conn = lock(&self.reader);
        Ok(conn.query_row("SELECT count(*) FROM profiles", [], |r| r.get(0))?)
    }
}

/// The API path of profile `id`.
pub fn profile_url(id: i64) -> String {
    format!("/api/v1/profiles/{id}")
}

/// A part of a profile as a JSON column.
fn to_json<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).expect("profile parts serialise")
}
