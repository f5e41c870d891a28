//! A SQLite journal file is its owner's alone: created 0600 (its `-wal`
//! too), never opened through a symbolic link, and refused with
//! `JournalErrorKind::Insecure` (naming the file, owner and mode) when
//! another user owns it or its group or others may use it.
#![cfg(unix)]

use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::Path;

use arcp_sdk::{JournalError, JournalErrorKind, SqliteJournal};

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn wal(path: &Path) -> std::path::PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push("-wal");
    name.into()
}

fn insecure(result: Result<SqliteJournal, JournalError>) -> JournalError {
    let e = result.expect_err("an insecure journal file must be refused");
    assert_eq!(e.kind, JournalErrorKind::Insecure, "{e}");
    e
}

#[test]
fn a_new_journal_and_its_wal_are_private_to_their_owner() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.db");
    let journal = SqliteJournal::open(&path).unwrap();
    assert_eq!(mode(&path), 0o600, "the journal file");
    // Open in WAL mode: the write-ahead log exists while the journal is.
    assert!(wal(&path).exists(), "WAL mode keeps a -wal beside the file");
    assert_eq!(mode(&wal(&path)), 0o600, "the -wal file");
    drop(journal);
    // Reopening a private journal works, for a client and an operator.
    drop(SqliteJournal::open(&path).unwrap());
    drop(SqliteJournal::open_read_only(&path).unwrap());
}

#[test]
fn a_symbolic_link_is_never_followed() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real.db");
    drop(SqliteJournal::open(&real).unwrap());
    let link = dir.path().join("link.db");
    symlink(&real, &link).unwrap();
    let e = insecure(SqliteJournal::open(&link));
    assert!(e.message.contains("symbolic link"), "{e}");
    assert!(e.message.contains("link.db"), "names the file: {e}");
    insecure(SqliteJournal::open_read_only(&link));

    // A dangling link is not followed to create its target either.
    let target = dir.path().join("planted-target.db");
    let dangling = dir.path().join("dangling.db");
    symlink(&target, &dangling).unwrap();
    insecure(SqliteJournal::open(&dangling));
    assert!(!target.exists(), "the link's target was created");
}

#[test]
fn a_journal_others_may_read_is_refused_with_its_path_and_mode() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.db");
    drop(SqliteJournal::open(&path).unwrap());
    for shared in [0o644, 0o640, 0o606, 0o620] {
        chmod(&path, shared);
        let e = insecure(SqliteJournal::open(&path));
        let shown = format!("{shared:04o}");
        assert!(e.message.contains(&shown), "names mode {shown}: {e}");
        assert!(e.message.contains(&path.display().to_string()), "{e}");
        assert_eq!(e.location, path.display().to_string());
        insecure(SqliteJournal::open_read_only(&path));
        assert_eq!(mode(&path), shared, "a refused file is left as it was");
    }
    chmod(&path, 0o600);
    drop(SqliteJournal::open(&path).unwrap());
}

#[test]
fn a_shared_wal_beside_a_private_journal_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.db");
    drop(SqliteJournal::open(&path).unwrap());
    // A write-ahead log someone else may write would feed rows into the
    // journal when SQLite replays it.
    std::fs::write(wal(&path), b"").unwrap();
    chmod(&wal(&path), 0o666);
    let e = insecure(SqliteJournal::open(&path));
    assert!(e.message.contains("-wal"), "names the -wal: {e}");
    assert!(e.message.contains("0666"), "{e}");

    // A link in its place is refused too.
    std::fs::remove_file(wal(&path)).unwrap();
    symlink(dir.path().join("elsewhere"), wal(&path)).unwrap();
    let e = insecure(SqliteJournal::open(&path));
    assert!(e.message.contains("symbolic link"), "{e}");
}

#[test]
fn a_missing_journal_is_not_created_by_a_reader() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent.db");
    let e = SqliteJournal::open_read_only(&path).expect_err("nothing to read");
    assert_eq!(e.kind, JournalErrorKind::Io, "{e}");
    assert!(!path.exists());
}

#[test]
fn a_journal_another_user_owns_is_refused_with_its_owner() {
    if effective_uid() != 0 {
        // Giving a file away takes root; as another user the mode rule
        // above is what protects the journal.
        eprintln!("skipped: not root, cannot chown a file to another user");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.db");
    drop(SqliteJournal::open(&path).unwrap());
    let nobody = 65534;
    std::os::unix::fs::chown(&path, Some(nobody), Some(nobody)).unwrap();
    assert_eq!(mode(&path), 0o600, "private, but not ours");
    let e = insecure(SqliteJournal::open(&path));
    assert!(e.message.contains("uid 65534"), "names the owner: {e}");
    assert!(e.message.contains("0600"), "names the mode: {e}");
    insecure(SqliteJournal::open_read_only(&path));
}

/// This process's effective user id, read from a file it creates (the
/// test crate has no unsafe-free `geteuid`).
fn effective_uid() -> u32 {
    let probe = tempfile::NamedTempFile::new().unwrap();
    probe.as_file().metadata().unwrap().uid()
}
