//! Gives the kiln crate's own tests (integration and doc tests) the run path
//! kiln-sys found when `KILN_RPATH=1`: Cargo passes link arguments to a
//! package's own targets only, so each package asks for it.
fn main() {
    println!("cargo:rerun-if-env-changed=KILN_RPATH");
    if let Ok(dir) = std::env::var("DEP_KILN_RPATH") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
