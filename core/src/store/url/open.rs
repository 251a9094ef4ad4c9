//! Opening the store a URL names: the one place that knows every backend (object_store's
//! `parse_url` plays this part there). No backend imports it, so none depends on another
//! through it.

use std::sync::Arc;

use super::StoreUrl;
#[cfg(not(all(feature = "s3", feature = "gcs", feature = "azure")))]
use crate::error::Error;
use crate::error::Result;
use crate::per_process::PerProcess;
use crate::store::file::FileStore;
use crate::store::memory::MemoryStore;
use crate::store::DynStore;

/// The stores this process opened, one per URL.
static STORES: PerProcess<StoreUrl, DynStore> = PerProcess::new();

impl StoreUrl {
    /// Open the store, or return the one this process already opened for the same URL (the
    /// store beneath [`Client::for_store`](crate::Client::for_store)'s, which counts its
    /// requests through the metrics' wrapper). Opening does not contact the store.
    pub fn open(&self) -> Result<DynStore> {
        STORES.get_or_open(self, || self.open_new())
    }

    /// Open a new store for this URL, outside what this process shares (see
    /// [`StoreUrl::open`]): for tests that want a store of their own.
    pub fn open_new(&self) -> Result<DynStore> {
        Ok(match self {
            StoreUrl::Memory { namespace } => Arc::new(MemoryStore::named(namespace)),
            StoreUrl::File { root } => Arc::new(FileStore::open(root.clone())?),
            StoreUrl::DefaultFile => Arc::new(FileStore::open_default()?),
            StoreUrl::S3 { bucket, options } => open_s3(bucket, options)?,
            StoreUrl::Gcs { bucket, options } => open_gcs(bucket, options)?,
            StoreUrl::Azure {
                account,
                container,
                options,
            } => open_azure(account, container, options)?,
        })
    }
}

#[cfg(feature = "s3")]
fn open_s3(bucket: &str, options: &[(String, String)]) -> Result<DynStore> {
    Ok(Arc::new(crate::store::s3::S3Store::open(bucket, options)?))
}

#[cfg(not(feature = "s3"))]
fn open_s3(bucket: &str, _options: &[(String, String)]) -> Result<DynStore> {
    Err(Error::store(format!(
        "cannot open s3://{bucket}: this build of lease has no S3 support (feature \"s3\")"
    )))
}

#[cfg(feature = "gcs")]
fn open_gcs(bucket: &str, options: &[(String, String)]) -> Result<DynStore> {
    Ok(Arc::new(crate::store::gcs::GcsStore::open(
        bucket, options,
    )?))
}

#[cfg(not(feature = "gcs"))]
fn open_gcs(bucket: &str, _options: &[(String, String)]) -> Result<DynStore> {
    Err(Error::store(format!(
        "cannot open gs://{bucket}: this build of lease has no Google Cloud Storage support \
         (feature \"gcs\")"
    )))
}

#[cfg(feature = "azure")]
fn open_azure(account: &str, container: &str, options: &[(String, String)]) -> Result<DynStore> {
    Ok(Arc::new(crate::store::azure::AzureStore::open(
        account, container, options,
    )?))
}

#[cfg(not(feature = "azure"))]
fn open_azure(account: &str, container: &str, _options: &[(String, String)]) -> Result<DynStore> {
    Err(Error::store(format!(
        "cannot open az://{account}/{container}: this build of lease has no Azure Blob Storage \
         support (feature \"azure\")"
    )))
}
