//! A typed view of job event bodies, for callers that render progress.

use serde_json::Value;

use crate::message::JobEvent;

/// The body of a [`JobEvent`], typed by its `kind`.
///
/// Reading never fails: a body whose fields do not fit its kind is returned as
/// [`EventBody::Other`], so a runtime's creative event cannot break a call.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum EventBody {
    /// `progress`: `current` of `total` `units`. Legacy `{percent}` reads as
    /// `current = percent, total = 100`.
    Progress {
        /// Work done so far.
        current: f64,
        /// Total work, if known.
        total: Option<f64>,
        /// Unit of `current` and `total`.
        units: Option<String>,
        /// A human-readable note.
        message: Option<String>,
    },
    /// `log`: a log line from the job.
    Log {
        /// Severity (`info`, `warn`, ...).
        level: String,
        /// The line.
        message: String,
    },
    /// `metric`: a named measurement.
    Metric {
        /// Metric name, such as `cost.tick`.
        name: String,
        /// The value.
        value: f64,
        /// Unit, such as `USD`.
        unit: Option<String>,
    },
    /// `result_chunk`: one piece of a streamed result.
    ResultChunk {
        /// Stable id of the assembled result.
        result_id: String,
        /// 0-based chunk index.
        chunk_seq: u64,
        /// The chunk, encoded per `encoding`.
        data: String,
        /// `utf8` or `base64`.
        encoding: String,
        /// Whether more chunks follow.
        more: bool,
    },
    /// Any other kind, or a body that does not fit its kind.
    Other {
        /// The event kind.
        kind: String,
        /// The body, verbatim.
        body: Value,
    },
}

impl JobEvent {
    /// The body typed by kind.
    pub fn typed(&self) -> EventBody {
        typed(&self.kind, &self.body).unwrap_or_else(|| EventBody::Other {
            kind: self.kind.clone(),
            body: self.body.clone(),
        })
    }
}

fn typed(kind: &str, body: &Value) -> Option<EventBody> {
    let s = |k: &str| body.get(k).and_then(Value::as_str).map(str::to_owned);
    let n = |k: &str| body.get(k).and_then(Value::as_f64);
    Some(match kind {
        "progress" => match (n("current"), n("percent")) {
            (Some(current), _) => EventBody::Progress {
                current,
                total: n("total"),
                units: s("units"),
                message: s("message"),
            },
            (None, Some(percent)) => EventBody::Progress {
                current: percent,
                total: Some(100.0),
                units: Some("percent".into()),
                message: s("message"),
            },
            (None, None) => return None,
        },
        "log" => EventBody::Log {
            level: s("level").unwrap_or_else(|| "info".into()),
            message: s("message")?,
        },
        "metric" => EventBody::Metric {
            name: s("name")?,
            value: n("value")?,
            unit: s("unit"),
        },
        "result_chunk" => EventBody::ResultChunk {
            result_id: s("result_id")?,
            chunk_seq: body.get("chunk_seq").and_then(Value::as_u64)?,
            data: s("data")?,
            encoding: s("encoding").unwrap_or_else(|| "utf8".into()),
            more: body.get("more").and_then(Value::as_bool).unwrap_or(false),
        },
        _ => return None,
    })
}
