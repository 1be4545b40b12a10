//! The folder a handle opened (a store's, a collection's): the path it keeps
//! of it, and the check that this path still leads to it.
//!
//! A handle opens files by path long after its open: a store's chunk files
//! at their first read and its zstd dictionary, a collection's shards, a
//! writer's new shards. It keeps its folder's real path (absolute, links
//! resolved: [`Folder::new`]), which neither a change of directory nor a
//! link pointed elsewhere can lead astray. A rename can: a deployment that
//! swaps in a new version (`mv ds ds.old && mv ds.new ds`) puts another
//! store at that very path, and a chunk file opened there would be read
//! with the old table's offsets. So a handle also keeps which folder it
//! opened (device and inode), and after each such open checks that its
//! path still leads there ([`Folder::checked`]): if not, the opened file may
//! be another folder's, and the call fails with [`Error::FolderReplaced`]
//! instead of giving that folder's bytes. Checking after the open leaves no
//! gap: a file opened while the path led to the folder is the folder's. A
//! handle that read on from the moved folder would need every file it
//! opens opened through a descriptor of the folder (`openat`).
//!
//! Windows has no inode in the standard library, and does not rename a
//! folder while files in it are open; there the check does nothing.

use std::io;
use std::path::{Path, PathBuf};

use crate::error::{io_error, Error, Result};

/// Which file a path leads to, whatever the path: device and inode.
type FileId = (u64, u64);

/// A handle's folder: its real path and which folder that was at the open.
#[derive(Clone, Debug)]
pub(crate) struct Folder {
    path: PathBuf,
    /// `None` until the folder exists, and always on Windows.
    id: Option<FileId>,
}

impl Folder {
    /// The folder at `dir`, kept by its real path (absolute, symbolic links
    /// resolved) when it exists, else by its absolute path against the
    /// current directory of this moment (a store about to be created: call
    /// [`Folder::identify`] once it exists). Relative paths and links would
    /// lead later opens into whatever folder the process moved to, or the
    /// link was pointed at, since.
    pub(crate) fn new(dir: &Path) -> Result<Folder> {
        if dir.as_os_str().is_empty() {
            return Err(Error::InvalidArgument {
                path: dir.to_path_buf(),
                reason: "an empty path names no folder".into(),
            });
        }
        let path = match std::fs::canonicalize(dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                std::path::absolute(dir).map_err(io_error(dir))?
            }
            real => real.map_err(io_error(dir))?,
        };
        let mut folder = Folder { path, id: None };
        folder.identify()?;
        Ok(folder)
    }

    /// Notes which folder the path leads to now, unless it was noted: for a
    /// folder created since [`Folder::new`]. Nothing while it does not exist.
    pub(crate) fn identify(&mut self) -> Result<()> {
        if self.id.is_none() {
            self.id = file_id(&self.path).map_err(io_error(&self.path))?;
        }
        Ok(())
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Fails with [`Error::FolderReplaced`] unless the path still leads to
    /// the folder that was identified.
    pub(crate) fn check(&self) -> Result<()> {
        let Some(id) = self.id else {
            return Ok(());
        };
        match file_id(&self.path) {
            Ok(Some(now)) if now == id => Ok(()),
            Ok(_) => Err(self.replaced()),
            Err(e) => Err(io_error(&self.path)(e)),
        }
    }

    /// `opened`, the outcome of opening something in the folder by its path,
    /// unless the path no longer leads to the folder ([`Folder::check`]):
    /// then what was opened may be another folder's, and it is dropped.
    pub(crate) fn checked<T>(&self, opened: Result<T>) -> Result<T> {
        self.check()?;
        opened
    }

    fn replaced(&self) -> Error {
        Error::FolderReplaced {
            path: self.path.clone(),
        }
    }
}

/// The device and inode of `path`; `None` where the system has none to give
/// (Windows), or when nothing is there.
fn file_id(path: &Path) -> io::Result<Option<FileId>> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        match std::fs::metadata(path) {
            Ok(meta) => Ok(Some((meta.dev(), meta.ino()))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        Ok(None)
    }
}
