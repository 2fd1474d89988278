//! The straight-line code of one step, generic over the device (`__S`, its storage; `__E`, what
//! runs each call): forward layer by layer; backward in reverse with each bucket's all-reduce
//! (which may update the parameters lent with it) right after the backward call that completes
//! it; and the step with each bucket's wait point, then the parameters taken back, or updated
//! there when they could not be lent. The host and the GPU both run this code.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};

use crate::generated_names::local_of;
pub use crate::generated_names::Names;
use crate::helpers::{lit, suffixed};

/// The forward pass; with `gathering` (`forward_gathering_on`), each all-gather's wait point
/// right before the first layer that reads one of its parameters.
pub fn forward_body(n: &Names, gathering: bool) -> TokenStream {
    let mut out = quote! {
        __ws.context = *__ctx;
        __dev.copy_input(__input, &mut __ws.input)?;
    };
    let gathers = n.schedule.gather_groups();
    for (i, f) in n.fields.iter().enumerate() {
        if gathering {
            for (g, _) in gathers.iter().enumerate().filter(|(_, group)| group.first_read == i) {
                let g = lit(g);
                out.extend(quote!(__gather.wait_gather(#g, self)?;));
            }
        }
        let (input, o, s, index) = (n.input_of(i), suffixed(f, "out"), suffixed(f, "saved"), lit(i));
        let layer = &n.access[i];
        out.extend(match n.tied[i] {
            None => quote!(__dev.forward(#index, &self.#layer, &__ws.context, &#input, &mut __ws.#o, &mut __ws.#s)?;),
            Some(t) => {
                let tied = n.tied_arg(t);
                quote!(__dev.forward_tied(#index, &self.#layer, #tied, &__ws.context, &#input, &mut __ws.#o, &mut __ws.#s)?;)
            }
        });
        // Residual blocks ending here: output = f(x) + x, innermost first.
        let mut from = quote!(__ws.#o);
        for (first, _, sum) in n.ending_at(i) {
            let x = n.input_of(*first);
            out.extend(quote!(__dev.set_sum(&mut __ws.#sum, &#from, &#x)?;));
            from = quote!(__ws.#sum);
        }
    }
    let last = n.output_of(n.last());
    out.extend(quote!(::core::result::Result::Ok(&#last)));
    out
}

/// The backward pass; with `sync`, each bucket's all-reduce is launched right after the layer
/// that completes it, without it (`backward_no_sync_on`) gradients only accumulate.
pub fn backward_body(n: &Names, sync: bool) -> TokenStream {
    let (grads_on, buckets, locals) = (&n.grads_on, &n.buckets, &n.bucket_locals);
    // Low-rank buckets carry this rank's PowerSGD error between steps: gradients add to it.
    let carries_errors = n.schedule.buckets.iter().any(|b| b.low_rank.is_some());
    let mut out = if sync {
        let accumulate = if carries_errors { quote!(true) } else { quote!(__micro_steps > 0) };
        // Each bucket waits in a slot until its launch takes it: moved out of locals one by
        // one, they would cost the compiler a drop flag each at every exit (see `Slot`).
        quote! {
            let #grads_on { #(#buckets: #locals,)* micro_steps: __micro_steps } = __grads;
            #(let mut #locals = ::overlap::program::Slot::new(#locals);)*
            let __accumulate = #accumulate;
            let __grad_scale = __dev.grad_scale(__micro_steps + 1);
            __dev.begin_step();
        }
    } else {
        let accumulate = if carries_errors { quote!(true) } else { quote!(*__micro_steps > 0) };
        quote! {
            let #grads_on { #(#buckets: #locals,)* micro_steps: __micro_steps } = __grads;
            let __accumulate = #accumulate;
        }
    };
    for i in (n.first_param_layer..n.fields.len()).rev() {
        let f = &n.fields[i];
        let (input, o, s) = (n.input_of(i), suffixed(f, "out"), suffixed(f, "saved"));
        let dy = n.grad_of(i);
        let dx = if i == n.first_param_layer {
            quote!(::core::option::Option::None)
        } else {
            let g = n.grad_buffer_mut(i - 1);
            quote!(::core::option::Option::Some(#g))
        };
        let (lets, views) = n.gradient_views(i, sync);
        let (index, layer) = (lit(i), &n.access[i]);
        // A residual block starting here passes its output's gradient straight to its input too.
        let skips = n.residuals.iter().filter(|r| r.0 == i && i > n.first_param_layer).map(|(_, last, _)| {
            let (into, g) = (n.grad_buffer_mut(i - 1), n.grad_of(*last));
            quote!(__dev.add_assign(#into, #g)?;)
        });
        let kept = quote!((&#input, &__ws.#o, &__ws.#s));
        // A layer another is tied to adds to what that layer wrote earlier in this backward, as
        // does a tied layer after which another is tied to the same parameter.
        let accumulate =
            if n.is_tied_to(i) || n.shares_tie_with_a_later_layer(i) { quote!(true) } else { quote!(__accumulate) };
        let call = match n.tied[i] {
            None => quote!(__dev.backward(#index, &self.#layer, &__ws.context, #kept, #dy, #views, #accumulate, #dx)?;),
            Some(t) => {
                // The tied parameter's gradient slot, in its bucket (launched after its owner's
                // backward, which comes later).
                let info = n.schedule.param(t);
                let (b, off, len) = (&locals[info.bucket], lit(info.offset), lit(info.numel()));
                let bucket = if sync { quote!(::overlap::program::Slot::get_mut(&mut #b)) } else { quote!(&mut *#b) };
                let (view, tied) = (local_of(f, "tied_grad"), n.tied_arg(t));
                quote!({
                    let [mut #view] = __S::views_mut(#bucket, [(#off, #len)]);
                    __dev.backward_tied(#index, &self.#layer, #tied, &__ws.context, #kept, #dy, &mut #view, #accumulate, #dx)?;
                })
            }
        };
        out.extend(if lets.is_empty() { quote!(#call #(#skips)*) } else { quote!({ #lets #call } #(#skips)*) });
        if sync {
            // PowerSGD: the P sums of the buckets launched at the previous launch point are in
            // (or close): orthogonalise them and start the Q all-reduces, before new launches.
            for k in (0..buckets.len()).filter(|&k| n.turnaround_after(k) == Some(i)) {
                let pending = &n.pending[k];
                out.extend(quote!(let #pending = __dev.reduce_q(::overlap::program::Slot::take(&mut #pending))?;));
            }
            for k in (0..buckets.len()).filter(|&k| n.schedule.buckets[k].launch_after == i) {
                let (b, pending) = (&locals[k], &n.pending[k]);
                let members = n.schedule.buckets[k].params.iter().map(|&r| {
                    let info = n.schedule.param(r);
                    let (index, offset) = (lit(info.index), lit(info.offset));
                    quote!(::overlap::__private::BucketMember { index: #index, offset: #offset })
                });
                let index = lit(k);
                let args =
                    quote!(#index, ::overlap::program::Slot::take(&mut #b), &[#(#members),*], self, __grad_scale);
                out.extend(match n.schedule.buckets[k].low_rank {
                    None => quote!(let #pending = __dev.launch(#args)?;),
                    // The P sums wait in a slot too, until `reduce_q` takes them.
                    Some(_) => quote!(let mut #pending = ::overlap::program::Slot::new(__dev.launch_low_rank(#args)?);),
                });
            }
        }
    }
    if sync {
        // Sharded optimizer state (when the run shards it): the all-gathers of the updated
        // shards (group, bucket, its elements), queued behind every reduce-scatter in the order
        // the next forward reads them. PowerSGD's buckets are never sharded.
        for (g, group) in n.schedule.gather_groups().iter().enumerate() {
            let (g, bucket, start, end) = (lit(g), lit(group.bucket), lit(group.start), lit(group.end));
            out.extend(quote!(__dev.launch_gather(#g, #bucket, #start..#end)?;));
        }
    }
    if sync {
        let in_flight_on = &n.in_flight_on;
        let pending = &n.pending;
        let late =
            (0..buckets.len()).filter(|&k| n.schedule.buckets[k].low_rank.is_some() && n.turnaround_after(k).is_none());
        let late = late.map(|k| &n.pending[k]);
        out.extend(quote! {
            __dev.backward_done()?;
            #(let #late = __dev.reduce_q(::overlap::program::Slot::take(&mut #late))?;)*
            ::core::result::Result::Ok(#in_flight_on {
                #(#buckets: #pending,)*
                grad_scale: __grad_scale,
            })
        });
    } else {
        out.extend(quote!(
            *__micro_steps += 1;
            ::core::result::Result::Ok(())
        ));
    }
    out
}

/// The optimizer step. Without clipping, each bucket in launch order: its wait point, then its
/// updates (`update_bucket_on`), so that a bucket's updates overlap the later buckets' sums.
/// Clipping by the global norm needs every bucket's sums before the first update: every wait
/// point, the scale from the norm, then every bucket's updates. The all-reduces wait in slots
/// until their wait points take them (see `Slot`).
pub fn step_body(n: &Names) -> TokenStream {
    let (grads_on, in_flight_on, buckets, locals, pending) =
        (&n.grads_on, &n.in_flight_on, &n.buckets, &n.bucket_locals, &n.pending);
    let waits: Vec<TokenStream> = n
        .schedule
        .buckets
        .iter()
        .enumerate()
        .map(|(k, bucket)| {
            let (b, p, index) = (&locals[k], &pending[k], lit(k));
            let wait = match bucket.low_rank {
                None => format_ident!("wait"),
                Some(_) => format_ident!("wait_low_rank"),
            };
            quote!(let mut #b = __dev.#wait(#index, ::overlap::program::Slot::take(&mut #p))?;)
        })
        .collect();
    let updates: Vec<TokenStream> = (0..buckets.len())
        .map(|k| {
            let (b, index) = (&locals[k], lit(k));
            quote!(::overlap::program::Program::update_bucket_on(self, __dev, #index, &mut #b, __grad_scale)?;)
        })
        .collect();
    quote! {
        let #in_flight_on { #(#buckets: #pending,)* grad_scale: __grad_scale } = __in_flight;
        #(let mut #pending = ::overlap::program::Slot::new(#pending);)*
        if __dev.clips() {
            #(#waits)*
            let __grad_scale = __dev.clip(&[#(&#locals),*], __grad_scale)?;
            #(#updates)*
            return ::core::result::Result::Ok(#grads_on { #(#buckets: #locals,)* micro_steps: 0 });
        }
        #(#waits #updates)*
        ::core::result::Result::Ok(#grads_on { #(#buckets: #locals,)* micro_steps: 0 })
    }
}

/// Bucket `index`'s updates, after its wait point: its parameters taken back updated (the
/// bucket cleared by then), or updated here one by one and the bucket cleared.
pub fn update_bucket_body(n: &Names) -> TokenStream {
    let arms = n.schedule.buckets.iter().enumerate().map(|(k, bucket)| {
        let index = lit(k);
        let updates = bucket.params.iter().map(|r| {
            let info = n.schedule.param(*r);
            let (f, j) = (&n.access[r.layer], lit(r.param));
            let (param, off, len) = (lit(info.index), lit(info.offset), lit(info.numel()));
            let slot = quote!(::overlap::program::ParamSlot { bucket: #index, index: #param, offset: #off, len: #len });
            quote!(__dev.update(&mut self.#f, #j, #slot, __bucket, __grad_scale)?;)
        });
        quote!(#index => {
            #(#updates)*
        })
    });
    let count = lit(n.buckets.len());
    quote! {
        if __dev.give_back_updated(__bucket, self)? {
            return ::core::result::Result::Ok(());
        }
        match __index {
            #(#arms)*
            _ => ::core::unreachable!("bucket {} of {}", __index, #count),
        }
        __dev.clear(__index, __bucket)
    }
}
