//! Heap allocations of a training step after warm-up, counted by a global allocator: everything
//! of ours (layers, buckets, loss, optimizer, the generated forward/backward/step) allocates
//! nothing; the only allocations left are the `gemm` crate's packing buffers, made inside its
//! calls (it cannot be handed a buffer), which the test counts separately. One process, and two
//! ranks under mpirun with each gradient transport (this counts Rust's allocations; MPI's and
//! OpenBLAS's own C allocations are invisible to it, and OpenBLAS maps its buffers once).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use overlap::gemm::{gemm_calls, in_library_call};
use overlap::prelude::*;
use overlap::{CommMode, Transport};

mod common;

struct Counting;

/// Allocations outside and inside the GEMM libraries.
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
static IN_GEMM: AtomicUsize = AtomicUsize::new(0);

fn count() {
    let counter = if in_library_call() { &IN_GEMM } else { &ALLOCATIONS };
    counter.fetch_add(1, Ordering::Relaxed);
}

// SAFETY: every call is forwarded unchanged to the system allocator, which upholds the
// `GlobalAlloc` contract; the counter has no effect on the memory handed out.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: forwarded with the caller's layout, as the caller guarantees it is valid.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout (every allocation goes there).
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: as for `dealloc`; `new_size` comes from the caller, who guarantees it.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

#[distributed_model(bucket_cap_mb = 1, first_bucket_mb = 1)]
pub struct Net {
    fc1: Linear<64, 256>,
    norm: LayerNorm<256>,
    act1: Gelu,
    fc2: Linear<256, 256>,
    act2: Relu,
    head: Linear<256, 10>,
}

/// Allocations outside the GEMM libraries, inside them, and GEMM calls, over 5 steps after 3
/// warm-up steps of `Net` on `comm`'s ranks (two micro-steps each).
fn count_step_allocations(comm: &Communicator) -> (usize, usize, usize) {
    let mut model = Net::new(comm, 0).unwrap();
    let (mut grads, mut ws) = (model.new_grads(), NetWorkspace::default());
    let mut optimizer = AdamW::new(1e-3);
    let inputs = Matrix::from_vec(32, 64, (0..32 * 64).map(|i| (i % 13) as f32 / 13.0).collect());
    let labels: Vec<usize> = (0..32).map(|i| i % 10).collect();
    let mut dlogits = Matrix::default();
    let mut step = |grads: NetGrads| {
        let mut grads = grads;
        let logits = model.forward(&inputs, &mut ws);
        CrossEntropyLoss.forward_backward(logits, &labels, &mut dlogits);
        model.backward_no_sync(&mut ws, &dlogits, &mut grads);
        let logits = model.forward(&inputs, &mut ws);
        CrossEntropyLoss.forward_backward(logits, &labels, &mut dlogits);
        let in_flight = model.backward(&mut ws, &dlogits, grads, comm, &mut optimizer);
        comm.backward_done();
        model.step(in_flight, &mut optimizer).unwrap()
    };
    for _ in 0..3 {
        grads = step(grads);
    }
    let before = (ALLOCATIONS.load(Ordering::Relaxed), IN_GEMM.load(Ordering::Relaxed), gemm_calls());
    for _ in 0..5 {
        grads = step(grads);
    }
    let counts = (
        ALLOCATIONS.load(Ordering::Relaxed) - before.0,
        IN_GEMM.load(Ordering::Relaxed) - before.1,
        gemm_calls() - before.2,
    );
    drop(grads);
    counts
}

/// The counters are process-wide: tests of this file run one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn a_step_after_warm_up_allocates_only_inside_the_gemm_libraries() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let (allocations, in_gemm, products) = count_step_allocations(&Communicator::single());
    println!("5 steps after warm-up: {allocations} allocations outside the GEMM libraries, {in_gemm} inside their {products} calls");
    // Per step, two micro-steps: 3 forward products each, and 5 backward products each (the
    // first layer computes no input gradient).
    assert_eq!(products, 5 * 2 * (3 + 5), "the product count this test assumes");
    assert_eq!(allocations, 0, "allocations outside the GEMM libraries");
    assert!(in_gemm > 0, "the libraries' packing buffers are counted (the counter works)");
}

#[test]
fn two_ranks_allocate_nothing_either_with_either_transport() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let exe = std::env::current_exe().expect("test binary path");
    for (transport, mode) in [("shared-memory", "overlap"), ("mpi", "overlap"), ("shared-memory", "no-overlap")] {
        let env = [("OVERLAP_TEST_TRANSPORT", transport), ("OVERLAP_TEST_MODE", mode)];
        let args = ["-n", "2", exe.to_str().unwrap(), "--exact", "ranks_step_without_allocating"];
        let out = common::mpirun_with_env(&env, &[&args[..], &["--include-ignored", "--nocapture"]].concat());
        let stdout = String::from_utf8_lossy(&out.stdout);
        println!("{transport}, {mode}:\n{stdout}");
        assert!(out.status.success(), "{transport}, {mode}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(stdout.matches("test result: ok. 1 passed").count(), 2, "both ranks ran it");
    }
}

/// The body of `two_ranks_allocate_nothing_either_with_either_transport`, on each rank.
#[test]
#[ignore = "runs under mpirun, started by two_ranks_allocate_nothing_either_with_either_transport"]
fn ranks_step_without_allocating() {
    let transport = match std::env::var("OVERLAP_TEST_TRANSPORT").as_deref() {
        Ok("mpi") => Transport::Mpi,
        _ => Transport::SharedMemory,
    };
    let mode = match std::env::var("OVERLAP_TEST_MODE").as_deref() {
        Ok("no-overlap") => CommMode::AfterBackward,
        _ => CommMode::Overlap,
    };
    let comm = Communicator::from_env_with(transport).unwrap().with_mode(mode);
    assert_eq!(comm.world_size(), 2, "run under mpirun -n 2");
    assert_eq!(comm.transport(), Some(transport));
    let (allocations, in_gemm, products) = count_step_allocations(&comm);
    println!(
        "rank {}: 5 steps after warm-up: {allocations} allocations outside the GEMM libraries, {in_gemm} inside their {products} calls",
        comm.rank()
    );
    assert_eq!(allocations, 0, "allocations outside the GEMM libraries on rank {}", comm.rank());
}
