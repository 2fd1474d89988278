//! The process a run lives in: its terminal (`console`), starting itself again with a changed
//! environment (`restart`), and the files a run may create or replace (`output_paths`), each
//! replaced whole (`atomic_write`), and the files it reads whole (`input_files`).
//! Internal: the command line reaches what it needs through `command_line`.

pub(crate) mod atomic_write;
pub mod console;
pub(crate) mod input_files;
pub(crate) mod output_paths;
pub(crate) mod restart;
