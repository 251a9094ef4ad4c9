//! Building the SDK client: the configuration chain (profiles, SSO, IMDS, environment),
//! endpoints, timeouts and retries, loaded on first use.

use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::config::{
    Region, RequestChecksumCalculation, ResponseChecksumValidation, StalledStreamProtectionConfig,
};

use super::{env_nonempty, Loaded, S3Store};
use crate::error::{Error, Result};

impl S3Store {
    pub(super) async fn load(&self) -> Result<Loaded> {
        let s = &self.inner.settings;
        let bucket = &self.inner.bucket;
        let env_endpoint = env_nonempty("AWS_ENDPOINT_URL_S3")
            .map(|e| (e, "AWS_ENDPOINT_URL_S3"))
            .or_else(|| env_nonempty("AWS_ENDPOINT_URL").map(|e| (e, "AWS_ENDPOINT_URL")));
        let custom_endpoint = s.endpoint.is_some() || env_endpoint.is_some();

        let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest());
        if let Some(profile) = &s.profile {
            loader = loader.profile_name(profile);
        }
        if let Some(region) = &s.region {
            loader = loader.region(Region::new(region.clone()));
        } else if custom_endpoint {
            // S3-compatible servers mostly ignore the region, but SigV4 needs one. Do not ask
            // IMDS for it: a machine talking to MinIO is rarely an EC2 instance, and the
            // lookup would only add a timeout to the first request.
            use aws_config::meta::region::RegionProviderChain;
            let mut profile = aws_config::profile::ProfileFileRegionProvider::builder();
            if let Some(name) = &s.profile {
                profile = profile.profile_name(name);
            }
            loader = loader.region(
                RegionProviderChain::first_try(
                    aws_config::environment::EnvironmentVariableRegionProvider::new(),
                )
                .or_else(profile.build())
                .or_else(Region::from_static("us-east-1")),
            );
        }
        let sdk_config = loader.load().await;
        let Some(region) = sdk_config.region().cloned() else {
            return Err(Error::store(format!(
                "s3://{bucket}: no AWS region: set AWS_REGION, a region in the AWS profile, or \
                 add ?region=REGION to the URL"
            )));
        };

        // Retries and timeouts. Every store call made by the protocol already runs under the
        // lease's own request timeout (`Timing::request_timeout`, half the renew interval), and
        // the client retries itself: it backs off within the renew interval, reads back before
        // resending a write, and stops at the holder's deadline. SDK retries would only sleep
        // on their own schedule (1 s-scale backoff) inside that timeout, and a retried write
        // that had landed comes back as 412 and costs a read-back anyway. So the SDK makes one
        // attempt per call, and its timeouts are only a backstop for direct users of the
        // store: `timeout` (default 30 s) for a whole call, `connect_timeout` (5 s) to connect.
        // A hung request can never carry a holder past its deadline: the holder's deadline is
        // fixed before the request is sent and the protocol cancels the request at its own
        // timeout.
        let timeouts = TimeoutConfig::builder()
            .connect_timeout(s.connect_timeout)
            .operation_timeout(s.timeout)
            .build();
        let mut config = aws_sdk_s3::config::Builder::from(&sdk_config)
            .region(region.clone())
            .retry_config(RetryConfig::disabled())
            .timeout_config(timeouts)
            // The protocol's own timeouts bound every call; the SDK's stalled-stream check
            // (a throughput floor after a 5 s grace) adds nothing for records of a few hundred
            // bytes and misfires on slow test proxies.
            .stalled_stream_protection(StalledStreamProtectionConfig::disabled())
            // Checksums only where S3 requires them: the default CRC32 headers and trailers
            // are not understood by every S3-compatible server, and a lease record is a few
            // hundred bytes sent over TLS.
            .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
            .response_checksum_validation(ResponseChecksumValidation::WhenRequired)
            .force_path_style(s.path_style.unwrap_or(custom_endpoint));
        if let Some(endpoint) = &s.endpoint {
            config = config.endpoint_url(endpoint);
        }
        let endpoint = match (&s.endpoint, &env_endpoint) {
            (Some(e), _) => e.clone(),
            (None, Some((e, var))) => format!("{e} (from {var})"),
            (None, None) => format!("AWS S3 in {region}"),
        };
        let credentials_hint = if env_nonempty("AWS_ACCESS_KEY_ID").is_some() {
            "the credentials in AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY".to_string()
        } else if let Some(p) = s.profile.clone().or_else(|| env_nonempty("AWS_PROFILE")) {
            format!("the credentials of AWS profile {p:?}")
        } else {
            "the credentials found by the AWS credential chain (environment, profile, SSO, web \
             identity, instance role)"
                .to_string()
        };
        Ok(Loaded {
            client: aws_sdk_s3::Client::from_conf(config.build()),
            endpoint,
            credentials_hint,
        })
    }
}
