//! The async runtime and core count the commands run with, and the error
//! type they return.

/// What a command fails with: the CLI prints it with its whole cause chain.
pub type CliError = Box<dyn std::error::Error + Send + Sync>;

/// A command's exit status, or why it failed.
pub type CliResult = Result<u8, CliError>;

/// A multi-threaded runtime for a command.
pub fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}").into())
}

/// CPU cores (2 when unknown).
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(2, usize::from)
}

/// Prints `error` and every cause beneath it, each once; an error in the
/// configuration's keys or values ends with the manual's page on them.
pub fn print_error(error: &(dyn std::error::Error + 'static)) {
    eprintln!("error: {error}");
    let mut cause = error.source();
    while let Some(e) = cause {
        eprintln!("  caused by: {e}");
        cause = e.source();
    }
    use tessera_server::ConfigError;
    if let Some(ConfigError::Yaml(_) | ConfigError::Schema { .. } | ConfigError::Invalid(_)) =
        error.downcast_ref::<ConfigError>()
    {
        eprintln!("  docs: reference (every key, its type and default)");
    }
}
