//! A field named with a raw identifier (`r#type`) is `type` to everyone outside Rust: the
//! schedule, and so the parameter files and checkpoints compared with PyTorch's, use the unraw
//! name, while the generated code keeps addressing the field as `r#type`.

use overlap::params_file::{load_params, save_params};
use overlap::plan::ParamRef;
use overlap::prelude::*;

#[distributed_model]
struct Keywords {
    r#type: Linear<4, 3>,
    act: Relu,
    r#match: Linear<3, 2>,
}

#[test]
fn raw_field_names_are_saved_without_their_prefix() {
    let schedule = &Keywords::SCHEDULE;
    assert_eq!(schedule.layers[0].name, "type");
    assert_eq!(schedule.param_name(ParamRef { layer: 0, param: 0 }), "type.weight");
    assert_eq!(schedule.param_name(ParamRef { layer: 2, param: 1 }), "match.bias");

    let model = Keywords::init(3);
    assert_eq!(model.r#type.param(0).len(), 12);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("params.safetensors");
    save_params(&model, &path).unwrap();
    let mut names: Vec<String> = load_params(&path).unwrap().into_iter().map(|(name, _, _)| name).collect();
    names.sort();
    assert_eq!(names, ["match.bias", "match.weight", "type.bias", "type.weight"]);
}

/// A model named with a raw identifier is `Model` in its schedule, as its fields are.
#[distributed_model]
struct r#Model {
    fc: Linear<2, 2>,
}

#[test]
fn a_raw_model_name_is_unraw_in_the_schedule() {
    assert_eq!(r#Model::SCHEDULE.model, "Model");
}

/// A parameter of a described layer named with a raw identifier is `weight` in the schedule too,
/// and so matches the layer's own name for it.
#[distributed_model]
struct RawParameter {
    #[layer(input = 4, output = 3, params(r#weight = [3, 4], bias = [3]))]
    fc: Linear<4, 3>,
}

/// A block named with a raw identifier is the same block as its plain name.
#[distributed_model]
mod raw_block {
    use overlap::prelude::*;

    pub struct r#Block {
        fc: Linear<4, 4>,
    }

    pub struct Net {
        block: Block,
        head: Linear<4, 2>,
    }
}

#[test]
fn raw_parameter_and_block_names_are_plain_in_the_schedule() {
    assert_eq!(RawParameter::SCHEDULE.param_name(ParamRef { layer: 0, param: 0 }), "fc.weight");
    let schedule = &raw_block::Net::SCHEDULE;
    let names: Vec<&str> = schedule.layers.iter().map(|l| l.name.as_ref()).collect();
    assert_eq!(names, ["block.fc", "head"]);
}
