//! `#[tied(wte)] lm_head: TiedHead<D, V>`: the head reads the weight of `wte`, an
//! `Embedding<V, D>` of the same struct defined before it, and adds its gradient to that
//! weight's. Resolved here into `LayerSpec::tied`, so that the planner states the tie in
//! `SCHEDULE` and the code generator passes the weight and its gradient slot to the head.

use overlap_plan::{ParamRef, Width};
use syn::ext::IdentExt;

use crate::ast::Model;
use crate::errors::{Errors, Rule};
use crate::layers::{kind_name, shown_type};

/// Sets each tied head's `tied`, or reports why it cannot be: a head without `#[tied]`, a tie on
/// a field that is no `TiedHead`, a name that is no earlier sibling, an embedding of other sizes.
pub fn resolve(model: &mut Model, errors: &mut Errors) {
    for i in 0..model.fields.len() {
        let field = &model.fields[i];
        let Some(spec) = &field.spec else { continue };
        if field.custom && kind_name(&spec.kind) == "TiedHead" {
            // Its forward reads the weight a tie hands it: as a layer of one's own, it has none.
            errors.once(
                field.ty,
                Rule::Tie,
                field.ty,
                format!(
                    "`{}` is a built-in layer that reads the embedding it is tied to, which `#[layer(..)]` cannot \
                     describe: remove `#[layer(..)]`{}",
                    spec.kind,
                    if field.tied.is_some() { "" } else { " and name the embedding with `#[tied(field)]`" }
                ),
            );
            continue;
        }
        let is_head = !field.custom && kind_name(&spec.kind) == "TiedHead";
        let Some((target, attr)) = &field.tied else {
            if is_head {
                errors.once(
                    field.ty,
                    Rule::Tie,
                    field.ty,
                    format!(
                        "`{}` reads another layer's weight: name the embedding it is tied to with `#[tied(field)]`",
                        spec.kind
                    ),
                );
            }
            continue;
        };
        if !is_head {
            errors.once(
                field.ty,
                Rule::Tie,
                attr,
                format!(
                    "`#[tied(..)]` ties a `TiedHead` to an embedding; `{}` is not a `TiedHead`",
                    shown_type(field.ty)
                ),
            );
            continue;
        }
        let Width::Fixed { input: d, output: vocab } = spec.width else { continue };
        let wanted = match spec.name.rsplit_once('.') {
            Some((prefix, _)) => format!("{prefix}.{}", target.unraw()),
            None => target.unraw().to_string(),
        };
        let head = spec.name.to_string();
        let Some(j) = model.fields.iter().position(|f| f.spec.as_ref().is_some_and(|s| s.name == wanted)) else {
            // A model's own field is shown as written (`r#type`), a block's by its path.
            let named = |f: &crate::ast::Field| f.name.strip_prefix("r#").unwrap_or(&f.name) == wanted;
            if model.fields.iter().any(|f| f.spec.is_none() && named(f)) {
                continue; // The embedding itself is malformed, and reported.
            }
            let inside = format!("{wanted}.");
            let why = if model.fields.iter().any(|f| f.name.starts_with(&inside)) {
                format!(
                    "`{target}` is a block, not a layer: `{head}` is tied to an `Embedding` of its own struct, beside it"
                )
            } else {
                format!("no layer `{target}` in this struct for `{head}` to be tied to")
            };
            errors.once(field.ty, Rule::Tie, target, why);
            continue;
        };
        if j > i {
            errors.once(
                field.ty,
                Rule::Tie,
                target,
                format!(
                    "`{target}` is defined after `{head}`: define the embedding before the head tied to it (backward \
                     completes the tied weight's gradient at the embedding, after the head)"
                ),
            );
            continue;
        }
        let owner = model.fields[j].spec.as_ref().expect("found by its spec");
        if model.fields[j].custom {
            errors.once(
                field.ty,
                Rule::Tie,
                target,
                format!(
                    "`{}` is described by `#[layer(..)]`, as a layer of your own, whose weight `{head}` cannot read: a \
                     tie reads a built-in `Embedding`'s (remove `#[layer(..)]` from `{}`)",
                    owner.name, owner.name
                ),
            );
            continue;
        }
        let fits = kind_name(&owner.kind) == "Embedding"
            && !model.fields[j].custom
            && owner.params.first().is_some_and(|p| *p.shape == [vocab, d]);
        if !fits {
            errors.once(
                field.ty,
                Rule::Tie,
                target,
                format!(
                    "`{head}: TiedHead<{d}, {vocab}>` reads an `Embedding<{vocab}, {d}>`'s `[{vocab}, {d}]` weight; `{}` is \
                     `{}`",
                    owner.name, owner.kind
                ),
            );
            continue;
        }
        if let Some(spec) = &mut model.fields[i].spec {
            spec.tied = Some(ParamRef { layer: j, param: 0 });
        }
    }
}
