use super::*;

#[test]
fn names_the_ranks_below_this_ranks_count_with_their_process_state() {
    let path = std::env::temp_dir().join(format!("overlap-board-test-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let me = Board::open(path.clone(), 0, 3, Some(3)).unwrap();
    let other = Board::open(path.clone(), 1, 3, Some(3)).unwrap();
    me.reach(READY);
    other.reach(READY);
    assert_eq!(me.enter_collective(), READY + 1);
    assert_eq!(me.enter_collective(), READY + 2);
    other.enter_collective();
    // Rank 1 (this process, so running) is one collective behind; rank 2 never opened it.
    let laggards = me.laggards();
    assert_eq!(laggards[0], Laggard { rank: 1, reached: READY + 1, state: Some(ProcessState::Running) });
    assert_eq!(laggards[1], Laggard { rank: 2, reached: 0, state: None });
    assert_eq!(me.describe_laggards(), "rank 1 is 1 collective(s) behind; rank 2 has not started");
    other.enter_collective();
    assert_eq!(me.laggards(), vec![Laggard { rank: 2, reached: 0, state: None }]);
    me.unlink();
    assert!(!path.exists());
    // The mappings outlive the name.
    assert_eq!(other.own(), READY + 2);
}

#[test]
fn the_last_rank_of_the_node_to_open_the_board_removes_its_name() {
    let path = std::env::temp_dir().join(format!("overlap-board-last-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    // Ranks 0 and 1 of 3 share this node.
    let first = Board::open(path.clone(), 0, 3, Some(2)).unwrap();
    assert!(path.exists(), "rank 1 has yet to open it");
    let last = Board::open(path.clone(), 1, 3, Some(2)).unwrap();
    assert!(!path.exists(), "every rank of the node has it mapped");
    // The mappings are still shared: rank 0 sees rank 1.
    first.reach(READY);
    assert_eq!(first.laggards()[0], Laggard { rank: 1, reached: STARTED, state: Some(ProcessState::Running) });
    last.reach(READY);
    assert_eq!(first.laggards(), vec![Laggard { rank: 2, reached: 0, state: None }]);
    // Without the node's rank count, the name stays for the other removals.
    let unknown = Board::open(path.clone(), 0, 1, None).unwrap();
    assert!(path.exists());
    unknown.unlink();
}

#[test]
fn boards_whose_ranks_all_exited_are_removed_and_live_ones_kept() {
    let _children = crate::test_children::one_at_a_time();
    let folder = tempfile::tempdir().unwrap();
    let gone = {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        child.wait().unwrap();
        u64::from(child.id())
    };
    let board = |name: &str, slots: &[(u64, u64)]| {
        let mut bytes = vec![0u8; slots.len() * SLOT_BYTES];
        for (s, (count, pid)) in slots.iter().enumerate() {
            bytes[s * SLOT_BYTES..s * SLOT_BYTES + 8].copy_from_slice(&count.to_ne_bytes());
            bytes[s * SLOT_BYTES + 8..s * SLOT_BYTES + 16].copy_from_slice(&pid.to_ne_bytes());
        }
        let path = folder.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    };
    let me = u64::from(std::process::id());
    let left = board("overlap-killed", &[(STARTED, gone), (0, 0)]);
    let live = board("overlap-running", &[(MPI_INITIALISED, me), (STARTED, gone)]);
    let fresh = board("overlap-fresh", &[(0, 0), (0, 0)]);
    let own = board("overlap-own", &[(STARTED, gone)]);
    let other = board("not-a-board", &[(STARTED, gone)]);
    remove_stale(folder.path(), &own, Duration::from_secs(3600));
    assert!(!left.exists(), "every rank it recorded has exited");
    assert!(live.exists() && fresh.exists() && own.exists() && other.exists());
    remove_stale(folder.path(), &own, Duration::ZERO);
    assert!(!fresh.exists(), "old enough, and no rank recorded");
    assert!(live.exists(), "a running rank keeps its job's board");
}

#[test]
fn describes_start_up_stages_and_process_states() {
    let stuck = |reached, state| Laggard { rank: 1, reached, state };
    let d = |l: Laggard, own| describe(&[l], own, false);
    assert_eq!(d(stuck(0, None), 2), "rank 1 was not seen on this node");
    assert_eq!(
        d(stuck(STARTED, Some(ProcessState::Stopped)), 2),
        "rank 1 has not finished initialising MPI, its process is stopped by a signal"
    );
    assert_eq!(
        d(stuck(7, Some(ProcessState::Exited)), 7),
        "rank 1 is inside the same collective, its process has exited"
    );
    assert!(describe(&[], 9, true).starts_with("every rank on this node has reached this point"));
}

#[test]
fn reads_process_states_from_proc() {
    let _children = crate::test_children::one_at_a_time();
    assert_eq!(process_state(u64::from(std::process::id())), ProcessState::Running);
    assert_eq!(process_state(u64::from(u32::MAX)), ProcessState::Exited);
    let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
    // SAFETY: kill() has no memory-safety preconditions; the pid is our own child's.
    unsafe { libc::kill(child.id() as i32, libc::SIGSTOP) };
    let stopped = (0..100).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(10));
        process_state(u64::from(child.id())) == ProcessState::Stopped
    });
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(stopped, "a SIGSTOPped child reads as stopped");
}
