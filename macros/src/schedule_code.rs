//! The straight-line code of one step, generic over the device (`__S`, its storage; `__E`, what
//! runs each call): forward layer by layer; backward in reverse with each bucket's all-reduce
//! (which may update the parameters lent with it) right after the backward call that completes
//! it; and the step with each bucket's wait point, then the parameters taken back, or updated
//! there when they could not be lent. The host and the GPU both run this code.

use overlap_plan::{ParamRef, Schedule};
use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::{Ident, Type};

use crate::ast::Model;
use crate::helpers::{lit, suffixed};

/// Every identifier the generated code uses, derived once from the model.
pub struct Names<'s> {
    pub schedule: &'s Schedule,
    pub workspace: Ident,
    pub grads: Ident,
    pub in_flight: Ident,
    /// The device-generic types the aliases above name on the host (`MlpWorkspaceOn`, ...).
    pub workspace_on: Ident,
    pub grads_on: Ident,
    pub in_flight_on: Ident,
    /// Per layer, for generated identifiers (`fc1`, `blocks_3_fc1`).
    pub fields: Vec<Ident>,
    /// Per layer, the layer after `self.` (`fc1`, `blocks[3].fc1`).
    pub access: Vec<TokenStream>,
    pub types: Vec<Type>,
    /// Residual blocks: `(first, last, sum)`, the sum's workspace entry `<sum>_sum`.
    pub residuals: Vec<(usize, usize, Ident)>,
    /// `b0`, `b1`, ...: buckets in launch order.
    pub buckets: Vec<Ident>,
    /// Backward stops at the first layer with parameters: nothing before it has gradients.
    pub first_param_layer: usize,
    /// Per layer, the parameter of an earlier layer it is tied to (`#[tied(..)]`).
    pub tied: Vec<Option<ParamRef>>,
    /// Per layer, the workspace slot (`grad_<slot>`) of the gradient with respect to its output,
    /// where backward keeps one (`overlap_plan::assign_grad_slots`); and how many slots there are.
    pub grad_slots: Vec<Option<usize>>,
    pub grad_slot_count: usize,
}

impl<'s> Names<'s> {
    pub fn new(model: &Model, schedule: &'s Schedule) -> Self {
        let ident = &model.item.ident;
        let first_param_layer = schedule.first_layer_with_params();
        let spans: Vec<(usize, usize)> = model.residuals.iter().map(|r| (r.first, r.last)).collect();
        let (grad_slots, grad_slot_count) =
            overlap_plan::assign_grad_slots(model.fields.len(), first_param_layer, &spans);
        // One list of these names, which a module's own items are also checked against.
        let [workspace, grads, in_flight, workspace_on, grads_on, in_flight_on] =
            crate::nesting::GENERATED_TYPES.map(|kind| format_ident!("{}{}", ident, kind));
        Names {
            schedule,
            workspace,
            grads,
            in_flight,
            workspace_on,
            grads_on,
            in_flight_on,
            fields: model.fields.iter().map(|f| f.ident.clone()).collect(),
            access: model.fields.iter().map(|f| f.access.clone()).collect(),
            types: model.fields.iter().map(|f| f.ty.clone()).collect(),
            residuals: model.residuals.iter().map(|r| (r.first, r.last, suffixed(&r.ident, "sum"))).collect(),
            buckets: (0..schedule.buckets.len()).map(|k| format_ident!("b{}", k)).collect(),
            first_param_layer,
            tied: schedule.layers.iter().map(|l| l.tied).collect(),
            grad_slots,
            grad_slot_count,
        }
    }

    /// The layer after whose backward low-rank bucket `k` turns from its P all-reduce to its Q
    /// all-reduce: the next layer with parameters that backward runs after `k`'s launch point;
    /// `None` when there is none (the turnaround then follows `backward_done`).
    fn turnaround_after(&self, k: usize) -> Option<usize> {
        let launch = self.schedule.buckets[k].launch_after;
        self.schedule.buckets[k].low_rank?;
        (self.first_param_layer..launch).rev().find(|&l| !self.schedule.layers[l].params.is_empty())
    }

    fn last(&self) -> usize {
        self.fields.len() - 1
    }

    /// The step's `context` and `input`, then per layer `<name>_out` and `<name>_saved`, the
    /// residual blocks' sums, and `grad_0`, `grad_1`, ...: the buffers backward passes the loss
    /// gradients with respect to layer outputs in, shared by liveness; tensors of storage `__S`.
    /// Each with a line of documentation, so that a crate that denies `missing_docs` compiles.
    pub fn workspace_fields(&self) -> TokenStream {
        let mut out = quote! {
            #[doc = " The step's batch shape (sequences x positions)."]
            pub context: ::overlap::StepContext,
            #[doc = " The step's input rows."]
            pub input: __S::Tensor,
        };
        for ((f, ty), layer) in self.fields.iter().zip(&self.types).zip(self.schedule.layers.iter()) {
            let (o, s) = (suffixed(f, "out"), suffixed(f, "saved"));
            let (out_doc, saved_doc) =
                (format!(" `{}`'s output.", layer.name), format!(" What `{}` keeps for its backward.", layer.name));
            out.extend(quote!(#[doc = #out_doc] pub #o: __S::Tensor, #[doc = #saved_doc] pub #s: __S::Saved<#ty>,));
        }
        for (first, _, sum) in &self.residuals {
            let doc = format!(" The residual sum of the block starting at `{}`.", self.schedule.layers[*first].name);
            out.extend(quote!(#[doc = #doc] pub #sum: __S::Tensor,));
        }
        for g in self.grad_buffers() {
            out.extend(quote!(#[doc = " A gradient backward passes between layers."] pub #g: __S::Tensor,));
        }
        out
    }

    /// Every workspace field's name, for its `Default`.
    pub fn workspace_field_names(&self) -> Vec<Ident> {
        let mut out = vec![format_ident!("context"), format_ident!("input")];
        for f in &self.fields {
            out.extend([suffixed(f, "out"), suffixed(f, "saved")]);
        }
        out.extend(self.residuals.iter().map(|(_, _, sum)| sum.clone()));
        out.extend(self.grad_buffers());
        out
    }

    fn grad_buffers(&self) -> impl Iterator<Item = Ident> {
        (0..self.grad_slot_count).map(|slot| format_ident!("grad_{}", slot))
    }

    /// The gradient with respect to layer `j`'s output: `dy` (the loss's) for the last layer,
    /// else its workspace buffer.
    fn grad_of(&self, j: usize) -> TokenStream {
        match self.grad_slots[j] {
            None => quote!(dy),
            Some(slot) => {
                let g = format_ident!("grad_{}", slot);
                quote!(&ws.#g)
            }
        }
    }

    /// The buffer layer `j`'s backward writes its input's gradient into (`j` > the first layer
    /// with parameters).
    fn grad_buffer_mut(&self, j: usize) -> TokenStream {
        let slot = self.grad_slots[j].expect("a layer after the first with parameters has a gradient buffer");
        let g = format_ident!("grad_{}", slot);
        quote!(&mut ws.#g)
    }

    /// The residual blocks that end at layer `i`, innermost (latest first layer) first: each adds
    /// its input to what the one before it output.
    fn ending_at(&self, i: usize) -> impl Iterator<Item = &(usize, usize, Ident)> {
        let mut ending: Vec<&(usize, usize, Ident)> = self.residuals.iter().filter(|r| r.1 == i).collect();
        ending.sort_by_key(|r| std::cmp::Reverse(r.0));
        ending.into_iter()
    }

    /// `::overlap::program::Tied { .. }` for the parameter `t` a layer is tied to.
    fn tied_arg(&self, t: ParamRef) -> TokenStream {
        let (layer, owner, param) = (lit(t.layer), &self.access[t.layer], lit(t.param));
        quote!(::overlap::program::Tied { layer: #layer, owner: &self.#owner, param: #param })
    }

    /// Whether a later layer is tied to a parameter of layer `i`: that layer's backward then
    /// adds to a gradient the tied layer already wrote this step.
    fn is_tied_to(&self, i: usize) -> bool {
        self.tied.iter().any(|t| t.is_some_and(|t| t.layer == i))
    }

    /// Whether a layer after `i` is tied to the parameter layer `i` is tied to (two heads on one
    /// embedding): that layer's backward, earlier in this one, wrote the shared gradient first,
    /// and `i`'s must add to it, not overwrite it where a device writes a step's first gradients.
    fn shares_tie_with_a_later_layer(&self, i: usize) -> bool {
        self.tied[i].is_some_and(|t| self.tied[i + 1..].contains(&Some(t)))
    }

    /// What layer `i` outputs to the next: its own output, or the sum of the outermost residual
    /// block ending with it.
    fn output_of(&self, i: usize) -> TokenStream {
        match self.ending_at(i).last() {
            Some((_, _, sum)) => quote!(ws.#sum),
            None => {
                let o = suffixed(&self.fields[i], "out");
                quote!(ws.#o)
            }
        }
    }

    fn input_of(&self, i: usize) -> TokenStream {
        if i == 0 {
            quote!(ws.input)
        } else {
            self.output_of(i - 1)
        }
    }

    /// The forward pass; with `gathering` (`forward_gathering_on`), each all-gather's wait point
    /// right before the first layer that reads one of its parameters.
    pub fn forward_body(&self, gathering: bool) -> TokenStream {
        let mut out = quote! {
            ws.context = *ctx;
            dev.copy_input(input, &mut ws.input)?;
        };
        let gathers = self.schedule.gather_groups();
        for (i, f) in self.fields.iter().enumerate() {
            if gathering {
                for (g, _) in gathers.iter().enumerate().filter(|(_, group)| group.first_read == i) {
                    let g = lit(g);
                    out.extend(quote!(gather.wait_gather(#g, self)?;));
                }
            }
            let (input, o, s, index) = (self.input_of(i), suffixed(f, "out"), suffixed(f, "saved"), lit(i));
            let layer = &self.access[i];
            out.extend(match self.tied[i] {
                None => quote!(dev.forward(#index, &self.#layer, &ws.context, &#input, &mut ws.#o, &mut ws.#s)?;),
                Some(t) => {
                    let tied = self.tied_arg(t);
                    quote!(dev.forward_tied(#index, &self.#layer, #tied, &ws.context, &#input, &mut ws.#o, &mut ws.#s)?;)
                }
            });
            // Residual blocks ending here: output = f(x) + x, innermost first.
            let mut from = quote!(ws.#o);
            for (first, _, sum) in self.ending_at(i) {
                let x = self.input_of(*first);
                out.extend(quote!(dev.set_sum(&mut ws.#sum, &#from, &#x)?;));
                from = quote!(ws.#sum);
            }
        }
        let last = self.output_of(self.last());
        out.extend(quote!(::core::result::Result::Ok(&#last)));
        out
    }

    /// `let [fc1_bias, fc1_weight] = __S::views_mut(b2.get_mut(), [(0, 2048), (2048, 1605632)]);` per bucket the
    /// layer's parameters live in (views in buffer order, which `views_mut` needs: gradient-ready
    /// order puts a layer's last parameter first), and the `&mut [..]` list in parameter order.
    fn gradient_views(&self, i: usize, owned: bool) -> (TokenStream, TokenStream) {
        let layer = &self.schedule.layers[i];
        let f = &self.fields[i];
        // `c_attn.weight` names the view `attn_c_attn_weight`.
        let view = |p: usize| suffixed(f, &layer.params[p].name.replace('.', "_"));
        let mut lets = TokenStream::new();
        let mut used: Vec<usize> = layer.params.iter().map(|p| p.bucket).collect();
        used.sort_unstable();
        used.dedup();
        for k in used {
            let mut members: Vec<usize> = (0..layer.params.len()).filter(|&p| layer.params[p].bucket == k).collect();
            members.sort_by_key(|&p| layer.params[p].offset);
            let names = members.iter().map(|&p| view(p));
            let ranges = members.iter().map(|&p| {
                let (off, len) = (lit(layer.params[p].offset), lit(layer.params[p].numel()));
                quote!((#off, #len))
            });
            let b = &self.buckets[k];
            let bucket = if owned { quote!(#b.get_mut()) } else { quote!(&mut *#b) };
            lets.extend(quote!(let [#(#names),*] = __S::views_mut(#bucket, [#(#ranges),*]);));
        }
        let all = (0..layer.params.len()).map(view);
        (lets, quote!(&mut [#(#all),*]))
    }
}

/// The backward pass; with `sync`, each bucket's all-reduce is launched right after the layer
/// that completes it, without it (`backward_no_sync_on`) gradients only accumulate.
pub fn backward_body(n: &Names, sync: bool) -> TokenStream {
    let (grads_on, buckets) = (&n.grads_on, &n.buckets);
    // Low-rank buckets carry this rank's PowerSGD error between steps: gradients add to it.
    let carries_errors = n.schedule.buckets.iter().any(|b| b.low_rank.is_some());
    let mut out = if sync {
        let accumulate = if carries_errors { quote!(true) } else { quote!(micro_steps > 0) };
        // Each bucket waits in a slot until its launch takes it: moved out of locals one by
        // one, they would cost the compiler a drop flag each at every exit (see `Slot`).
        quote! {
            let #grads_on { #(#buckets,)* micro_steps } = grads;
            #(let mut #buckets = ::overlap::program::Slot::new(#buckets);)*
            let accumulate = #accumulate;
            let grad_scale = dev.grad_scale(micro_steps + 1);
            dev.begin_step();
        }
    } else {
        let accumulate = if carries_errors { quote!(true) } else { quote!(*micro_steps > 0) };
        quote! {
            let #grads_on { #(#buckets,)* micro_steps } = grads;
            let accumulate = #accumulate;
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
            quote!(dev.add_assign(#into, #g)?;)
        });
        let kept = quote!((&#input, &ws.#o, &ws.#s));
        // A layer another is tied to adds to what that layer wrote earlier in this backward, as
        // does a tied layer after which another is tied to the same parameter.
        let accumulate =
            if n.is_tied_to(i) || n.shares_tie_with_a_later_layer(i) { quote!(true) } else { quote!(accumulate) };
        let call = match n.tied[i] {
            None => quote!(dev.backward(#index, &self.#layer, &ws.context, #kept, #dy, #views, #accumulate, #dx)?;),
            Some(t) => {
                // The tied parameter's gradient slot, in its bucket (launched after its owner's
                // backward, which comes later).
                let info = n.schedule.param(t);
                let (b, off, len) = (&buckets[info.bucket], lit(info.offset), lit(info.numel()));
                let bucket = if sync { quote!(#b.get_mut()) } else { quote!(&mut *#b) };
                let (view, tied) = (suffixed(f, "tied_grad"), n.tied_arg(t));
                quote!({
                    let [mut #view] = __S::views_mut(#bucket, [(#off, #len)]);
                    dev.backward_tied(#index, &self.#layer, #tied, &ws.context, #kept, #dy, &mut #view, #accumulate, #dx)?;
                })
            }
        };
        out.extend(if lets.is_empty() { quote!(#call #(#skips)*) } else { quote!({ #lets #call } #(#skips)*) });
        if sync {
            // PowerSGD: the P sums of the buckets launched at the previous launch point are in
            // (or close): orthogonalise them and start the Q all-reduces, before new launches.
            for k in (0..buckets.len()).filter(|&k| n.turnaround_after(k) == Some(i)) {
                let pending = format_ident!("b{}_in_flight", k);
                out.extend(quote!(let #pending = dev.reduce_q(#pending.take())?;));
            }
            for k in (0..buckets.len()).filter(|&k| n.schedule.buckets[k].launch_after == i) {
                let (b, pending) = (&buckets[k], format_ident!("b{}_in_flight", k));
                let members = n.schedule.buckets[k].params.iter().map(|&r| {
                    let info = n.schedule.param(r);
                    let (index, offset) = (lit(info.index), lit(info.offset));
                    quote!(::overlap::__private::BucketMember { index: #index, offset: #offset })
                });
                let index = lit(k);
                let args = quote!(#index, #b.take(), &[#(#members),*], self, grad_scale);
                out.extend(match n.schedule.buckets[k].low_rank {
                    None => quote!(let #pending = dev.launch(#args)?;),
                    // The P sums wait in a slot too, until `reduce_q` takes them.
                    Some(_) => quote!(let mut #pending = ::overlap::program::Slot::new(dev.launch_low_rank(#args)?);),
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
            out.extend(quote!(dev.launch_gather(#g, #bucket, #start..#end)?;));
        }
    }
    if sync {
        let in_flight_on = &n.in_flight_on;
        let pending = (0..buckets.len()).map(|k| format_ident!("b{}_in_flight", k));
        let late =
            (0..buckets.len()).filter(|&k| n.schedule.buckets[k].low_rank.is_some() && n.turnaround_after(k).is_none());
        let late = late.map(|k| format_ident!("b{}_in_flight", k));
        out.extend(quote! {
            dev.backward_done()?;
            #(let #late = dev.reduce_q(#late.take())?;)*
            ::core::result::Result::Ok(#in_flight_on {
                #(#buckets: #pending,)*
                grad_scale,
            })
        });
    } else {
        out.extend(quote!(
            *micro_steps += 1;
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
    let (grads_on, in_flight_on, buckets) = (&n.grads_on, &n.in_flight_on, &n.buckets);
    let pending: Vec<Ident> = (0..buckets.len()).map(|k| format_ident!("b{}_in_flight", k)).collect();
    let waits: Vec<TokenStream> = n
        .schedule
        .buckets
        .iter()
        .enumerate()
        .map(|(k, bucket)| {
            let (b, p, index) = (&buckets[k], &pending[k], lit(k));
            let wait = match bucket.low_rank {
                None => format_ident!("wait"),
                Some(_) => format_ident!("wait_low_rank"),
            };
            quote!(let mut #b = dev.#wait(#index, #p.take())?;)
        })
        .collect();
    let updates: Vec<TokenStream> = (0..buckets.len())
        .map(|k| {
            let (b, index) = (&buckets[k], lit(k));
            quote!(self.update_bucket_on(dev, #index, &mut #b, grad_scale)?;)
        })
        .collect();
    quote! {
        let #in_flight_on { #(#buckets: #pending,)* grad_scale } = in_flight;
        #(let mut #pending = ::overlap::program::Slot::new(#pending);)*
        if dev.clips() {
            #(#waits)*
            let grad_scale = dev.clip(&[#(&#buckets),*], grad_scale)?;
            #(#updates)*
            return ::core::result::Result::Ok(#grads_on { #(#buckets,)* micro_steps: 0 });
        }
        #(#waits #updates)*
        ::core::result::Result::Ok(#grads_on { #(#buckets,)* micro_steps: 0 })
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
            quote!(dev.update(&mut self.#f, #j, #slot, bucket, grad_scale)?;)
        });
        quote!(#index => {
            #(#updates)*
        })
    });
    let count = lit(n.buckets.len());
    quote! {
        if dev.give_back_updated(bucket, self) {
            return ::core::result::Result::Ok(());
        }
        match index {
            #(#arms)*
            _ => ::core::unreachable!("bucket {} of {}", index, #count),
        }
        dev.clear(index, bucket)
    }
}
