//! The process a run lives in: its terminal (`console`), starting itself again with a changed
//! environment (`restart`), and the files a run may create or replace (`output_paths`), each
//! replaced whole (`atomic_write`), and the files it reads whole (`input_files`; `file_kind` names
//! what is not a file).
//! Internal: the command line reaches what it needs through `command_line`.

pub(crate) mod atomic_write;
pub mod console;
pub(crate) mod file_kind;
pub(crate) mod input_files;
pub(crate) mod output_paths;
pub(crate) mod restart;
