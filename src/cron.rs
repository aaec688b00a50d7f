//! The cron output contract: with `--json` every command prints exactly one line of JSON on
//! stdout, whatever way it ends — its own result on success, else one failure line naming the
//! command, the exit code, the error (redacted) and, for a signal, its name; for `run`, the
//! failing step and its command line too. A cron wrapper or Slurm epilogue parses stdout and
//! never finds it empty.
//!
//! Commands print their result through [`json_line`] (which records that the line went out);
//! `main` calls [`failure_line`] on the way out, which prints only when no line did.

use std::sync::{Mutex, OnceLock};

/// Whether the one line went out; held while a line is printed, so a watchdog's failure line
/// and a command's own line never both appear.
static PRINTED: Mutex<bool> = Mutex::new(false);
static MODE: OnceLock<Mode> = OnceLock::new();

/// What the command line asked for, read from the raw arguments (so a line is printed even
/// when they do not parse).
#[derive(Debug, Clone, Default)]
pub struct Mode {
    pub json: bool,
    /// The subcommand (`pack`, `run`, …), when one is named.
    pub command: Option<String>,
}

/// `--json` anywhere before `--`, and the first argument naming a subcommand of `names`.
pub fn mode_of(argv: &[String], names: &[&str]) -> Mode {
    let args: Vec<&String> = argv
        .iter()
        .skip(1)
        .take_while(|a| a.as_str() != "--")
        .collect();
    Mode {
        json: args.iter().any(|a| a.as_str() == "--json"),
        command: args
            .iter()
            .find(|a| names.contains(&a.as_str()))
            .map(|a| a.to_string()),
    }
}

/// The process's stdout as it was at start: a failure line goes there even while `run` has
/// pointed fd 1 at stderr for a step's output.
static STDOUT: OnceLock<i32> = OnceLock::new();

/// Fix the mode for this process (the CLI, once, before parsing).
pub fn init(mode: Mode) {
    if mode.json {
        // SAFETY: duplicating the process's own descriptor 1.
        let fd = unsafe { libc::dup(1) };
        if fd >= 0 {
            let _ = STDOUT.set(fd);
        }
    }
    let _ = MODE.set(mode);
}

fn mode() -> Mode {
    MODE.get().cloned().unwrap_or_default()
}

fn printed() -> std::sync::MutexGuard<'static, bool> {
    PRINTED.lock().unwrap_or_else(|p| p.into_inner())
}

/// Print the command's one result line on stdout and remember that it went out (not when a
/// failure line already did: a signal's watchdog).
pub fn json_line(line: impl std::fmt::Display) {
    use std::io::Write;
    let mut p = printed();
    if !*p {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}").and_then(|_| out.flush());
        *p = true;
    }
}

/// A result line printed somewhere it does not count (a `run` step's stdout goes to stderr):
/// the run still owes its own line.
pub fn forget_line() {
    *printed() = false;
}

/// The step of `dlm-data run` that failed, carried as context on its error so the failure
/// line names it. Displays as the context line the run always wrote.
#[derive(Debug, Clone)]
pub struct StepFailed {
    pub step: String,
    /// The step's command line as it would be typed.
    pub command_line: String,
    pub pipeline: String,
}

impl std::fmt::Display for StepFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "run: step {} (`{}`; pipeline file {})",
            self.step, self.command_line, self.pipeline
        )
    }
}

/// The failure line for `e` ending the process with `code` (`None` without `--json`).
pub fn failure_json(e: &anyhow::Error, code: i32) -> Option<serde_json::Value> {
    let m = mode();
    if !m.json {
        return None;
    }
    let text = crate::secret::redact(&format!("{e:#}")).into_owned();
    let mut v = serde_json::json!({
        "command": m.command,
        "ok": false,
        "exit": code,
        "error": text,
        "signal": crate::signals::received().map(crate::signals::name),
    });
    // anyhow finds a context value at any depth of the chain.
    if let Some(s) = e.downcast_ref::<StepFailed>() {
        v["step"] = s.step.clone().into();
        // The step ran in this process: its exit code is the run's.
        v["step_exit"] = code.into();
        v["step_command"] = crate::secret::redact(&s.command_line).into_owned().into();
        v["pipeline"] = s.pipeline.clone().into();
    }
    Some(v)
}

/// Print [`failure_json`]'s line, if one is owed (`--json`, and no line went out yet), on
/// the process's original stdout.
pub fn failure_line(e: &anyhow::Error, code: i32) {
    use std::io::Write;
    let Some(v) = failure_json(e, code) else {
        return;
    };
    let mut p = printed();
    if *p {
        return;
    }
    let _ = std::io::stdout().flush();
    let line = format!("{v}\n");
    match STDOUT.get() {
        Some(&fd) => {
            // SAFETY: `fd` is the dup made in `init`, never closed; ManuallyDrop keeps it open.
            let mut f = std::mem::ManuallyDrop::new(unsafe {
                <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd)
            });
            let _ = f.write_all(line.as_bytes()).and_then(|_| f.flush());
        }
        None => {
            let _ = std::io::stdout().lock().write_all(line.as_bytes());
        }
    }
    *p = true;
}

/// The line for a command line that did not parse (exit 2), if `--json` was asked for.
pub fn usage_line(message: &str) {
    failure_line(&anyhow::anyhow!("{}", message.trim()), 2);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_reads_json_and_the_command() {
        let argv: Vec<String> = [
            "dlm-data", "--quiet", "run", "p.toml", "--json", "--", "--x",
        ]
        .map(String::from)
        .to_vec();
        let m = mode_of(&argv, &["run", "pack"]);
        assert!(m.json);
        assert_eq!(m.command.as_deref(), Some("run"));
        let argv: Vec<String> = ["dlm-data", "pack", "--", "--json"]
            .map(String::from)
            .to_vec();
        assert!(!mode_of(&argv, &["pack"]).json);
    }

    #[test]
    fn a_failed_step_is_named_in_the_line() {
        let _ = MODE.set(Mode {
            json: true,
            command: Some("run".into()),
        });
        let e = anyhow::anyhow!("exit 2: bad").context(StepFailed {
            step: "pack".into(),
            command_line: "dlm-data pack --out x".into(),
            pipeline: "p.toml".into(),
        });
        let v = failure_json(&e, 2).unwrap();
        assert_eq!(v["step"], "pack");
        assert_eq!(v["step_command"], "dlm-data pack --out x");
        assert_eq!(v["exit"], 2);
        assert_eq!(v["step_exit"], 2);
        assert_eq!(v["ok"], false);
        assert!(v["error"].as_str().unwrap().contains("bad"));
    }
}
