//! Reads the profile file `buckets = profile("...")` names (`overlap_plan::Profile`, which a run
//! wrote with `--write-profile`), relative to the crate being compiled, and reports whatever
//! keeps it from planning this model at the path literal.

use std::path::PathBuf;

use overlap_plan::{LayerSpec, Link, Profile, Target};
use syn::LitStr;

use crate::errors::Errors;

/// A profile's size at most: a layer's entry is about 100 bytes, and a model at most 2048 layers.
const LARGEST_PROFILE_BYTES: u64 = 16 << 20;

/// The optimisation target the profile describes, with `link`/`world` overriding the run's own,
/// and the absolute path read. Every problem goes to `errors`, spanned on the path literal.
pub fn read(
    path: &LitStr,
    link: Option<Link>,
    world: Option<usize>,
    layers: &[LayerSpec],
    errors: &mut Errors,
) -> Option<(Target, PathBuf)> {
    let (profile, file) = load(path, errors)?;
    match profile.target(layers, link, world) {
        Ok(target) => Some((target, file)),
        Err(problems) => {
            errors.spanned(path, format!("profile {} does not fit this model: {problems}", file.display()));
            None
        }
    }
}

/// The profile at `path` (relative to the crate's manifest), and that path; a file that cannot
/// be read, or is not a profile, is reported. Whether it fits the model is `read`'s to say, so a
/// model with other problems still hears about its file in the same compile.
pub fn load(path: &LitStr, errors: &mut Errors) -> Option<(Profile, PathBuf)> {
    let base = std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from).unwrap_or_default();
    let file = base.join(path.value());
    // Never opened unless a regular file of a profile's size: a FIFO would block the compile, a
    // device (`/dev/zero`) fill the compiler's memory.
    match std::fs::metadata(&file) {
        Ok(meta) if !meta.is_file() => {
            errors.spanned(path, format!("profile {} is not a regular file", file.display()));
            return None;
        }
        Ok(meta) if meta.len() > LARGEST_PROFILE_BYTES => {
            let mib = LARGEST_PROFILE_BYTES >> 20;
            errors.spanned(
                path,
                format!("profile {} holds {} bytes: a profile is at most {mib} MiB", file.display(), meta.len()),
            );
            return None;
        }
        _ => {}
    }
    let text = match std::fs::read_to_string(&file) {
        Ok(t) => t,
        Err(e) => {
            errors.spanned(path, format!("cannot read profile {}: {e}", file.display()));
            return None;
        }
    };
    match Profile::from_json(&text) {
        Ok(profile) => Some((profile, file)),
        Err(e) => {
            errors.spanned(path, format!("{} is not a profile: {e}", file.display()));
            None
        }
    }
}
