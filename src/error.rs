//! Exit-code policy in one place: 0 success, 2 refused by policy or bad usage, 75 the output is
//! held by another live dlm-data process ([`Busy`]), 128+N stopped by signal N
//! ([`Interrupted`]), 1 anything else.
//!
//! Library code returns `anyhow::Error`; errors that must map to exit code 2 carry a
//! [`Refused`] or [`Usage`] value somewhere in their chain, and `main` inspects the chain once.

use std::fmt;

/// An error type that is its message, shown as `PREFIX: message`.
macro_rules! message_error {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone)]
        pub struct $name(pub String);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, ": {}"), self.0)
            }
        }
        impl std::error::Error for $name {}
    };
}

message_error!(
    /// A request refused by policy (an evaluation split, an eval-reference file used as
    /// training input, ...). Exit code 2.
    Refused,
    "refused"
);

message_error!(
    /// Bad command-line usage or an argument that cannot be honoured. Exit code 2.
    Usage,
    "usage"
);

/// Build an `anyhow::Error` that exits with code 2 because policy refused the request.
pub fn refused(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Refused(msg.into()))
}

/// Build an `anyhow::Error` that exits with code 2 because of bad usage.
pub fn usage(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Usage(msg.into()))
}

/// Exit code of [`Busy`]: `EX_TEMPFAIL` from sysexits.h ("try again later"), what cron
/// wrappers and Slurm requeue scripts test for.
pub const EXIT_BUSY: i32 = 75;

message_error!(
    /// Another live dlm-data process holds the output (see [`crate::lock`]). Exit code
    /// [`EXIT_BUSY`].
    Busy,
    "busy"
);

/// The run stopped at a safe point because signal `.0` arrived (see [`crate::signals`]).
/// Exit code 128 + the signal number, as a shell reports a process killed by it.
#[derive(Debug, Clone, Copy)]
pub struct Interrupted(pub i32);

impl fmt::Display for Interrupted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "stopped by {}: committed work is kept and temp files removed; rerun the same command to continue",
            signal_name(self.0)
        )
    }
}
impl std::error::Error for Interrupted {}

/// `SIGTERM`, `SIGINT`, `SIGHUP`, else `signal N`.
pub fn signal_name(sig: i32) -> String {
    match sig {
        15 => "SIGTERM".into(),
        2 => "SIGINT".into(),
        1 => "SIGHUP".into(),
        n => format!("signal {n}"),
    }
}

/// The process exit code for an error: 128+N when stopped by signal N, 75 when the output is
/// busy, 2 when any cause is [`Refused`] or [`Usage`], else 1.
pub fn exit_code(err: &anyhow::Error) -> i32 {
    for cause in err.chain() {
        if let Some(i) = cause.downcast_ref::<Interrupted>() {
            return 128 + i.0;
        }
        if cause.downcast_ref::<Busy>().is_some() {
            return EXIT_BUSY;
        }
    }
    for cause in err.chain() {
        if cause.downcast_ref::<Refused>().is_some() || cause.downcast_ref::<Usage>().is_some() {
            return 2;
        }
    }
    1
}
