//! The import graph between the files of each workspace crate has no cycle outside a shrinking
//! list of known ones.
//!
//! A file depends on another when it names an item the other defines: through a `use`, or a path
//! that starts with `crate::`, `super::` or `self::`. Names re-exported by a `use` are followed to
//! the file that defines them, and the `pub use` lines of a facade (`lib.rs`, `mod.rs`) are not
//! dependencies of their own. Code under `#[cfg(test)]` and test-only files are left out: tests may
//! reach anywhere.
//!
//! [`KNOWN`] lists today's cycles, one line each: a cycle that is not on it fails the test, and so
//! does a line whose cycle is gone (delete the line). The list only shrinks.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Known cycles: a crate's directory under `crates/`, then the files of one strongly connected
/// component, relative to its `src/`, sorted and joined by spaces.
const KNOWN: &[&str] = &[];

#[test]
fn no_import_cycle_outside_the_known_list() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = BTreeMap::new();
    let mut names: Vec<_> = fs::read_dir(&crates)
        .expect("crates/")
        .map(|e| e.expect("crates/ entry").path())
        .filter(|p| p.join("src").is_dir())
        .collect();
    names.sort();
    assert!(
        names.len() >= 4,
        "expected the workspace's crates under {crates:?}"
    );
    for dir in names {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let graph = Graph::of_crate(&dir.join("src"));
        for scc in graph.cycles() {
            let line = format!("{name}: {}", scc.join(" "));
            found.insert(line, graph.witness(&scc));
        }
    }
    let known: BTreeSet<String> = KNOWN.iter().map(|s| s.to_string()).collect();
    let mut report = String::new();
    for (line, witness) in &found {
        if !known.contains(line) {
            report.push_str(&format!("new cycle: {line}\n{witness}\n"));
        }
    }
    for line in &known {
        if !found.contains_key(line) {
            report.push_str(&format!("gone (delete it from KNOWN): {line}\n"));
        }
    }
    assert!(report.is_empty(), "{report}");
}

#[test]
fn the_scanner_sees_a_cycle_and_follows_reexports() {
    let tree = Scratch::new("tb-modgraph", "p");
    let dir = tree.dir();
    let write = |rel: &str, text: &str| tree.write(rel, text);
    write(
        "lib.rs",
        "mod a;\nmod p;\npub use p::Q;\n#[cfg(test)]\nmod t;\n",
    );
    write("a.rs", "use crate::p::{Q, r::R as Rr};\npub struct A;\n");
    write(
        "p/mod.rs",
        "mod q;\nmod r;\npub use q::Q;\npub struct Own;\n",
    );
    write("p/q.rs", "pub struct Q(crate::a::A);\n");
    write("p/r.rs", "use super::Own;\n// crate::a::A in a comment\nlet s = \"crate::a::A\";\npub struct R;\n#[cfg(test)]\nmod tests { use crate::a::A; }\n");
    write("t.rs", "use crate::a::A;\n");
    let g = Graph::of_crate(dir);
    let cycles = g.cycles();
    // a -> p/q.rs (Q followed through p's re-export) -> a, and a -> p/r.rs -> p/mod.rs only.
    assert_eq!(cycles, vec![vec!["a.rs".to_string(), "p/q.rs".to_string()]]);
    assert!(g.edges["p/r.rs"].contains_key("p/mod.rs"));
    assert!(
        !g.edges["p/r.rs"].contains_key("a.rs"),
        "comments, strings and cfg(test) are skipped"
    );
    assert!(
        !g.files.contains_key("t.rs"),
        "test-only files are left out"
    );
}

#[test]
fn a_bare_child_path_and_a_facade_that_uses_its_reexport_are_dependencies() {
    let tree = Scratch::new("tb-modgraph-bare", "m");
    let dir = tree.dir();
    let write = |rel: &str, text: &str| tree.write(rel, text);
    // `m.rs` beside `m/` is a root; it uses what it re-exports from `c`, and names `d` bare.
    write("lib.rs", "mod m;\nmod n;\n");
    write(
        "m.rs",
        "mod c;\nmod d;\npub use c::X;\npub use d::Y;\nfn f() -> X { d::make() }\n",
    );
    write("m/c.rs", "pub struct X;\n");
    write(
        "m/d.rs",
        "pub struct Y;\npub fn make() -> super::X { super::X }\n",
    );
    write("n.rs", "use crate::m::Y;\n");
    let g = Graph::of_crate(dir);
    assert!(g.edges["m.rs"].contains_key("m/c.rs"), "X is used in m.rs");
    assert!(
        g.edges["m.rs"].contains_key("m/d.rs"),
        "d::make is a bare child path"
    );
    assert!(
        g.edges["m/d.rs"].contains_key("m/c.rs"),
        "super::X follows m's re-export"
    );
    assert!(g.edges["n.rs"].contains_key("m/d.rs") && !g.edges["n.rs"].contains_key("m.rs"));
    assert!(g.cycles().is_empty(), "{:?}", g.cycles());
}

/// The tbfs modules that orchestrate: they alone may name two or more parts of `State` (see
/// docs/ARCHITECTURE.md, "tbfs: parts and orchestration"). A path ending in `/` is a directory.
const ORCHESTRATION: &[&str] = &["tbfs/fs.rs", "tbfs/commit/", "tbfs/state.rs"];

/// Known tbfs modules that name more than one part of `State` without being orchestration: the
/// file, then the parts it names, sorted. A file that names more parts than its line, or that is
/// not listed and names two, fails the test; so does a line that names more than the file does
/// (shorten or delete it). The list only shrinks.
const KNOWN_MULTI_PART: &[&str] = &[];

#[test]
fn only_the_orchestration_names_more_than_one_part_of_the_state() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = multi_part_modules(&src);
    let report = against_known(&found, KNOWN_MULTI_PART, "names more than one part");
    assert!(report.is_empty(), "{report}");
}

#[test]
fn the_part_scanner_sees_bindings_of_the_state_and_skips_the_rest() {
    let tree = Scratch::new("tb-parts", "tbfs/commit");
    let dir = tree.dir();
    let write = |rel: &str, text: &str| tree.write(rel, text);
    write(
        "tbfs/state.rs",
        "pub struct State {\n    pub seg: Seg,\n    /// doc\n    pub(crate) life: L<u8, u8>,\n    hold: H,\n}\nfn f(g: &mut State) { g.seg; g.life; }\n",
    );
    // One part through a parameter, one through a lock's guard, one through a closure's
    // parameter of the same name: three.
    write(
        "tbfs/a.rs",
        "fn f(&self, m: &mut State) { m.seg.x(); self.in_section(m, |m| m.life.y()); }\nfn g(&self) { let mut meta = self.lock_meta(); meta\n    .hold.z(); }\n",
    );
    // Fields of other values, comments, strings and tests do not count; `self` counts only in
    // `impl State`.
    write(
        "tbfs/b.rs",
        "fn f(t: &Tree, m: &State) { t.life; m.seg; \"m.life\"; /* m.hold */ self.life; }\n#[cfg(test)]\nfn t(m: &State) { m.life; }\nimpl State { fn g(&self) { self.hold; } }\n",
    );
    write(
        "tbfs/c.rs",
        "fn f() -> State { State { seg: s(), life: l(), ..State::default() } }\nfn g() -> State { x }\n",
    );
    // A field that holds a whole `State` (a view's copy), and a guard passed by value.
    write(
        "tbfs/e.rs",
        "struct V { tree: State }\nimpl V { fn f(&self) { self.tree.seg; self.tree.life; } }\nfn g(mut n: StateGuard<'_>) { n.hold; }\n",
    );
    write(
        "tbfs/commit/d.rs",
        "fn f(m: &mut State) { m.seg; m.life; m.hold; }\n",
    );
    let found = multi_part_modules(dir);
    assert_eq!(
        found,
        BTreeSet::from([
            "tbfs/a.rs: hold life seg".to_string(),
            "tbfs/b.rs: hold seg".to_string(),
            "tbfs/c.rs: life seg".to_string(),
            "tbfs/e.rs: hold life seg".to_string(),
        ])
    );
}

/// Each non-orchestration tbfs file under `src` that names two or more parts of `State`, as
/// `file: part part ...`.
fn multi_part_modules(src: &Path) -> BTreeSet<String> {
    let parts = state_parts(&fs::read_to_string(src.join("tbfs/state.rs")).expect("state.rs"));
    assert!(parts.len() >= 2, "State's fields: {parts:?}");
    files_naming_two(src, |text| parts_named(text, &parts))
}

/// Each non-orchestration, non-test tbfs file under `src` for which `named` finds two or more
/// parts, as `file: part part ...`.
fn files_naming_two(src: &Path, named: impl Fn(&str) -> BTreeSet<String>) -> BTreeSet<String> {
    let mut all = Vec::new();
    walk(&src.join("tbfs"), &mut all);
    let mut out = BTreeSet::new();
    for path in all {
        let rel = path
            .strip_prefix(src)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let orchestration = ORCHESTRATION.iter().any(|o| {
            if o.ends_with('/') {
                rel.starts_with(o)
            } else {
                rel == *o
            }
        });
        let name = rel.rsplit('/').next().unwrap_or_default();
        if orchestration || name.ends_with("tests.rs") {
            continue;
        }
        let found = named(&fs::read_to_string(&path).unwrap());
        if found.len() > 1 {
            let list: Vec<&str> = found.iter().map(String::as_str).collect();
            out.insert(format!("{rel}: {}", list.join(" ")));
        }
    }
    out
}

/// The fields of `struct State` in `text`.
fn state_parts(text: &str) -> BTreeSet<String> {
    let toks: Vec<Tok> = lex(text).into_iter().map(|t| t.0).collect();
    let ident = |s: &str| Tok::Ident(s.to_string());
    let mut out = BTreeSet::new();
    let Some(start) = toks
        .windows(3)
        .position(|w| w[0] == ident("struct") && w[1] == ident("State") && w[2] == Tok::Punct('{'))
    else {
        return out;
    };
    // Depth counts every bracket, so a field's type (`L<u8, u8>`, `[u8; 16]`) is never read
    // as a field.
    let mut depth = 0i32;
    for (i, t) in toks.iter().enumerate().skip(start + 2) {
        match t {
            Tok::Punct('{' | '(' | '[' | '<') => depth += 1,
            Tok::Punct('}' | ')' | ']' | '>') => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            Tok::Ident(name) if depth == 1 && toks.get(i + 1) == Some(&Tok::Punct(':')) => {
                out.insert(name.clone());
            }
            _ => {}
        }
    }
    out
}

/// The parts of `State` (`parts`) that one file names, outside its tests: a field read through
/// a binding of the state (a parameter, variable or field typed `State` or `StateGuard`, by value
/// or by reference, a variable bound to a `lock_meta*` call, any binding of the same name in the
/// file, and `self` in an `impl State`), or set in a `State { .. }` literal.
fn parts_named(text: &str, parts: &BTreeSet<String>) -> BTreeSet<String> {
    let toks: Vec<Tok> = strip_test_items(lex(text), &mut BTreeSet::new())
        .into_iter()
        .map(|t| t.0)
        .collect();
    let ident = |s: &str| Tok::Ident(s.to_string());
    let is_state =
        |t: Option<&Tok>| matches!(t, Some(Tok::Ident(n)) if n == "State" || n == "StateGuard");
    let mut bindings: BTreeSet<String> = BTreeSet::new();
    for (i, t) in toks.iter().enumerate() {
        let Tok::Ident(name) = t else { continue };
        // `name: State`, a field or a parameter that holds the state itself (a view's frozen
        // copy, a guard passed on).
        if toks.get(i + 1) == Some(&Tok::Punct(':')) && is_state(toks.get(i + 2)) {
            bindings.insert(name.clone());
        }
        // `name: &State`, `name: &mut StateGuard<'_>` (the lexer drops lifetimes).
        if toks.get(i + 1) == Some(&Tok::Punct(':')) && toks.get(i + 2) == Some(&Tok::Punct('&')) {
            let ty = if toks.get(i + 3) == Some(&ident("mut")) {
                i + 4
            } else {
                i + 3
            };
            if is_state(toks.get(ty)) {
                bindings.insert(name.clone());
            }
        }
        // `let [mut] name = ... lock_meta...(..) ... ;`
        if name == "let" {
            let mut j = i + 1;
            if toks.get(j) == Some(&ident("mut")) {
                j += 1;
            }
            if let (Some(Tok::Ident(bound)), Some(Tok::Punct('='))) = (toks.get(j), toks.get(j + 1))
            {
                let end = toks[j..]
                    .iter()
                    .position(|t| *t == Tok::Punct(';'))
                    .map_or(toks.len(), |p| j + p);
                let locks = toks[j..end]
                    .iter()
                    .any(|t| matches!(t, Tok::Ident(w) if w.starts_with("lock_meta")));
                if locks {
                    bindings.insert(bound.clone());
                }
            }
        }
    }
    // `self` inside `impl State { .. }`.
    let mut self_is_state = vec![false; toks.len()];
    let mut i = 0;
    while i + 2 < toks.len() {
        if toks[i] == ident("impl") && is_state(toks.get(i + 1)) && toks[i + 2] == Tok::Punct('{') {
            let mut depth = 0;
            let mut j = i + 2;
            while j < toks.len() {
                match toks[j] {
                    Tok::Punct('{') => depth += 1,
                    Tok::Punct('}') => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
                self_is_state[j] = true;
                j += 1;
            }
            i = j;
        }
        i += 1;
    }
    let mut named = BTreeSet::new();
    for (i, t) in toks.iter().enumerate() {
        let Tok::Ident(name) = t else { continue };
        let state_binding = bindings.contains(name) || (name == "self" && self_is_state[i]);
        if state_binding && toks.get(i + 1) == Some(&Tok::Punct('.')) {
            if let Some(Tok::Ident(field)) = toks.get(i + 2) {
                if parts.contains(field) && toks.get(i + 3) != Some(&Tok::Punct('(')) {
                    named.insert(field.clone());
                }
            }
        }
        // `State { field: .., field, .. }`, not `impl State {` nor `struct State {`.
        let literal = name == "State"
            && toks.get(i + 1) == Some(&Tok::Punct('{'))
            && !matches!(
                i.checked_sub(1).map(|p| &toks[p]),
                Some(Tok::Ident(k)) if k == "impl" || k == "struct" || k == "for"
            )
            // `-> State {`: a return type, then the body.
            && i.checked_sub(1).map(|p| &toks[p]) != Some(&Tok::Punct('>'));
        if literal {
            let mut depth = 0;
            for (j, u) in toks.iter().enumerate().skip(i + 1) {
                match u {
                    Tok::Punct('{' | '(' | '[') => depth += 1,
                    Tok::Punct('}' | ')' | ']') => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    Tok::Ident(field)
                        if depth == 1
                            && parts.contains(field)
                            && matches!(toks.get(j + 1), Some(Tok::Punct(':' | ',' | '}'))) =>
                    {
                        named.insert(field.clone());
                    }
                    _ => {}
                }
            }
        }
    }
    named
}

/// Known tbfs modules that name more than one part of `Engine` (its `pub` fields: the log
/// pipeline, the superblock writer, the budget, the counters, ...) without being orchestration,
/// as in [`KNOWN_MULTI_PART`]. The list only shrinks.
const KNOWN_MULTI_ENGINE_PART: &[&str] = &[];

#[test]
fn only_the_orchestration_names_more_than_one_part_of_the_engine() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = multi_engine_part_modules(&src);
    let report = against_known(
        &found,
        KNOWN_MULTI_ENGINE_PART,
        "names more than one part of Engine",
    );
    assert!(report.is_empty(), "{report}");
}

#[test]
fn the_engine_part_scanner_sees_bindings_of_the_engine_and_skips_the_rest() {
    let tree = Scratch::new("tb-engine-parts", "tbfs/commit");
    let dir = tree.dir();
    let write = |rel: &str, text: &str| tree.write(rel, text);
    // Only `pub` fields are parts; a private one (`meta`) is `Engine`'s own.
    write(
        "tbfs/state.rs",
        "pub struct State { pub seg: Seg }\npub(crate) struct Engine {\n    meta: M<State>,\n    /// doc\n    pub logs: L,\n    pub(crate) budget: B<u8, u8>,\n    pub stats: S,\n}\n",
    );
    // `self` in `impl Engine`, a parameter `&Engine`, a field `Arc<Engine>`: three parts.
    write(
        "tbfs/a.rs",
        "impl Engine { fn f(&self) { self.logs.x(); self.meta.y(); } }\nfn g(e: &Engine) { e.budget.z(); }\nstruct F { inner: Arc<Engine> }\nimpl F { fn h(&self) { self.inner.stats.w(); } }\n",
    );
    // Fields of other values, methods of the same name, comments, strings and tests do not
    // count; `self` outside `impl Engine` is not the engine.
    write(
        "tbfs/b.rs",
        "impl Engine { fn f(&self, t: &T) { self.logs.x(); t.budget; self.stats(); \"self.budget\"; /* self.budget */ } }\nimpl T { fn g(&self) { self.budget; } }\n#[cfg(test)]\nfn t(e: &Engine) { e.stats; }\n",
    );
    write(
        "tbfs/commit/c.rs",
        "impl Engine { fn f(&self) { self.logs; self.budget; self.stats; } }\n",
    );
    let found = multi_engine_part_modules(dir);
    assert_eq!(
        found,
        BTreeSet::from(["tbfs/a.rs: budget logs stats".to_string()])
    );
}

#[test]
fn the_engine_part_scanner_sees_the_engine_through_a_trait_impl_and_a_holder_elsewhere() {
    let tree = Scratch::new("tb-engine-holders", "tbfs");
    let dir = tree.dir();
    let write = |rel: &str, text: &str| tree.write(rel, text);
    write(
        "tbfs/state.rs",
        "pub(crate) struct Engine {\n    pub logs: L,\n    pub budget: B,\n    pub stats: S,\n}\n",
    );
    // `Fs` and `File` hold the engine; they are defined in the orchestration.
    write(
        "tbfs/fs.rs",
        "pub struct Fs { pub(crate) inner: Arc<Engine> }\npub struct File<'a> { e: &'a Engine, n: u64 }\n",
    );
    // `self.inner` in an `impl Fs` of another file, with no binding of the engine in it.
    write(
        "tbfs/a.rs",
        "impl Fs { fn f(&self) { self.inner.logs.x(); self.inner.budget.y(); } }\n",
    );
    // `self` in a trait's impl for the engine, and `self.e` in an `impl<'a>` of a holder.
    write(
        "tbfs/b.rs",
        "impl Drop for Engine { fn drop(&mut self) { self.stats.x(); } }\nimpl<'a> File<'a> { fn g(&self) { self.e.logs.y(); } }\n",
    );
    // The holder's engine bound to a variable first, as the orchestration does.
    write(
        "tbfs/d.rs",
        "impl Fs { fn f(&self) { let inner = &self.inner; inner.logs.x(); let e = self.inner.clone(); e.stats.y(); } }\n",
    );
    // Not holders: another struct's `inner`, a holder's other field, a method of the engine.
    write(
        "tbfs/c.rs",
        "impl Other { fn f(&self) { self.inner.logs; self.inner.budget; } }\nimpl File<'_> { fn g(&self) { self.n.logs; self.e.stats(); self.e.budget.z(); } }\n",
    );
    let found = multi_engine_part_modules(dir);
    assert_eq!(
        found,
        BTreeSet::from([
            "tbfs/a.rs: budget logs".to_string(),
            "tbfs/b.rs: logs stats".to_string(),
            "tbfs/d.rs: logs stats".to_string(),
        ])
    );
}

/// Each non-orchestration tbfs file under `src` that names two or more parts of `Engine`, as
/// `file: part part ...`.
fn multi_engine_part_modules(src: &Path) -> BTreeSet<String> {
    let parts = engine_parts(&fs::read_to_string(src.join("tbfs/state.rs")).expect("state.rs"));
    assert!(parts.len() >= 2, "Engine's pub fields: {parts:?}");
    let mut all = Vec::new();
    walk(&src.join("tbfs"), &mut all);
    let mut holders = BTreeSet::new();
    for path in all {
        holders.extend(engine_holders(&fs::read_to_string(&path).unwrap()));
    }
    files_naming_two(src, |text| engine_parts_named(text, &parts, &holders))
}

/// The fields that hold the engine (typed `Engine`, `&Engine`, `Arc<Engine>` or
/// `&Arc<Engine>`) of the structs `text` defines, as (struct, field): `Fs::inner`, say, which
/// an `impl Fs` in another file reaches as `self.inner`.
fn engine_holders(text: &str) -> BTreeSet<(String, String)> {
    let toks: Vec<Tok> = lex(text).into_iter().map(|t| t.0).collect();
    let ident = |s: &str| Tok::Ident(s.to_string());
    let mut out = BTreeSet::new();
    let mut i = 0;
    while i + 1 < toks.len() {
        let Tok::Ident(name) = &toks[i + 1] else {
            i += 1;
            continue;
        };
        if toks[i] != ident("struct") {
            i += 1;
            continue;
        }
        // `struct S {` or `struct S<'a> {` (the lexer drops lifetimes: `struct S < > {`).
        let mut j = i + 2;
        if toks.get(j) == Some(&Tok::Punct('<')) {
            while j < toks.len() && toks[j] != Tok::Punct('>') {
                j += 1;
            }
            j += 1;
        }
        if toks.get(j) != Some(&Tok::Punct('{')) {
            i += 1;
            continue;
        }
        let mut depth = 0i32;
        while j < toks.len() {
            match &toks[j] {
                Tok::Punct('{' | '(' | '[' | '<') => depth += 1,
                Tok::Punct('}' | ')' | ']' | '>') => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                Tok::Ident(field)
                    if depth == 1
                        && toks.get(j + 1) == Some(&Tok::Punct(':'))
                        && holds_engine(&toks, j + 2) =>
                {
                    out.insert((name.clone(), field.clone()));
                }
                _ => {}
            }
            j += 1;
        }
        i = j;
    }
    out
}

/// Whether the type at `toks[j]` is `Engine`, `&Engine`, `&mut Engine`, `Arc<Engine>` or
/// `&Arc<Engine>`.
fn holds_engine(toks: &[Tok], mut j: usize) -> bool {
    let ident = |s: &str| Tok::Ident(s.to_string());
    if toks.get(j) == Some(&Tok::Punct('&')) {
        j += 1;
        if toks.get(j) == Some(&ident("mut")) {
            j += 1;
        }
    }
    if toks.get(j) == Some(&ident("Arc")) && toks.get(j + 1) == Some(&Tok::Punct('<')) {
        j += 2;
    }
    toks.get(j) == Some(&ident("Engine"))
}

/// The `pub` fields (`pub`, `pub(crate)`, `pub(in ..)`) of `struct Engine` in `text`.
fn engine_parts(text: &str) -> BTreeSet<String> {
    let toks: Vec<Tok> = lex(text).into_iter().map(|t| t.0).collect();
    let ident = |s: &str| Tok::Ident(s.to_string());
    let mut out = BTreeSet::new();
    let Some(start) = toks.windows(3).position(|w| {
        w[0] == ident("struct") && w[1] == ident("Engine") && w[2] == Tok::Punct('{')
    }) else {
        return out;
    };
    let mut depth = 0i32;
    for (i, t) in toks.iter().enumerate().skip(start + 2) {
        match t {
            Tok::Punct('{' | '(' | '[' | '<') => depth += 1,
            Tok::Punct('}' | ')' | ']' | '>') => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            Tok::Ident(name) if depth == 1 && toks.get(i + 1) == Some(&Tok::Punct(':')) => {
                // `pub name:` or `pub(..) name:`.
                let public = match i.checked_sub(1).map(|p| &toks[p]) {
                    Some(Tok::Ident(k)) => k == "pub",
                    Some(Tok::Punct(')')) => toks[..i]
                        .iter()
                        .rposition(|t| *t == Tok::Punct('('))
                        .and_then(|p| p.checked_sub(1))
                        .is_some_and(|p| toks[p] == ident("pub")),
                    _ => false,
                };
                if public {
                    out.insert(name.clone());
                }
            }
            _ => {}
        }
    }
    out
}

/// The parts of `Engine` (`parts`) that one file names, outside its tests: a field read through
/// `self` in an `impl Engine` (or an `impl Trait for Engine`), through any binding typed
/// `&Engine`, `&Arc<Engine>` or `Arc<Engine>` (a parameter or a field, and any binding of the
/// same name in the file), or through `self.field` in an impl of a struct whose `field` holds the
/// engine (`holders`, from every tbfs file: `self.inner` in an `impl Fs`), or a variable bound
/// to it there (`let inner = &self.inner;`).
fn engine_parts_named(
    text: &str,
    parts: &BTreeSet<String>,
    holders: &BTreeSet<(String, String)>,
) -> BTreeSet<String> {
    let toks: Vec<Tok> = strip_test_items(lex(text), &mut BTreeSet::new())
        .into_iter()
        .map(|t| t.0)
        .collect();
    let ident = |s: &str| Tok::Ident(s.to_string());
    let engine = ident("Engine");
    let mut bindings: BTreeSet<String> = BTreeSet::new();
    for (i, t) in toks.iter().enumerate() {
        let Tok::Ident(name) = t else { continue };
        if toks.get(i + 1) != Some(&Tok::Punct(':')) {
            continue;
        }
        // `&Engine`, `&mut Engine`, `&Arc<Engine>`, `Arc<Engine>`.
        let mut j = i + 2;
        if toks.get(j) == Some(&Tok::Punct('&')) {
            j += 1;
            if toks.get(j) == Some(&ident("mut")) {
                j += 1;
            }
        }
        if toks.get(j) == Some(&ident("Arc")) && toks.get(j + 1) == Some(&Tok::Punct('<')) {
            j += 2;
        }
        if toks.get(j) == Some(&engine) {
            bindings.insert(name.clone());
        }
    }
    // The type each `impl` block is for: `impl Engine {`, `impl Drop for Engine {`,
    // `impl<'a> Fs {` (the lexer drops lifetimes): the name just before the block's `{`.
    let mut impl_of: Vec<Option<String>> = vec![None; toks.len()];
    let mut i = 0;
    while i < toks.len() {
        if toks[i] != ident("impl") {
            i += 1;
            continue;
        }
        let Some(open) = toks[i..].iter().position(|t| *t == Tok::Punct('{')) else {
            break;
        };
        let open = i + open;
        // Past the type's own generics: `File<'a> {` is `File < > {`.
        let mut last = open - 1;
        if toks[last] == Tok::Punct('>') {
            let mut depth = 0;
            while last > i {
                match toks[last] {
                    Tok::Punct('>') => depth += 1,
                    Tok::Punct('<') => depth -= 1,
                    _ => {}
                }
                last -= 1;
                if depth == 0 {
                    break;
                }
            }
        }
        let of = match &toks[last] {
            Tok::Ident(n) => Some(n.clone()),
            _ => None,
        };
        let mut depth = 0;
        let mut j = open;
        while j < toks.len() {
            match toks[j] {
                Tok::Punct('{') => depth += 1,
                Tok::Punct('}') => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            impl_of[j].clone_from(&of);
            j += 1;
        }
        i = j + 1;
    }
    // `let [mut] name = [&][*]self.field[.clone()];` in an impl of a holder: the engine too.
    for (i, t) in toks.iter().enumerate() {
        if *t != ident("let") {
            continue;
        }
        let mut j = i + 1;
        if toks.get(j) == Some(&ident("mut")) {
            j += 1;
        }
        let (Some(Tok::Ident(bound)), Some(Tok::Punct('='))) = (toks.get(j), toks.get(j + 1))
        else {
            continue;
        };
        let mut k = j + 2;
        while matches!(toks.get(k), Some(Tok::Punct('&' | '*'))) {
            k += 1;
        }
        let Some(end) = toks[k..].iter().position(|t| *t == Tok::Punct(';')) else {
            continue;
        };
        let rhs = &toks[k..k + end];
        let clone = [
            Tok::Punct('.'),
            ident("clone"),
            Tok::Punct('('),
            Tok::Punct(')'),
        ];
        let plain = rhs.len() == 3 || (rhs.len() == 7 && rhs[3..] == clone);
        if let (true, Some(of), [s, Tok::Punct('.'), Tok::Ident(field), ..]) =
            (plain, impl_of[i].as_deref(), rhs)
        {
            if *s == ident("self") && holders.contains(&(of.to_string(), field.clone())) {
                bindings.insert(bound.clone());
            }
        }
    }
    let mut named = BTreeSet::new();
    let part_at = |k: usize| match toks.get(k) {
        Some(Tok::Ident(field))
            if parts.contains(field) && toks.get(k + 1) != Some(&Tok::Punct('(')) =>
        {
            Some(field.clone())
        }
        _ => None,
    };
    for (i, t) in toks.iter().enumerate() {
        let Tok::Ident(name) = t else { continue };
        if toks.get(i + 1) != Some(&Tok::Punct('.')) {
            continue;
        }
        let in_impl_of = impl_of[i].as_deref();
        let bound = bindings.contains(name) || (name == "self" && in_impl_of == Some("Engine"));
        if bound {
            named.extend(part_at(i + 2));
        }
        // `self.field.part` where `field` of the impl's struct holds the engine.
        if name == "self" && toks.get(i + 3) == Some(&Tok::Punct('.')) {
            if let (Some(of), Some(Tok::Ident(field))) = (in_impl_of, toks.get(i + 2)) {
                if holders.contains(&(of.to_string(), field.clone())) {
                    named.extend(part_at(i + 4));
                }
            }
        }
    }
    named
}

struct File {
    module: Vec<String>,
    /// Items defined here: structs, functions, traits and the like, and child modules.
    defines: BTreeSet<String>,
    /// Names bound by `use`: the name and the absolute path it stands for.
    binds: Vec<(String, Vec<String>)>,
    /// Every path this file names, absolute, with the line it is on and whether it is a facade's
    /// re-export.
    paths: Vec<(Vec<String>, usize, bool)>,
    /// Child modules declared under `#[cfg(test)]`.
    test_children: BTreeSet<String>,
}

struct Graph {
    files: BTreeMap<String, File>,
    by_module: BTreeMap<Vec<String>, String>,
    /// file -> file it depends on -> (line, path) of the first reference.
    edges: BTreeMap<String, BTreeMap<String, (usize, String)>>,
}

impl Graph {
    fn of_crate(src: &Path) -> Graph {
        let mut all = Vec::new();
        walk(src, &mut all);
        let mut files = BTreeMap::new();
        for path in all {
            let rel = path
                .strip_prefix(src)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            let module = module_of(&rel);
            // A module's root file: lib.rs, main.rs, a mod.rs, or `x.rs` beside a directory `x/`.
            let root = rel == "lib.rs"
                || rel == "main.rs"
                || rel.ends_with("/mod.rs")
                || path.with_extension("").is_dir();
            let text = fs::read_to_string(&path).unwrap();
            files.insert(rel, parse(&text, module, root));
        }
        // Leave out files that only tests declare, and everything under them.
        let mut test_modules: Vec<Vec<String>> = Vec::new();
        for f in files.values() {
            for c in &f.test_children {
                let mut m = f.module.clone();
                m.push(c.clone());
                test_modules.push(m);
            }
        }
        files.retain(|_, f| !test_modules.iter().any(|t| f.module.starts_with(t)));
        let by_module = files
            .iter()
            .map(|(k, f)| (f.module.clone(), k.clone()))
            .collect();
        let mut g = Graph {
            files,
            by_module,
            edges: BTreeMap::new(),
        };
        let mut edges = BTreeMap::new();
        for (name, f) in &g.files {
            let mut out: BTreeMap<String, (usize, String)> = BTreeMap::new();
            for (path, line, facade_reexport) in &f.paths {
                if *facade_reexport {
                    continue;
                }
                if let Some(target) = g.resolve(path, 0) {
                    if &target != name {
                        out.entry(target).or_insert((*line, path.join("::")));
                    }
                }
            }
            edges.insert(name.clone(), out);
        }
        g.edges = edges;
        g
    }

    /// The file that defines what an absolute path names.
    fn resolve(&self, path: &[String], depth: usize) -> Option<String> {
        // The longest prefix that is a module of this crate.
        let mut n = path.len();
        while n > 0 && !self.by_module.contains_key(&path[..n]) {
            n -= 1;
        }
        if n == 0 && !self.by_module.contains_key(&path[..0]) {
            return None;
        }
        let file = self.by_module.get(&path[..n])?;
        let Some(item) = path.get(n) else {
            return Some(file.clone());
        };
        let f = &self.files[file];
        if depth < 8 && !f.defines.contains(item) {
            if let Some((_, target)) = f.binds.iter().find(|(b, _)| b == item) {
                let mut next = target.clone();
                next.extend(path[n + 1..].iter().cloned());
                if let Some(t) = self.resolve(&next, depth + 1) {
                    return Some(t);
                }
            }
        }
        Some(file.clone())
    }

    /// Strongly connected components of more than one file, each sorted.
    fn cycles(&self) -> Vec<Vec<String>> {
        let names: Vec<&String> = self.files.keys().collect();
        let index: BTreeMap<&String, usize> =
            names.iter().enumerate().map(|(i, n)| (*n, i)).collect();
        let adj: Vec<Vec<usize>> = names
            .iter()
            .map(|n| self.edges[*n].keys().map(|t| index[t]).collect())
            .collect();
        let mut out: Vec<Vec<String>> = tarjan(&adj)
            .into_iter()
            .filter(|c| c.len() > 1)
            .map(|c| {
                let mut v: Vec<String> = c.iter().map(|&i| names[i].clone()).collect();
                v.sort();
                v
            })
            .collect();
        out.sort();
        out
    }

    /// The edges inside one component, each with the line and path that makes it.
    fn witness(&self, scc: &[String]) -> String {
        let mut s = String::new();
        for from in scc {
            for (to, (line, path)) in &self.edges[from] {
                if scc.contains(to) {
                    s.push_str(&format!("  {from}:{line} -> {to} ({path})\n"));
                }
            }
        }
        s
    }
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            walk(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

fn module_of(rel: &str) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(String::from)
        .collect();
    let last = parts.last().cloned().unwrap_or_default();
    if last == "mod" || (parts.len() == 1 && (last == "lib" || last == "main")) {
        parts.pop();
    }
    parts
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Punct(char),
    PathSep,
}

/// Rust source to tokens with their line, without comments, literals or lifetimes.
fn lex(text: &str) -> Vec<(Tok, usize)> {
    let b: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    let skip_string = |i: &mut usize, line: &mut usize| {
        // At the opening quote of a plain string.
        *i += 1;
        while *i < b.len() && b[*i] != '"' {
            if b[*i] == '\\' {
                *i += 1;
            }
            if *i < b.len() && b[*i] == '\n' {
                *line += 1;
            }
            *i += 1;
        }
        *i += 1;
    };
    while i < b.len() {
        let c = b[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && b.get(i + 1) == Some(&'/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && b.get(i + 1) == Some(&'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if b[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
        } else if c == '"' {
            skip_string(&mut i, &mut line);
        } else if (c == 'r' || c == 'b')
            && matches!(b.get(i + 1), Some('"') | Some('#'))
            && (c == 'r' || b.get(i + 1) == Some(&'"'))
        {
            // r"..", r#".."#, b"..".
            if c == 'b' {
                i += 1;
                skip_string(&mut i, &mut line);
                continue;
            }
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&'"') {
                out.push((Tok::Ident("r".into()), line));
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == '\n' {
                    line += 1;
                }
                if b[j] == '"' && (0..hashes).all(|k| b.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            i = j;
        } else if c == 'b'
            && b.get(i + 1) == Some(&'r')
            && matches!(b.get(i + 2), Some('"') | Some('#'))
        {
            i += 1; // br"..": the raw string branch takes it from the `r`.
        } else if c == '\'' {
            if b.get(i + 1) == Some(&'\\') {
                i += 2;
                while i < b.len() && b[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if b.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
                while i < b.len() && (b[i].is_alphanumeric() || b[i] == '_') {
                    i += 1;
                }
            }
        } else if c.is_alphabetic() || c == '_' {
            let s = i;
            while i < b.len() && (b[i].is_alphanumeric() || b[i] == '_') {
                i += 1;
            }
            let word: String = b[s..i].iter().collect();
            let word = word.strip_prefix("r#").map(String::from).unwrap_or(word);
            out.push((Tok::Ident(word), line));
        } else if c.is_ascii_digit() {
            while i < b.len() && (b[i].is_alphanumeric() || b[i] == '_' || b[i] == '.') {
                i += 1;
            }
        } else if c == ':' && b.get(i + 1) == Some(&':') {
            out.push((Tok::PathSep, line));
            i += 2;
        } else {
            out.push((Tok::Punct(c), line));
            i += 1;
        }
    }
    out
}

/// Drops the item after each `#[cfg(test)]`, and records the test-only child modules.
fn strip_test_items(
    toks: Vec<(Tok, usize)>,
    test_children: &mut BTreeSet<String>,
) -> Vec<(Tok, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    let is = |i: usize, t: &Tok| toks.get(i).map(|x| &x.0) == Some(t);
    let ident = |s: &str| Tok::Ident(s.to_string());
    while i < toks.len() {
        let cfg_test = is(i, &Tok::Punct('#'))
            && is(i + 1, &Tok::Punct('['))
            && is(i + 2, &ident("cfg"))
            && is(i + 3, &Tok::Punct('('))
            && is(i + 4, &ident("test"))
            && is(i + 5, &Tok::Punct(')'))
            && is(i + 6, &Tok::Punct(']'));
        if !cfg_test {
            out.push(toks[i].clone());
            i += 1;
            continue;
        }
        i += 7;
        // The item runs to its `;` or to the end of its first balanced `{ }`.
        let start = i;
        let mut depth = 0;
        while i < toks.len() {
            match toks[i].0 {
                Tok::Punct('{') => depth += 1,
                Tok::Punct('}') => {
                    depth -= 1;
                    if depth == 0 {
                        i += 1;
                        break;
                    }
                }
                Tok::Punct(';') if depth == 0 => {
                    i += 1;
                    break;
                }
                _ => {}
            }
            i += 1;
        }
        let item = &toks[start..i];
        if let Some(p) = item.iter().position(|t| t.0 == ident("mod")) {
            if let (Some((Tok::Ident(name), _)), Some((Tok::Punct(';'), _))) =
                (item.get(p + 1), item.get(p + 2))
            {
                test_children.insert(name.clone());
            }
        }
    }
    out
}

/// Reads one file of module `module`; `root` when it is `lib.rs` or a `mod.rs`, whose `pub use`
/// lines are a facade rather than dependencies.
fn parse(text: &str, module: Vec<String>, root: bool) -> File {
    let mut test_children = BTreeSet::new();
    let toks = strip_test_items(lex(text), &mut test_children);
    let mut f = File {
        module,
        defines: BTreeSet::new(),
        binds: Vec::new(),
        paths: Vec::new(),
        test_children,
    };
    let kw = [
        "struct",
        "enum",
        "fn",
        "trait",
        "type",
        "const",
        "static",
        "mod",
        "union",
        "macro_rules",
    ];
    // What the file defines and which child modules it declares, before any path is read.
    let mut children = BTreeSet::new();
    let mut uses: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, (t, _)) in toks.iter().enumerate() {
        let Tok::Ident(w) = t else { continue };
        *uses.entry(w.as_str()).or_default() += 1;
        if kw.contains(&w.as_str()) {
            let j = if w == "macro_rules" { i + 2 } else { i + 1 };
            if let Some((Tok::Ident(name), _)) = toks.get(j) {
                f.defines.insert(name.clone());
                if w == "mod" {
                    children.insert(name.clone());
                }
            }
        }
    }
    let mut i = 0;
    while i < toks.len() {
        let (t, line) = &toks[i];
        let starts_path = i == 0 || toks[i - 1].0 != Tok::PathSep;
        match t {
            Tok::Ident(w) if w == "use" => {
                let public = is_pub_before(&toks, i);
                let mut j = i + 1;
                let mut leaves = Vec::new();
                use_tree(&toks, &mut j, Vec::new(), &mut leaves);
                for (rel, bound) in leaves {
                    if let Some(abs) = absolute(&f.module, &rel, &f.defines) {
                        // A root's `pub use` is its facade, not a dependency of its own, unless
                        // the file itself uses the name it binds.
                        let used_here = bound
                            .as_deref()
                            .is_some_and(|b| uses.get(b).copied().unwrap_or(0) > 1);
                        let reexport = root && public && !used_here;
                        if let Some(b) = bound {
                            f.binds.push((b, abs.clone()));
                        }
                        f.paths.push((abs, *line, reexport));
                    }
                }
                i = j;
            }
            Tok::Ident(w)
                if starts_path
                    && children.contains(w)
                    && toks.get(i + 1).map(|t| &t.0) == Some(&Tok::PathSep) =>
            {
                // A path through a child module named without `self::`.
                let mut rel = vec!["self".to_string()];
                let mut j = i;
                while let Some((Tok::Ident(seg), _)) = toks.get(j) {
                    rel.push(seg.clone());
                    if toks.get(j + 1).map(|t| &t.0) != Some(&Tok::PathSep) {
                        break;
                    }
                    j += 2;
                }
                if let Some(abs) = absolute(&f.module, &rel, &f.defines) {
                    f.paths.push((abs, *line, false));
                }
                i = j + 1;
            }
            Tok::Ident(w)
                if matches!(w.as_str(), "crate" | "super" | "self")
                    && toks.get(i + 1).map(|t| &t.0) == Some(&Tok::PathSep) =>
            {
                let mut rel = Vec::new();
                let mut j = i;
                while let Some((Tok::Ident(seg), _)) = toks.get(j) {
                    rel.push(seg.clone());
                    if toks.get(j + 1).map(|t| &t.0) != Some(&Tok::PathSep) {
                        break;
                    }
                    j += 2;
                }
                if let Some(abs) = absolute(&f.module, &rel, &f.defines) {
                    f.paths.push((abs, *line, false));
                }
                i = j + 1;
            }
            _ => i += 1,
        }
    }
    f
}

fn is_pub_before(toks: &[(Tok, usize)], i: usize) -> bool {
    // `pub use`, `pub(crate) use`, `pub(super) use`, `pub(in path) use`.
    let mut j = i;
    if j >= 1 && toks[j - 1].0 == Tok::Punct(')') {
        while j > 0 && toks[j - 1].0 != Tok::Punct('(') {
            j -= 1;
        }
        j = j.saturating_sub(1);
    }
    j >= 1 && toks[j - 1].0 == Tok::Ident("pub".into())
}

/// Parses one use tree from `toks[*j]`, collecting (relative path, bound name) for each leaf.
fn use_tree(
    toks: &[(Tok, usize)],
    j: &mut usize,
    prefix: Vec<String>,
    leaves: &mut Vec<(Vec<String>, Option<String>)>,
) {
    let mut path = prefix;
    loop {
        match toks.get(*j).map(|t| &t.0) {
            Some(Tok::PathSep) => *j += 1,
            Some(Tok::Ident(seg)) if seg == "as" => {
                *j += 1;
                let alias = match toks.get(*j).map(|t| &t.0) {
                    Some(Tok::Ident(a)) => Some(a.clone()),
                    _ => None,
                };
                *j += 1;
                leaves.push((path.clone(), alias.filter(|a| a != "_")));
                return;
            }
            Some(Tok::Ident(seg)) => {
                path.push(seg.clone());
                *j += 1;
            }
            Some(Tok::Punct('*')) => {
                *j += 1;
                leaves.push((path.clone(), None));
                return;
            }
            Some(Tok::Punct('{')) => {
                *j += 1;
                loop {
                    match toks.get(*j).map(|t| &t.0) {
                        Some(Tok::Punct('}')) => {
                            *j += 1;
                            break;
                        }
                        Some(Tok::Punct(',')) => *j += 1,
                        None => return,
                        _ => use_tree(toks, j, path.clone(), leaves),
                    }
                }
                return;
            }
            _ => {
                // `,`, `}` or `;` ends this leaf.
                let bound = match path.last().map(String::as_str) {
                    Some("self") => {
                        path.pop();
                        path.last().cloned()
                    }
                    other => other.map(String::from),
                };
                if matches!(toks.get(*j).map(|t| &t.0), Some(Tok::Punct(';'))) {
                    *j += 1;
                }
                leaves.push((path, bound));
                return;
            }
        }
    }
}

/// A path as written in `module` made absolute within the crate, or `None` when it leaves the
/// crate (another crate, `std`, a prelude name).
fn absolute(module: &[String], rel: &[String], defines: &BTreeSet<String>) -> Option<Vec<String>> {
    let mut abs: Vec<String> = module.to_vec();
    let mut k = 0;
    match rel.first().map(String::as_str) {
        Some("crate") => {
            abs.clear();
            k = 1;
        }
        Some("self") => k = 1,
        Some("super") => {
            while rel.get(k).map(String::as_str) == Some("super") {
                abs.pop()?;
                k += 1;
            }
        }
        // A child module of this one, named without `self::` (2018 paths).
        Some(first) if defines.contains(first) => {}
        _ => return None,
    }
    abs.extend(rel[k..].iter().cloned());
    Some(abs)
}

fn tarjan(adj: &[Vec<usize>]) -> Vec<Vec<usize>> {
    struct St<'a> {
        adj: &'a [Vec<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn visit(s: &mut St<'_>, v: usize) {
        s.index[v] = Some(s.next);
        s.low[v] = s.next;
        s.next += 1;
        s.stack.push(v);
        s.on[v] = true;
        for &w in &s.adj[v] {
            match s.index[w] {
                None => {
                    visit(s, w);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(iw) if s.on[w] => s.low[v] = s.low[v].min(iw),
                _ => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut c = Vec::new();
            loop {
                let w = s.stack.pop().unwrap();
                s.on[w] = false;
                c.push(w);
                if w == v {
                    break;
                }
            }
            s.out.push(c);
        }
    }
    let n = adj.len();
    let mut s = St {
        adj,
        index: vec![None; n],
        low: vec![0; n],
        on: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if s.index[v].is_none() {
            visit(&mut s, v);
        }
    }
    s.out
}

/// What `found` has that `known` does not (each line after `what`), and the lines of `known`
/// that are not so any more: empty when the two agree.
fn against_known(found: &BTreeSet<String>, known: &[&str], what: &str) -> String {
    let known: BTreeSet<String> = known.iter().map(|s| s.to_string()).collect();
    let mut report = String::new();
    for line in found.difference(&known) {
        report.push_str(&format!("{what}: {line}\n"));
    }
    for line in known.difference(found) {
        report.push_str(&format!("not so any more (shorten or delete it): {line}\n"));
    }
    report
}

/// A source tree for a scanner test, under the temporary directory, removed when dropped (a
/// failing test's too).
struct Scratch(PathBuf);

impl Scratch {
    /// A new tree named `name` (and the process id), with the directory `sub` made in it.
    fn new(name: &str, sub: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join(sub)).unwrap();
        Scratch(dir)
    }

    fn dir(&self) -> &Path {
        &self.0
    }

    fn write(&self, rel: &str, text: &str) {
        fs::write(self.0.join(rel), text).unwrap();
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}
