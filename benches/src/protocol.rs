//! The line protocol between the driver and a worker (one line per message).
//!
//! ```text
//! worker → driver   ready load_ms=<f64>          after loading, compiling and warming up
//! driver → worker   run <k> <w>                  run w times untimed (caches warm again after
//!                                                the other engines' turns), then k times timed
//! worker → driver   times <ms> <ms> ...          one wall-clock time per timed run
//! driver → worker   quit
//! worker → driver   peak_rss_kb=<u64>            VmHWM of the worker process, then it exits
//! worker → driver   error <message>              instead of any reply; the worker then exits
//! ```

use anyhow::{bail, Context, Result};

/// A command from the driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    Run { timed: usize, untimed: usize },
    Quit,
}

impl Command {
    pub fn to_line(self) -> String {
        match self {
            Command::Run { timed, untimed } => format!("run {timed} {untimed}"),
            Command::Quit => "quit".to_string(),
        }
    }

    pub fn parse(line: &str) -> Result<Command> {
        let words: Vec<&str> = line.split_whitespace().collect();
        let count = |w: &str| w.parse::<usize>().with_context(|| format!("bad run count in {line:?}"));
        match words[..] {
            ["run", timed, untimed] => Ok(Command::Run { timed: count(timed)?, untimed: count(untimed)? }),
            ["quit"] => Ok(Command::Quit),
            _ => bail!("unknown command {line:?}"),
        }
    }
}

/// A reply from a worker.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    Ready { load_ms: f64 },
    Times(Vec<f64>),
    PeakRss { kb: u64 },
    Error(String),
}

impl Reply {
    pub fn to_line(&self) -> String {
        match self {
            Reply::Ready { load_ms } => format!("ready load_ms={load_ms}"),
            Reply::Times(ts) => std::iter::once("times".to_string()).chain(ts.iter().map(f64::to_string)).collect::<Vec<_>>().join(" "),
            Reply::PeakRss { kb } => format!("peak_rss_kb={kb}"),
            // One line: the driver reads line by line.
            Reply::Error(msg) => format!("error {}", msg.replace('\n', " | ")),
        }
    }

    pub fn parse(line: &str) -> Result<Reply> {
        let line = line.trim_end();
        if let Some(v) = line.strip_prefix("ready load_ms=") {
            return Ok(Reply::Ready { load_ms: v.parse().with_context(|| format!("bad reply {line:?}"))? });
        }
        if let Some(v) = line.strip_prefix("peak_rss_kb=") {
            return Ok(Reply::PeakRss { kb: v.parse().with_context(|| format!("bad reply {line:?}"))? });
        }
        if let Some(msg) = line.strip_prefix("error ") {
            return Ok(Reply::Error(msg.to_string()));
        }
        if let Some(rest) = line.strip_prefix("times") {
            return Ok(Reply::Times(rest.split_whitespace().map(|t| t.parse::<f64>().with_context(|| format!("bad time {t:?}"))).collect::<Result<_>>()?));
        }
        bail!("unexpected reply {line:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip() {
        for c in [Command::Run { timed: 7, untimed: 1 }, Command::Quit] {
            assert_eq!(Command::parse(&c.to_line()).unwrap(), c);
        }
        for r in [Reply::Ready { load_ms: 12.5 }, Reply::Times(vec![0.25, 1.0]), Reply::Times(vec![]), Reply::PeakRss { kb: 4096 }, Reply::Error("no".into())] {
            assert_eq!(Reply::parse(&r.to_line()).unwrap(), r);
        }
    }
}
