//! Finding the CUDA user-space libraries where users actually have them, before cudarc asks the
//! dynamic loader for them by name.
//!
//! GPU machines carry cuBLAS, NVRTC and NCCL in one of a few places: a folder on
//! `LD_LIBRARY_PATH`, the system linker cache (`ldconfig -p`), a CUDA toolkit under
//! `/usr/local/cuda*/lib64`, or PyTorch's pip wheels (`nvidia/cu13/lib`, `nvidia/nccl/lib`, ...)
//! inside a Python environment on `PATH`. [`locate`] looks in that order. [`load`] then opens
//! each library found by its full path, in dependency order: the loader matches a later
//! `dlopen("libcublas.so.13")` from cudarc against the soname of the already loaded library, so
//! no folder has to be on the loader's path and no symbolic link has to be made by hand.
//!
//! One name cannot be matched that way: NCCL ships as `libnccl.so.2`, a name cudarc never asks
//! for (it tries `libnccl.so`, `.so.13`, `.so.12`, ..., `.so.1`). For it [`nccl_link`] keeps a
//! link named `libnccl.so` in a private folder, and the command line restarts itself once with
//! that folder on `LD_LIBRARY_PATH` (the loader reads the variable only at start-up).

use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// One library the backend loads at run time.
#[derive(Clone, Copy, Debug)]
pub struct CudaLibrary {
    /// What it is, for messages: `cuBLAS`.
    pub what: &'static str,
    /// File names accepted, preferred first.
    pub files: &'static [&'static str],
    /// What provides it.
    pub install: &'static str,
}

/// The libraries, in the order they must be loaded (cuBLAS needs cuBLASLt).
pub const LIBRARIES: &[CudaLibrary] = &[
    CudaLibrary {
        what: "cuBLASLt",
        files: &["libcublasLt.so.13", "libcublasLt.so.12"],
        install: "the CUDA toolkit, or the pip wheel nvidia-cublas (CUDA 13) / nvidia-cublas-cu12",
    },
    CudaLibrary {
        what: "cuBLAS",
        files: &["libcublas.so.13", "libcublas.so.12"],
        install: "the CUDA toolkit, or the pip wheel nvidia-cublas (CUDA 13) / nvidia-cublas-cu12",
    },
    CudaLibrary {
        what: "NVRTC",
        files: &["libnvrtc.so.13", "libnvrtc.so.12"],
        install: "the CUDA toolkit, or the pip wheel nvidia-cuda-nvrtc (CUDA 13) / nvidia-cuda-nvrtc-cu12",
    },
    CudaLibrary {
        what: "NCCL",
        files: &["libnccl.so.2", "libnccl.so"],
        install: "the libnccl2 package, or the pip wheel nvidia-nccl-cu13 / nvidia-nccl-cu12",
    },
];

/// A folder searched, and why it was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Place {
    /// The folder.
    pub dir: PathBuf,
    /// `LD_LIBRARY_PATH`, `linker cache`, `CUDA toolkit`, `Python environment /opt/venv`.
    pub origin: String,
}

/// What the search reads from the process and the machine; tests build their own.
#[derive(Clone, Debug, Default)]
pub struct SearchEnv {
    /// `LD_LIBRARY_PATH`: its folders are searched first.
    pub ld_library_path: Option<OsString>,
    /// `PATH`: each folder holding `python3` or `python` is a Python environment's `bin`.
    pub path: Option<OsString>,
    /// The output of `ldconfig -p`.
    pub linker_cache: String,
    /// Roots of CUDA toolkits (`/usr/local/cuda`, `/usr/local/cuda-13.0`, ...).
    pub toolkits: Vec<PathBuf>,
    /// The user's home, for `~/.local/lib/python3*/site-packages`.
    pub home: Option<PathBuf>,
}

impl SearchEnv {
    /// This process's environment and this machine's linker cache and toolkits.
    pub fn from_process() -> Self {
        let linker_cache = ["/sbin/ldconfig", "/usr/sbin/ldconfig", "ldconfig"]
            .iter()
            .find_map(|exe| std::process::Command::new(exe).arg("-p").output().ok())
            .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
            .unwrap_or_default();
        let mut toolkits: Vec<PathBuf> = read_dir_sorted(Path::new("/usr/local"))
            .into_iter()
            .filter(|p| p.file_name().and_then(OsStr::to_str).is_some_and(|n| n.starts_with("cuda")))
            .collect();
        toolkits.reverse(); // `cuda-13.0` before `cuda-12.8`; the plain `cuda` link sorts first of all after this
        toolkits.sort_by_key(|p| p.file_name() != Some(OsStr::new("cuda")));
        SearchEnv {
            ld_library_path: std::env::var_os("LD_LIBRARY_PATH"),
            path: std::env::var_os("PATH"),
            linker_cache,
            toolkits,
            home: std::env::var_os("HOME").map(PathBuf::from),
        }
    }

    /// Every folder to search, in order, without repeats.
    pub fn places(&self) -> Vec<Place> {
        let mut places = Vec::new();
        for dir in self.ld_library_path.iter().flat_map(std::env::split_paths) {
            places.push(Place { dir, origin: "LD_LIBRARY_PATH".into() });
        }
        for line in self.linker_cache.lines() {
            let Some((_, path)) = line.split_once(" => ") else { continue };
            if let Some(dir) = Path::new(path.trim()).parent() {
                places.push(Place { dir: dir.to_path_buf(), origin: "linker cache".into() });
            }
        }
        for root in &self.toolkits {
            places.push(Place { dir: root.join("lib64"), origin: "CUDA toolkit".into() });
        }
        let python_bins = self
            .path
            .iter()
            .flat_map(std::env::split_paths)
            .filter(|bin| ["python3", "python"].iter().any(|exe| bin.join(exe).exists()));
        let mut env_roots: Vec<PathBuf> = python_bins.filter_map(|bin| bin.parent().map(Path::to_path_buf)).collect();
        env_roots.extend(self.home.iter().map(|home| home.join(".local")));
        for root in env_roots {
            for python in read_dir_sorted(&root.join("lib")) {
                let is_python = python.file_name().and_then(OsStr::to_str).is_some_and(|n| n.starts_with("python3"));
                if !is_python {
                    continue;
                }
                for package in read_dir_sorted(&python.join("site-packages").join("nvidia")) {
                    let origin = format!("Python environment {}", root.display());
                    places.push(Place { dir: package.join("lib"), origin });
                }
            }
        }
        let mut seen = BTreeSet::new();
        places.retain(|p| seen.insert(p.dir.clone()));
        places
    }
}

/// Where one library was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// The library's `CudaLibrary::what`, e.g. `cuBLAS`.
    pub library: &'static str,
    /// The file found.
    pub path: PathBuf,
    /// Why its folder was searched: the `Place::origin`.
    pub origin: String,
}

/// The outcome of a search: what was found, what was not, and where it looked.
#[derive(Clone, Debug)]
pub struct Located {
    /// The libraries found, in `LIBRARIES`' order.
    pub found: Vec<Found>,
    /// The libraries found nowhere.
    pub missing: Vec<CudaLibrary>,
    /// Every folder searched, in order.
    pub searched: Vec<Place>,
}

/// Looks for every library of [`LIBRARIES`] in `env`'s places, in order; within a folder the
/// preferred file name wins.
pub fn locate(env: &SearchEnv) -> Located {
    let searched = env.places();
    let (mut found, mut missing) = (Vec::new(), Vec::new());
    for library in LIBRARIES {
        let hit = searched.iter().find_map(|place| {
            library.files.iter().map(|file| place.dir.join(file)).find(|path| path.is_file()).map(|path| Found {
                library: library.what,
                path,
                origin: place.origin.clone(),
            })
        });
        match hit {
            Some(hit) => found.push(hit),
            None => missing.push(*library),
        }
    }
    Located { found, missing, searched }
}

impl Located {
    /// The library `what` (`cuBLAS`, `NCCL`), if found.
    pub fn get(&self, what: &str) -> Option<&Found> {
        self.found.iter().find(|f| f.library == what)
    }

    /// The newest CUDA release a found library was built for, from its soname
    /// (`libcublas.so.13`: 13), with that library: its driver must support that release. NCCL's
    /// soname numbers its own releases and is left out.
    pub fn cuda_release(&self) -> Option<(i32, &Found)> {
        let release = |f: &Found| f.path.file_name()?.to_str()?.rsplit_once(".so.")?.1.parse::<i32>().ok();
        self.found.iter().filter(|f| f.library != "NCCL").filter_map(|f| Some((release(f)?, f))).max_by_key(|&(r, _)| r)
    }

    /// Fails with every missing library, where the search looked and what provides each.
    pub fn require_all(&self) -> Result<(), String> {
        if self.missing.is_empty() {
            return Ok(());
        }
        let mut message = String::from("CUDA libraries not found: ");
        let names: Vec<String> =
            self.missing.iter().map(|l| format!("{} ({})", l.what, l.files.join(" or "))).collect();
        message.push_str(&names.join(", "));
        message.push_str("\nsearched, in order:");
        for place in &self.searched {
            message.push_str(&format!("\n  {} ({})", place.dir.display(), place.origin));
        }
        if self.searched.is_empty() {
            message.push_str("\n  nothing: LD_LIBRARY_PATH is empty, the linker cache lists no folder, no /usr/local/cuda*, no Python on PATH");
        }
        for library in &self.missing {
            message.push_str(&format!("\n{} comes with {}", library.what, library.install));
        }
        Err(message)
    }
}

impl fmt::Display for Located {
    /// One line per library: where it is, or that it is missing.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for library in LIBRARIES {
            match self.get(library.what) {
                Some(hit) => writeln!(f, "{:<9} {} ({})", library.what, hit.path.display(), hit.origin)?,
                None => writeln!(f, "{:<9} not found ({})", library.what, library.files.join(" or "))?,
            }
        }
        Ok(())
    }
}

/// Opens every library found by its full path, in [`LIBRARIES`]' order, for the rest of the
/// process, so that cudarc's later look-up by soname finds them.
pub fn load(located: &Located) -> Result<(), String> {
    use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
    for hit in &located.found {
        // SAFETY: these are NVIDIA's CUDA libraries, whose initialisers only set up their own
        // state; loading them is what cudarc would do itself with the same flags.
        let library = unsafe { Library::open(Some(&hit.path), RTLD_NOW | RTLD_GLOBAL) }
            .map_err(|e| format!("{} at {} could not be loaded: {e}", hit.library, hit.path.display()))?;
        // Kept loaded for the process's life: cudarc holds its own handles to it from now on.
        std::mem::forget(library);
    }
    Ok(())
}

/// Finds and loads the libraries, once per process; later calls get the first outcome.
pub fn prepare() -> Result<&'static Located, String> {
    static PREPARED: OnceLock<Result<Located, String>> = OnceLock::new();
    let prepared = PREPARED.get_or_init(|| {
        let located = locate(&SearchEnv::from_process());
        located.require_all()?;
        load(&located)?;
        Ok(located)
    });
    prepared.as_ref().map_err(Clone::clone)
}

/// Whether cudarc can open NVRTC by one of the names it asks for (`libnvrtc.so.13`, ...).
pub fn nvrtc_findable() -> bool {
    // SAFETY: only tries to open the library by cudarc's names; no symbol is called.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// Whether cudarc can open NCCL by one of the names it asks for (`libnccl.so`, ...).
pub fn nccl_findable() -> bool {
    // SAFETY: only tries to open the library by cudarc's names; no symbol is called.
    unsafe { cudarc::nccl::sys::is_culib_present() }
}

/// `None` when cudarc opens NCCL by one of its names. Otherwise the folder, made here, that
/// holds a `libnccl.so` link to the NCCL found, for `LD_LIBRARY_PATH`; an error when NCCL is
/// nowhere or the link cannot be made.
pub fn nccl_link_folder(located: &Located) -> Result<Option<PathBuf>, String> {
    if nccl_findable() {
        return Ok(None);
    }
    let Some(nccl) = located.get("NCCL") else { return located.require_all().map(|()| None) };
    nccl_link(&nccl.path)
        .map(Some)
        .map_err(|e| format!("NCCL is at {} but a link to it could not be made: {e}", nccl.path.display()))
}

/// Whether cudarc can open NCCL by one of the names it asks for; if not, says which folder to
/// put on `LD_LIBRARY_PATH` (made here, holding a `libnccl.so` link to the library found).
pub fn check_nccl_name(located: &Located) -> Result<(), String> {
    let Some(dir) = nccl_link_folder(located)? else { return Ok(()) };
    let found = located.get("NCCL").map(|n| n.path.display().to_string()).unwrap_or_default();
    Err(format!(
        "NCCL is at {found}, a name cudarc does not ask for (it tries libnccl.so); add {} (which holds a \
         libnccl.so link to it) to LD_LIBRARY_PATH before the program starts (the overlap command line does \
         this itself)",
        dir.display()
    ))
}

/// For a program's `main`, before MPI or any thread starts: when NCCL exists only under a name
/// cudarc does not try, starts this program again, once, in place of this process, with a
/// folder holding a `libnccl.so` link first on `LD_LIBRARY_PATH`. Returns when nothing needs
/// doing; an error when a library is missing or the restart failed.
pub fn restart_if_nccl_is_unnamed() -> Result<(), String> {
    const RESTARTED: &str = "OVERLAP_CUDA_LIBRARY_RESTART";
    let located = prepare()?;
    let Some(dir) = nccl_link_folder(located)? else { return Ok(()) };
    if crate::process::restart::restarted(RESTARTED) {
        return check_nccl_name(located); // restarted once already: say what is wrong instead
    }
    let mut path = vec![dir];
    path.extend(std::env::var_os("LD_LIBRARY_PATH").iter().flat_map(std::env::split_paths));
    let path = std::env::join_paths(path).map_err(|e| format!("LD_LIBRARY_PATH: {e}"))?;
    let error = crate::process::restart::again(RESTARTED, &[("LD_LIBRARY_PATH", &path)]);
    Err(format!("restarting with NCCL's folder on LD_LIBRARY_PATH failed: {error}"))
}

/// A private folder holding `libnccl.so`, a link to the NCCL library `found` (its real name is
/// `libnccl.so.2`, which cudarc does not ask for). Made or refreshed atomically, so ranks
/// starting together on one machine do not trip over each other.
pub fn nccl_link(found: &Path) -> std::io::Result<PathBuf> {
    nccl_link_in(&link_folder(), found)
}

fn nccl_link_in(dir: &Path, found: &Path) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let link = dir.join("libnccl.so");
    if std::fs::read_link(&link).is_ok_and(|target| target == found) {
        return Ok(dir.to_path_buf());
    }
    let staging = dir.join(format!(".libnccl.so.{}", std::process::id()));
    let _ = std::fs::remove_file(&staging);
    std::os::unix::fs::symlink(found, &staging)?;
    std::fs::rename(&staging, &link)?;
    Ok(dir.to_path_buf())
}

/// `$XDG_CACHE_HOME/overlap/cuda-libs`, else `~/.cache/overlap/cuda-libs`, else a folder of
/// this user's in the temporary directory.
fn link_folder() -> PathBuf {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")));
    match cache {
        Some(cache) => cache.join("overlap").join("cuda-libs"),
        // SAFETY: getuid cannot fail and has no preconditions.
        None => std::env::temp_dir().join(format!("overlap-cuda-libs-{}", unsafe { libc::getuid() })),
    }
}

fn read_dir_sorted(dir: &Path) -> Vec<PathBuf> {
    let mut entries: Vec<PathBuf> =
        std::fs::read_dir(dir).map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect()).unwrap_or_default();
    entries.sort();
    entries
}

#[cfg(test)]
mod tests;
