//! `kafka://HOST:PORT/TOPIC` addresses.

use crate::ShipError;

/// A broker to bootstrap from and a topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaUrl {
    /// `HOST:PORT`.
    pub broker: String,
    pub topic: String,
}

impl KafkaUrl {
    /// Parses `kafka://HOST:PORT/TOPIC`. A topic is 1 to 249 characters of `[A-Za-z0-9._-]`, as
    /// Kafka allows.
    pub fn parse(s: &str) -> Result<KafkaUrl, ShipError> {
        let bad =
            |why: &str| ShipError::Usage(format!("{s:?}: {why} (want kafka://HOST:PORT/TOPIC)"));
        let rest = s
            .strip_prefix("kafka://")
            .ok_or_else(|| bad("not a kafka:// address"))?;
        let (broker, topic) = rest.split_once('/').ok_or_else(|| bad("no topic"))?;
        let (host, port) = broker.rsplit_once(':').ok_or_else(|| bad("no port"))?;
        if host.is_empty() {
            return Err(bad("no host"));
        }
        port.parse::<u16>()
            .map_err(|_| bad("the port is not a number"))?;
        let topic_ok = !topic.is_empty()
            && topic.len() <= 249
            && topic
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
        if !topic_ok {
            return Err(bad("a topic is 1 to 249 of A-Z a-z 0-9 . _ -"));
        }
        Ok(KafkaUrl {
            broker: broker.to_string(),
            topic: topic.to_string(),
        })
    }
}

impl std::fmt::Display for KafkaUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "kafka://{}/{}", self.broker, self.topic)
    }
}

impl std::str::FromStr for KafkaUrl {
    type Err = ShipError;
    fn from_str(s: &str) -> Result<KafkaUrl, ShipError> {
        KafkaUrl::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_broker_and_topic_and_rejects_the_rest() {
        let u = KafkaUrl::parse("kafka://127.0.0.1:9092/fleet.rec").unwrap();
        assert_eq!(u.broker, "127.0.0.1:9092");
        assert_eq!(u.topic, "fleet.rec");
        assert_eq!(u.to_string(), "kafka://127.0.0.1:9092/fleet.rec");
        for bad in [
            "http://h:1/t",
            "kafka://h:1",
            "kafka://h/t",
            "kafka://:1/t",
            "kafka://h:x/t",
            "kafka://h:1/",
            "kafka://h:1/a b",
        ] {
            assert!(KafkaUrl::parse(bad).is_err(), "{bad}");
        }
    }
}
