//! Rules across fields, one function each. Each reports to `errors` with the span of the field
//! at fault.

use overlap_plan::{LayerSpec, Width, ELEM_BYTES, MAX_TENSOR_NUMEL};

use syn::Type;

use crate::ast::{Model, Residual};
use crate::errors::{Errors, Rule};
use crate::layers;

pub fn all(model: &mut Model, errors: &mut Errors) {
    not_empty(model, errors);
    distinct_identifiers(model, errors);
    crate::tied::resolve(model, errors);
    widths_chain(model, errors);
    has_parameters(model, errors);
    widths_known(model, errors);
    boundaries_separate(model, errors);
    sizes_fit(model, errors);
}

/// A `#[bucket_boundary]` keeps the layers before it and those from it on in separate buckets:
/// with no parameters on one side, it separates nothing. One written in a block, or on a block's
/// field, stands at every copy and use of it, so it is refused only where it separates nothing
/// at any of them.
fn boundaries_separate(model: &Model, errors: &mut Errors) {
    if !model.complete {
        return; // Layers refused or not read may hold parameters on either side.
    }
    // Known to have none: a layer of an unknown type (reported) may have parameters.
    let none = |f: &crate::ast::Field| f.spec.as_ref().is_some_and(|s| s.params.is_empty());
    // Each attribute, by the field it is written on (the same `Type` at every copy), with the
    // unrolled layers it stands before.
    let mut written: Vec<(*const Type, &syn::Attribute, Vec<usize>)> = Vec::new();
    for (i, field) in model.fields.iter().enumerate() {
        let own = field.boundary.as_ref().map(|attr| (std::ptr::from_ref(field.ty), attr));
        let on_block = field.block_boundaries.iter().map(|(ty, attr)| (std::ptr::from_ref(*ty), attr));
        for (at, attr) in own.into_iter().chain(on_block) {
            match written.iter_mut().find(|(other, ..)| *other == at) {
                Some((.., places)) => places.push(i),
                None => written.push((at, attr, vec![i])),
            }
        }
    }
    for (_, attr, places) in written {
        let why = |i: usize| {
            if model.fields[..i].iter().all(none) {
                Some("no layer before it has parameters")
            } else if model.fields[i..].iter().all(none) {
                Some("no layer from it on has parameters")
            } else {
                None
            }
        };
        let whys: Option<Vec<&str>> = places.iter().map(|&i| why(i)).collect();
        match whys.as_deref() {
            Some([why]) => {
                errors.spanned(attr, format!("this `#[bucket_boundary]` separates nothing: {why}; remove it"))
            }
            Some(whys) => {
                let more = if places.len() > 4 { ", ..." } else { "" };
                let named = |i: usize| format!("`{}`", model.fields[i].name);
                let message = if whys.iter().all(|why| *why == whys[0]) {
                    // One reason at every place: said once.
                    let at: Vec<String> = places.iter().take(4).map(|&i| named(i)).collect();
                    format!(
                        "this `#[bucket_boundary]` separates nothing at any of the {} places it stands before ({}{more}): \
                         {}; remove it",
                        places.len(),
                        at.join(", "),
                        whys[0]
                    )
                } else {
                    // Each place says its own reason: before one, nothing has parameters; after another.
                    let at: Vec<String> =
                        (places.iter().zip(whys).take(4)).map(|(&i, why)| format!("at {}, {why}", named(i))).collect();
                    format!(
                        "this `#[bucket_boundary]` separates nothing at any of the places it stands before ({}{more}); \
                         remove it",
                        at.join("; ")
                    )
                };
                errors.spanned(attr, message);
            }
            None => {}
        }
    }
}

/// Gradients of one model on one rank, at most: far above any real model, and far enough below
/// `usize::MAX` that no size the planner computes can overflow.
const MAX_MODEL_BYTES: u128 = 1 << 44;

/// Every tensor must be addressable by the kernels and collectives (at most `MAX_TENSOR_NUMEL`
/// elements, widths included), and the model's gradients plausible; one error per field at its
/// type, computed with checked arithmetic so that no size can overflow the macro itself.
fn sizes_fit(model: &Model, errors: &mut Errors) {
    let mut total: u128 = 0;
    for field in &model.fields {
        let Some(spec) = &field.spec else { continue };
        if let Some(problem) = oversized(spec) {
            errors.once(field.ty, Rule::Size, field.ty, problem);
            continue;
        }
        for param in &spec.params {
            total = total.saturating_add(param.numel() as u128 * ELEM_BYTES as u128);
        }
    }
    if total > MAX_MODEL_BYTES {
        errors.spanned(
            &model.item.ident,
            format!("the parameters need {total} bytes of gradients, more than the {MAX_MODEL_BYTES} one model may have on one rank"),
        );
    }
}

/// Why a layer's widths or parameters cannot be addressed, if they cannot.
fn oversized(spec: &LayerSpec) -> Option<String> {
    const WHY: &str = "tensors are addressed with a C `int` by the GPU kernels, cuBLAS and MPI";
    let param = spec.params.iter().find(|p| p.checked_numel().is_none_or(|n| n > MAX_TENSOR_NUMEL));
    if let Some(param) = param {
        let count = param.shape.iter().fold(1u128, |acc, &d| acc.saturating_mul(d as u128));
        return Some(format!(
            "`{}.{}` with shape {:?} has {count} elements, more than the {MAX_TENSOR_NUMEL} one tensor may have ({WHY})",
            spec.name, param.name, param.shape
        ));
    }
    match spec.width {
        Width::Fixed { input, output } if input.max(output) > MAX_TENSOR_NUMEL => Some(format!(
            "layer `{}` has width {}, more than the {MAX_TENSOR_NUMEL} features one row may have ({WHY})",
            spec.name,
            input.max(output)
        )),
        _ => None,
    }
}

/// Each layer's workspace entries are named after it (`blocks_0_fc_out`): a field `blocks_0_fc`
/// beside the block field `blocks: [Block; N]` would share them with `blocks.0.fc`, and two fields
/// of one name (the compiler's own error) would too. Reported once per clash, at the field that
/// makes it in the struct where the two names part (`clash_site`): once for all copies of a
/// repeated block, whose tokens it is.
fn distinct_identifiers(model: &Model, errors: &mut Errors) {
    let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for (i, field) in model.fields.iter().enumerate() {
        let ident = crate::helpers::generated_base(&field.ident);
        let Some(&j) = seen.get(&ident) else {
            seen.insert(ident, i);
            continue;
        };
        let (earlier, later) = (&model.fields[j], field);
        let what = if earlier.name == later.name {
            format!("two layers are named `{}`", later.name)
        } else {
            format!("`{}` and `{}` would share the generated name `{ident}_out`", earlier.name, later.name)
        };
        let at = clash_site((&earlier.uses, earlier.ty), (&later.uses, later.ty));
        errors.once(at, Rule::NameClash, at, format!("{what}: rename one of them"));
    }
    // Residual blocks name their sums the same way (`a_b_sum` for `a.b` and for `a_b`).
    let mut sums: std::collections::HashMap<String, &Residual> = std::collections::HashMap::new();
    for later in &model.residuals {
        let ident = crate::helpers::generated_base(&later.ident);
        let Some(earlier) = sums.insert(ident.clone(), later) else { continue };
        let (earlier_in, later_in) = (model.fields[earlier.first].uses.as_slice(), &model.fields[later.first].uses);
        // A block's sum is named from its own use (`at`), inside the uses above it.
        let depth = |r: &Residual, uses: &[(String, &Type)]| {
            uses.iter().position(|(_, ty)| std::ptr::eq(*ty, r.at)).unwrap_or(uses.len())
        };
        let at = clash_site(
            (&earlier_in[..depth(earlier, earlier_in)], earlier.at),
            (&later_in[..depth(later, later_in)], later.at),
        );
        errors.once(
            at,
            Rule::NameClash,
            at,
            format!(
                "residual blocks `{}` and `{}` would share the generated name `{ident}_sum`: rename one of them",
                earlier.name, later.name
            ),
        );
    }
}

/// Where two things whose generated names clash part: each given by the block fields it is in
/// (outermost first) and its own field's type. In the struct where their paths first differ, the
/// field of the later one there, unless the earlier one is written in that struct itself and the
/// later one is not (`blocks_0_fc` beside `blocks: [Block; 1]` holding `fc`).
fn clash_site<'a>(earlier: (&[(String, &'a Type)], &'a Type), later: (&[(String, &'a Type)], &'a Type)) -> &'a Type {
    let common =
        earlier.0.iter().zip(later.0).take_while(|((a, at), (b, bt))| a == b && std::ptr::eq(*at, *bt)).count();
    match (earlier.0.get(common), later.0.get(common)) {
        (_, None) => later.1,
        (None, Some(_)) => earlier.1,
        (Some(_), Some((_, ty))) => ty,
    }
}

fn not_empty(model: &Model, errors: &mut Errors) {
    if model.item.fields.is_empty() && matches!(model.item.fields, syn::Fields::Named(_)) {
        errors.spanned(&model.item.ident, "a #[distributed_model] needs at least one layer");
    }
}

/// Each fixed-width layer's input must equal the width flowing into it; element-wise layers
/// take that width (which also gives them their FLOP count).
fn widths_chain(model: &mut Model, errors: &mut Errors) {
    let own_inputs: Vec<Option<usize>> = model.residuals.iter().map(|r| own_input(model, r).map(|(x, _)| x)).collect();
    // Each layer's block use, by the fields' paths (`blocks.3`): the same for two layers of one
    // copy of a block.
    let model_uses: Vec<Vec<String>> =
        model.fields.iter().map(|f| f.uses.iter().map(|(name, _)| name.clone()).collect()).collect();
    // The width flowing on, the layer that last set it, and that layer's index.
    let mut flowing: Option<(usize, String, usize)> = None;
    // The layer before (its name, and whether it is a layer of one's own), and whether every
    // layer up to it has a known width.
    let (mut previous, mut all_known): (Option<(String, bool)>, bool) = (None, true);
    // The width into each layer, and out of it (after the residual sums ending there).
    let (mut into, mut out) = (vec![None; model.fields.len()], vec![None; model.fields.len()]);
    for (i, field) in model.fields.iter_mut().enumerate() {
        into[i] = flowing.as_ref().map(|f| f.0);
        let before = previous.replace((field.name.clone(), field.custom));
        let Some(spec) = &mut field.spec else {
            // Unknown width: do not report follow-on mismatches against it.
            (flowing, all_known) = (None, false);
            continue;
        };
        match spec.width {
            Width::Fixed { input, output } => {
                let embedding = !field.custom && layers::kind_name(&spec.kind) == "Embedding";
                // After a layer of another width, or after a built-in one of width 1 or an
                // element-wise one, whose outputs are no token ids; a layer of one's own may
                // output them (one column; the CPU checks each id as the embedding reads it).
                let after = match (&flowing, &before) {
                    (Some((width, from, _)), _) if *width != input => {
                        Some(format!("the previous layer `{from}` outputs width {width}"))
                    }
                    (_, Some((from, false))) if all_known => {
                        Some(format!("it comes after `{from}`, a built-in layer, whose outputs are no token ids"))
                    }
                    _ => None,
                };
                if let Some(after) = after.filter(|_| embedding) {
                    errors.once_per_use(
                        (field.ty, &field.uses),
                        Rule::Width,
                        field.ty,
                        format!(
                            "`{}` is an Embedding, which reads one token id per row, but {after}: an Embedding \
                             comes first in the model, where it reads the batch's token ids",
                            field.name
                        ),
                    );
                } else if let Some((width, from, origin)) = &flowing {
                    if *width != input {
                        let message = format!(
                            "`{}` expects input width {input}, but the previous layer `{from}` outputs width {width}",
                            field.name
                        );
                        // Set by a layer inside a block this layer is in too (the same copy), the
                        // width is that block's own: one error however many fields use it, keyed
                        // by the uses inside it alone.
                        let shared = model_uses[*origin].iter().zip(&model_uses[i]).take_while(|(a, b)| a == b);
                        let inner = &field.uses[shared.count()..];
                        errors.once_per_use((field.ty, inner), Rule::Width, field.ty, message);
                    }
                }
                flowing = Some((output, field.name.clone(), i));
            }
            Width::Preserving => {
                if let Some((width, _, origin)) = &flowing {
                    if spec.flops_per_sample == 0 {
                        spec.flops_per_sample =
                            layers::elementwise_flops(layers::kind_name(&spec.kind)).saturating_mul(*width as u64);
                    }
                    flowing = Some((*width, field.name.clone(), *origin));
                }
            }
        }
        out[i] = flowing.as_ref().map(|f| f.0);
        // A residual block whose last layer outputs another width than its input is the block's
        // error alone (`residual_widths`): which width was meant is unknown, so the layers after
        // it are not judged against either.
        for (r, own) in model.residuals.iter().zip(&own_inputs).filter(|(r, _)| r.last == i) {
            if let (Some(input), Some((width, _, _))) = (own.or(into[r.first]), &flowing) {
                if input != *width {
                    flowing = None;
                }
            }
        }
    }
    residual_widths(model, &into, &out, errors);
}

/// The first layer of residual block `r` that is not element-wise, with the width it takes;
/// none if there is none, or a layer before it is invalid.
fn own_input<'m>(model: &'m Model, r: &Residual) -> Option<(usize, &'m str)> {
    let mut widths = model.fields[r.first..=r.last].iter().map(|f| (f, f.spec.as_ref().map(|s| s.width)));
    let (field, width) = widths.find(|(_, w)| !matches!(w, Some(Width::Preserving)))?;
    match width? {
        Width::Fixed { input, .. } => Some((input, field.name.as_str())),
        Width::Preserving => None,
    }
}

/// A residual block adds its input to its output: both must have one width. Where no width flows
/// into the block (it starts the model, or follows element-wise layers only), its input is what
/// its first fixed-width layer takes, the layers before that one keeping the width.
fn residual_widths(model: &Model, into: &[Option<usize>], out: &[Option<usize>], errors: &mut Errors) {
    for r in &model.residuals {
        let input = match own_input(model, r) {
            Some((x, name)) => Some((x, format!("its layer `{name}`, the first of a fixed width, takes width {x}"))),
            None => into[r.first].map(|x| (x, format!("its input has width {x}"))),
        };
        // The block's own input where a layer of it says it: a width flowing in that differs is
        // the chain's error, already reported. Both widths are then the block's own (a width
        // flowing in is its input only where every layer keeps it, and then so is its output):
        // one error at its last layer, however many fields use the block.
        if let (Some((x, input)), Some(y)) = (input, out[r.last]) {
            if x != y {
                let last = model.fields[r.last].ty;
                errors.once(
                    last,
                    Rule::ResidualWidth,
                    last,
                    format!(
                        "a residual block adds its input to its output, so both need one width: {input}, its last \
                         layer `{}` outputs width {y}",
                        model.fields[r.last].name
                    ),
                );
            }
        }
    }
}

fn has_parameters(model: &Model, errors: &mut Errors) {
    let all_known = model.fields.iter().all(|f| f.spec.is_some());
    let any_params = model.fields.iter().filter_map(|f| f.spec.as_ref()).any(|s| !s.params.is_empty());
    if all_known && !model.fields.is_empty() && !any_params {
        errors.spanned(&model.item.ident, "this model has no parameters, so there are no gradients to all-reduce");
    }
}

/// Some layer fixes the model's input and output widths, which the data's features and the
/// loss's classes are checked against (a model without parameters is `has_parameters`' error).
fn widths_known(model: &Model, errors: &mut Errors) {
    let specs: Option<Vec<&LayerSpec>> = model.fields.iter().map(|f| f.spec.as_ref()).collect();
    let Some(specs) = specs else { return };
    let any_params = specs.iter().any(|s| !s.params.is_empty());
    if any_params && specs.iter().all(|s| s.width == Width::Preserving) {
        errors.spanned(
            &model.item.ident,
            "every layer of this model keeps its input's width, so nothing says how wide its input and output are: \
             give it a layer of fixed widths (`Linear<N, M>`, or `#[layer(input = N, output = M, ..)]` on a layer of \
             your own)",
        );
    }
}
