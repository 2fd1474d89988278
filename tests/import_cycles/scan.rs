//! A crate's source files and which of them each one imports, read with `syn`.
//!
//! A file imports another when it names a path into it: a `use` (`use crate::a::X`,
//! `use super::{b, c}`, `pub use child::Y`), or a path in code, types or a macro's tokens
//! (`crate::a::f()`, `super::X`, `$crate::a::m!`), an attribute's arguments included
//! (`#[error("{}", crate::a::name(..))]`). A path lands in the deepest module of it that
//! exists: `crate::a::b::X` is in `a/b.rs` when that file exists, else in `a.rs`, and
//! `crate::X` in the crate root. Declaring a child module (`mod a;`) is no import of it, but a
//! child naming its parent's items is an import of the parent. Inline modules (`mod tests {..}`)
//! belong to their file: `super::*` inside one is the file itself. `pub(in crate::a)` is a
//! visibility, not an import; paths that start elsewhere (`std::`, `::x`, another crate) are
//! outside the crate. `#[cfg]` is not evaluated: every declared module is read.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

use crate::graph::Graph;

/// The imports between the files of the crate whose sources are under `src` (`lib.rs` or
/// `main.rs` at its root), files named by their path from `names_from`.
pub fn crate_graph(src: &Path, names_from: &Path) -> Graph {
    let root = ["lib.rs", "main.rs"].iter().map(|f| src.join(f)).find(|f| f.exists());
    let root = root.unwrap_or_else(|| panic!("{} has neither lib.rs nor main.rs", src.display()));
    let mut crate_files = Files::default();
    crate_files.read(root, Vec::new(), true);
    let mut graph = Graph::default();
    let nodes: Vec<usize> = crate_files
        .files
        .iter()
        .map(|f| graph.node(&f.path.strip_prefix(names_from).unwrap_or(&f.path).display().to_string()))
        .collect();
    for (i, file) in crate_files.files.iter().enumerate() {
        let mut paths = Paths { scope: file.module.clone(), found: Vec::new() };
        paths.visit_file(&file.syntax);
        for (scope, segments) in paths.found {
            if let Some(to) = crate_files.resolve(&scope, &segments) {
                graph.import(nodes[i], nodes[to], segments.join("::"));
            }
        }
    }
    graph
}

struct File {
    path: PathBuf,
    /// Its module path from the crate root (`["comm", "lent"]`).
    module: Vec<String>,
    syntax: syn::File,
}

/// Every file of the crate, and the file each module (inline ones included) is in.
#[derive(Default)]
struct Files {
    files: Vec<File>,
    modules: BTreeMap<Vec<String>, usize>,
}

impl Files {
    /// Reads `path`, the file of `module`, and every file it declares. `owns_directory`: the
    /// file is `lib.rs`, `main.rs` or `mod.rs`, whose children lie beside it.
    fn read(&mut self, path: PathBuf, module: Vec<String>, owns_directory: bool) {
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let syntax = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let here = path.parent().expect("a source file is in a folder").to_path_buf();
        let children =
            if owns_directory { here.clone() } else { here.join(path.file_stem().expect("a source file has a name")) };
        let index = self.files.len();
        self.modules.insert(module.clone(), index);
        let declared = self.declarations(index, &syntax.items, &module, &Folders { explicit: here, children });
        self.files.push(File { path, module, syntax });
        for child in declared {
            self.read(child.path, child.module, child.owns_directory);
        }
    }

    /// The out-of-line modules `items` (of `module`, in file `file`) declare; inline ones are
    /// recorded as part of `file`.
    fn declarations(
        &mut self,
        file: usize,
        items: &[syn::Item],
        module: &[String],
        folders: &Folders,
    ) -> Vec<Declared> {
        let mut declared = Vec::new();
        for item in items {
            let syn::Item::Mod(m) = item else { continue };
            let name = m.ident.to_string();
            let inner = [module, std::slice::from_ref(&name)].concat();
            if let Some((_, content)) = &m.content {
                self.modules.insert(inner.clone(), file);
                let nested = folders.children.join(&name);
                let folders = Folders { explicit: nested.clone(), children: nested };
                declared.extend(self.declarations(file, content, &inner, &folders));
                continue;
            }
            let explicit = m.attrs.iter().find(|a| a.path().is_ident("path")).map(|a| match &a.meta {
                syn::Meta::NameValue(syn::MetaNameValue {
                    value: syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }),
                    ..
                }) => PathBuf::from(s.value()),
                _ => panic!("#[path] takes a string"),
            });
            let (path, owns_directory) = match explicit {
                Some(p) => (folders.explicit.join(&p), p.file_name().is_some_and(|f| f == "mod.rs")),
                None => {
                    let flat = folders.children.join(format!("{name}.rs"));
                    if flat.exists() {
                        (flat, false)
                    } else {
                        (folders.children.join(&name).join("mod.rs"), true)
                    }
                }
            };
            assert!(path.exists(), "mod {name} in {}: {} is missing", folders.explicit.display(), path.display());
            declared.push(Declared { path, module: inner, owns_directory });
        }
        declared
    }

    /// The file `segments`, named inside module `scope`, lands in; `None` outside the crate.
    fn resolve(&self, scope: &[String], segments: &[String]) -> Option<usize> {
        let (mut module, rest): (Vec<String>, &[String]) = match segments.first()?.as_str() {
            "crate" => (Vec::new(), &segments[1..]),
            "self" => (scope.to_vec(), &segments[1..]),
            "super" => {
                let supers = segments.iter().take_while(|s| *s == "super").count();
                let parent = scope.len().checked_sub(supers)?;
                (scope[..parent].to_vec(), &segments[supers..])
            }
            // A module declared in `scope`, named by itself (`bucket::X` in `comm/mod.rs`); a name
            // alone is a local (`bucket.len()`), not the module.
            first if segments.len() > 1 && self.modules.contains_key(&[scope, &[first.to_string()]].concat()) => {
                (scope.to_vec(), segments)
            }
            _ => return None,
        };
        for segment in rest {
            module.push(segment.clone());
            if !self.modules.contains_key(&module) {
                module.pop();
                break;
            }
        }
        self.modules.get(&module).copied()
    }
}

/// Where the modules declared in a file (or an inline module of it) are looked for.
struct Folders {
    /// What a `#[path]` is relative to: the file's folder, or inside an inline module the folder
    /// its children would be in.
    explicit: PathBuf,
    /// Where `mod x;` finds `x.rs` or `x/mod.rs`.
    children: PathBuf,
}

/// A module declared out of line: its file, its module path, and whether it is a `mod.rs`.
struct Declared {
    path: PathBuf,
    module: Vec<String>,
    owns_directory: bool,
}

/// Every path a file names, each with the module it is named in.
struct Paths {
    scope: Vec<String>,
    found: Vec<(Vec<String>, Vec<String>)>,
}

impl Paths {
    fn add(&mut self, segments: Vec<String>) {
        if !segments.is_empty() {
            self.found.push((self.scope.clone(), segments));
        }
    }

    /// The leaves of a `use` tree, each as the full path it imports.
    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) if n.ident == "self" => self.add(prefix.clone()),
            syn::UseTree::Name(n) => self.add([prefix.as_slice(), &[n.ident.to_string()]].concat()),
            syn::UseTree::Rename(r) => self.add([prefix.as_slice(), &[r.ident.to_string()]].concat()),
            syn::UseTree::Glob(_) => self.add(prefix.clone()),
            syn::UseTree::Group(g) => g.items.iter().for_each(|t| self.use_tree(prefix, t)),
        }
    }

    /// Paths in a macro's tokens, which `syn` leaves unparsed: `crate::`, `$crate::`, `self::`
    /// or `super::` followed by more segments.
    fn tokens(&mut self, tokens: TokenStream) {
        let tokens: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < tokens.len() {
            match &tokens[i] {
                TokenTree::Group(g) => self.tokens(g.stream()),
                TokenTree::Ident(id) if ["crate", "self", "super"].contains(&id.to_string().as_str()) => {
                    let mut segments = vec![id.to_string()];
                    while let (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b)), Some(TokenTree::Ident(next))) =
                        (tokens.get(i + 1), tokens.get(i + 2), tokens.get(i + 3))
                    {
                        if a.as_char() != ':' || b.as_char() != ':' {
                            break;
                        }
                        segments.push(next.to_string());
                        i += 3;
                    }
                    if segments.len() > 1 {
                        self.add(segments);
                    }
                }
                _ => {}
            }
            i += 1;
        }
    }
}

impl<'ast> Visit<'ast> for Paths {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        self.scope.push(m.ident.to_string());
        syn::visit::visit_item_mod(self, m);
        self.scope.pop();
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        if u.leading_colon.is_none() {
            self.use_tree(&mut Vec::new(), &u.tree);
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() {
            self.add(path.segments.iter().map(|s| s.ident.to_string()).collect());
        }
        syn::visit::visit_path(self, path);
    }

    /// An attribute's arguments are tokens too (`#[error("{}", crate::a::name(..))]`).
    fn visit_attribute(&mut self, a: &'ast syn::Attribute) {
        syn::visit::visit_attribute(self, a);
        if let syn::Meta::List(list) = &a.meta {
            self.tokens(list.tokens.clone());
        }
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        syn::visit::visit_macro(self, m);
        self.tokens(m.tokens.clone());
    }

    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}
}
