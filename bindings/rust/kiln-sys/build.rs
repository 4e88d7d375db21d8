//! Finds libkiln and tells cargo how to link it, with no crates: the
//! `pkg-config` program is run directly.
//!
//! - `KILN_LIB_DIR=<dir>`: link the libkiln.so in that directory (a build
//!   tree or an install's lib/), skipping pkg-config.
//! - otherwise `pkg-config kiln` (an install's `<prefix>/lib/pkgconfig`, or a
//!   build tree, on `PKG_CONFIG_PATH`), which must report at least the
//!   version of the header the committed bindings were generated from.
//! - `KILN_RPATH=1`: also record the library's directory as the run path of
//!   this package's tests, and hand it to dependents as `DEP_KILN_RPATH` (the
//!   `kiln` crate does the same for its own tests). Cargo passes no link
//!   argument from a dependency to a program, so a program that wants it adds
//!   `-C link-arg=-Wl,-rpath,<dir>` itself (see the crate docs).
//!
//! Any failure stops the build with a message saying what to set.
use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    for var in ["KILN_LIB_DIR", "KILN_RPATH", "PKG_CONFIG_PATH", "PKG_CONFIG_LIBDIR", "PKG_CONFIG_SYSROOT_DIR", "PKG_CONFIG"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    println!("cargo:rerun-if-changed=src/bindings.rs");
    let (major, minor, abi) = header_versions();
    let lib_dir = match env::var_os("KILN_LIB_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => from_lib_dir(PathBuf::from(dir), abi),
        None => from_pkg_config(&format!("{major}.{minor}.0")),
    };
    println!("cargo:rustc-link-lib=dylib=kiln");
    println!("cargo:lib_dir={}", lib_dir.display());
    if env::var("KILN_RPATH").as_deref() == Ok("1") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib_dir.display());
        println!("cargo:rpath={}", lib_dir.display());
    }
}

/// KILN_VERSION_MAJOR, _MINOR and KILN_ABI_VERSION of the header the
/// committed bindings came from, read from the bindings themselves so that
/// regenerating them moves the requirement too.
fn header_versions() -> (u32, u32, u32) {
    let text = std::fs::read_to_string("src/bindings.rs").expect("kiln-sys: cannot read src/bindings.rs");
    let constant = |name: &str| -> u32 {
        let prefix = format!("pub const {name}: u32 = ");
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|v| v.trim_end_matches(';').parse().ok())
            .unwrap_or_else(|| panic!("kiln-sys: {name} not found in src/bindings.rs"))
    };
    (constant("KILN_VERSION_MAJOR"), constant("KILN_VERSION_MINOR"), constant("KILN_ABI_VERSION"))
}

fn fail(message: &str) -> ! {
    eprintln!("\nkiln-sys: {message}\n");
    panic!("kiln-sys: {message}");
}

/// KILN_LIB_DIR: the directory must hold libkiln.so and the SONAME of the ABI
/// these bindings were generated for (libkiln.so.<ABI>).
fn from_lib_dir(dir: PathBuf, abi: u32) -> PathBuf {
    let dir = dir.canonicalize().unwrap_or_else(|e| {
        fail(&format!("KILN_LIB_DIR={} cannot be used: {e}. Set it to the directory holding libkiln.so \
                       (a kiln build tree, or <prefix>/lib of an installed kiln), or unset it to use pkg-config.",
                      dir.display()))
    });
    if !dir.join("libkiln.so").exists() {
        fail(&format!("KILN_LIB_DIR={} holds no libkiln.so. Build kiln (cmake --build <build> --target kiln) \
                       and point KILN_LIB_DIR at that build directory or <prefix>/lib of an install.", dir.display()));
    }
    let soname = format!("libkiln.so.{abi}");
    if !dir.join(&soname).exists() {
        fail(&format!("KILN_LIB_DIR={} holds libkiln.so but not {soname}: that kiln has another ABI than the \
                       header these bindings were generated from (KILN_ABI_VERSION {abi}).", dir.display()));
    }
    println!("cargo:rustc-link-search=native={}", dir.display());
    dir
}

fn pkg_config(args: &[&str]) -> Result<String, String> {
    let program = env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".into());
    let out = Command::new(&program).args(args).output().map_err(|e| {
        format!("cannot run {program} ({e}). Install pkg-config (Debian: apt-get install pkg-config), \
                 or set KILN_LIB_DIR to the directory holding libkiln.so.")
    })?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
    }
}

fn from_pkg_config(min_version: &str) -> PathBuf {
    let search = env::var("PKG_CONFIG_PATH").unwrap_or_default();
    if let Err(e) = pkg_config(&["--exists", "--print-errors", "kiln"]) {
        fail(&format!("pkg-config cannot find kiln ({e}). PKG_CONFIG_PATH is \"{search}\". Either add the \
                       directory holding kiln.pc to PKG_CONFIG_PATH (<prefix>/lib/pkgconfig of an installed kiln, \
                       or a kiln build directory), or set KILN_LIB_DIR to the directory holding libkiln.so."));
    }
    let version = pkg_config(&["--modversion", "kiln"]).unwrap_or_default();
    if pkg_config(&["--atleast-version", min_version, "kiln"]).is_err() {
        let pc = pkg_config(&["--variable=pcfiledir", "kiln"]).unwrap_or_default();
        fail(&format!("kiln {version} (from {pc}/kiln.pc) is older than {min_version}, the version of the header \
                       these bindings were generated from. Put a newer kiln's kiln.pc first on PKG_CONFIG_PATH \
                       (now \"{search}\"), or set KILN_LIB_DIR to a newer build."));
    }
    let libs = pkg_config(&["--libs", "kiln"]).unwrap_or_else(|e| fail(&format!("pkg-config --libs kiln: {e}")));
    let mut dir = None;
    for flag in libs.split_whitespace() {
        if let Some(d) = flag.strip_prefix("-L") {
            println!("cargo:rustc-link-search=native={d}");
            dir.get_or_insert_with(|| PathBuf::from(d));
        } else if let Some(lib) = flag.strip_prefix("-l").filter(|l| *l != "kiln") {
            println!("cargo:rustc-link-lib={lib}");
        }
    }
    let dir = dir.unwrap_or_else(|| PathBuf::from(pkg_config(&["--variable=libdir", "kiln"]).unwrap_or_default()));
    dir.canonicalize().unwrap_or(dir)
}
