//! How the program ends when its command line does not start a run: clap's error, `--help` or
//! `--version`, as clap prints them, except under a launcher of several ranks.
//!
//! There, the ranks given a good command line wait at start-up for every rank to start (up to
//! `--comm-timeout`), and mpirun ends a job at once only when a rank fails: one that prints
//! `--help` and succeeds leaves the others waiting. So under several ranks `--help` and
//! `--version` are printed by rank 0 alone (when it was given them), and every rank given them
//! fails, saying why.

use clap::error::ErrorKind;

/// Prints what `e` says and exits (status 2 for errors, and for help under several ranks).
pub(crate) fn exit(e: clap::Error) -> ! {
    let flag = match e.kind() {
        ErrorKind::DisplayHelp => "--help",
        ErrorKind::DisplayVersion => "--version",
        _ => e.exit(),
    };
    let Some(rank) = launched_rank().filter(|_| several_ranks()) else { e.exit() };
    let said = if rank == 0 {
        let _ = e.print();
        "printed"
    } else {
        "given (rank 0 prints it, when given it too)"
    };
    // One write, so mpirun does not interleave it with other ranks' messages.
    let note = format!(
        "rank {rank}: {flag} {said}: ending this job of several ranks, so that none started without it waits for \
         this one\n"
    );
    let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), note.as_bytes());
    std::process::exit(2)
}

/// This process's rank, where an MPI launcher set it in the environment.
pub(crate) fn launched_rank() -> Option<usize> {
    number(&["OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"])
}

/// Whether the launcher started more than one rank; a launcher that says no size is taken to
/// have, since a rank that leaves alone only costs its job one failed status.
fn several_ranks() -> bool {
    number(&["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"]).is_none_or(|world| world > 1)
}

fn number(names: &[&str]) -> Option<usize> {
    names.iter().find_map(|n| std::env::var(n).ok()?.parse().ok())
}
