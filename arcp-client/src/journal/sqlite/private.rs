//! A journal file only its owner can use. A journal holds every call's
//! arguments and results, and `recover()` re-sends what it finds there with
//! the client's token: a file another user can read leaks the calls, and a
//! file another user planted (or a symbolic link to one) makes this process
//! send that user's calls.
//!
//! So, on Unix: the file is created mode 0600 whatever the umask, opened
//! with `O_NOFOLLOW`, and refused
//! ([`JournalErrorKind::Insecure`](crate::journal::JournalErrorKind::Insecure), naming
//! the file, its owner and its mode) when it is not a regular file, another
//! user owns it, or its group or others may read or write it. Its `-wal`,
//! `-shm` and `-journal` companions are held to the same rule before SQLite
//! opens the file and again after (SQLite creates them with the main file's
//! mode). After SQLite has opened the path, the path must still name the
//! file that was checked (same device and inode), so a swap between the
//! check and the open is caught. The file checked is closed before SQLite
//! opens it: closing any descriptor of a file drops every POSIX lock the
//! process holds on it, SQLite's exclusive lock included. Elsewhere the
//! checks are skipped.

use std::path::Path;

use crate::journal::JournalError;

/// The companion files SQLite keeps beside a database.
const COMPANIONS: [&str; 3] = ["-wal", "-shm", "-journal"];

/// The identity (device, inode) of the file that was checked.
#[derive(Debug)]
pub(super) struct Checked {
    #[cfg(unix)]
    id: (u64, u64),
}

/// How the journal file is about to be opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Access {
    /// Read-write, created when missing.
    Create,
    /// Read-write, never created.
    Existing,
}

#[cfg(unix)]
mod unix {
    use std::fs::{File, Metadata};
    use std::io;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::path::{Path, PathBuf};

    use rustix::fs::{Mode, OFlags};

    use super::{Access, Checked, COMPANIONS};
    use crate::journal::{JournalError, JournalErrorKind};

    /// Group and other permission bits: none may be set.
    const SHARED_BITS: u32 = 0o077;

    pub(super) fn check_before(
        path: &Path,
        location: &str,
        access: Access,
    ) -> Result<Checked, JournalError> {
        for companion in companions(path) {
            check_companion(&companion, location)?;
        }
        let file = open_no_follow(path, location, access)?;
        let meta = file.metadata().map_err(|e| io_error(location, path, &e))?;
        check_metadata(path, &meta, location)?;
        Ok(Checked {
            id: (meta.dev(), meta.ino()),
        })
    }

    pub(super) fn check_after(
        path: &Path,
        checked: &Checked,
        location: &str,
    ) -> Result<(), JournalError> {
        let now = std::fs::symlink_metadata(path).map_err(|e| io_error(location, path, &e))?;
        if (now.dev(), now.ino()) != checked.id {
            return Err(insecure(
                location,
                format!(
                    "{} was replaced while it was being opened; refusing to use it",
                    path.display()
                ),
            ));
        }
        check_metadata(path, &now, location)?;
        for companion in companions(path) {
            check_companion(&companion, location)?;
        }
        Ok(())
    }

    /// Opens `path` without following a symbolic link in its last
    /// component; a file created here is 0600 whatever the umask.
    fn open_no_follow(path: &Path, location: &str, access: Access) -> Result<File, JournalError> {
        let base = OFlags::RDWR | OFlags::CLOEXEC | OFlags::NOFOLLOW | OFlags::NOCTTY;
        let private = Mode::from_raw_mode(0o600);
        let opened = match access {
            Access::Create => {
                match rustix::fs::open(path, base | OFlags::CREATE | OFlags::EXCL, private) {
                    Ok(fd) => {
                        let file = File::from(fd);
                        // The umask may have taken bits away (0400 under 0o277):
                        // the owner must still write it, and nobody else use it.
                        file.set_permissions(std::fs::Permissions::from_mode(0o600))
                            .map_err(|e| io_error(location, path, &e))?;
                        return Ok(file);
                    }
                    Err(rustix::io::Errno::EXIST) => rustix::fs::open(path, base, Mode::empty()),
                    Err(e) => Err(e),
                }
            }
            Access::Existing => rustix::fs::open(path, base, Mode::empty()),
        };
        match opened {
            Ok(fd) => Ok(File::from(fd)),
            Err(rustix::io::Errno::LOOP) => Err(insecure(
                location,
                format!(
                    "{} is a symbolic link; a journal is opened only at its real path",
                    path.display()
                ),
            )),
            Err(rustix::io::Errno::NOENT) if access == Access::Existing => Err(JournalError::new(
                JournalErrorKind::Io,
                location,
                "no journal file at this path",
            )),
            Err(e) => Err(io_error(location, path, &io::Error::from(e))),
        }
    }

    /// A companion file may be missing; if present it must be a private,
    /// regular file of this user, not a link.
    fn check_companion(path: &Path, location: &str) -> Result<(), JournalError> {
        match std::fs::symlink_metadata(path) {
            Ok(meta) => check_metadata(path, &meta, location),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_error(location, path, &e)),
        }
    }

    fn check_metadata(path: &Path, meta: &Metadata, location: &str) -> Result<(), JournalError> {
        let shown = path.display();
        let mode = meta.mode() & 0o7777;
        if meta.file_type().is_symlink() {
            return Err(insecure(
                location,
                format!("{shown} is a symbolic link; a journal is opened only at its real path"),
            ));
        }
        if !meta.file_type().is_file() {
            return Err(insecure(location, format!("{shown} is not a regular file")));
        }
        let me = rustix::process::geteuid().as_raw();
        if meta.uid() != me {
            return Err(insecure(
                location,
                format!(
                    "{shown} is owned by uid {} (mode {mode:04o}), not by this process's \
                     user (uid {me}); a journal is used only by the user that owns it",
                    meta.uid()
                ),
            ));
        }
        if mode & SHARED_BITS != 0 {
            return Err(insecure(
                location,
                format!(
                    "{shown} has mode {mode:04o} (owner uid {}): its group or others may \
                     read or write it; make it private with `chmod 600 {shown}`",
                    meta.uid()
                ),
            ));
        }
        Ok(())
    }

    fn companions(path: &Path) -> impl Iterator<Item = PathBuf> + '_ {
        COMPANIONS.iter().map(move |suffix| {
            let mut name = path.as_os_str().to_owned();
            name.push(suffix);
            PathBuf::from(name)
        })
    }

    fn insecure(location: &str, message: String) -> JournalError {
        JournalError::new(JournalErrorKind::Insecure, location, message)
    }

    fn io_error(location: &str, path: &Path, e: &io::Error) -> JournalError {
        JournalError::new(
            JournalErrorKind::Io,
            location,
            format!("{}: {e}", path.display()),
        )
    }
}

/// Checks (and, for [`Access::Create`], creates) the journal file before
/// SQLite opens it.
pub(super) fn check_before(
    path: &Path,
    location: &str,
    access: Access,
) -> Result<Checked, JournalError> {
    #[cfg(unix)]
    {
        unix::check_before(path, location, access)
    }
    #[cfg(not(unix))]
    {
        let _ = (location, access);
        if access == Access::Existing && !path.is_file() {
            return Err(JournalError::new(
                crate::journal::JournalErrorKind::Io,
                location,
                "no journal file at this path",
            ));
        }
        Ok(Checked {})
    }
}

/// After SQLite opened the path: it still names the checked file, and the
/// companions SQLite may have created are private.
pub(super) fn check_after(
    path: &Path,
    checked: &Checked,
    location: &str,
) -> Result<(), JournalError> {
    #[cfg(unix)]
    {
        unix::check_after(path, checked, location)
    }
    #[cfg(not(unix))]
    {
        let _ = (path, checked, location);
        Ok(())
    }
}
