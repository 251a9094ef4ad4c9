//! Exit codes, and the one place errors become a line on stderr.

use std::process::ExitCode;

use lease::{Error, ErrorKind};

/// Bad arguments or input (sysexits EX_USAGE).
pub const USAGE: u8 = 64;
/// The store failed: permissions, missing bucket or directory, or it did not answer within
/// the wait or the unavailable timeout (EX_UNAVAILABLE).
pub const STORE: u8 = 69;
/// A bug (EX_SOFTWARE).
pub const INTERNAL: u8 = 70;
/// Held by someone else, with --no-wait or after --wait ran out (EX_TEMPFAIL). Change with -E.
pub const HELD: u8 = 75;
/// The lease was lost (or renewals were too late) while the command ran. Change with
/// --lost-exit-code.
pub const LOST: u8 = 76;
/// The command could not be executed / was not found (as in shells).
pub const NOT_EXECUTABLE: u8 = 126;
pub const NOT_FOUND: u8 = 127;
/// Interrupted while waiting for the lease (128 + SIGINT).
pub const INTERRUPTED: u8 = 130;

pub const HELP: &str = "\
Exit codes of `lease run`:
  CMD's own status   CMD ran while the lease was held (128+N if a signal N killed it)
  75                 the lease is held by someone else (-n, or --wait ran out), or its queue is
                     full; see -E
  76                 the lease was lost, or renewals were too late, while CMD ran: CMD
                     was killed before the lease's deadline; see --lost-exit-code
  64                 bad arguments, lease name or URL
  69                 the store failed (permissions, missing bucket or directory), did not
                     answer within --wait, -n or --unavailable-timeout, holds a record of a
                     newer version of lease, or the release could not be written
  126, 127           CMD could not be executed, or was not found
  130                interrupted while waiting for the lease

CMD's environment: LEASE_URL, LEASE_EPOCH (the fencing token), LEASE_TOKEN (URL#EPOCH@HOLDER,
then ;shared and ;path=P or ;range=A..B for a shared or scoped grant), LEASE_HOLDER_ID. Durations take a unit: 500ms, 30s, 1.5s, 5m, 1h, 1m30s.";

/// How the program ends: an exit code and, maybe, a message for stderr.
#[derive(Debug)]
pub struct Exit {
    pub code: u8,
    pub message: Option<String>,
}

impl Exit {
    pub fn ok() -> Exit {
        Exit {
            code: 0,
            message: None,
        }
    }

    pub fn code(code: u8) -> Exit {
        Exit {
            code,
            message: None,
        }
    }

    pub fn fail(code: u8, message: impl Into<String>) -> Exit {
        Exit {
            code,
            message: Some(message.into()),
        }
    }

    pub fn report(self) -> ExitCode {
        if let Some(m) = self.message {
            eprintln!("lease: {m}");
        }
        ExitCode::from(self.code)
    }
}

/// The exit code for an error of this kind (for `run`, Held and Timeout use -E instead).
pub fn code_for(kind: ErrorKind) -> u8 {
    match kind {
        ErrorKind::Invalid => USAGE,
        ErrorKind::Held | ErrorKind::Timeout | ErrorKind::QueueFull => HELD,
        ErrorKind::Lost | ErrorKind::Fenced => LOST,
        ErrorKind::Cancelled => INTERRUPTED,
        ErrorKind::Store | ErrorKind::Unavailable | ErrorKind::Corrupt | ErrorKind::Unsupported => {
            STORE
        }
        _ => INTERNAL,
    }
}

/// One line: what happened, to which lease, and what to do when there is something to do.
pub fn from_error(e: &Error) -> Exit {
    let hint = match e.kind() {
        ErrorKind::Store if e.to_string().contains("does not exist") => "",
        ErrorKind::Unavailable => "; the store may be overloaded or unreachable, try again",
        ErrorKind::Internal => "; this is a bug in lease, please report it",
        _ => "",
    };
    Exit::fail(code_for(e.kind()), format!("{e}{hint}"))
}

impl From<Error> for Exit {
    fn from(e: Error) -> Exit {
        from_error(&e)
    }
}
