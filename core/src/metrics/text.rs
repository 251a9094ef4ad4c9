//! The Prometheus text format of a [`Snapshot`], written by the `prometheus-client` crate's
//! OpenMetrics encoder (number formatting, histogram lines, `# EOF`). Label values are escaped
//! here: the crate (0.24) writes them as given (prometheus/client_rust#151, open), and one
//! lease name with a `"` would make Prometheus refuse the whole scrape.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use super::{snapshot, Kind, Snapshot, Value};

/// The `Content-Type` of [`encode_text`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Every metric of this process in the OpenMetrics text format, which Prometheus scrapes.
pub fn encode_text() -> String {
    encode_snapshot(snapshot())
}

pub(crate) fn encode_snapshot(snapshot: Snapshot) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Encoded(snapshot)));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry)
        .expect("writing to a String cannot fail");
    out
}

#[derive(Debug)]
struct Encoded(Snapshot);

impl Collector for Encoded {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for f in &self.0.families {
            let (name, metric_type) = match f.kind {
                // The encoder appends `_total` to a counter's samples.
                Kind::Counter => (f.name.trim_end_matches("_total"), MetricType::Counter),
                Kind::Gauge => (f.name, MetricType::Gauge),
                Kind::Histogram => (f.name, MetricType::Histogram),
            };
            let mut family = encoder.encode_descriptor(name, f.help, None, metric_type)?;
            for s in &f.samples {
                let escaped: Vec<(&str, String)> = s
                    .labels
                    .iter()
                    .map(|(k, v)| (*k, escape_label_value(v)))
                    .collect();
                let labels: Vec<(&str, &str)> =
                    escaped.iter().map(|(k, v)| (*k, v.as_str())).collect();
                let mut m = family.encode_family(&labels)?;
                match (&s.value, f.kind) {
                    (Value::Number(v), Kind::Counter) => {
                        m.encode_counter::<NoLabelSet, _, f64>(v, None)?
                    }
                    (Value::Number(v), _) => m.encode_gauge(v)?,
                    (
                        Value::Histogram {
                            buckets,
                            sum,
                            count,
                        },
                        _,
                    ) => {
                        // The encoder wants per-bucket counts and adds them up itself, and
                        // adds the +Inf bucket from the count.
                        let mut last = 0;
                        let mut per_bucket: Vec<(f64, u64)> = Vec::with_capacity(buckets.len() + 1);
                        for (le, cumulative) in buckets {
                            per_bucket.push((*le, cumulative - last));
                            last = *cumulative;
                        }
                        // The encoder writes f64::MAX as +Inf.
                        per_bucket.push((f64::MAX, count - last));
                        m.encode_histogram::<NoLabelSet>(*sum, *count, &per_bucket, None)?
                    }
                }
            }
        }
        Ok(())
    }
}

/// A label value as the text formats want it: `\\`, `\"` and `\n` for a backslash, a double quote
/// and a line feed (OpenMetrics, "Escaping"; Prometheus's text format says the same).
fn escape_label_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}
