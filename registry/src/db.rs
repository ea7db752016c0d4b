//! The profile store: one SQLite file in WAL mode: the profiles, the
//! upload tokens (their SHA-256 hashes) and each token's uploads per day.
//!
//! Each upload is one `BEGIN IMMEDIATE` transaction (the idempotency and
//! content look-ups, the quota and the insert together), committed with
//! `synchronous = FULL`, so a profile whose `201` went out is on disk, and a
//! process killed half-way leaves no partial row. A row is the profile (as
//! the core's schema re-serialises it, its claims recomputed), the columns
//! the listing shows (taken from it), its review status, the
//! `Idempotency-Key` (a hash of the body), the SHA-256 of the body (one row
//! per identical profile) and the token that uploaded it (none for seeded
//! profiles and an `--open` registry's uploads).

use headroom_core::calibration::Profile;
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use serde::Serialize;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// The schema this registry writes (`PRAGMA user_version`); version 1 (no
/// tokens, no review) is migrated on open.
pub const SCHEMA_VERSION: i64 = 2;
/// `PRAGMA application_id` of this registry's files ("HdRm"), set on
/// creation and migration: a file with another id is another program's.
pub const APPLICATION_ID: i64 = 0x4864_526d;

const SCHEMA_V1: &str = "
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

/// Version 1 to 2: review status (rows of version 1 were public: approved),
/// content hash, uploader; tokens and quotas.
const MIGRATE_V1_TO_V2: &str = "
ALTER TABLE profiles ADD COLUMN status TEXT NOT NULL DEFAULT 'approved'
    CHECK (status IN ('pending', 'approved', 'rejected'));
ALTER TABLE profiles ADD COLUMN content_hash TEXT;
ALTER TABLE profiles ADD COLUMN uploader INTEGER;
CREATE INDEX profiles_status ON profiles (status);
CREATE TABLE tokens (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    name    TEXT NOT NULL UNIQUE,
    hash    TEXT NOT NULL UNIQUE,
    revoked INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE quota (
    token   INTEGER NOT NULL,
    day     INTEGER NOT NULL,
    uploads INTEGER NOT NULL,
    bytes   INTEGER NOT NULL,
    PRIMARY KEY (token, day)
);
";

/// Review status of a profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Uploaded, waiting for an operator.
    Pending,
    /// Listed.
    Approved,
    /// Refused by an operator: never listed or served; kept so that the
    /// same profile uploaded again stays refused.
    Rejected,
}

impl Status {
    /// The word stored and shown.
    pub fn key(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Approved => "approved",
            Status::Rejected => "rejected",
        }
    }
}

/// An uploader's daily allowance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quota {
    /// Uploads stored a UTC day.
    pub uploads_per_day: u64,
    /// Bytes of stored profiles a UTC day.
    pub bytes_per_day: u64,
}

/// Who uploads, and under what rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Uploader {
    /// The token's row (none: seeded, or an `--open` registry).
    pub token: Option<i64>,
    /// The status a new row gets.
    pub status: Status,
    /// The token's allowance (none: unlimited).
    pub quota: Option<Quota>,
    /// Days since 1970-01-01, UTC (the quota's day).
    pub day: i64,
}

/// SHA-256 of `bytes`, in lower-case hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// What went wrong in the store.
#[derive(Debug)]
pub enum DbError {
    /// The `Idempotency-Key` belongs to another profile (its id).
    Conflict(i64),
    /// SQLite failed.
    Sqlite(rusqlite::Error),
    /// The file is not this registry's database.
    Schema(String),
    /// The uploader's daily allowance is spent: what ran out.
    Quota(String),
    /// No such row (a profile id, a token name).
    NotFound(String),
}

impl std::fmt::Display for DbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DbError::Conflict(id) => write!(f, "the key belongs to profile {id}"),
            DbError::Sqlite(e) => write!(f, "{e}"),
            DbError::Schema(s) | DbError::Quota(s) | DbError::NotFound(s) => f.write_str(s),
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
    /// The same profile was stored before (under the same key, or with the
    /// same content): that row.
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
    /// `approved`, or `pending` (listed on request only).
    pub status: Status,
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
    /// This registry's schema version 1.
    Old,
}

/// Reads (changes nothing) whether the file at `path` is this registry's
/// database or an empty one; anything else is refused: another
/// `application_id`, tables without this registry's schema version, or a
/// schema version this registry does not read.
fn owned_or_empty(conn: &Connection, path: &Path) -> Result<Ownership, DbError> {
    let application: i64 = conn.query_row("PRAGMA application_id", [], |r| r.get(0))?;
    if application != 0 && application != APPLICATION_ID {
        return Err(DbError::Schema(format!(
            "{}: an SQLite database of another program (application_id {application:#x}, this registry's is {APPLICATION_ID:#x}); it was left as it was",
            path.display()
        )));
    }
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
        1 | SCHEMA_VERSION => {
            let ours: i64 = conn.query_row(
                "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'profiles'",
                [],
                |r| r.get(0),
            )?;
            if ours == 0 {
                return Err(DbError::Schema(format!(
                    "{}: schema version {version} but no `profiles` table: not this registry's database; it was left as it was",
                    path.display()
                )));
            }
            Ok(if version == SCHEMA_VERSION {
                Ownership::Ours
            } else {
                Ownership::Old
            })
        }
        v => Err(DbError::Schema(format!(
            "{}: schema version {v}, this registry reads 1 and {SCHEMA_VERSION}; it was left as it was",
            path.display()
        ))),
    }
}

/// Brings a version 1 file to version 2 inside `tx`.
fn migrate_v1(tx: &rusqlite::Transaction<'_>) -> Result<(), DbError> {
    tx.execute_batch(MIGRATE_V1_TO_V2)?;
    let bodies: Vec<(i64, String)> = tx
        .prepare("SELECT id, body FROM profiles ORDER BY id")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    let mut seen = std::collections::HashSet::new();
    for (id, body) in bodies {
        let hash = sha256_hex(body.as_bytes());
        // A profile stored twice under two keys keeps its hash on the first row.
        if seen.insert(hash.clone()) {
            tx.execute(
                "UPDATE profiles SET content_hash = ?1 WHERE id = ?2",
                params![hash, id],
            )?;
        }
    }
    tx.execute_batch("CREATE UNIQUE INDEX profiles_content ON profiles (content_hash);")?;
    Ok(())
}

impl Db {
    /// Opens the database at `path` for an operator's command: the file
    /// must exist (an operator's typo does not create an empty registry).
    pub fn open_existing(path: &Path) -> Result<Db, DbError> {
        if !path.is_file() {
            return Err(DbError::NotFound(format!(
                "{}: no such database; allowed: the --db file the registry serves",
                path.display()
            )));
        }
        Db::open(path)
    }

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
        match owned_or_empty(&tx, path)? {
            Ownership::Empty => {
                tx.execute_batch(SCHEMA_V1)?;
                migrate_v1(&tx)?;
            }
            Ownership::Old => migrate_v1(&tx)?,
            Ownership::Ours => {}
        }
        tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
        tx.pragma_update(None, "application_id", APPLICATION_ID)?;
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
    /// [`DbError::Conflict`]. A body stored before (any key, or none) is
    /// that row ([`Stored::Replayed`]). A new row counts against the
    /// uploader's quota ([`DbError::Quota`] when spent).
    pub fn insert(
        &self,
        profile: &Profile,
        body: &str,
        key: Option<&str>,
        uploader: &Uploader,
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
        let hash = sha256_hex(body.as_bytes());
        let same: Option<i64> = tx
            .query_row(
                "SELECT id FROM profiles WHERE content_hash = ?1",
                [&hash],
                |r| r.get(0),
            )
            .optional()?;
        if let Some(id) = same {
            return Ok(Stored::Replayed(id));
        }
        let bytes = i64::try_from(body.len()).unwrap_or(i64::MAX);
        if let (Some(token), Some(quota)) = (uploader.token, uploader.quota) {
            let (uploads, used): (i64, i64) = tx
                .query_row(
                    "SELECT uploads, bytes FROM quota WHERE token = ?1 AND day = ?2",
                    params![token, uploader.day],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?
                .unwrap_or((0, 0));
            if uploads as u64 >= quota.uploads_per_day {
                return Err(DbError::Quota(format!(
                    "this token stored {uploads} profile(s) today; allowed: {} a day (UTC)",
                    quota.uploads_per_day
                )));
            }
            if (used + bytes) as u64 > quota.bytes_per_day {
                return Err(DbError::Quota(format!(
                    "this token stored {used} bytes today and this profile is {bytes}; allowed: {} bytes a day (UTC)",
                    quota.bytes_per_day
                )));
            }
            tx.execute(
                "INSERT INTO quota (token, day, uploads, bytes) VALUES (?1, ?2, 1, ?3)
                 ON CONFLICT (token, day) DO UPDATE SET uploads = uploads + 1, bytes = bytes + ?3",
                params![token, uploader.day, bytes],
            )?;
            // Old days are of no use.
            tx.execute(
                "DELETE FROM quota WHERE day < ?1",
                params![uploader.day - 1],
            )?;
        }
        tx.execute(
            "INSERT INTO profiles (idempotency_key, name, gpu, gpu_total_bytes, compute_capability,
                 driver, cuda, torch, transformers, collector_version, points, fit, summary,
                 created, body, status, content_hash, uploader)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)",
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
                uploader.status.key(),
                hash,
                uploader.token,
            ],
        )?;
        let id = tx.last_insert_rowid();
        tx.commit()?;
        Ok(Stored::Created(id))
    }

    /// The review status of profile `id`, if there is one.
    pub fn status(&self, id: i64) -> Result<Option<Status>, DbError> {
        let conn = lock(&self.reader);
        let word: Option<String> = conn
            .query_row("SELECT status FROM profiles WHERE id = ?1", [id], |r| {
                r.get(0)
            })
            .optional()?;
        Ok(word.map(|w| status_of(&w)))
    }

    /// Sets the review status of profile `id`; the status it had.
    pub fn review(&self, id: i64, status: Status) -> Result<Status, DbError> {
        let mut conn = lock(&self.writer);
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let before: Option<String> = tx
            .query_row("SELECT status FROM profiles WHERE id = ?1", [id], |r| {
                r.get(0)
            })
            .optional()?;
        let Some(before) = before else {
            return Err(DbError::NotFound(format!(
                "no profile {id}; allowed: an id from `headroom-registry pending`"
            )));
        };
        tx.execute(
            "UPDATE profiles SET status = ?1 WHERE id = ?2",
            params![status.key(), id],
        )?;
        tx.commit()?;
        Ok(status_of(&before))
    }

    /// Adds an upload token named `name`; the token (shown once: only its
    /// hash is kept).
    pub fn add_token(&self, name: &str) -> Result<String, DbError> {
        let mut secret = [0u8; 32];
        getrandom::getrandom(&mut secret)
            .map_err(|e| DbError::Schema(format!("no randomness for a token: {e}")))?;
        let token = format!(
            "hr_{}",
            secret
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        );
        let conn = lock(&self.writer);
        let taken: i64 =
            conn.query_row("SELECT count(*) FROM tokens WHERE name = ?1", [name], |r| {
                r.get(0)
            })?;
        if taken > 0 {
            return Err(DbError::Schema(format!(
                "a token named `{name}` exists; allowed: a new name"
            )));
        }
        conn.execute(
            "INSERT INTO tokens (name, hash) VALUES (?1, ?2)",
            params![name, sha256_hex(token.as_bytes())],
        )?;
        Ok(token)
    }

    /// Revokes the token named `name` (its uploads stay).
    pub fn revoke_token(&self, name: &str) -> Result<(), DbError> {
        let conn = lock(&self.writer);
        let n = conn.execute(
            "UPDATE tokens SET revoked = 1 WHERE name = ?1 AND revoked = 0",
            [name],
        )?;
        if n == 0 {
            return Err(DbError::NotFound(format!(
                "no live token named `{name}`; allowed: a name from `headroom-registry token list`"
            )));
        }
        Ok(())
    }

    /// Every token: `(name, revoked, profiles uploaded)`.
    pub fn tokens(&self) -> Result<Vec<(String, bool, i64)>, DbError> {
        let conn = lock(&self.reader);
        let mut stmt = conn.prepare(
            "SELECT t.name, t.revoked, (SELECT count(*) FROM profiles p WHERE p.uploader = t.id)
             FROM tokens t ORDER BY t.id",
        )?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get::<_, i64>(1)? != 0, r.get(2)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The live token whose hash is `hash`: its row id.
    pub fn token_id(&self, hash: &str) -> Result<Option<i64>, DbError> {
        let conn = lock(&self.reader);
        Ok(conn
            .query_row(
                "SELECT id FROM tokens WHERE hash = ?1 AND revoked = 0",
                [hash],
                |r| r.get(0),
            )
            .optional()?)
    }

    /// Copies the database, as it is at one moment, to a new file `to`,
    /// while it serves (`VACUUM INTO`: one read transaction, no lock on
    /// writers in WAL mode).
    pub fn backup(&self, to: &Path) -> Result<(), DbError> {
        if to.exists() {
            return Err(DbError::Schema(format!(
                "{}: exists; allowed: a path that does not exist yet (a backup never overwrites)",
                to.display()
            )));
        }
        // The reader is `query_only`, which forbids VACUUM INTO: a
        // connection of its own.
        let conn = connect(&self.path)?;
        conn.execute("VACUUM INTO ?1", [to.to_string_lossy()])?;
        Ok(())
    }

    /// Profiles whose GPU name contains `gpu` (ASCII case-insensitive), newest
    /// first, and how many match in all.
    pub fn list(
        &self,
        gpu: Option<&str>,
        shown: Shown,
        limit: i64,
        offset: i64,
    ) -> Result<(Vec<Entry>, i64), DbError> {
        let conn = lock(&self.reader);
        let filter = format!(
            "(?1 IS NULL OR instr(lower(gpu), lower(?1)) > 0) AND status IN ({})",
            shown.statuses()
        );
        let total: i64 = conn.query_row(
            &format!("SELECT count(*) FROM profiles WHERE {filter}"),
            [gpu],
            |r| r.get(0),
        )?;
        let mut stmt = conn.prepare(&format!(
            "SELECT id, name, gpu, gpu_total_bytes, compute_capability, driver, cuda, torch,
                    transformers, collector_version, points, fit, summary, created, status
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
                status: status_of(&r.get::<_, String>(14)?),
            })
        })?;
        let entries = rows.collect::<Result<Vec<_>, _>>()?;
        Ok((entries, total))
    }

    /// The stored profile `id` (its JSON) and its status, unless there is
    /// none or it was rejected.
    pub fn get(&self, id: i64) -> Result<Option<(String, Status)>, DbError> {
        let conn = lock(&self.reader);
        Ok(conn
            .query_row(
                "SELECT body, status FROM profiles WHERE id = ?1 AND status != 'rejected'",
                [id],
                |r| Ok((r.get(0)?, status_of(&r.get::<_, String>(1)?))),
            )
            .optional()?)
    }

    /// How many profiles are listed (approved) and how many wait (pending).
    pub fn counts(&self) -> Result<(i64, i64), DbError> {
        let conn = lock(&self.reader);
        Ok(conn.query_row(
            "SELECT count(*) FILTER (WHERE status = 'approved'), count(*) FILTER (WHERE status = 'pending') FROM profiles",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?)
    }

    /// How many profiles are stored, whatever their status.
    pub fn count(&self) -> Result<i64, DbError> {
        let conn = lock(&self.reader);
        Ok(conn.query_row("SELECT count(*) FROM profiles", [], |r| r.get(0))?)
    }
}

/// Which statuses a listing shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shown {
    /// Approved only (the default).
    Approved,
    /// Pending only (what waits for review).
    Pending,
    /// Approved and pending, each marked.
    All,
}

impl Shown {
    fn statuses(self) -> &'static str {
        match self {
            Shown::Approved => "'approved'",
            Shown::Pending => "'pending'",
            Shown::All => "'approved', 'pending'",
        }
    }
}

fn status_of(word: &str) -> Status {
    match word {
        "approved" => Status::Approved,
        "rejected" => Status::Rejected,
        _ => Status::Pending,
    }
}

/// Restores the backup `from` (a file `backup` wrote) as the database `to`,
/// which must not exist (stop the registry, move its file away, restore):
/// the backup is checked to be this registry's and intact, then copied to a
/// temporary file beside `to` and renamed into place.
pub fn restore(from: &Path, to: &Path) -> Result<(), DbError> {
    if !from.is_file() {
        return Err(DbError::NotFound(format!(
            "{}: no such backup file",
            from.display()
        )));
    }
    if to.exists() {
        return Err(DbError::Schema(format!(
            "{}: exists; allowed: a path that does not exist (stop the registry and move its database away first)",
            to.display()
        )));
    }
    let source = Connection::open_with_flags(from, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    if owned_or_empty(&source, from)? == Ownership::Empty {
        return Err(DbError::Schema(format!(
            "{}: an empty database, not a registry's backup",
            from.display()
        )));
    }
    let check: String = source.query_row("PRAGMA integrity_check", [], |r| r.get(0))?;
    if check != "ok" {
        return Err(DbError::Schema(format!(
            "{}: the backup is damaged (integrity_check: {check})",
            from.display()
        )));
    }
    if let Some(dir) = to.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| DbError::Schema(format!("cannot create {}: {e}", dir.display())))?;
    }
    let partial = to.with_extension("restoring");
    let _ = std::fs::remove_file(&partial);
    source.execute("VACUUM INTO ?1", [partial.to_string_lossy()])?;
    drop(source);
    std::fs::rename(&partial, to)
        .map_err(|e| DbError::Schema(format!("cannot move the restored file into place: {e}")))?;
    // Opened once: migrated if the backup was of an older schema, in WAL mode.
    Db::open(to)?;
    Ok(())
}

/// The API path of profile `id`.
pub fn profile_url(id: i64) -> String {
    format!("/api/v1/profiles/{id}")
}

/// A part of a profile as a JSON column.
fn to_json<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).expect("profile parts serialise")
}
