//! Every identifier and expression the generated step code uses for a model: its workspace's
//! fields, gradient buffers and views, each layer's input and output, residual sums, buckets
//! (`schedule_code` writes the code with them).

use overlap_plan::{ParamRef, Schedule};
use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::ext::IdentExt;
use syn::{Ident, Type};

use crate::ast::Model;
use crate::helpers::{lit, suffixed};

/// A name the generated code binds, an argument or a local: `name` after `__`. A `let` cannot
/// shadow a constant or a static, and macro hygiene keeps no item of the user's out of the
/// generated code, so a crate's lowercase `const dev` (or `static b0`) would otherwise turn
/// `let dev = ..` into a pattern, or an error.
pub fn local(name: &str) -> Ident {
    format_ident!("__{}", name)
}

/// A local named after a model's field: `__fc1_weight` (`__type_weight` for `r#type`).
pub fn local_of(field: &Ident, suffix: &str) -> Ident {
    local(&format!("{}_{suffix}", field.unraw()))
}

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
    /// `b0`, `b1`, ...: buckets in launch order, as fields of the gradient and in-flight structs.
    pub buckets: Vec<Ident>,
    /// `__b0`, `__b1`, ...: the same buckets held in the generated functions' locals.
    pub bucket_locals: Vec<Ident>,
    /// `__b0_in_flight`, ...: each bucket's all-reduce, from its launch to its wait point.
    pub pending: Vec<Ident>,
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
            bucket_locals: (0..schedule.buckets.len()).map(|k| local(&format!("b{k}"))).collect(),
            pending: (0..schedule.buckets.len()).map(|k| local(&format!("b{k}_in_flight"))).collect(),
            first_param_layer,
            tied: schedule.layers.iter().map(|l| l.tied).collect(),
            grad_slots,
            grad_slot_count,
        }
    }

    /// The layer after whose backward low-rank bucket `k` turns from its P all-reduce to its Q
    /// all-reduce: the next layer with parameters that backward runs after `k`'s launch point;
    /// `None` when there is none (the turnaround then follows `backward_done`).
    pub(crate) fn turnaround_after(&self, k: usize) -> Option<usize> {
        let launch = self.schedule.buckets[k].launch_after;
        self.schedule.buckets[k].low_rank?;
        (self.first_param_layer..launch).rev().find(|&l| !self.schedule.layers[l].params.is_empty())
    }

    pub(crate) fn last(&self) -> usize {
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

    pub(crate) fn grad_buffers(&self) -> impl Iterator<Item = Ident> {
        (0..self.grad_slot_count).map(|slot| format_ident!("grad_{}", slot))
    }

    /// The gradient with respect to layer `j`'s output: `dy` (the loss's) for the last layer,
    /// else its workspace buffer.
    pub(crate) fn grad_of(&self, j: usize) -> TokenStream {
        match self.grad_slots[j] {
            None => quote!(__dy),
            Some(slot) => {
                let g = format_ident!("grad_{}", slot);
                quote!(&__ws.#g)
            }
        }
    }

    /// The buffer layer `j`'s backward writes its input's gradient into (`j` > the first layer
    /// with parameters).
    pub(crate) fn grad_buffer_mut(&self, j: usize) -> TokenStream {
        let slot = self.grad_slots[j].expect("a layer after the first with parameters has a gradient buffer");
        let g = format_ident!("grad_{}", slot);
        quote!(&mut __ws.#g)
    }

    /// The residual blocks that end at layer `i`, innermost (latest first layer) first: each adds
    /// its input to what the one before it output.
    pub(crate) fn ending_at(&self, i: usize) -> impl Iterator<Item = &(usize, usize, Ident)> {
        let mut ending: Vec<&(usize, usize, Ident)> = self.residuals.iter().filter(|r| r.1 == i).collect();
        ending.sort_by_key(|r| std::cmp::Reverse(r.0));
        ending.into_iter()
    }

    /// `::overlap::program::Tied { .. }` for the parameter `t` a layer is tied to.
    pub(crate) fn tied_arg(&self, t: ParamRef) -> TokenStream {
        let (layer, owner, param) = (lit(t.layer), &self.access[t.layer], lit(t.param));
        quote!(::overlap::program::Tied { layer: #layer, owner: &self.#owner, param: #param })
    }

    /// Whether a later layer is tied to a parameter of layer `i`: that layer's backward then
    /// adds to a gradient the tied layer already wrote this step.
    pub(crate) fn is_tied_to(&self, i: usize) -> bool {
        self.tied.iter().any(|t| t.is_some_and(|t| t.layer == i))
    }

    /// Whether a layer after `i` is tied to the parameter layer `i` is tied to (two heads on one
    /// embedding): that layer's backward, earlier in this one, wrote the shared gradient first,
    /// and `i`'s must add to it, not overwrite it where a device writes a step's first gradients.
    pub(crate) fn shares_tie_with_a_later_layer(&self, i: usize) -> bool {
        self.tied[i].is_some_and(|t| self.tied[i + 1..].contains(&Some(t)))
    }

    /// What layer `i` outputs to the next: its own output, or the sum of the outermost residual
    /// block ending with it.
    pub(crate) fn output_of(&self, i: usize) -> TokenStream {
        match self.ending_at(i).last() {
            Some((_, _, sum)) => quote!(__ws.#sum),
            None => {
                let o = suffixed(&self.fields[i], "out");
                quote!(__ws.#o)
            }
        }
    }

    pub(crate) fn input_of(&self, i: usize) -> TokenStream {
        if i == 0 {
            quote!(__ws.input)
        } else {
            self.output_of(i - 1)
        }
    }

    /// `let [__fc1_bias, __fc1_weight] = __S::views_mut(Slot::get_mut(&mut __b2), [(0, 2048), (2048,
    /// 1605632)]);` per bucket the layer's parameters live in (views in buffer order, which
    /// `views_mut` needs: gradient-ready order puts a layer's last parameter first), and the
    /// `&mut [..]` list in parameter order.
    pub(crate) fn gradient_views(&self, i: usize, owned: bool) -> (TokenStream, TokenStream) {
        let layer = &self.schedule.layers[i];
        let f = &self.fields[i];
        // `c_attn.weight` names the view `__attn_c_attn_weight`.
        let view = |p: usize| local_of(f, &layer.params[p].name.replace('.', "_"));
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
            let b = &self.bucket_locals[k];
            let bucket = if owned { quote!(::overlap::program::Slot::get_mut(&mut #b)) } else { quote!(&mut *#b) };
            lets.extend(quote!(let [#(#names),*] = __S::views_mut(#bucket, [#(#ranges),*]);));
        }
        let all = (0..layer.params.len()).map(view);
        (lets, quote!(&mut [#(#all),*]))
    }
}
