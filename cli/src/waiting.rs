//! What a waiting `lease run` says: who holds the lease and that it waits, once and then at
//! each change of holder, as a plain `lease: …` line on stderr.
//!
//! The library says it as a `tracing` event ([`lease::WAITING_TARGET`], at info); this layer
//! prints it when stderr is a terminal (someone watches) or with `-v`, and never otherwise: a
//! cron job's log gets nothing extra.

use std::io::Write;

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

/// Prints the library's waiting events as `lease: waiting for …`.
pub struct Waiting;

/// The event's message, formatted.
struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl<S: Subscriber> Layer<S> for Waiting {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let mut message = Message(String::new());
        event.record(&mut message);
        // A closed stderr must not stop `lease run`.
        let _ = writeln!(std::io::stderr(), "lease: {}", message.0);
    }
}
