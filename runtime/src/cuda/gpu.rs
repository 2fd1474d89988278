//! One GPU as this process uses it: its context, a compute stream and a communication stream,
//! cuBLAS bound to the compute stream, and every kernel, compiled by NVRTC to machine code once
//! per process for this GPU's architecture.
//!
//! Ordering between the streams is explicit only: cudarc's automatic per-buffer event tracking
//! (an event record and a stream wait around every kernel and cuBLAS call) is turned off before
//! the first buffer exists. What makes that sound is stated where the context is opened.

use std::cell::Cell;
use std::collections::HashMap;
use std::mem::ManuallyDrop;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::cublas::CudaBlas;
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaContext, CudaFunction, CudaStream};
use cudarc::nvrtc::Ptx;

use super::kernels::{compile, nvrtc_available, KERNEL_SOURCES};
use super::libraries;
use crate::comm::backoff::wait_until;
use crate::error::{Error, Result};

/// Whether libcuda (the driver) can be loaded here.
pub fn driver_present() -> bool {
    // SAFETY: only tries to open the library by its usual names; no symbol is called.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// The CUDA version the installed driver supports, as `(major, minor)` (driver 580: 13.0).
pub fn driver_cuda_version() -> Option<(i32, i32)> {
    if !driver_present() {
        return None;
    }
    let mut version = 0;
    // SAFETY: the driver library is present; the call only writes the int it is given, and
    // needs no `cuInit` first.
    let status = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut version) };
    (status == cudarc::driver::sys::CUresult::CUDA_SUCCESS).then_some((version / 1000, version % 1000 / 10))
}

/// The oldest driver API this build calls into: the CUDA 13 bindings time events with
/// `cuEventElapsedTime_v2`, which drivers before CUDA 12.8 (r570) lack.
const OLDEST_DRIVER: (i32, i32) = (12, 8);

/// GPUs this process can see (0 without a driver).
pub fn gpu_count() -> usize {
    if !driver_present() {
        return 0;
    }
    CudaContext::device_count().map_or(0, |n| n.max(0) as usize)
}

/// One GPU opened for this rank: its streams, cuBLAS and the backend's kernels compiled for its
/// architecture.
pub struct Gpu {
    ordinal: usize,
    name: String,
    arch: String,
    /// Kernels, cuBLAS products and optimizer updates run here, in program order.
    compute: Arc<CudaStream>,
    /// NCCL runs here, ordered against `compute` by events only.
    comm: Arc<CudaStream>,
    /// In `ManuallyDrop`: cudarc's `CudaBlas` unwraps cuBLAS's destroy status, which fails after
    /// a sticky CUDA error and would turn a clear error into a panic (see `Drop`).
    blas: ManuallyDrop<CudaBlas>,
    kernels: HashMap<&'static str, CudaFunction>,
    /// How long `finish` waits at most (`CommConfig::wait_timeout`), and this rank.
    wait_bound: (Option<Duration>, usize),
    /// A `finish` timed out: work queued on the streams may never end (see `Drop`).
    stuck: Cell<bool>,
}

/// How long `Gpu::finish` checks back to back before sleeping between checks.
const FINISH_SPIN: Duration = Duration::from_millis(50);

impl Gpu {
    /// Opens GPU `ordinal`, or says clearly why it cannot: no driver, no such GPU, no NVRTC or
    /// cuBLAS library, a kernel that does not compile.
    pub fn open(ordinal: usize) -> Result<Self> {
        // cudarc panics on first use of a missing library, hence these checks.
        if !driver_present() {
            return Err(Error::Cuda(
                "no CUDA driver found (libcuda.so could not be loaded): `TrainConfig::device` cuda needs an NVIDIA \
                 GPU and its driver; use `TrainConfig::device` cpu otherwise"
                    .into(),
            ));
        }
        match driver_cuda_version() {
            Some(version) if version >= OLDEST_DRIVER => {}
            Some((major, minor)) => {
                return Err(Error::Cuda(format!(
                    "the NVIDIA driver supports CUDA {major}.{minor}; the GPU backend needs CUDA {}.{} or newer \
                     (driver 570 or later): update the driver",
                    OLDEST_DRIVER.0, OLDEST_DRIVER.1
                )))
            }
            None => return Err(Error::Cuda("the NVIDIA driver did not say which CUDA version it supports".into())),
        }
        // Loads cuBLAS, NVRTC and NCCL from wherever they are, or lists where they were sought.
        let located = libraries::prepare().map_err(Error::Cuda)?;
        // CUDA 13's libraries fail inside their first call on a driver of CUDA 12 (before 580).
        if let (Some((release, found)), Some(driver)) = (located.cuda_release(), driver_cuda_version()) {
            if driver < (release, 0) {
                return Err(Error::Cuda(format!(
                    "{} ({}) is CUDA {release}'s, but the NVIDIA driver supports CUDA {}.{}: update the driver \
                     (CUDA 13 needs 580 or later), or put CUDA {}'s libraries first on LD_LIBRARY_PATH",
                    found.library,
                    found.path.display(),
                    driver.0,
                    driver.1,
                    driver.0
                )));
            }
        }
        // SAFETY: only tries to open the library by its usual names; no symbol is called.
        if !unsafe { cudarc::cublas::sys::is_culib_present() } {
            return Err(Error::Cuda(format!("cuBLAS was found but cudarc cannot open it:\n{located}")));
        }
        if !nvrtc_available() {
            return Err(Error::Cuda(format!("NVRTC was found but cudarc cannot open it:\n{located}")));
        }
        let count = CudaContext::device_count().map_err(cuda("counting GPUs"))?;
        if ordinal >= count.max(0) as usize {
            return Err(Error::Cuda(format!(
                "GPU {ordinal} was asked for, but this machine has {count} (`TrainConfig::device.gpu`, or the MPI local rank)"
            )));
        }
        let ctx = CudaContext::new(ordinal).map_err(cuda("creating the context"))?;
        // SAFETY: called before any buffer of this context exists, so none is tracked. Without
        // tracking, cudarc requires that no buffer is freed while another stream still uses it,
        // used by another stream before its allocation completes, or written by two streams at
        // once. Here: every buffer is allocated, used by kernels and cuBLAS, and freed on the
        // compute stream; the communication stream touches a gradient bucket, and with sharded
        // optimizer state the parameters of a bucket and its all-gather buffer, only between a
        // ready event recorded on the compute stream after their last writer (the backward
        // kernels; the bucket's updates) and a done event that the compute stream waits for
        // before they are used or freed again (`GpuInFlight` owns a bucket meanwhile and waits
        // for that event even when dropped on an error path; forward's wait points or
        // `gathered` wait for the all-gathers, and `GpuShards`'s drop for all its work).
        unsafe { ctx.disable_event_tracking() };
        let name = ctx.name().map_err(cuda("reading the GPU name"))?;
        let (major, minor) = ctx.compute_capability().map_err(cuda("reading the compute capability"))?;
        let arch = format!("sm_{major}{minor}");
        let mut kernels = HashMap::new();
        for source in KERNEL_SOURCES {
            let compiled = compile(source, &arch).map_err(Error::Cuda)?;
            let module = ctx.load_module(Ptx::from_binary(compiled.cubin)).map_err(cuda(source.file))?;
            for &kernel in source.kernels {
                kernels.insert(kernel, module.load_function(kernel).map_err(cuda(kernel))?);
            }
        }
        let compute = ctx.new_stream().map_err(cuda("creating the compute stream"))?;
        let comm = ctx.new_stream().map_err(cuda("creating the communication stream"))?;
        let blas = CudaBlas::new(Arc::clone(&compute)).map_err(|e| Error::Cuda(format!("cuBLAS: {e:?}")))?;
        Ok(Gpu {
            ordinal,
            name,
            arch,
            compute,
            comm,
            blas: ManuallyDrop::new(blas),
            kernels,
            wait_bound: (None, 0),
            stuck: Cell::new(false),
        })
    }

    /// `GPU 0 (NVIDIA H200, sm_90)`.
    pub fn describe(&self) -> String {
        format!("GPU {} ({}, {})", self.ordinal, self.name, self.arch)
    }

    /// The stream kernels, cuBLAS products and optimizer updates run on, in program order.
    pub fn compute(&self) -> &Arc<CudaStream> {
        &self.compute
    }

    /// The stream NCCL runs on, ordered against `compute` by events only.
    pub fn comm(&self) -> &Arc<CudaStream> {
        &self.comm
    }

    /// cuBLAS, bound to the compute stream.
    pub fn blas(&self) -> &CudaBlas {
        &self.blas
    }

    /// A kernel by its `extern "C"` name; every name in `KERNEL_SOURCES` was loaded in `open`.
    pub fn kernel(&self, name: &str) -> &CudaFunction {
        self.kernels.get(name).unwrap_or_else(|| panic!("kernel `{name}` is not in KERNEL_SOURCES"))
    }

    /// Bounds every later `finish` (`CommConfig::wait_timeout`; `None`: unbounded), whose
    /// error then names `rank`.
    pub fn set_wait_bound(&mut self, bound: Option<Duration>, rank: usize) {
        self.wait_bound = (bound, rank);
    }

    /// Waits for everything queued on the compute stream so far (once per step, after the last
    /// update; before a copy to the host), for at most the wait bound, `what` naming the wait in
    /// the error. NCCL's sums wait for every rank, so a rank that stopped would otherwise leave
    /// the others blocked here for good. Checks back to back for `FINISH_SPIN` (a step's tail is
    /// usually microseconds away), then sleeps between checks.
    pub fn finish(&self, what: &'static str) -> Result<()> {
        let event = self
            .compute
            .record_event(Some(CUevent_flags::CU_EVENT_DISABLE_TIMING))
            .map_err(cuda("recording the end of the queued work"))?;
        let ((bound, rank), started) = (self.wait_bound, Instant::now());
        let mut failed = None;
        let done = || match event.try_is_complete() {
            Ok(complete) => complete,
            Err(e) => {
                failed = Some(e);
                true
            }
        };
        let finished = wait_until(FINISH_SPIN, done, || bound.is_some_and(|b| started.elapsed() >= b));
        if let Some(e) = failed {
            return Err(cuda(what)(e));
        }
        if finished {
            return Ok(());
        }
        self.stuck.set(true);
        Err(Error::CollectiveTimeout {
            what,
            rank,
            waited: started.elapsed(),
            behind: "the bound covers the work the host queued ahead of the GPU, NCCL's sums included, which \
                     wait for every rank: one has stopped or is far behind (or a step takes longer than the \
                     bound); the GPU's queued work is left to this process's exit"
                .into(),
        })
    }
}

impl Drop for Gpu {
    /// Destroys the cuBLAS handle only while the GPU is healthy. After a sticky error (an
    /// illegal address, say) every CUDA call fails, cudarc's `CudaBlas` would panic on the
    /// destroy status and hide the error already reported; the handle is then left to the
    /// process's exit, which the error is about to cause.
    fn drop(&mut self) {
        if self.stuck.get() {
            // Nothing may wait for the streams now, nor destroy them (or the context) under work
            // that may never end: kept alive, with the cuBLAS handle, until the process exits.
            std::mem::forget(Arc::clone(&self.compute));
            std::mem::forget(Arc::clone(&self.comm));
            return;
        }
        let healthy = self.compute.synchronize().is_ok() && self.comm.synchronize().is_ok();
        if healthy {
            // SAFETY: dropped once, here, and never used again.
            unsafe { ManuallyDrop::drop(&mut self.blas) };
        }
    }
}

/// Wraps a driver error with what was being done.
pub(crate) fn cuda<E: std::fmt::Debug>(what: &'static str) -> impl Fn(E) -> Error {
    move |e| Error::Cuda(format!("{what}: {e:?}"))
}
