//! Heap allocations of a training step after warm-up, counted by a global allocator: everything
//! of ours (layers, buckets, loss, optimizer, the generated forward/backward/step) allocates
//! nothing; the only allocations left are the GEMM libraries' packing buffers, made inside
//! their calls (neither can be handed a buffer), which the test counts separately.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use overlap::gemm::{gemm_calls, in_library_call};
use overlap::prelude::*;

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

#[test]
fn a_step_after_warm_up_allocates_only_inside_the_gemm_libraries() {
    let comm = Communicator::single();
    let mut model = Net::new(&comm, 0).unwrap();
    let (mut grads, mut ws) = (model.new_grads(), NetWorkspace::default());
    let mut optimizer = AdamW::new(1e-3);
    let inputs = Matrix::from_vec(32, 64, (0..32 * 64).map(|i| (i % 13) as f32 / 13.0).collect());
    let labels: Vec<usize> = (0..32).map(|i| i % 10).collect();
    let mut dlogits = Matrix::default();
    let mut step = |grads: NetGrads, micro: bool| {
        let mut grads = grads;
        let logits = model.forward(&inputs, &mut ws);
        CrossEntropyLoss.forward_backward(logits, &labels, &mut dlogits);
        if micro {
            model.backward_no_sync(&mut ws, &dlogits, &mut grads);
            let logits = model.forward(&inputs, &mut ws);
            CrossEntropyLoss.forward_backward(logits, &labels, &mut dlogits);
        }
        let in_flight = model.backward(&mut ws, &dlogits, grads, &comm);
        model.step(in_flight, &mut optimizer).unwrap()
    };
    for _ in 0..3 {
        grads = step(grads, true);
    }
    let (allocations, in_gemm, products) =
        (ALLOCATIONS.load(Ordering::Relaxed), IN_GEMM.load(Ordering::Relaxed), gemm_calls());
    for _ in 0..5 {
        grads = step(grads, true);
    }
    let allocations = ALLOCATIONS.load(Ordering::Relaxed) - allocations;
    let in_gemm = IN_GEMM.load(Ordering::Relaxed) - in_gemm;
    let products = gemm_calls() - products;
    println!("5 steps after warm-up: {allocations} allocations outside the GEMM libraries, {in_gemm} inside their {products} calls");
    // Per step, two micro-steps: 3 forward products each, and 5 backward products each (the
    // first layer computes no input gradient).
    assert_eq!(products, 5 * 2 * (3 + 5), "the product count this test assumes");
    assert_eq!(allocations, 0, "allocations outside the GEMM libraries");
    assert!(in_gemm > 0, "the libraries' packing buffers are counted (the counter works)");
    drop(grads);
}
