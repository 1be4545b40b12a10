//! The files of a store directory and how they are opened, written, synced
//! and locked (`lock/`, one implementation per operating system): `meta.zr`,
//! the chunk files, the `checksums.zr` sidecar and the delete journal. Every
//! write and sync is announced to the optional I/O hook first, so crash and
//! fault tests see them all; `os.rs` holds the calls that differ by system,
//! `folder.rs` the folder a handle keeps and the check that it is still there,
//! `table_blocks.rs` the disk blocks the mapped table files get before a write.

pub(crate) mod change_watch;
pub(crate) mod checksum_file;
pub(crate) mod chunk_file;
pub(crate) mod delete_journal;
pub(crate) mod dictionary_file;
pub(crate) mod folder;
pub(crate) mod io_hook;
pub(crate) mod lock;
pub(crate) mod meta_file;
pub(crate) mod os;
pub(crate) mod table_blocks;
