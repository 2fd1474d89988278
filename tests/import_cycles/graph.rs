//! Files and the imports between them, and the cycles those imports form: the strongly
//! connected components of more than one file, each shown as one shortest cycle through it.

use std::collections::{BTreeMap, VecDeque};

/// Files that import each other, directly or through others.
pub struct Cycle {
    /// A shortest cycle among them, starting at the first by name.
    shortest: Vec<usize>,
    group: Vec<usize>,
}

/// Files (by name) and, for each import of one by another, the path that makes it.
#[derive(Default)]
pub struct Graph {
    names: Vec<String>,
    /// `edges[a][b]`: the first path seen by which file `a` reaches file `b`.
    edges: Vec<BTreeMap<usize, String>>,
}

impl Graph {
    /// The node of file `name`, added on first mention.
    pub fn node(&mut self, name: &str) -> usize {
        if let Some(i) = self.names.iter().position(|n| n == name) {
            return i;
        }
        self.names.push(name.to_string());
        self.edges.push(BTreeMap::new());
        self.names.len() - 1
    }

    /// Records that `from` imports `to` through `path`. A file using its own items is no import.
    pub fn import(&mut self, from: usize, to: usize, path: String) {
        if from != to {
            self.edges[from].entry(to).or_insert(path);
        }
    }

    /// The same imports between groups of files: each file's node becomes `group(name)`'s (files
    /// whose group is `None` are left out), and imports inside a group vanish.
    pub fn grouped(&self, group: impl Fn(&str) -> Option<String>) -> Graph {
        let mut out = Graph::default();
        let nodes: Vec<Option<usize>> = self.names.iter().map(|n| group(n).map(|g| out.node(&g))).collect();
        for (from, edges) in self.edges.iter().enumerate() {
            for (&to, path) in edges {
                if let (Some(a), Some(b)) = (nodes[from], nodes[to]) {
                    out.import(a, b, path.clone());
                }
            }
        }
        out
    }

    /// Each group of files that reach each other through their imports; empty when no file is
    /// imported back by a file it imports.
    pub fn cycles(&self) -> Vec<Cycle> {
        let groups = self.components().into_iter().filter(|c| c.len() > 1);
        groups.map(|group| Cycle { shortest: self.shortest_cycle(&group), group }).collect()
    }

    /// `a.rs -> b.rs (crate::b::X) -> a.rs (super::Y)`: a shortest cycle of the group, each step
    /// with the path that makes it, then the group's other files, which a fix must also free.
    pub fn describe(&self, cycle: &Cycle) -> String {
        let files = &cycle.shortest;
        let mut out = self.names[files[0]].clone();
        for (k, &from) in files.iter().enumerate() {
            let to = files[(k + 1) % files.len()];
            out += &format!(" -> {} ({})", self.names[to], self.edges[from][&to]);
        }
        let mut others: Vec<&str> =
            cycle.group.iter().filter(|f| !files.contains(f)).map(|&f| self.names[f].as_str()).collect();
        if !others.is_empty() {
            others.sort_unstable();
            out += &format!("; in a cycle with these too: {}", others.join(", "));
        }
        out
    }

    /// Strongly connected components (Tarjan's algorithm).
    fn components(&self) -> Vec<Vec<usize>> {
        struct State {
            next: usize,
            index: Vec<Option<usize>>,
            low: Vec<usize>,
            stack: Vec<usize>,
            on_stack: Vec<bool>,
            out: Vec<Vec<usize>>,
        }
        fn visit(g: &Graph, v: usize, s: &mut State) {
            s.index[v] = Some(s.next);
            s.low[v] = s.next;
            s.next += 1;
            s.stack.push(v);
            s.on_stack[v] = true;
            for &w in g.edges[v].keys() {
                match s.index[w] {
                    None => {
                        visit(g, w, s);
                        s.low[v] = s.low[v].min(s.low[w]);
                    }
                    Some(i) if s.on_stack[w] => s.low[v] = s.low[v].min(i),
                    Some(_) => {}
                }
            }
            if Some(s.low[v]) == s.index[v] {
                let mut component = Vec::new();
                while let Some(w) = s.stack.pop() {
                    s.on_stack[w] = false;
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                s.out.push(component);
            }
        }
        let n = self.names.len();
        let mut s = State {
            next: 0,
            index: vec![None; n],
            low: vec![0; n],
            stack: Vec::new(),
            on_stack: vec![false; n],
            out: Vec::new(),
        };
        for v in 0..n {
            if s.index[v].is_none() {
                visit(self, v, &mut s);
            }
        }
        s.out
    }

    /// A shortest cycle through the first file (by name) of `component`, by breadth-first search
    /// inside it.
    fn shortest_cycle(&self, component: &[usize]) -> Vec<usize> {
        let start = *component.iter().min_by_key(|&&v| &self.names[v]).expect("components are not empty");
        let mut before: BTreeMap<usize, usize> = BTreeMap::new();
        let mut queue = VecDeque::from([start]);
        while let Some(v) = queue.pop_front() {
            for &w in self.edges[v].keys().filter(|w| component.contains(w)) {
                if w == start {
                    let mut cycle = vec![v];
                    while let Some(&p) = before.get(cycle.last().expect("not empty")) {
                        cycle.push(p);
                    }
                    cycle.reverse();
                    return cycle;
                }
                if !before.contains_key(&w) && w != start {
                    before.insert(w, v);
                    queue.push_back(w);
                }
            }
        }
        unreachable!("every file of a strongly connected component is on a cycle through the others")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(edges: &[(&str, &str)]) -> Graph {
        let mut g = Graph::default();
        for (from, to) in edges {
            let (a, b) = (g.node(from), g.node(to));
            g.import(a, b, format!("crate::{}", to.trim_end_matches(".rs")));
        }
        g
    }

    #[test]
    fn a_cycle_through_three_files_is_found_and_shown_shortest() {
        // a -> b -> c -> a, with a longer way round through d, and e only importing into it.
        let mut g = graph(&[("a.rs", "b.rs"), ("b.rs", "c.rs"), ("c.rs", "a.rs"), ("b.rs", "d.rs"), ("d.rs", "c.rs")]);
        let (e, a) = (g.node("e.rs"), g.node("a.rs"));
        g.import(e, a, "crate::a".into());
        let cycles = g.cycles();
        assert_eq!(cycles.len(), 1);
        assert_eq!(
            g.describe(&cycles[0]),
            "a.rs -> b.rs (crate::b) -> c.rs (crate::c) -> a.rs (crate::a); in a cycle with these too: d.rs"
        );
    }

    #[test]
    fn two_files_importing_each_other_are_a_cycle() {
        let g = graph(&[("mod.rs", "child.rs"), ("child.rs", "mod.rs")]);
        assert_eq!(g.cycles().len(), 1);
    }

    #[test]
    fn a_chain_and_a_file_using_its_own_items_are_not_cycles() {
        let mut g = graph(&[("a.rs", "b.rs"), ("b.rs", "c.rs"), ("a.rs", "c.rs")]);
        let a = g.node("a.rs");
        g.import(a, a, "self::x".into());
        assert!(g.cycles().is_empty());
    }

    #[test]
    fn separate_cycles_are_each_reported() {
        let g = graph(&[("a.rs", "b.rs"), ("b.rs", "a.rs"), ("c.rs", "d.rs"), ("d.rs", "c.rs"), ("b.rs", "c.rs")]);
        assert_eq!(g.cycles().len(), 2);
    }
}
