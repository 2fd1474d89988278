//! What a failed job leaves behind: nothing in /dev/shm after a rank killed in start-up, and no
//! fault injected into the examples by a stray variable.

use super::*;

/// The pids the /dev/shm progress boards still record, from their 64-byte slots (word 1).
fn pids_on_progress_boards() -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/dev/shm") else { return Vec::new() };
    let boards = entries.flatten().filter(|e| e.file_name().to_string_lossy().starts_with("overlap-"));
    let slots: Vec<Vec<u8>> = boards.filter_map(|e| std::fs::read(e.path()).ok()).collect();
    let words = slots.iter().flat_map(|bytes| bytes.chunks_exact(64).map(|slot| slot[8..16].try_into().unwrap()));
    words.map(u64::from_ne_bytes).filter_map(|pid| u32::try_from(pid).ok()).collect()
}

/// `(pid, state letter)` of the rank processes (not `mpirun`) whose command line holds `marker`.
fn ranks_naming(marker: &str) -> Vec<(u32, char)> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    let pids = entries.flatten().filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok());
    pids.filter_map(|pid| {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let (name, rest) = stat.split_once(") ")?;
        let rank = String::from_utf8_lossy(&cmdline).contains(marker) && !name.ends_with("(mpirun");
        rank.then(|| (pid, rest.chars().next().unwrap_or('?')))
    })
    .collect()
}

/// A rank killed during start-up (stopped before MPI starts, then SIGKILL): the others are ended
/// by `mpirun` without a chance to clean up, and still nothing of the job is left in /dev/shm,
/// since the board's name went as soon as every rank of the node had opened it.
#[test]
fn a_rank_killed_in_start_up_leaves_nothing_in_dev_shm() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ck");
    let marker = marker.to_str().unwrap();
    let exe = fault_mlp();
    let mut job = std::process::Command::new("mpirun")
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OVERLAP_FAULT", "stop:1:mpi-init")
        .args(["--oversubscribe", "-n", "3"])
        .arg(&exe)
        .args(["--steps", "3", "--batch", "4", "--report", "off", "--save", marker])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("mpirun starts");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let ranks = loop {
        let ranks = ranks_naming(marker);
        if ranks.len() == 3 && ranks.iter().any(|&(_, state)| state == 'T') {
            break ranks;
        }
        assert!(std::time::Instant::now() < deadline, "rank 1 never stopped at start-up: {ranks:?}");
        std::thread::sleep(Duration::from_millis(20));
    };
    // Let the running ranks reach MPI's initialisation, where they wait for rank 1.
    std::thread::sleep(Duration::from_millis(500));
    let stopped = ranks.iter().find(|&&(_, state)| state == 'T').unwrap().0;
    // Every rank maps the job's board (so there was one to leave behind), whose name went once
    // all three had opened it; on a busy machine a rank may take a while to get there.
    let unlinked_board = |pid: u32| {
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
        maps.lines().any(|l| l.contains("/dev/shm/overlap-") && l.ends_with("(deleted)"))
    };
    while !ranks.iter().all(|&(pid, _)| unlinked_board(pid)) {
        assert!(std::time::Instant::now() < deadline, "the ranks {ranks:?} never all mapped an unlinked board");
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: kill() has no memory-safety preconditions; the pid is a rank of this test's job.
    assert_eq!(unsafe { libc::kill(stopped as i32, libc::SIGKILL) }, 0);
    while job.try_wait().unwrap().is_none() {
        assert!(std::time::Instant::now() < deadline, "the job did not end after rank 1 was killed");
        std::thread::sleep(Duration::from_millis(50));
    }
    let left: Vec<u32> = pids_on_progress_boards().into_iter().filter(|p| ranks.iter().any(|r| r.0 == *p)).collect();
    assert!(left.is_empty(), "a board in /dev/shm still records ranks {left:?} of the killed job");
}

/// The examples ignore a stray `OVERLAP_FAULT`, even as `make test` builds them: with the whole
/// workspace, so with the fault harness's feature compiled in (Cargo unifies features across the
/// members built together). Only `fault-mlp` turns injection on.
#[test]
fn the_examples_ignore_a_stray_fault_variable() {
    let run_with_kill_at_step_1 = |exe: std::path::PathBuf| {
        let out = std::process::Command::new(&exe)
            .env("OVERLAP_FAULT", "kill:0:1")
            .args(["--steps", "2", "--batch", "4", "--report", "off"])
            .output()
            .unwrap_or_else(|e| panic!("{} starts: {e}", exe.display()));
        let text = format!("{}{}", String::from_utf8_lossy(&out.stderr), String::from_utf8_lossy(&out.stdout));
        (out.status, text)
    };
    let (status, text) = run_with_kill_at_step_1(common::example("mlp"));
    assert!(status.success(), "{status:?}:\n{text}");
    assert!(text.contains("done: 2 steps"), "{text}");
    let (status, _) = run_with_kill_at_step_1(fault_mlp());
    assert!(!status.success(), "fault-mlp honours the variable: {status:?}");
}
