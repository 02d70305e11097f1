//! Output piped into a reader that stops early (`vargr … | head`) is not an error: end
//! quietly, as other command-line tools do. Rust's `println!` panics on a closed pipe,
//! and SIGPIPE stays ignored because these programs also write to sockets and children.
//! Shared by `vargr` and `vargr-bench`.

/// Installs a panic hook that exits with status 0 on a closed standard output.
pub fn end_quietly() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let p = info.payload();
        let msg = p
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| p.downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.starts_with("failed printing to stdout") && msg.contains("Broken pipe") {
            std::process::exit(0);
        }
        default(info)
    }));
}
