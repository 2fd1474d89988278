//! How the program ends when its command line does not start a run: clap's error, `--help` or
//! `--version`, as clap prints them, except under a launcher of several ranks.
//!
//! There, the ranks given a good command line wait at start-up for every rank to start (up to
//! `--comm-timeout`), and mpirun ends a job at once only when a rank fails: one that prints
//! `--help` and succeeds leaves the others waiting. So under several ranks `--help` and
//! `--version` are printed by rank 0 alone and every rank that got them fails, saying why.

use clap::error::ErrorKind;

/// Prints what `e` says and exits (status 2 for errors, and for help under several ranks).
pub(crate) fn exit(e: clap::Error) -> ! {
    let shown = matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion);
    let Some((rank, world)) = launched_ranks().filter(|&(_, world)| shown && world > 1) else { e.exit() };
    if rank == 0 {
        let _ = e.print();
    }
    // One write, so mpirun does not interleave it with other ranks' messages.
    let note = format!(
        "rank {rank}: {what} shown: ending this job of {world} ranks, so that none started without it waits for this one\n",
        what = if e.kind() == ErrorKind::DisplayHelp { "help" } else { "version" }
    );
    let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), note.as_bytes());
    std::process::exit(2)
}

/// This process's rank and the job's size, as an MPI launcher sets them in its environment.
fn launched_ranks() -> Option<(usize, usize)> {
    let number = |names: &[&str]| names.iter().find_map(|n| std::env::var(n).ok()?.parse::<usize>().ok());
    Some((number(&["OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"])?, number(&["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"])?))
}
