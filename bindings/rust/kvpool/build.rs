// SPDX-License-Identifier: MIT
//! Finds libkvpool with no crates: $KVPOOL_LIB_DIR (a directory holding
//! libkvpool.so, such as an uninstalled build's lib/.libs) or else the
//! output of `pkg-config --libs kvpool`, parsed here.
use std::env;
use std::process::Command;

fn link_dir(dir: &str) {
    println!("cargo:rustc-link-search=native={}", dir);
    // Tests, examples and benches then run without LD_LIBRARY_PATH.
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir);
}

fn main() {
    println!("cargo:rerun-if-env-changed=KVPOOL_LIB_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG");
    println!("cargo:rerun-if-changed=build.rs");
    if let Ok(dir) = env::var("KVPOOL_LIB_DIR") {
        link_dir(&dir);
        println!("cargo:rustc-link-lib=dylib=kvpool");
        return;
    }
    let pc = env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".to_string());
    let out = match Command::new(&pc).args(["--libs", "kvpool"]).output() {
        Ok(o) if o.status.success() => o,
        Ok(o) => panic!(
            "kvpool: `{} --libs kvpool` failed: {} (install libkvpool, set \
             PKG_CONFIG_PATH, or set KVPOOL_LIB_DIR to the directory of \
             libkvpool.so)",
            pc,
            String::from_utf8_lossy(&o.stderr).trim()
        ),
        Err(e) => panic!(
            "kvpool: cannot run {}: {} (or set KVPOOL_LIB_DIR to the \
             directory of libkvpool.so)",
            pc, e
        ),
    };
    let libs = String::from_utf8(out.stdout).expect("pkg-config output is not UTF-8");
    let mut found = false;
    for flag in libs.split_whitespace() {
        if let Some(dir) = flag.strip_prefix("-L") {
            link_dir(dir);
        } else if let Some(name) = flag.strip_prefix("-l") {
            println!("cargo:rustc-link-lib={}", name);
            found |= name == "kvpool";
        }
    }
    if !found {
        panic!(
            "kvpool: `{} --libs kvpool` names no -lkvpool: {}",
            pc,
            libs.trim()
        );
    }
}
