//! Inside `src/hub/`, the small modules form no import circle: `names` (repo kinds, digest and
//! path checks, how server strings are shown) imports no sibling; `cache` and `retry` import
//! `names` and never `client`; `client` never imports `cache`. (Top-level circles are
//! tests/architecture.rs's; this guards the one issue #30 removed: cache ↔ client ↔ retry.)

use std::path::PathBuf;

/// The code of a file before its test module, every line with its `//` comment cut off.
fn code(file: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("src/hub")
        .join(file);
    let text = std::fs::read_to_string(&p).unwrap();
    let main = text.split("#[cfg(test)]").next().unwrap().to_string();
    main.lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn hub_leaf_modules_import_no_circle() {
    let names = code("names.rs");
    assert!(
        !names.contains("super::") && !names.contains("crate::hub"),
        "names.rs must import no sibling"
    );
    for f in ["cache.rs", "retry.rs"] {
        let c = code(f);
        assert!(!c.contains("client"), "{f} imports client");
        assert!(
            c.contains("names::"),
            "{f} should take its helpers from names"
        );
    }
    assert!(
        !code("client.rs").contains("cache::"),
        "client.rs imports cache"
    );
}
