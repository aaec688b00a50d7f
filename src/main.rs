//! The `dlm-data` binary: parse the command line, run one stage, map errors to exit codes.
//! Every error and panic message leaves through [`dlm_data::secret::redact`].

fn main() {
    dlm_data::secret::install();
    let code = match dlm_data::cli::main() {
        Ok(()) => 0,
        Err(e) => {
            let text = format!("error: {e:#}");
            eprintln!("{}", dlm_data::secret::redact(&text));
            // Stopped by a signal: 128+N whatever error the stop surfaced as.
            match dlm_data::signals::received() {
                Some(sig) => 128 + sig,
                None => dlm_data::error::exit_code(&e),
            }
        }
    };
    std::process::exit(code);
}
