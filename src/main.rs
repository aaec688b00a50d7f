//! The `dlm-data` binary: parse the command line, run one stage, map errors to exit codes.
//! Every error and panic message leaves through [`dlm_data::secret::redact`]; under `--json`
//! every way out prints one line on stdout ([`dlm_data::cron`]).

fn main() {
    dlm_data::secret::install();
    let result = std::panic::catch_unwind(dlm_data::cli::main).unwrap_or_else(|_| {
        // The panic hook already wrote the (redacted) message; 101 is Rust's panic exit.
        let e = anyhow::anyhow!("internal error (panic); see the message above");
        dlm_data::cron::failure_line(&e, 101);
        std::process::exit(101);
    });
    let code = match result {
        Ok(()) => 0,
        Err(e) => {
            let text = format!("error: {e:#}");
            eprintln!("{}", dlm_data::secret::redact(&text));
            // Stopped by a signal: 128+N whatever error the stop surfaced as.
            let code = match dlm_data::signals::received() {
                Some(sig) => 128 + sig,
                None => dlm_data::error::exit_code(&e),
            };
            dlm_data::cron::failure_line(&e, code);
            code
        }
    };
    std::process::exit(code);
}
