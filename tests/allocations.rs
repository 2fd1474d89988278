//! Heap allocations of a training step after warm-up, counted by a global allocator: nothing
//! allocates, neither our code (layers, buckets, loss, optimizer, the generated
//! forward/backward/step, the communication thread) nor the products, which all run through
//! OpenBLAS (its buffers are mapped once). A GPT (attention, embeddings, residual blocks, clipping)
//! as well as a chain of dense layers; one process, and two ranks under mpirun with each
//! gradient transport and each wire format (fp32, bf16, fp16). This counts Rust's allocations; C
//! libraries' own are invisible to it. Each count runs alone in a process of its own and counts
//! every step, so an allocation every few steps (a buffer that grows now and then) shows. The
//! bytes it sees live also check the memory estimate against what the workspace of a step really
//! holds.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};

use overlap::prelude::*;
use overlap::{CommMode, WireFormat};

mod common;

struct Counting;

/// Allocations so far, in this process.
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

/// Bytes allocated and not yet freed, in this process.
static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);

fn count() {
    ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
}

fn live(change: isize) {
    LIVE_BYTES.fetch_add(change, Ordering::Relaxed);
}

// SAFETY: every call is forwarded unchanged to the system allocator, which upholds the
// `GlobalAlloc` contract; the counter has no effect on the memory handed out.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        live(layout.size() as isize);
        // SAFETY: forwarded with the caller's layout, as the caller guarantees it is valid.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        live(-(layout.size() as isize));
        // SAFETY: `ptr` came from `System.alloc` with this layout (every allocation goes there).
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        live(new_size as isize - layout.size() as isize);
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

/// `Net` with PowerSGD: each large matrix's gradient as rank-2 factors, compressed from the
/// second step (the warm-up covers both kinds of step).
#[distributed_model(bucket_cap_mb = 1, first_bucket_mb = 1, grad_comm = powersgd(rank = 2, start_iter = 1))]
pub struct LowRankNet {
    fc1: Linear<64, 256>,
    norm: LayerNorm<256>,
    act1: Gelu,
    fc2: Linear<256, 256>,
    act2: Relu,
    head: Linear<256, 10>,
}

/// A GPT of two blocks: embeddings, causal self-attention, residual blocks, on sequences.
#[distributed_model(bucket_cap_mb = 0.01, first_bucket_mb = 0.01)]
pub mod tiny_gpt {
    use overlap::prelude::*;

    #[residual]
    pub struct Attend {
        ln_1: LayerNorm<32>,
        attn: CausalSelfAttention<32, 4>,
    }

    #[residual]
    pub struct Mlp {
        ln_2: LayerNorm<32>,
        c_fc: Linear<32, 128>,
        gelu: Gelu,
        c_proj: Linear<128, 32>,
    }

    pub struct Block {
        attend: Attend,
        mlp: Mlp,
    }

    pub struct TinyGpt {
        wte: Embedding<20, 32>,
        wpe: PositionEmbedding<8, 32>,
        h: [Block; 2],
        ln_f: LayerNorm<32>,
        lm_head: Linear<32, 20>,
    }
}

/// `after_warm_up` of the GPT on 4 sequences of 8 tokens, with AdamW and clipping by the global
/// norm (the step that waits for every bucket first), and attention dropping its weights, each
/// step other ones.
fn count_gpt_allocations(comm: &Communicator) -> usize {
    use tiny_gpt::{TinyGpt, TinyGptWorkspace};
    let mut model = TinyGpt::new(comm, 0).unwrap();
    let (grads, mut ws) = (model.new_grads(), TinyGptWorkspace::default());
    let mut optimizer = AdamW::new(1e-3).clip_grad_norm(0.5);
    let mut first_row = 0;
    let tokens = Matrix::from_vec(32, 1, (0..32).map(|i| (i * 7 % 20) as f32).collect());
    let labels: Vec<usize> = (0..32).map(|i| (i * 7 + 1) % 20).collect();
    let mut dlogits = Matrix::default();
    let step = |grads: <TinyGpt as DistributedModel>::Grads| {
        first_row += 32;
        let ctx = StepContext::sequences(4, 8).with_dropout(overlap::DropoutDraw::new(0.2, 1, first_row));
        let logits = model.forward_with(&ctx, &tokens, &mut ws);
        CrossEntropyLoss.forward_backward(logits, &labels, &mut dlogits);
        let in_flight = model.backward(&mut ws, &dlogits, grads, comm, &mut optimizer);
        comm.backward_done();
        model.step(in_flight, &mut optimizer).unwrap()
    };
    after_warm_up(grads, step)
}

/// `after_warm_up` of `Net` on `comm`'s ranks (two micro-steps each).
fn count_step_allocations(comm: &Communicator) -> usize {
    count_allocations_of::<Net>(comm)
}

/// `count_step_allocations` for any model of `Net`'s input and output widths.
fn count_allocations_of<M: DistributedModel>(comm: &Communicator) -> usize {
    let mut model = M::new(comm, 0).unwrap();
    let (grads, mut ws) = (model.new_grads(), M::Workspace::default());
    let mut optimizer = AdamW::new(1e-3);
    let inputs = Matrix::from_vec(32, 64, (0..32 * 64).map(|i| (i % 13) as f32 / 13.0).collect());
    let labels: Vec<usize> = (0..32).map(|i| i % 10).collect();
    let mut dlogits = Matrix::default();
    let step = |grads: M::Grads| {
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
    after_warm_up(grads, step)
}

/// Allocations in 10 steps after 3 warm-up steps (`step` takes the buckets and returns them),
/// every one counted: the caller runs alone in its process, so nothing but the step (and the
/// threads it drives) allocates meanwhile.
fn after_warm_up<G>(mut grads: G, mut step: impl FnMut(G) -> G) -> usize {
    for _ in 0..3 {
        grads = step(grads);
    }
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    for _ in 0..10 {
        grads = step(grads);
    }
    let allocations = ALLOCATIONS.load(Ordering::Relaxed) - before;
    drop(grads);
    allocations
}

/// The counter is process-wide: tests of this file run one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The counter is process-wide, and the test harness allocates on its own thread when another
/// test of this file ends: the count runs alone in a process of its own.
#[test]
fn a_step_after_warm_up_allocates_nothing() {
    common::run_alone("one_process_steps_without_allocating");
}

/// The body of `a_step_after_warm_up_allocates_nothing`, alone in its process.
#[test]
#[ignore = "runs alone in a process of its own, started by a_step_after_warm_up_allocates_nothing"]
fn one_process_steps_without_allocating() {
    let allocations = count_step_allocations(&Communicator::single());
    println!("10 steps after warm-up: {allocations} allocations");
    assert_eq!(allocations, 0, "allocations in 10 steps after warm-up");
    let allocations = count_allocations_of::<LowRankNet>(&Communicator::single());
    println!("PowerSGD: 10 steps after warm-up: {allocations} allocations");
    assert_eq!(allocations, 0, "allocations in 10 PowerSGD steps after warm-up");
    let allocations = count_gpt_allocations(&Communicator::single());
    println!("GPT with clipping and dropout: 10 steps after warm-up: {allocations} allocations");
    assert_eq!(allocations, 0, "allocations in 10 GPT steps after warm-up");
}

/// The bytes one forward and backward of the GPT leave allocated (the workspace, the loss's
/// gradient, attention's scratch), with the gradient buckets made before, against
/// `memory::activation_bytes_of`: the report's memory line and the preflight refusal use it.
/// With dropout too, where attention keeps its dropped weights beside the softmax's.
#[test]
fn the_memory_estimate_counts_what_a_step_keeps() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    for rate in [0.0, 0.2] {
        // On a thread of its own: attention's scratch is kept per thread, and the second step on
        // one thread would find it made.
        let (kept, estimate) = std::thread::spawn(move || kept_and_estimated(rate)).join().unwrap();
        println!("dropout {rate}: one step keeps {kept} bytes; the estimate is {estimate}");
        assert!(
            (0.95..=1.05).contains(&(estimate / kept)),
            "dropout {rate}: estimate {estimate} bytes for {kept} kept"
        );
    }
}

/// What one GPT step at dropout `rate` keeps allocated, and the estimate of it.
fn kept_and_estimated(rate: f32) -> (f64, f64) {
    use tiny_gpt::{TinyGpt, TinyGptWorkspace};
    let comm = Communicator::single();
    let mut model = TinyGpt::new(&comm, 0).unwrap();
    let grads = model.new_grads();
    let mut optimizer = Sgd::new(0.1);
    let (sequences, positions) = (16, 8);
    let mut ctx = StepContext::sequences(sequences, positions);
    if rate > 0.0 {
        ctx = ctx.with_dropout(overlap::DropoutDraw::new(rate, 1, 0));
    }
    let rows = sequences * positions;
    let tokens = Matrix::from_vec(rows, 1, (0..rows).map(|i| (i * 7 % 20) as f32).collect());
    let labels: Vec<usize> = (0..rows).map(|i| (i * 7 + 1) % 20).collect();
    let before = LIVE_BYTES.load(Ordering::Relaxed);
    let (mut ws, mut dlogits) = (TinyGptWorkspace::default(), Matrix::default());
    let logits = model.forward_with(&ctx, &tokens, &mut ws);
    CrossEntropyLoss.forward_backward(logits, &labels, &mut dlogits);
    let in_flight = model.backward(&mut ws, &dlogits, grads, &comm, &mut optimizer);
    comm.backward_done();
    let kept = (LIVE_BYTES.load(Ordering::Relaxed) - before) as f64;
    drop(model.step(in_flight, &mut optimizer).unwrap());
    let estimate = overlap::memory::activation_bytes_of::<TinyGpt>(sequences, positions, rate).unwrap() as f64;
    (kept, estimate)
}

#[test]
fn the_counter_counts() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    let boxed = std::hint::black_box(Box::new([0u8; 64]));
    drop(boxed);
    assert_eq!(ALLOCATIONS.load(Ordering::Relaxed) - before, 1, "one Box, one allocation");
}

#[test]
fn two_ranks_allocate_nothing_either_with_either_transport() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    common::run_on_two_ranks_each_way("ranks_step_without_allocating");
}

/// The body of `two_ranks_allocate_nothing_either_with_either_transport`, on each rank.
#[test]
#[ignore = "runs under mpirun, started by two_ranks_allocate_nothing_either_with_either_transport"]
fn ranks_step_without_allocating() {
    let mut comm = common::two_rank_communicator();
    for format in [WireFormat::Fp32, WireFormat::Bf16, WireFormat::Fp16] {
        comm.set_wire_format(format);
        let allocations = count_step_allocations(&comm);
        println!("rank {}, {format}: 10 steps after warm-up: {allocations} allocations", comm.rank());
        assert_eq!(allocations, 0, "allocations in 10 steps after warm-up on rank {}, {format}", comm.rank());
    }
    let allocations = count_gpt_allocations(&comm);
    println!("rank {}, GPT with clipping: 10 steps after warm-up: {allocations} allocations", comm.rank());
    assert_eq!(allocations, 0, "allocations in 10 GPT steps on rank {}", comm.rank());
    comm.use_schedule_wire_formats();
    for mode in [CommMode::Overlap, CommMode::AfterBackward] {
        comm = comm.with_mode(mode);
        let allocations = count_allocations_of::<LowRankNet>(&comm);
        println!("rank {}, PowerSGD, {mode:?}: 10 steps after warm-up: {allocations} allocations", comm.rank());
        assert_eq!(allocations, 0, "allocations in 10 PowerSGD steps on rank {}, {mode:?}", comm.rank());
    }
}
