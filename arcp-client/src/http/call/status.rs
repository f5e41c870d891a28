//! An attempt's HTTP status: what each code says of the call (the
//! binding's codes, draft-ietf-httpapi-idempotency-key-header's 409 and
//! 422, a gateway's 5xx), up to the attempt's next step.

use std::time::{Duration, SystemTime};

use arcp_types::Dialect;
use http::HeaderMap;
use hyper::body::Incoming;

use super::answer::is_error;
use super::{HttpCall, Next};
use crate::classify::Ending;
use crate::http::{
    body_detail, has_media_type, header_is_true, read_capped, retry_after, ERROR_BODY_LIMIT,
    NDJSON, REPLAYED_HEADER,
};

impl HttpCall<'_> {
    pub(super) async fn on_response(
        &mut self,
        status: u16,
        headers: &HeaderMap,
        response: &mut Incoming,
    ) -> Next {
        let marked = header_is_true(headers, REPLAYED_HEADER);
        let floor = retry_after(headers, SystemTime::now());
        let stream = has_media_type(headers, NDJSON);
        self.streamed = stream;
        match status {
            200..=299 if stream => self.read_stream(response, marked).await,
            200..=299 => self.read_single(response, marked).await,
            401 | 403 => {
                let detail = self.error_detail(response).await;
                self.in_flight = false;
                Next::Done(Err(self.end(Ending::Unauthenticated {
                    message: format!("HTTP {status}: {detail}"),
                })))
            }
            409 => {
                // The first request with this key is still being processed.
                self.record.key_bound();
                let detail = self.error_detail(response).await;
                Next::Pending {
                    floor,
                    reason: format!("HTTP 409, a request with this key is in progress: {detail}"),
                }
            }
            422 => {
                let detail = self.error_detail(response).await;
                self.in_flight = false;
                let conflict = self.end(Ending::DuplicateKey {
                    message: format!("HTTP 422: {detail}"),
                });
                Next::Done(Err(self.whole_body_conflict(conflict)))
            }
            // The binding's "not processed, retry later": 429, and 503 with
            // `Retry-After`. A bare 503 is also what proxies (Envoy, Istio)
            // answer when the upstream reset after they forwarded the
            // request: the request may have reached the runtime.
            408 | 429 => self.transient(response, status, floor).await,
            503 if floor.is_some() => self.transient(response, status, floor).await,
            // A final 1xx (hyper passes on only 101, unasked for) answers
            // nothing, as does every server error but "not implemented"
            // (501) and "version not supported" (505), which refuse the
            // request itself.
            100..=199 | 500 | 502..=504 | 506..=599 => {
                // The request may have reached the runtime (a gateway's
                // 502/504/52x: it may have forwarded it; 507: it ran and
                // could not store the outcome).
                self.record.lost();
                let detail = self.error_detail(response).await;
                Next::Lost {
                    floor,
                    reason: format!("HTTP {status}: {detail}"),
                }
            }
            _ => {
                let body = read_capped(response, ERROR_BODY_LIMIT)
                    .await
                    .unwrap_or_default();
                // An ARCP error envelope is the runtime's answer, whatever the status.
                if let Some((header, message)) = std::str::from_utf8(&body)
                    .ok()
                    .and_then(|text| Dialect::V1_1.decode_borrowed(text).ok())
                    .filter(|(_, message)| is_error(message))
                {
                    if let Some(next) = self.on_frame(&header, message, marked) {
                        return next;
                    }
                }
                // This request was answered without an envelope: it ran
                // nothing; an earlier one may have.
                self.in_flight = false;
                Next::Done(Err(self.end(Ending::HttpStatus {
                    url: self.backend.endpoint.clone(),
                    status,
                    message: body_detail(&body, &self.redactor()),
                })))
            }
        }
    }

    /// A 422 from whatever fingerprints the whole body (the idempotency-key
    /// draft's middleware does): another body is also the same intent in
    /// another envelope, sent by another caller of a supplied key. It
    /// proves this intent never ran under the key only for a key generated
    /// for this call: else "not sent" (retry with the same key).
    fn whole_body_conflict(&self, conflict: crate::Error) -> crate::Error {
        match conflict {
            crate::Error::DuplicateKey {
                key,
                message,
                attempts,
                execution: crate::Execution::NotRun,
            } if self.req.key_supplied || self.req.in_doubt => crate::Error::DuplicateKey {
                key,
                message,
                attempts,
                execution: crate::Execution::NotSent,
            },
            other => other,
        }
    }

    /// A refusal before processing: this request ran nothing; retried.
    async fn transient(
        &self,
        response: &mut Incoming,
        status: u16,
        floor: Option<Duration>,
    ) -> Next {
        let detail = self.error_detail(response).await;
        Next::Transient {
            floor,
            reason: format!("HTTP {status}: {detail}"),
        }
    }

    async fn error_detail(&self, response: &mut Incoming) -> String {
        match read_capped(response, ERROR_BODY_LIMIT).await {
            Ok(body) => body_detail(&body, &self.redactor()),
            Err(_) => "the response body could not be read".into(),
        }
    }
}
