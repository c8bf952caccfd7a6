//! What every subcommand returns, apart from the command line that dispatches to them.

/// What a subcommand returns: any error is printed as `tailbound: error: ...` and exits with 1,
/// except [`ExitStatus`], which exits with its code and prints nothing more.
pub type CliResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// An exit status a subcommand chose, having printed what it has to say (`fs fsck` uses 1, 2, 8).
#[derive(Debug)]
pub struct ExitStatus(pub u8);

impl std::fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit status {}", self.0)
    }
}

impl std::error::Error for ExitStatus {}
