//! The straight-line code of one step: forward layer by layer; backward in reverse with each
//! bucket's all-reduce (which updates the parameters lent with it) right after the backward call
//! that completes it; and the step with each bucket's wait point, then the parameters taken back,
//! or updated there when they could not be lent.

use overlap_plan::Schedule;
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
}

impl<'s> Names<'s> {
    pub fn new(model: &Model, schedule: &'s Schedule) -> Self {
        let ident = &model.item.ident;
        Names {
            schedule,
            workspace: format_ident!("{}Workspace", ident),
            grads: format_ident!("{}Grads", ident),
            in_flight: format_ident!("{}InFlight", ident),
            fields: model.fields.iter().map(|f| f.ident.clone()).collect(),
            access: model.fields.iter().map(|f| f.access.clone()).collect(),
            types: model.fields.iter().map(|f| f.ty.clone()).collect(),
            residuals: model.residuals.iter().map(|r| (r.first, r.last, suffixed(&r.ident, "sum"))).collect(),
            buckets: (0..schedule.buckets.len()).map(|k| format_ident!("b{}", k)).collect(),
            first_param_layer: schedule.layers.iter().position(|l| !l.params.is_empty()).unwrap_or(0),
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

    /// The step's `context` and `input`, then per layer `<name>_out` and `<name>_saved`, and
    /// `<name>_grad` (the loss gradient with respect to that layer's output) where backward
    /// needs one.
    pub fn workspace_fields(&self) -> TokenStream {
        let mut out = quote!(pub context: ::overlap::StepContext, pub input: ::overlap::Matrix,);
        for (i, (f, ty)) in self.fields.iter().zip(&self.types).enumerate() {
            let (o, s) = (suffixed(f, "out"), suffixed(f, "saved"));
            out.extend(quote!(pub #o: ::overlap::Matrix, pub #s: <#ty as ::overlap::Layer>::Saved,));
            if i >= self.first_param_layer && i < self.last() {
                let g = suffixed(f, "grad");
                out.extend(quote!(pub #g: ::overlap::Matrix,));
            }
        }
        for (_, _, sum) in &self.residuals {
            out.extend(quote!(pub #sum: ::overlap::Matrix,));
        }
        out
    }

    /// The residual blocks that end at layer `i`, innermost (latest first layer) first: each adds
    /// its input to what the one before it output.
    fn ending_at(&self, i: usize) -> impl Iterator<Item = &(usize, usize, Ident)> {
        let mut ending: Vec<&(usize, usize, Ident)> = self.residuals.iter().filter(|r| r.1 == i).collect();
        ending.sort_by_key(|r| std::cmp::Reverse(r.0));
        ending.into_iter()
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

    pub fn forward_body(&self) -> TokenStream {
        let mut out = quote! {
            use ::overlap::Layer as _;
            ::core::assert_eq!(input.rows(), ctx.row_count(), "the input's rows are not the step context's");
            ws.context = *ctx;
            ws.input.clone_from(input);
        };
        for (i, f) in self.fields.iter().enumerate() {
            let (input, o, s, index) = (self.input_of(i), suffixed(f, "out"), suffixed(f, "saved"), lit(i));
            let layer = &self.access[i];
            out.extend(quote!({
                let _span = ::overlap::trace::forward(#index);
                self.#layer.forward(&ws.context, &#input, &mut ws.#o, &mut ws.#s);
            }));
            // Residual blocks ending here: output = f(x) + x, innermost first.
            let mut from = quote!(ws.#o);
            for (first, _, sum) in self.ending_at(i) {
                let x = self.input_of(*first);
                out.extend(quote!(ws.#sum.set_sum(&#from, &#x);));
                from = quote!(ws.#sum);
            }
        }
        let last = self.output_of(self.last());
        out.extend(quote!(&#last));
        out
    }

    /// `let [fc1_bias, fc1_weight] = b2.views_mut([(0, 2048), (2048, 1605632)]);` per bucket the
    /// layer's parameters live in (views in buffer order, which `views_mut` needs: gradient-ready
    /// order puts a layer's last parameter first), and the `&mut [..]` list in parameter order.
    fn gradient_views(&self, i: usize) -> (TokenStream, TokenStream) {
        let layer = &self.schedule.layers[i];
        let f = &self.fields[i];
        let view = |p: usize| suffixed(f, &layer.params[p].name);
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
            lets.extend(quote!(let [#(#names),*] = #b.views_mut([#(#ranges),*]);));
        }
        let all = (0..layer.params.len()).map(view);
        (lets, quote!(&mut [#(#all),*]))
    }
}

/// The backward pass; with `sync`, each bucket's all-reduce is launched right after the layer
/// that completes it, without it (`backward_no_sync`) gradients only accumulate.
pub fn backward_body(n: &Names, sync: bool) -> TokenStream {
    let (grads, buckets) = (&n.grads, &n.buckets);
    let mut out = quote!(
        use ::overlap::Layer as _;
    );
    // Low-rank buckets carry this rank's PowerSGD error between steps: gradients add to it.
    let carries_errors = n.schedule.buckets.iter().any(|b| b.low_rank.is_some());
    out.extend(if sync {
        let accumulate = if carries_errors { quote!(true) } else { quote!(micro_steps > 0) };
        quote! {
            let #grads { #(mut #buckets,)* micro_steps } = grads;
            let accumulate = #accumulate;
            let grad_scale = ::overlap::__private::grad_scale(comm.world_size(), micro_steps + 1);
            optimizer.begin_step();
        }
    } else {
        let accumulate = if carries_errors { quote!(true) } else { quote!(*micro_steps > 0) };
        quote! {
            let #grads { #(#buckets,)* micro_steps } = grads;
            let accumulate = #accumulate;
        }
    });
    for i in (n.first_param_layer..n.fields.len()).rev() {
        let f = &n.fields[i];
        let (input, o, s) = (n.input_of(i), suffixed(f, "out"), suffixed(f, "saved"));
        let dy = if i == n.last() {
            quote!(dy)
        } else {
            let g = suffixed(f, "grad");
            quote!(&ws.#g)
        };
        let dx = if i == n.first_param_layer {
            quote!(::core::option::Option::None)
        } else {
            let g = suffixed(&n.fields[i - 1], "grad");
            quote!(::core::option::Option::Some(&mut ws.#g))
        };
        let (lets, views) = n.gradient_views(i);
        let (index, layer) = (lit(i), &n.access[i]);
        // A residual block starting here passes its output's gradient straight to its input too.
        let skips = n.residuals.iter().filter(|r| r.0 == i && i > n.first_param_layer).map(|(_, last, _)| {
            let into = suffixed(&n.fields[i - 1], "grad");
            let g = if *last == n.last() {
                quote!(dy)
            } else {
                let g = suffixed(&n.fields[*last], "grad");
                quote!(&ws.#g)
            };
            quote!(ws.#into.add_assign(#g);)
        });
        out.extend(quote!({
            let _span = ::overlap::trace::backward(#index);
            #lets
            self.#layer.backward(&ws.context, &#input, &ws.#o, &ws.#s, #dy, #views, accumulate, #dx);
            #(#skips)*
        }));
        if sync {
            // PowerSGD: the P sums of the buckets launched at the previous launch point are in
            // (or close): orthogonalise them and start the Q all-reduces, before new launches.
            for k in (0..buckets.len()).filter(|&k| n.turnaround_after(k) == Some(i)) {
                let pending = format_ident!("b{}_in_flight", k);
                out.extend(quote!(let #pending = #pending.reduce_q(comm);));
            }
            for k in (0..buckets.len()).filter(|&k| n.schedule.buckets[k].launch_after == i) {
                let (b, pending) = (&buckets[k], format_ident!("b{}_in_flight", k));
                let members = n.schedule.buckets[k].params.iter().map(|&r| {
                    let info = n.schedule.param(r);
                    let (index, offset) = (lit(info.index), lit(info.offset));
                    quote!(::overlap::__private::BucketMember { index: #index, offset: #offset })
                });
                let launch = match n.schedule.buckets[k].low_rank {
                    None => format_ident!("all_reduce_and_update"),
                    Some(_) => format_ident!("all_reduce_low_rank"),
                };
                out.extend(quote!(
                    let #pending = comm.#launch(#b, &[#(#members),*], self, optimizer, grad_scale);
                ));
            }
        }
    }
    if sync {
        let in_flight = &n.in_flight;
        let pending = (0..buckets.len()).map(|k| format_ident!("b{}_in_flight", k));
        let late =
            (0..buckets.len()).filter(|&k| n.schedule.buckets[k].low_rank.is_some() && n.turnaround_after(k).is_none());
        let late = late.map(|k| format_ident!("b{}_in_flight", k));
        out.extend(quote! {
            comm.backward_done();
            #(let #late = #late.reduce_q(comm);)*
            #in_flight {
                #(#buckets: #pending,)*
                grad_scale,
            }
        });
    } else {
        out.extend(quote!(*micro_steps += 1;));
    }
    out
}

/// The optimizer step: for each bucket in launch order, its wait point, then its parameters
/// taken back updated (the bucket cleared by then), or their updates and the bucket cleared.
pub fn step_body(n: &Names) -> TokenStream {
    let (grads, in_flight, buckets) = (&n.grads, &n.in_flight, &n.buckets);
    let pending: Vec<Ident> = (0..buckets.len()).map(|k| format_ident!("b{}_in_flight", k)).collect();
    let mut out = quote! {
        use ::overlap::Layer as _;
        let #in_flight { #(#buckets: #pending,)* grad_scale } = in_flight;
    };
    for (k, bucket) in n.schedule.buckets.iter().enumerate() {
        let (b, p) = (&buckets[k], &pending[k]);
        out.extend(quote!(let mut #b = #p.wait()?;));
        let updates = bucket.params.iter().map(|r| {
            let info = n.schedule.param(*r);
            let (f, j) = (&n.access[r.layer], lit(r.param));
            let (index, off, len) = (lit(info.index), lit(info.offset), lit(info.numel()));
            quote!(optimizer.update(#index, self.#f.param_mut(#j), #b.view(#off, #len), grad_scale);)
        });
        let k = lit(k);
        out.extend(quote!(if !#b.give_back_updated(self, optimizer) {
            let _span = ::overlap::trace::update(#k);
            #(#updates)*
            #b.clear();
        }));
    }
    out.extend(quote!(::core::result::Result::Ok(#grads { #(#buckets,)* micro_steps: 0 })));
    out
}
