//! The search over a fake machine: folders of empty files laid out as the pip wheels, a toolkit
//! and the loader's path lay them out.

use std::path::{Path, PathBuf};

use super::*;

fn touch(dir: &Path, files: &[&str]) {
    std::fs::create_dir_all(dir).unwrap();
    for file in files {
        std::fs::write(dir.join(file), b"").unwrap();
    }
}

/// A Python environment at `root` with PyTorch's CUDA 13 wheels: `nvidia/cu13/lib` and
/// `nvidia/nccl/lib`, and a `python3` in its `bin`.
fn python_env_with_wheels(root: &Path) -> PathBuf {
    let site = root.join("lib/python3.12/site-packages/nvidia");
    touch(&site.join("cu13/lib"), &["libcublas.so.13", "libcublasLt.so.13", "libnvrtc.so.13"]);
    touch(&site.join("nccl/lib"), &["libnccl.so.2"]);
    touch(&root.join("bin"), &["python3"]);
    root.join("bin")
}

#[test]
fn the_wheel_layout_of_a_python_environment_on_path_is_found() {
    let machine = tempfile::tempdir().unwrap();
    let venv = machine.path().join("venv");
    let bin = python_env_with_wheels(&venv);
    let env = SearchEnv { path: Some(bin.into_os_string()), ..SearchEnv::default() };
    let located = locate(&env);
    assert!(located.missing.is_empty(), "{}", located.require_all().unwrap_err());
    let site = venv.join("lib/python3.12/site-packages/nvidia");
    assert_eq!(located.get("cuBLAS").unwrap().path, site.join("cu13/lib/libcublas.so.13"));
    assert_eq!(located.get("cuBLASLt").unwrap().path, site.join("cu13/lib/libcublasLt.so.13"));
    assert_eq!(located.get("NVRTC").unwrap().path, site.join("cu13/lib/libnvrtc.so.13"));
    assert_eq!(located.get("NCCL").unwrap().path, site.join("nccl/lib/libnccl.so.2"));
    let origin = &located.get("NCCL").unwrap().origin;
    assert_eq!(origin, &format!("Python environment {}", venv.display()));
    let summary = located.to_string();
    assert!(summary.contains("NCCL") && summary.contains("libnccl.so.2"), "{summary}");
}

#[test]
fn ld_library_path_comes_first_then_the_linker_cache_then_toolkits_then_python() {
    let machine = tempfile::tempdir().unwrap();
    let root = machine.path();
    let bin = python_env_with_wheels(&root.join("venv"));
    let (ld, cache, toolkit) = (root.join("ld"), root.join("cache"), root.join("cuda-13.0"));
    touch(&ld, &["libnvrtc.so.12"]);
    touch(&cache, &["libcublas.so.13"]);
    touch(&toolkit.join("lib64"), &["libcublas.so.13", "libcublasLt.so.13", "libnvrtc.so.13"]);
    let env = SearchEnv {
        ld_library_path: Some(ld.clone().into_os_string()),
        path: Some(bin.into_os_string()),
        linker_cache: format!(
            "12 libs found in cache `/etc/ld.so.cache'\n\tlibcublas.so.13 (libc6,x86-64) => {}\n",
            cache.join("libcublas.so.13").display()
        ),
        toolkits: vec![toolkit.clone()],
        home: None,
    };
    let places = env.places();
    let origins: Vec<&str> = places.iter().map(|p| p.origin.as_str()).collect();
    assert_eq!(&origins[..3], ["LD_LIBRARY_PATH", "linker cache", "CUDA toolkit"]);
    assert!(origins[3..].iter().all(|o| o.starts_with("Python environment")), "{origins:?}");
    let located = locate(&env);
    // An older NVRTC on the loader's path wins over a newer one further down: users' own
    // LD_LIBRARY_PATH is obeyed, as the loader would.
    assert_eq!(located.get("NVRTC").unwrap().path, ld.join("libnvrtc.so.12"));
    assert_eq!(located.get("cuBLAS").unwrap().path, cache.join("libcublas.so.13"));
    assert_eq!(located.get("cuBLASLt").unwrap().path, toolkit.join("lib64/libcublasLt.so.13"));
    assert_eq!(located.get("NCCL").unwrap().origin.split(' ').next(), Some("Python"));
}

#[test]
fn within_a_folder_the_cuda_13_name_is_preferred() {
    let machine = tempfile::tempdir().unwrap();
    touch(machine.path(), &["libcublas.so.12", "libcublas.so.13"]);
    let env = SearchEnv { ld_library_path: Some(machine.path().into()), ..SearchEnv::default() };
    assert_eq!(locate(&env).get("cuBLAS").unwrap().path, machine.path().join("libcublas.so.13"));
}

#[test]
fn a_missing_library_is_named_with_every_place_searched_and_what_to_install() {
    let machine = tempfile::tempdir().unwrap();
    let venv = machine.path().join("venv");
    let bin = python_env_with_wheels(&venv);
    std::fs::remove_file(venv.join("lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2")).unwrap();
    let ld = machine.path().join("ld");
    touch(&ld, &[]);
    let env = SearchEnv {
        ld_library_path: Some(ld.clone().into_os_string()),
        path: Some(bin.into_os_string()),
        ..SearchEnv::default()
    };
    let located = locate(&env);
    assert_eq!(located.missing.iter().map(|l| l.what).collect::<Vec<_>>(), ["NCCL"]);
    let message = located.require_all().unwrap_err();
    assert!(message.starts_with("CUDA libraries not found: NCCL (libnccl.so.2 or libnccl.so)"), "{message}");
    assert!(message.contains(&format!("{} (LD_LIBRARY_PATH)", ld.display())), "{message}");
    let wheel_dir = venv.join("lib/python3.12/site-packages/nvidia/nccl/lib");
    assert!(message.contains(&format!("{} (Python environment", wheel_dir.display())), "{message}");
    assert!(message.contains("NCCL comes with the libnccl2 package, or the pip wheel nvidia-nccl-cu13"), "{message}");
}

#[test]
fn nothing_to_search_says_so() {
    let located = locate(&SearchEnv::default());
    assert_eq!(located.missing.len(), LIBRARIES.len());
    let message = located.require_all().unwrap_err();
    assert!(message.contains("LD_LIBRARY_PATH is empty"), "{message}");
}

#[test]
fn the_nccl_link_points_at_the_library_found_and_is_replaced_when_it_moves() {
    let machine = tempfile::tempdir().unwrap();
    let (first, second) = (machine.path().join("a/libnccl.so.2"), machine.path().join("b/libnccl.so.2"));
    touch(first.parent().unwrap(), &["libnccl.so.2"]);
    touch(second.parent().unwrap(), &["libnccl.so.2"]);
    let dir = nccl_link_in(&machine.path().join("links"), &first).unwrap();
    assert_eq!(std::fs::read_link(dir.join("libnccl.so")).unwrap(), first);
    let dir = nccl_link_in(&machine.path().join("links"), &second).unwrap();
    assert_eq!(std::fs::read_link(dir.join("libnccl.so")).unwrap(), second);
}

#[test]
fn the_cuda_release_the_libraries_need_is_read_from_their_sonames() {
    let dir = tempfile::tempdir().unwrap();
    let (old, new) = (dir.path().join("old"), dir.path().join("new"));
    touch(&old, &["libcublasLt.so.12", "libcublas.so.12", "libnvrtc.so.12", "libnccl.so.2"]);
    touch(&new, &["libnvrtc.so.13"]);
    let search = |dirs: &[&Path]| SearchEnv {
        ld_library_path: Some(std::env::join_paths(dirs).unwrap()),
        ..SearchEnv::default()
    };
    let twelve = locate(&search(&[&old]));
    assert_eq!(twelve.cuda_release().map(|(r, _)| r), Some(12));
    let mixed = locate(&search(&[&new, &old]));
    let (release, found) = mixed.cuda_release().unwrap();
    assert_eq!((release, found.library), (13, "NVRTC"));
    let none = locate(&SearchEnv::default());
    assert_eq!(none.cuda_release().map(|(r, _)| r), None);
}
