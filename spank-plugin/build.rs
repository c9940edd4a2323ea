//! Reads the Slurm version the plugin is built for from the installed `<slurm/slurm_version.h>`.
//!
//! The SPANK loader refuses a plugin whose `plugin_version` differs in major.minor from the running
//! Slurm (`src/common/plugin.c: _verify_syms`), so the number must come from the target's headers,
//! never from a constant here or from slurm-spank's pre-generated (23.11) bindings.
//!
//! Search order: `$SLURM_INCLUDE_DIR`, every `-I` in `$BINDGEN_EXTRA_CLANG_ARGS`, `/usr/include`,
//! `/usr/local/include`. Each of them must contain `slurm/slurm_version.h`.

// Cargo reads its directives from a build script's stdout.
#![allow(clippy::print_stdout)]

use std::path::{Path, PathBuf};

fn candidates() -> Vec<PathBuf> {
    let given = std::env::var("SLURM_INCLUDE_DIR").ok();
    let clang = std::env::var("BINDGEN_EXTRA_CLANG_ARGS").unwrap_or_default();
    let from_clang = clang
        .split_whitespace()
        .filter_map(|a| a.strip_prefix("-I"));
    let dirs = given.as_deref().into_iter().chain(from_clang);
    dirs.chain(["/usr/include", "/usr/local/include"])
        .map(PathBuf::from)
        .collect()
}

/// `#define SLURM_VERSION_NUMBER 0x160508` → 0x160508.
fn parse_version(header: &str) -> Option<u32> {
    header.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        match (words.next(), words.next(), words.next()) {
            (Some("#define"), Some("SLURM_VERSION_NUMBER"), Some(value)) => {
                let hex = value
                    .strip_prefix("0x")
                    .or_else(|| value.strip_prefix("0X"))?;
                u32::from_str_radix(hex, 16).ok()
            }
            _ => None,
        }
    })
}

fn main() {
    println!("cargo:rerun-if-env-changed=SLURM_INCLUDE_DIR");
    println!("cargo:rerun-if-env-changed=BINDGEN_EXTRA_CLANG_ARGS");
    let mut tried = Vec::new();
    let mut found = None;
    for dir in candidates() {
        let header = dir.join("slurm").join("slurm_version.h");
        println!("cargo:rerun-if-changed={}", header.display());
        if let Ok(text) = std::fs::read_to_string(&header) {
            match parse_version(&text) {
                Some(version) => {
                    found = Some((header, version));
                    break;
                }
                None => panic!(
                    "nccl-check: {}: no `#define SLURM_VERSION_NUMBER 0x...` line",
                    header.display()
                ),
            }
        }
        tried.push(header);
    }
    let Some((header, version)) = found else {
        panic!(
            "nccl-check: slurm/slurm_version.h not found (tried {}); install the Slurm headers \
             (Debian: libslurm-dev, RHEL: slurm-devel) or set SLURM_INCLUDE_DIR",
            tried
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    };
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let code = format!(
        "/// `SLURM_VERSION_NUMBER` of the headers this plugin was built against ({}).\n\
         pub const SLURM_VERSION_NUMBER: u32 = {:#08x};\n",
        header.display(),
        version
    );
    std::fs::write(Path::new(&out).join("slurm_version.rs"), code)
        .expect("write OUT_DIR/slurm_version.rs");
    println!(
        "cargo:rustc-env=NCCL_CHECK_SLURM_VERSION={}.{}.{}",
        (version >> 16) & 0xff,
        (version >> 8) & 0xff,
        version & 0xff
    );
}
