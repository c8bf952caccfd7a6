//! The broker side: one partition of one topic, through `rskafka`, with every request bounded in
//! time and none retried inside the client.

use std::future::Future;
use std::time::Duration;

use rskafka::client::partition::{Compression, OffsetAt, PartitionClient, UnknownTopicHandling};
use rskafka::client::{Client, ClientBuilder};
use rskafka::record::{Record, RecordAndOffset};
use rskafka::BackoffConfig;

use crate::key::{self, StreamId};
use crate::{KafkaUrl, ShipError};

/// How long one request may take before the connection is given up as broken.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes asked for per fetch.
pub const FETCH_BYTES: i32 = 8 << 20;
/// Largest message the client accepts in a response.
const MAX_MESSAGE_BYTES: usize = 256 << 20;

/// A connection to the partition one recorder ships to.
pub struct Dest {
    url: KafkaUrl,
    // Kept so the partition client's connections stay open.
    _client: Client,
    part: PartitionClient,
    pub partition: i32,
}

/// The client's own retries, off: after a failure the shipper learns from the partition's tail
/// what the broker holds instead of resending blindly.
fn no_retries() -> BackoffConfig {
    BackoffConfig {
        // The jitter range must not be empty (init..init*base), or the client panics.
        init_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(2),
        base: 2.0,
        deadline: Some(Duration::ZERO),
    }
}

fn kafka_err<'a>(
    url: &'a KafkaUrl,
    what: &'static str,
) -> impl FnOnce(rskafka::client::error::Error) -> ShipError + 'a {
    move |e| ShipError::Kafka {
        broker: url.broker.clone(),
        what,
        detail: e.to_string(),
    }
}

/// Runs `f` for at most [`REQUEST_TIMEOUT`].
async fn bounded<T>(
    url: &KafkaUrl,
    what: &'static str,
    f: impl Future<Output = Result<T, rskafka::client::error::Error>>,
) -> Result<T, ShipError> {
    match tokio::time::timeout(REQUEST_TIMEOUT, f).await {
        Ok(r) => r.map_err(kafka_err(url, what)),
        Err(_) => Err(ShipError::Kafka {
            broker: url.broker.clone(),
            what,
            detail: format!("no answer in {REQUEST_TIMEOUT:?}"),
        }),
    }
}

impl Dest {
    /// Connects, creates the topic (one partition) if it does not exist, and opens the partition
    /// `recorder` ships to: `partition` if given (a ledger's), else the one its id hashes to.
    pub async fn connect_to(
        url: &KafkaUrl,
        recorder: &str,
        partition: Option<i32>,
    ) -> Result<Dest, ShipError> {
        let client = bounded(
            url,
            "connecting",
            ClientBuilder::new(vec![url.broker.clone()])
                .client_id("tailbound-ship")
                .max_message_size(MAX_MESSAGE_BYTES)
                .backoff_config(no_retries())
                .build(),
        )
        .await?;
        let partitions = Dest::partitions(url, &client).await?;
        let partitions = match partitions {
            Some(n) => n,
            None => {
                let controller = client
                    .controller_client()
                    .map_err(kafka_err(url, "finding the controller"))?;
                // Another shipper may create it at the same time: that is fine.
                let _ = bounded(
                    url,
                    "creating the topic",
                    controller.create_topic(&url.topic, 1, 1, 10_000),
                )
                .await;
                Dest::partitions(url, &client)
                    .await?
                    .ok_or_else(|| ShipError::Kafka {
                        broker: url.broker.clone(),
                        what: "creating the topic",
                        detail: format!("topic {} still does not exist", url.topic),
                    })?
            }
        };
        let partition = match partition {
            Some(p) if p >= 0 && (p as usize) < partitions => p,
            Some(p) => {
                return Err(ShipError::Kafka {
                    broker: url.broker.clone(),
                    what: "opening the partition",
                    detail: format!("topic {} has no partition {p}", url.topic),
                })
            }
            None => key::partition_for(recorder, partitions),
        };
        let part = bounded(
            url,
            "opening the partition",
            client.partition_client(url.topic.clone(), partition, UnknownTopicHandling::Retry),
        )
        .await?;
        Ok(Dest {
            url: url.clone(),
            _client: client,
            part,
            partition,
        })
    }

    async fn partitions(url: &KafkaUrl, client: &Client) -> Result<Option<usize>, ShipError> {
        let topics = bounded(url, "listing topics", client.list_topics()).await?;
        Ok(topics
            .into_iter()
            .find(|t| t.name == url.topic)
            .map(|t| t.partitions.len())
            .filter(|&n| n > 0))
    }

    pub fn url(&self) -> &KafkaUrl {
        &self.url
    }

    /// Sends one batch and waits for the broker's acknowledgement; returns the records' offsets.
    pub async fn produce(&self, records: Vec<Record>) -> Result<Vec<i64>, ShipError> {
        bounded(
            &self.url,
            "producing",
            self.part.produce(records, Compression::NoCompression),
        )
        .await
    }

    /// The partition's end: the offset the next record will get.
    pub async fn end_offset(&self) -> Result<i64, ShipError> {
        bounded(
            &self.url,
            "reading the end offset",
            self.part.get_offset(OffsetAt::Latest),
        )
        .await
    }

    /// The partition's first kept offset.
    pub async fn start_offset(&self) -> Result<i64, ShipError> {
        bounded(
            &self.url,
            "reading the start offset",
            self.part.get_offset(OffsetAt::Earliest),
        )
        .await
    }

    /// Records from `offset` on (up to [`FETCH_BYTES`]), and the partition's end.
    pub async fn fetch(&self, offset: i64) -> Result<(Vec<RecordAndOffset>, i64), ShipError> {
        bounded(
            &self.url,
            "fetching",
            self.part.fetch_records(offset, 1..FETCH_BYTES, 0),
        )
        .await
    }

    /// Reads the partition from `from` to its end and returns the highest index of `stream` found
    /// there, with the end offset read.
    pub async fn highest_index(
        &self,
        stream: &StreamId,
        from: i64,
    ) -> Result<(Option<u64>, i64), ShipError> {
        let mut offset = from.max(self.start_offset().await?);
        let mut end = self.end_offset().await?;
        let mut highest = None;
        while offset < end {
            let (records, high_watermark) = self.fetch(offset).await?;
            end = end.max(high_watermark);
            if records.is_empty() {
                break;
            }
            for r in &records {
                offset = offset.max(r.offset + 1);
                let Some(k) = r.record.key.as_deref().and_then(key::decode) else {
                    continue;
                };
                if k.is_of(stream) {
                    highest = highest.max(Some(k.index));
                }
            }
        }
        Ok((highest, end))
    }
}
