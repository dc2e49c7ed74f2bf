// SPDX-License-Identifier: MIT
//! Finds libkvpool with no crates: $KVPOOL_LIB_DIR (a directory holding
//! libkvpool.so, such as an uninstalled build's lib/.libs) or else the
//! output of `pkg-config --libs kvpool`, parsed here.
//!
//! The shared library's directory goes into the RUNPATH of this crate's
//! own tests and examples only: cargo passes no link argument on to the
//! crates that depend on this one.  A dependent program finds
//! libkvpool.so through the loader's path (an install in /usr/local/lib,
//! LD_LIBRARY_PATH, its own rpath), or is built with the `static`
//! feature, which links libkvpool.a and the libraries it needs
//! (`pkg-config --static --libs kvpool`), so nothing is looked up at run
//! time.
use std::env;
use std::process::Command;

fn link_dir(dir: &str, rpath: bool) {
    println!("cargo:rustc-link-search=native={}", dir);
    if rpath {
        // Tests, examples and benches then run without LD_LIBRARY_PATH.
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir);
    }
}

/// `pkg-config args...`'s output, or a panic that says what to do.
fn pkg_config(args: &[&str]) -> String {
    let pc = env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".to_string());
    let out = match Command::new(&pc).args(args).output() {
        Ok(o) if o.status.success() => o,
        Ok(o) => panic!(
            "kvpool: `{} {}` failed: {} (install libkvpool, set \
             PKG_CONFIG_PATH, or set KVPOOL_LIB_DIR to the directory of \
             libkvpool.so)",
            pc,
            args.join(" "),
            String::from_utf8_lossy(&o.stderr).trim()
        ),
        Err(e) => panic!(
            "kvpool: cannot run {}: {} (or set KVPOOL_LIB_DIR to the \
             directory of libkvpool.so)",
            pc, e
        ),
    };
    String::from_utf8(out.stdout).expect("pkg-config output is not UTF-8")
}

/// Emits the -L and -l flags of libs; libkvpool itself statically when
/// `static_kvpool`.  True if -lkvpool was among them.
fn link_flags(libs: &str, static_kvpool: bool) -> bool {
    let mut found = false;
    for flag in libs.split_whitespace() {
        if let Some(dir) = flag.strip_prefix("-L") {
            link_dir(dir, !static_kvpool);
        } else if let Some(name) = flag.strip_prefix("-l") {
            if name == "kvpool" && static_kvpool {
                println!("cargo:rustc-link-lib=static=kvpool");
            } else {
                println!("cargo:rustc-link-lib={}", name);
            }
            found |= name == "kvpool";
        }
    }
    found
}

fn main() {
    println!("cargo:rerun-if-env-changed=KVPOOL_LIB_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG");
    println!("cargo:rerun-if-changed=build.rs");
    let static_kvpool = env::var_os("CARGO_FEATURE_STATIC").is_some();
    if let Ok(dir) = env::var("KVPOOL_LIB_DIR") {
        link_dir(&dir, !static_kvpool);
        if static_kvpool {
            // libkvpool.a beside the .so; what it needs from pkg-config.
            println!("cargo:rustc-link-lib=static=kvpool");
            link_flags(
                &pkg_config(&["--libs", "liburcu-cds", "liburcu-memb", "nettle", "libxxhash"]),
                true,
            );
            println!("cargo:rustc-link-lib=pthread");
        } else {
            println!("cargo:rustc-link-lib=dylib=kvpool");
        }
        return;
    }
    let libs = if static_kvpool {
        pkg_config(&["--static", "--libs", "kvpool"])
    } else {
        pkg_config(&["--libs", "kvpool"])
    };
    if !link_flags(&libs, static_kvpool) {
        panic!("kvpool: pkg-config names no -lkvpool: {}", libs.trim());
    }
}
