//! The `dlm-data` binary: parse the command line, run one stage, map errors to exit codes.

fn main() {
    let code = match dlm_data::cli::main() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {e:#}");
            dlm_data::error::exit_code(&e)
        }
    };
    std::process::exit(code);
}
