//! A reader that stops reading (`kiln render … | head -1`) ends kiln
//! quietly. Rust ignores SIGPIPE, so a write to a closed pipe fails with
//! EPIPE and `print!` panics on it; the panic hook turns exactly that panic
//! into a clean exit, as if every line had been read. Every other panic is
//! reported as before.

/// Installs the hook (once, before any command runs).
pub fn exit_quietly() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if is_broken_pipe(message) {
            std::process::exit(0);
        }
        report(info);
    }));
}

/// Whether `message` is the panic of `print!`/`eprint!` on a closed pipe.
fn is_broken_pipe(message: &str) -> bool {
    let epipe = std::io::Error::from_raw_os_error(nix::libc::EPIPE).to_string();
    message.starts_with("failed printing to std") && message.ends_with(&epipe)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_write_to_a_closed_pipe_is_quiet() {
        let epipe = std::io::Error::from_raw_os_error(nix::libc::EPIPE);
        assert!(is_broken_pipe(&format!(
            "failed printing to stdout: {epipe}"
        )));
        assert!(is_broken_pipe(&format!(
            "failed printing to stderr: {epipe}"
        )));
        let full = std::io::Error::from_raw_os_error(nix::libc::ENOSPC);
        assert!(!is_broken_pipe(&format!(
            "failed printing to stdout: {full}"
        )));
        assert!(!is_broken_pipe("index out of bounds"));
    }
}
