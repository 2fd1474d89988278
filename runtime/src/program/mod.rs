//! The contract between the program `#[distributed_model]` emits and the devices that run it.
//!
//! The macro writes one forward, one backward and one step per model, generic over where the
//! tensors live (`Storage`: the host or a GPU) and over what runs each call (`Compute`: a layer's
//! forward and backward, the residual sums; `Launch`: a bucket's all-reduce started during
//! backward; `Settle`: its wait point and its parameters' updates; `Gather`: the wait points of
//! sharded parameters' all-gathers in the next forward). The CPU and the GPU run that same code, so the schedule `cargo expand`
//! shows is the one both execute: the launches after the backward calls that complete their
//! buckets, the wait points before the updates. No device interprets `SCHEDULE` at run time.
//!
//! On the host (`host`), each call is the layer's own `Layer` method or the communicator's; on a
//! GPU (`cuda::program`), each queues kernels and NCCL calls on streams, by the layer's
//! `DeviceOp`.

mod contract;
mod fits;
mod host;
mod slot;

pub use contract::{grad_scale, Compute, Gather, Launch, ParamSlot, Program, Settle, Storage, Tied};
pub use host::{Host, HostCompute, HostGather, HostLaunch, HostSettle};
pub use slot::Slot;
