//! Finds libkiln: KILN_LIB_DIR (a build or install directory) if set, else
//! `pkg-config kiln`. No dependencies: pkg-config is run as a program.
use std::env;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=KILN_LIB_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    if let Ok(dir) = env::var("KILN_LIB_DIR") {
        println!("cargo:rustc-link-search=native={dir}");
    } else {
        match Command::new("pkg-config").args(["--libs-only-L", "kiln"]).output() {
            Ok(out) if out.status.success() => {
                for flag in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                    if let Some(dir) = flag.strip_prefix("-L") {
                        println!("cargo:rustc-link-search=native={dir}");
                    }
                }
            }
            // Not fatal: libkiln may be on the linker's default path.
            _ => println!("cargo:warning=kiln not found by pkg-config; set KILN_LIB_DIR"),
        }
    }
    println!("cargo:rustc-link-lib=dylib=kiln");
}
