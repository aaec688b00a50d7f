//! Why a guard on the raw arguments: a URL given where a command still takes only local paths
//! must be refused by name (exit 2) before anything runs — never become a directory named
//! `s3:` or a "No such file or directory". Each argument that takes a path and holds
//! `SCHEME://` is parsed as a [`Location`]: an unknown scheme is refused naming it; a known
//! one is refused where that command does not read or write object storage yet.

use anyhow::Result;

use super::location::{scheme_of, Location};

/// Flags whose value is a path (any command).
const PATH_FLAGS: &[&str] = &[
    "--out",
    "--input",
    "--shards",
    "--prompts",
    "--distilled",
    "--lineage",
    "--data",
    "--teacher",
    "--manifest",
    "--tokenizer",
    "--against",
    "--drop",
    "--from",
    "--to",
    "--shipped",
    "--local-dir",
    "--cache",
    "--log",
    "--root",
];

/// Commands whose positional arguments are paths.
const PATH_POSITIONALS: &[&str] = &["merge", "inspect", "run"];

/// Where a bucket URL is accepted: (command, flag or `<path>` for the positional).
const OBJECT_OK: &[(&str, &str)] = &[
    ("pack", "--out"),
    ("pack", "--input"),
    ("merge", "<path>"),
    ("inspect", "<path>"),
    ("audit", "--shards"),
    ("audit", "--prompts"),
    ("audit", "--distilled"),
    ("audit", "--lineage"),
    ("distill", "--prompts"),
    ("distill", "--out"),
    ("mcq", "--out"),
    ("decontam", "--drop"),
    ("decontam", "--shards"),
    ("decontam", "--prompts"),
    ("lineage", "--data"),
    ("lineage", "--lineage"),
];

/// Check a command line (program name first): its command is the first argument that is one
/// of `commands` (the subcommand names).
pub fn check(argv: &[String], commands: &[&str]) -> Result<()> {
    match argv.iter().skip(1).find(|a| commands.contains(&a.as_str())) {
        Some(c) => check_argv(c, argv),
        None => Ok(()),
    }
}

/// Check `argv` (program name first) of `command`.
pub fn check_argv(command: &str, argv: &[String]) -> Result<()> {
    let start = argv
        .iter()
        .position(|a| a == command)
        .map_or(argv.len(), |i| i + 1);
    for i in start..argv.len() {
        let tok = &argv[i];
        let (flag, value) = match tok.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, v),
            _ if tok.starts_with('-') => continue,
            _ => match argv
                .get(i - 1)
                .filter(|p| i > start && PATH_FLAGS.contains(&p.as_str()))
            {
                Some(p) => (p.as_str(), tok.as_str()),
                None => ("<path>", tok.as_str()),
            },
        };
        let is_path =
            PATH_FLAGS.contains(&flag) || (flag == "<path>" && PATH_POSITIONALS.contains(&command));
        if !is_path || scheme_of(value).is_none() {
            continue;
        }
        let shown = if flag == "<path>" {
            "a path argument"
        } else {
            flag
        };
        let loc = Location::parse(value, shown)?;
        let ok = OBJECT_OK.contains(&(command, flag));
        match loc {
            Location::Local(_) if !ok => {
                return Err(crate::error::usage(format!(
                    "{shown} of `{command}`: give a plain local path, not a file:// URL"
                )))
            }
            Location::Object(_) | Location::Hub(_) if !ok => {
                return Err(crate::error::usage(format!(
                    "{shown} of `{command}` does not take object-store or hf:// URLs yet (accepted: {}); got {}",
                    OBJECT_OK
                        .iter()
                        .map(|(c, f)| format!("{c} {f}"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    value.split(['?', '#']).next().unwrap_or_default()
                )))
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Vec<String> {
        s.split(' ').map(String::from).collect()
    }

    #[test]
    fn urls_are_refused_where_not_taken() {
        let ok = |c: &str, s: &str| check_argv(c, &argv(s)).is_ok();
        assert!(ok("pack", "dlm-data pack --input a.jsonl --out s3://bkt/x"));
        assert!(ok("pack", "dlm-data pack --input a.jsonl --out=s3://bkt/x"));
        assert!(ok("pack", "dlm-data pack --text see-http://x --out o"));
        assert!(ok(
            "pack",
            "dlm-data pack --input s3://bkt/d/ --input=gs://bkt/*.parquet --out o"
        ));
        assert!(ok(
            "pack",
            "dlm-data pack --input hf://datasets/o/n@abc/x.jsonl --out o"
        ));
        let e = check_argv("pack", &argv("dlm-data pack --input ftp://h/x --out o")).unwrap_err();
        assert!(e.to_string().contains("ftp://"), "{e}");
        let e = check_argv("mcq", &argv("dlm-data mcq --input s3://bkt/x --out o")).unwrap_err();
        assert!(e.to_string().contains("--input of `mcq`"), "{e}");
        let e = check_argv("pack", &argv("dlm-data --quiet pack --out ftp://h/x")).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(e.to_string().contains("ftp://"), "{e}");
        let e = check_argv("distill", &argv("dlm-data distill --teacher s3://bkt/t")).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(e.to_string().contains("--teacher of `distill`"), "{e}");
        for (c, line) in [
            ("mcq", "dlm-data mcq --manifest m.toml --out s3://bkt/x"),
            (
                "decontam",
                "dlm-data decontam --against a.toml --shards d --drop gs://bkt/x",
            ),
            (
                "distill",
                "dlm-data distill --prompts p --out s3://bkt/d/distilled.json",
            ),
            (
                "lineage",
                "dlm-data lineage add --data s3://bkt/x --from a --to b",
            ),
        ] {
            assert!(ok(c, line), "{line}");
        }
        let e = check_argv(
            "decontam",
            &argv("dlm-data decontam --against s3://bkt/a.toml"),
        )
        .unwrap_err();
        assert!(e.to_string().contains("--against of `decontam`"), "{e}");
        assert!(ok("inspect", "dlm-data inspect gs://bkt/x"));
        let e = check_argv("run", &argv("dlm-data run s3://bkt/p.toml")).unwrap_err();
        assert!(e.to_string().contains("a path argument of `run`"), "{e}");
        assert!(!ok("pack", "dlm-data pack --tokenizer file:///tmp/x"));
        assert!(ok("merge", "dlm-data merge --json s3://bkt/x"));
        assert!(!ok("merge", "dlm-data merge --json ftp://bkt/x"));
    }
}
