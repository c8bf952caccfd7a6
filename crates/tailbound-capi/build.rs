//! Generates `tailbound.h` with cbindgen into `$OUT_DIR` and `target/include/`.

use std::path::PathBuf;

fn main() {
    let crate_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("set by cargo"));
    println!("cargo:rerun-if-changed=src/lib.rs");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml"))
        .expect("cbindgen.toml is valid");
    let header = out_dir.join("tailbound.h");
    cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config)
        .generate()
        .expect("generating tailbound.h")
        .write_to_file(&header);
    // target/<profile>/build/<pkg>/out → target/include
    if let Some(target) = out_dir.ancestors().nth(4) {
        let include = target.join("include");
        if std::fs::create_dir_all(&include).is_ok() {
            let _ = std::fs::copy(&header, include.join("tailbound.h"));
        }
    }
}
