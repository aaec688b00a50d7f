//! Exit-code policy in one place: 0 success, 2 refused by policy or bad usage, 1 anything else.
//!
//! Library code returns `anyhow::Error`; errors that must map to exit code 2 carry a
//! [`Refused`] or [`Usage`] value somewhere in their chain, and `main` inspects the chain once.

use std::fmt;

/// A request refused by policy (an evaluation split, an eval-reference file used as training
/// input, ...). Exit code 2.
#[derive(Debug, Clone)]
pub struct Refused(pub String);

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "refused: {}", self.0)
    }
}
impl std::error::Error for Refused {}

/// Bad command-line usage or an argument that cannot be honoured. Exit code 2.
#[derive(Debug, Clone)]
pub struct Usage(pub String);

impl fmt::Display for Usage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "usage: {}", self.0)
    }
}
impl std::error::Error for Usage {}

/// Build an `anyhow::Error` that exits with code 2 because policy refused the request.
pub fn refused(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Refused(msg.into()))
}

/// Build an `anyhow::Error` that exits with code 2 because of bad usage.
pub fn usage(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Usage(msg.into()))
}

/// The process exit code for an error: 2 when any cause is [`Refused`] or [`Usage`], else 1.
pub fn exit_code(err: &anyhow::Error) -> i32 {
    for cause in err.chain() {
        if cause.downcast_ref::<Refused>().is_some() || cause.downcast_ref::<Usage>().is_some() {
            return 2;
        }
    }
    1
}
