//! One status line on stderr, rewritten in place, for long commands; nothing at all when stderr
//! is not a terminal (CI logs and pipes stay clean).

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// The status line.
pub struct Progress {
    on: bool,
    last: Option<Instant>,
    width: usize,
}

impl Progress {
    /// A status line when stderr is a terminal, else a no-op.
    pub fn on_terminal() -> Progress {
        Progress { on: std::io::stderr().is_terminal(), last: None, width: 0 }
    }

    /// Replaces the line with `text` (at most ten times a second, cut to 100 characters).
    pub fn show(&mut self, text: &str) {
        if !self.on || self.last.is_some_and(|t| t.elapsed() < Duration::from_millis(100)) {
            return;
        }
        self.last = Some(Instant::now());
        let text: String = text.chars().take(100).collect();
        let pad = self.width.saturating_sub(text.chars().count());
        self.width = text.chars().count();
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r{text}{:pad$}", "");
        let _ = err.flush();
    }

    /// Erases the line.
    pub fn clear(&mut self) {
        if self.on && self.width > 0 {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r{:w$}\r", "", w = self.width);
            let _ = err.flush();
            self.width = 0;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.clear();
    }
}

/// Shows each pipeline stage as it starts, while `f` runs, when stderr is a terminal.
pub fn stages<R>(f: impl FnOnce() -> R) -> R {
    fn show(stage: &str) {
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r{:<40}", format!("{stage}…"));
        let _ = err.flush();
    }
    if !std::io::stderr().is_terminal() {
        return f();
    }
    kiln::trace::on_stage(Some(show));
    let r = f();
    kiln::trace::on_stage(None);
    let _ = write!(std::io::stderr().lock(), "\r{:40}\r", "");
    r
}
