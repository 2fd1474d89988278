//! The planner's `Schedule` as a Rust constant expression (borrowed `'static` data), so
//! `Model::SCHEDULE` is the very plan the code was generated from.

use overlap_plan::{BucketLimits, ReadyOrder, Schedule, Width, WireFormat};
use proc_macro2::{Literal, TokenStream};
use quote::quote;

use crate::helpers::lit;

pub fn schedule(s: &Schedule) -> TokenStream {
    let model = s.model.as_ref();
    let limits = limits(s.limits);
    let shard_optimizer = s.shard_optimizer;
    let layers = s.layers.iter().map(|l| {
        let (name, kind, flops) = (l.name.as_ref(), l.kind.as_ref(), Literal::u64_unsuffixed(l.flops_per_sample));
        let width = width(l.width);
        let ready = ready(l.ready);
        let boundary = l.bucket_boundary;
        let tied = match l.tied {
            None => quote!(::core::option::Option::None),
            Some(t) => {
                let (layer, param) = (lit(t.layer), lit(t.param));
                quote!(::core::option::Option::Some(::overlap::plan::ParamRef { layer: #layer, param: #param }))
            }
        };
        let params = l.params.iter().map(|p| {
            let (name, index, bucket, offset) = (p.name.as_ref(), lit(p.index), lit(p.bucket), lit(p.offset));
            let shape = p.shape.iter().map(|&d| lit(d));
            quote! {
                ::overlap::plan::ParamInfo {
                    name: ::overlap::__private::Cow::Borrowed(#name),
                    shape: ::overlap::__private::Cow::Borrowed(&[#(#shape),*]),
                    index: #index,
                    bucket: #bucket,
                    offset: #offset,
                }
            }
        });
        quote! {
            ::overlap::plan::LayerInfo {
                name: ::overlap::__private::Cow::Borrowed(#name),
                kind: ::overlap::__private::Cow::Borrowed(#kind),
                width: #width,
                flops_per_sample: #flops,
                params: ::overlap::__private::Cow::Borrowed(&[#(#params),*]),
                ready: #ready,
                tied: #tied,
                bucket_boundary: #boundary,
            }
        }
    });
    let buckets = s.buckets.iter().map(|b| {
        let (numel, launch_after) = (lit(b.numel), lit(b.launch_after));
        let wire = match b.wire {
            WireFormat::Fp32 => quote!(::overlap::plan::WireFormat::Fp32),
            WireFormat::Bf16 => quote!(::overlap::plan::WireFormat::Bf16),
            WireFormat::Fp16 => quote!(::overlap::plan::WireFormat::Fp16),
        };
        let low_rank = match b.low_rank {
            None => quote!(::core::option::Option::None),
            Some(l) => {
                let (rank, start_iter) = (lit(l.rank), proc_macro2::Literal::u64_unsuffixed(l.start_iter));
                quote!(::core::option::Option::Some(::overlap::plan::LowRank { rank: #rank, start_iter: #start_iter }))
            }
        };
        let members = b.params.iter().map(|r| {
            let (layer, param) = (lit(r.layer), lit(r.param));
            quote!(::overlap::plan::ParamRef { layer: #layer, param: #param })
        });
        quote! {
            ::overlap::plan::BucketInfo {
                params: ::overlap::__private::Cow::Borrowed(&[#(#members),*]),
                numel: #numel,
                launch_after: #launch_after,
                wire: #wire,
                low_rank: #low_rank,
            }
        }
    });
    let gathers = s.gathers.iter().map(|g| {
        let (bucket, start, end, first_read) = (lit(g.bucket), lit(g.start), lit(g.end), lit(g.first_read));
        quote!(::overlap::plan::GatherGroup { bucket: #bucket, start: #start, end: #end, first_read: #first_read })
    });
    quote! {
        ::overlap::plan::Schedule {
            model: ::overlap::__private::Cow::Borrowed(#model),
            limits: #limits,
            layers: ::overlap::__private::Cow::Borrowed(&[#(#layers),*]),
            buckets: ::overlap::__private::Cow::Borrowed(&[#(#buckets),*]),
            shard_optimizer: #shard_optimizer,
            gathers: ::overlap::__private::Cow::Borrowed(&[#(#gathers),*]),
        }
    }
}

/// A layer's `ReadyOrder` as a path.
pub fn ready(r: ReadyOrder) -> TokenStream {
    match r {
        ReadyOrder::Reverse => quote!(::overlap::plan::ReadyOrder::Reverse),
        ReadyOrder::Definition => quote!(::overlap::plan::ReadyOrder::Definition),
    }
}

fn limits(l: BucketLimits) -> TokenStream {
    match l {
        BucketLimits::Capped { first_bucket_bytes, bucket_cap_bytes } => {
            let (first, cap) = (lit(first_bucket_bytes), lit(bucket_cap_bytes));
            quote!(::overlap::plan::BucketLimits::Capped { first_bucket_bytes: #first, bucket_cap_bytes: #cap })
        }
        BucketLimits::Unlimited => quote!(::overlap::plan::BucketLimits::Unlimited),
    }
}

pub fn width(w: Width) -> TokenStream {
    match w {
        Width::Fixed { input, output } => {
            let (input, output) = (lit(input), lit(output));
            quote!(::overlap::plan::Width::Fixed { input: #input, output: #output })
        }
        Width::Preserving => quote!(::overlap::plan::Width::Preserving),
    }
}
