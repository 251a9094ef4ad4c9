//! The price list behind `lease_store_cost_dollars_total`: US dollars per request, by store and
//! request kind. List prices of the standard (hot) storage class in a US region, read on
//! 2026-11-25:
//!
//! - **S3** (aws.amazon.com/s3/pricing, S3 Standard, us-east-1): PUT, COPY, POST, LIST $0.005 per
//!   1,000 requests; GET and all other requests $0.0004 per 1,000; DELETE free.
//! - **GCS** (cloud.google.com/storage/pricing, Standard storage; its pricing examples use the
//!   same figures): Class A (object inserts) $0.005 per 1,000 operations; Class B (object gets)
//!   $0.0004 per 1,000; `objects.delete` free.
//! - **Azure Blob Storage** (learn.microsoft.com, "Estimate the cost of using Azure Blob
//!   Storage", sample prices for the Hot tier; azure.microsoft.com/pricing/details/storage/blobs
//!   has each region's): write transactions $0.055 per 10,000; read transactions $0.0044 per
//!   10,000; Delete Blob free.
//! - **file** and **memory**: free.
//!
//! Every request the store answered counts (304s, 404s and 412s are billed like any other
//! request); one that got no answer (a timeout, a refused connection) does not. Prices differ
//! by region, storage class and contract: the metric is an estimate for comparing
//! configurations (ttl, poll interval), not a bill.

/// Dollars per request of `kind` (`get`, `create`, `update`, `delete`) on `store` (`s3`, `gs`,
/// `az`, `file`, `memory`, `other`).
pub fn price(store: &str, kind: &str) -> f64 {
    let (read, write) = match store {
        "s3" => (0.0004 / 1000.0, 0.005 / 1000.0),
        "gs" => (0.0004 / 1000.0, 0.005 / 1000.0),
        "az" => (0.0044 / 10000.0, 0.055 / 10000.0),
        _ => return 0.0,
    };
    match kind {
        "get" => read,
        "create" | "update" => write,
        _ => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::price;

    #[test]
    fn list_prices() {
        // A million renewals (updates) and a million polls (gets) on S3: $5 + $0.40.
        let s3 = 1e6 * price("s3", "update") + 1e6 * price("s3", "get");
        assert!((s3 - 5.4).abs() < 1e-9, "{s3}");
        let az = 1e6 * price("az", "create") + 1e6 * price("az", "get");
        assert!((az - (5.5 + 0.44)).abs() < 1e-9, "{az}");
        assert_eq!(price("s3", "delete"), 0.0);
        assert_eq!(price("file", "update"), 0.0);
        assert_eq!(price("gs", "get"), price("s3", "get"));
    }
}
