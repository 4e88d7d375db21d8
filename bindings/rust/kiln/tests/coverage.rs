//! Every function of the C API (each `KILN_API` declaration in the headers
//! of include/kiln) is called by the safe crate, or listed below as
//! deliberately unbound with the reason. A new C function fails this test
//! until it is bound or listed; a listed one that gets bound fails it too, so
//! the list stays true.
use std::collections::BTreeSet;
use std::path::Path;

/// C functions the safe crate does not call, and why.
const UNBOUND: &[(&str, &str)] = &[
    ("kiln_tensor_to_dlpack", "DLPack (kiln/dlpack.h) exchanges memory with another framework's tensor type; \
      the bindings may depend on no crate that has one, and kiln-sys binds kiln.h alone"),
    ("kiln_tensor_from_dlpack", "as kiln_tensor_to_dlpack"),
    ("kiln_communicator_retain", "shared ownership is Arc over the safe type; a second owner of the native object would let two &mut owners write shared storage"),
    ("kiln_context_retain", "shared ownership is Arc over the safe type; a second owner of the native object would let two &mut owners write shared storage"),
    ("kiln_dataset_retain", "shared ownership is Arc over the safe type; a second owner of the native object would let two &mut owners write shared storage"),
    ("kiln_history_retain", "shared ownership is Arc over the safe type; a second owner of the native object would let two &mut owners write shared storage"),
    ("kiln_model_retain", "shared ownership is Arc over the safe type; a second owner of the native object would let two &mut owners write shared storage"),
    ("kiln_tensor_retain", "shared ownership is Arc over the safe type; a second owner of the native object would let two &mut owners write shared storage"),
    ("kiln_trainer_retain", "shared ownership is Arc over the safe type; a second owner of the native object would let two &mut owners write shared storage"),
];

fn declared_functions(header: &str) -> BTreeSet<String> {
    // Declarations span lines: join them, then split at each KILN_API.
    let text: String = header.lines().filter(|l| !l.trim_start().starts_with('#')).collect::<Vec<_>>().join(" ");
    text.split("KILN_API")
        .skip(1)
        .filter_map(|decl| {
            let before_paren = &decl[..decl.find('(')?];
            let name = before_paren.rsplit(|c: char| !(c.is_alphanumeric() || c == '_')).next()?;
            name.starts_with("kiln_").then(|| name.to_owned())
        })
        .collect()
}

fn called_functions(src: &Path) -> BTreeSet<String> {
    let mut called = BTreeSet::new();
    for entry in std::fs::read_dir(src).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        for piece in text.split("sys::").skip(1) {
            let name: String = piece.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if name.starts_with("kiln_") && piece[name.len()..].trim_start().starts_with('(') {
                called.insert(name);
            }
        }
    }
    called
}

#[test]
fn every_c_function_is_bound_or_listed() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let include = manifest.join("../../../include/kiln");
    let mut declared = BTreeSet::new();
    for entry in std::fs::read_dir(&include).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().map_or(false, |e| e == "h") {
            declared.extend(declared_functions(&std::fs::read_to_string(&path).unwrap()));
        }
    }
    assert!(declared.len() > 100 && declared.contains("kiln_tensor_matmul"), "parsed {} declarations", declared.len());
    let called = called_functions(&manifest.join("src"));
    let unbound: BTreeSet<String> = UNBOUND.iter().map(|(name, _)| (*name).to_owned()).collect();

    let missing: Vec<&String> = declared.iter().filter(|f| !called.contains(*f) && !unbound.contains(*f)).collect();
    assert!(missing.is_empty(), "C functions neither bound nor listed in UNBOUND (tests/coverage.rs): {missing:?}");
    let bound_anyway: Vec<&String> = unbound.iter().filter(|f| called.contains(*f)).collect();
    assert!(bound_anyway.is_empty(), "listed as unbound but called: {bound_anyway:?}");
    let unknown: Vec<&String> = unbound.iter().chain(called.iter()).filter(|f| !declared.contains(*f)).collect();
    assert!(unknown.is_empty(), "not in include/kiln: {unknown:?}");
    eprintln!("{} C functions: {} bound, {} deliberately unbound", declared.len(), called.len(), unbound.len());
    let readme = std::fs::read_to_string(manifest.join("README.md")).unwrap();
    let words = readme.split_whitespace().collect::<Vec<_>>().join(" ");
    let said = format!("but {} functions deliberately unbound", unbound.len());
    assert!(words.contains(&said), "README.md should say {said:?} (the count of UNBOUND)");
}
