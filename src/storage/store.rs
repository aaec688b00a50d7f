//! Why a blocking facade: the pipeline is plain threads, the `object_store` crate is async.
//! A [`Bucket`] owns a small tokio runtime and gives every operation a synchronous call that
//! names the object and the operation in its error — with query strings (upload ids, signed
//! parameters) cut and every registered secret masked — so no caller formats a store error
//! itself. Credentials come from the standard environment only (see docs/environment.md).

use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;

use anyhow::{anyhow, Context, Result};
use bytes::Bytes;
use futures::StreamExt;
use object_store::path::Path as Key;
use object_store::{
    Attribute, Attributes, GetOptions, MultipartUpload, ObjectMeta, ObjectStore, ObjectStoreExt,
    PutMode, PutMultipartOptions, PutOptions, PutPayload, UpdateVersion,
};

use super::location::{ObjectUrl, Scheme};

/// The user metadata key holding an uploaded file's sha256 (S3: `x-amz-meta-dlm-sha256`).
pub const SHA_META: &str = "dlm-sha256";
/// Multipart parts in flight per upload (the part size is [`super::settings::part_bytes`]).
const PARTS_IN_FLIGHT: usize = 4;

/// One bucket (container) and key prefix, with the runtime its calls run on.
pub struct Bucket {
    store: Arc<dyn ObjectStore>,
    url: ObjectUrl,
    rt: tokio::runtime::Runtime,
    /// Files above this go up as multipart uploads of parts this size.
    part_bytes: usize,
}

/// One object of a listing.
#[derive(Debug, Clone)]
pub struct Listed {
    /// Its name relative to the bucket prefix.
    pub rel: String,
    pub size: u64,
    pub e_tag: Option<String>,
}

/// What a conditional put found.
#[derive(Debug)]
pub enum Put {
    /// Written; the new object's ETag.
    Done(Option<String>),
    /// `PutMode::Create` and the object exists, or `Update` and it changed meanwhile.
    Conflict,
}

/// Register the object-store secrets of the environment with [`crate::secret`].
pub fn register_secrets() {
    for k in [
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_SECURITY_TOKEN",
        "GOOGLE_SERVICE_ACCOUNT_KEY",
        "AZURE_STORAGE_ACCOUNT_KEY",
        "AZURE_STORAGE_ACCESS_KEY",
        "AZURE_STORAGE_SAS_TOKEN",
        "AZURE_CLIENT_SECRET",
    ] {
        if let Ok(v) = std::env::var(k) {
            crate::secret::register(v.trim());
        }
    }
}

/// An error text safe to show: URL query strings cut, secrets masked.
pub fn clean(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find('?') {
        out.push_str(&rest[..i]);
        let tail = &rest[i + 1..];
        // A query string runs to the next space, quote or closing bracket.
        let end = tail
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | ')' | '>'))
            .unwrap_or(tail.len());
        if end > 0 && tail[..end].contains('=') {
            out.push_str("?<query removed>");
        } else {
            out.push('?');
            out.push_str(&tail[..end]);
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    crate::secret::redact(&out).into_owned()
}

impl Bucket {
    /// Connect to `url`'s bucket with the environment's credentials and endpoint.
    pub fn open(url: &ObjectUrl) -> Result<Bucket> {
        register_secrets();
        let part_bytes = super::settings::part_bytes()?;
        let retry = super::settings::retry();
        let store: Arc<dyn ObjectStore> = match url.scheme {
            Scheme::S3 => {
                let mut b =
                    object_store::aws::AmazonS3Builder::from_env().with_bucket_name(&url.bucket);
                // AWS_ENDPOINT_URL (the AWS CLI's name) is read by from_env as the endpoint;
                // an http:// endpoint needs AWS_ALLOW_HTTP=true, as the SDKs want.
                if std::env::var_os("AWS_REGION").is_none()
                    && std::env::var_os("AWS_DEFAULT_REGION").is_none()
                {
                    b = b.with_region("us-east-1");
                }
                Arc::new(
                    b.with_retry(retry)
                        .build()
                        .map_err(|e| open_error(url, e))?,
                )
            }
            Scheme::Gcs => Arc::new(
                object_store::gcp::GoogleCloudStorageBuilder::from_env()
                    .with_bucket_name(&url.bucket)
                    .with_retry(retry.clone())
                    .build()
                    .map_err(|e| open_error(url, e))?,
            ),
            Scheme::Azure => Arc::new(
                object_store::azure::MicrosoftAzureBuilder::from_env()
                    .with_container_name(&url.bucket)
                    .with_retry(retry)
                    .build()
                    .map_err(|e| open_error(url, e))?,
            ),
        };
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("object-store")
            .enable_all()
            .build()?;
        Ok(Bucket {
            store,
            url: url.clone(),
            rt,
            part_bytes,
        })
    }

    pub fn url(&self) -> &ObjectUrl {
        &self.url
    }

    /// `rel`'s URL, for messages.
    pub fn name(&self, rel: &str) -> String {
        self.url.child(rel).to_string()
    }

    fn key(&self, rel: &str) -> Key {
        Key::from(self.url.key(rel))
    }

    fn fail(&self, op: &str, rel: &str, e: object_store::Error) -> anyhow::Error {
        anyhow!("{op} {}: {}", self.name(rel), clean(&e.to_string()))
    }

    /// The bucket answers (a listing of the prefix): else an error naming the bucket.
    pub fn check(&self) -> Result<()> {
        let prefix = self.key("");
        let r = self.rt.block_on(async {
            let mut s = self.store.list(Some(&prefix));
            s.next().await.transpose()
        });
        r.map(|_| ()).map_err(|e| {
            self.fail(
                "listing (does the bucket exist, are the credentials right?)",
                "",
                e,
            )
        })
    }

    /// The object's metadata, or `None` when it does not exist.
    pub fn head(&self, rel: &str) -> Result<Option<ObjectMeta>> {
        match self.rt.block_on(self.store.head(&self.key(rel))) {
            Ok(m) => Ok(Some(m)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.fail("HEAD", rel, e)),
        }
    }

    /// Size and the recorded sha256 (user metadata) of an object, `None` when missing.
    pub fn stat(&self, rel: &str) -> Result<Option<(u64, Option<String>)>> {
        let opts = GetOptions {
            head: true,
            ..Default::default()
        };
        match self.rt.block_on(self.store.get_opts(&self.key(rel), opts)) {
            Ok(r) => Ok(Some((
                r.meta.size,
                r.attributes
                    .get(&Attribute::Metadata(SHA_META.into()))
                    .map(|v| v.to_string()),
            ))),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.fail("HEAD", rel, e)),
        }
    }

    /// The object's bytes and ETag, or `None` when it does not exist.
    pub fn get(&self, rel: &str) -> Result<Option<(Bytes, Option<String>)>> {
        let key = self.key(rel);
        let r = self.rt.block_on(async {
            let g = self.store.get(&key).await?;
            let etag = g.meta.e_tag.clone();
            Ok::<_, object_store::Error>((g.bytes().await?, etag))
        });
        match r {
            Ok(v) => Ok(Some(v)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.fail("GET", rel, e)),
        }
    }

    /// Bytes `range` of an object.
    pub fn get_range(&self, rel: &str, range: std::ops::Range<u64>) -> Result<Bytes> {
        self.rt
            .block_on(self.store.get_range(&self.key(rel), range))
            .map_err(|e| self.fail("GET (range)", rel, e))
    }

    /// PUT `bytes` at `rel`: overwrite, create-only, or replace the version `etag`.
    pub fn put(&self, rel: &str, bytes: Vec<u8>, mode: PutMode) -> Result<Put> {
        let opts = PutOptions {
            mode,
            ..Default::default()
        };
        let r = self.rt.block_on(self.store.put_opts(
            &self.key(rel),
            PutPayload::from(bytes),
            opts,
        ));
        match r {
            Ok(p) => Ok(Put::Done(p.e_tag)),
            Err(object_store::Error::AlreadyExists { .. })
            | Err(object_store::Error::Precondition { .. }) => Ok(Put::Conflict),
            Err(e) => Err(self.fail("PUT", rel, e)),
        }
    }

    /// Replace the object whose ETag is `etag` (a conditional PUT with If-Match).
    pub fn replace(&self, rel: &str, bytes: Vec<u8>, etag: Option<String>) -> Result<Put> {
        self.put(
            rel,
            bytes,
            PutMode::Update(UpdateVersion {
                e_tag: etag,
                version: None,
            }),
        )
    }

    pub fn delete(&self, rel: &str) -> Result<()> {
        match self.rt.block_on(self.store.delete(&self.key(rel))) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.fail("DELETE", rel, e)),
        }
    }

    /// Every object under `rel/` (recursive): names relative to the bucket prefix, and sizes.
    pub fn list(&self, rel: &str) -> Result<Vec<(String, u64)>> {
        Ok(self
            .list_objects(rel)?
            .into_iter()
            .map(|o| (o.rel, o.size))
            .collect())
    }

    /// Every object under `rel/` (recursive), with its size and ETag.
    pub fn list_objects(&self, rel: &str) -> Result<Vec<Listed>> {
        let prefix = self.key(rel);
        let base = self.key("");
        let r: Result<Vec<ObjectMeta>, _> = self
            .rt
            .block_on(async { self.store.list(Some(&prefix)).collect::<Vec<_>>().await })
            .into_iter()
            .collect();
        let metas = r.map_err(|e| self.fail("LIST", rel, e))?;
        let strip = base.as_ref().len();
        Ok(metas
            .into_iter()
            .map(|m| {
                let k = m.location.as_ref();
                let rel = if strip == 0 {
                    k
                } else {
                    k.get(strip + 1..).unwrap_or(k)
                };
                Listed {
                    rel: rel.to_string(),
                    size: m.size,
                    e_tag: m.e_tag,
                }
            })
            .collect())
    }

    /// The runtime this bucket's calls run on (a caller awaiting [`Bucket::read_range`]).
    pub fn runtime(&self) -> &tokio::runtime::Runtime {
        &self.rt
    }

    /// Bytes `range` of an object as a future (await it on [`Bucket::runtime`]); with `e_tag`,
    /// only of that version (`If-Match`: an object replaced since it was listed fails, naming
    /// it, rather than mixing two versions' bytes).
    pub async fn read_range(
        &self,
        rel: &str,
        range: std::ops::Range<u64>,
        e_tag: Option<&str>,
    ) -> Result<Bytes> {
        let want = range.end - range.start;
        let opts = GetOptions {
            range: Some(range.into()),
            if_match: e_tag.map(str::to_string),
            ..Default::default()
        };
        let r = async {
            let g = self.store.get_opts(&self.key(rel), opts).await?;
            g.bytes().await
        }
        .await;
        let b = r.map_err(|e| self.fail("GET (range)", rel, e))?;
        if b.len() as u64 != want {
            anyhow::bail!(
                "GET (range) {}: {} bytes answered for a range of {want}",
                self.name(rel),
                b.len()
            );
        }
        Ok(b)
    }

    /// The sha256 of an object's bytes (of the version `e_tag`, when given) and their count,
    /// by one streamed GET (nothing kept).
    pub fn sha256(&self, rel: &str, e_tag: Option<&str>) -> Result<(String, u64)> {
        self.rt.block_on(self.streamed_get(rel, e_tag, |_| Ok(())))
    }

    /// One GET of `rel` (of the version `e_tag`, when given), each chunk handed to `sink` as
    /// it arrives; the sha256 of the bytes and their count.
    async fn streamed_get(
        &self,
        rel: &str,
        e_tag: Option<&str>,
        mut sink: impl FnMut(&[u8]) -> Result<()>,
    ) -> Result<(String, u64)> {
        use sha2::Digest;
        let opts = GetOptions {
            if_match: e_tag.map(str::to_string),
            ..Default::default()
        };
        let g = self
            .store
            .get_opts(&self.key(rel), opts)
            .await
            .map_err(|e| self.fail("GET", rel, e))?;
        let (mut h, mut n) = (sha2::Sha256::new(), 0u64);
        let mut s = g.into_stream();
        while let Some(chunk) = s.next().await {
            let chunk = chunk.map_err(|e| self.fail("GET", rel, e))?;
            h.update(&chunk);
            n += chunk.len() as u64;
            sink(&chunk)?;
        }
        Ok((hex::encode(h.finalize()), n))
    }

    /// Upload the local file `src` to `rel`, recording `sha256` as user metadata: one PUT up
    /// to the part size, else a multipart upload that is completed, or aborted on any error.
    pub fn upload_file(&self, src: &Path, rel: &str, sha256: &str) -> Result<()> {
        let mut attributes = Attributes::new();
        attributes.insert(
            Attribute::Metadata(SHA_META.into()),
            sha256.to_string().into(),
        );
        let mut f = std::fs::File::open(src)
            .with_context(|| format!("opening {} to upload it", src.display()))?;
        let len = f.metadata()?.len();
        if len <= self.part_bytes as u64 {
            let mut buf = Vec::with_capacity(len as usize);
            f.read_to_end(&mut buf)
                .with_context(|| format!("reading {}", src.display()))?;
            let opts = PutOptions {
                attributes,
                ..Default::default()
            };
            return self
                .rt
                .block_on(self.store.put_opts(&self.key(rel), buf.into(), opts))
                .map(|_| ())
                .map_err(|e| self.fail("PUT", rel, e));
        }
        let key = self.key(rel);
        let opts = PutMultipartOptions {
            attributes,
            ..Default::default()
        };
        self.rt.block_on(async {
            let mut up = match self.store.put_multipart_opts(&key, opts).await {
                Ok(u) => u,
                Err(e) => return Err(self.fail("starting the multipart upload of", rel, e)),
            };
            let sent = self.send_parts(&mut *up, &mut f, src, rel).await;
            let done = match sent {
                Ok(()) => up
                    .complete()
                    .await
                    .map(|_| ())
                    .map_err(|e| self.fail("completing the multipart upload of", rel, e)),
                Err(e) => Err(e),
            };
            // Never leave an upload open: a failed part or a failed completion aborts it.
            if done.is_err() {
                if let Err(ae) = up.abort().await {
                    tracing::warn!("{}", self.fail("aborting the multipart upload of", rel, ae));
                }
            }
            done
        })
    }

    /// Read `f` in parts of the part size and send them, [`PARTS_IN_FLIGHT`] at a time.
    async fn send_parts(
        &self,
        up: &mut dyn MultipartUpload,
        f: &mut std::fs::File,
        src: &Path,
        rel: &str,
    ) -> Result<()> {
        let mut flying = futures::stream::FuturesUnordered::<object_store::UploadPart>::new();
        loop {
            let mut part = Vec::with_capacity(self.part_bytes);
            let n = Read::by_ref(f)
                .take(self.part_bytes as u64)
                .read_to_end(&mut part)
                .with_context(|| format!("reading {}", src.display()))?;
            if n == 0 {
                break;
            }
            while flying.len() >= PARTS_IN_FLIGHT {
                if let Some(r) = flying.next().await {
                    r.map_err(|e| self.fail("uploading a part of", rel, e))?;
                }
            }
            flying.push(up.put_part(PutPayload::from(part)));
            if n < self.part_bytes {
                break;
            }
        }
        while let Some(r) = flying.next().await {
            r.map_err(|e| self.fail("uploading a part of", rel, e))?;
        }
        Ok(())
    }

    /// Download `rel` to the local file `dst` (temp + fsync + rename); its sha256.
    pub fn download_file(&self, rel: &str, dst: &Path) -> Result<String> {
        if let Some(d) = dst.parent() {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
        }
        let tmp = crate::util::temp_path(dst);
        let r: Result<String> = (|| {
            let mut f = std::fs::File::create(&tmp)
                .with_context(|| format!("creating {}", tmp.display()))?;
            let (sha, _) = self.rt.block_on(self.streamed_get(rel, None, |chunk| {
                f.write_all(chunk)
                    .with_context(|| format!("writing {}", tmp.display()))
            }))?;
            f.sync_all()?;
            Ok(sha)
        })();
        match r {
            Ok(sha) => {
                crate::util::commit_rename(&tmp, dst)?;
                Ok(sha)
            }
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                Err(e)
            }
        }
    }
}

fn open_error(url: &ObjectUrl, e: object_store::Error) -> anyhow::Error {
    anyhow!(
        "{url}: cannot configure the object store client from the environment: {}",
        clean(&e.to_string())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_cuts_query_strings() {
        let t = "error sending request for url (http://127.0.0.1:9/b/k?uploadId=abc&partNumber=2): reset";
        let c = clean(t);
        assert_eq!(
            c,
            "error sending request for url (http://127.0.0.1:9/b/k?<query removed>): reset"
        );
        assert_eq!(clean("what? no"), "what? no");
        let s = "https://x/y?X-Amz-Signature=deadbeef&X-Amz-Credential=AKIA";
        assert!(!clean(s).contains("deadbeef"));
    }
}
