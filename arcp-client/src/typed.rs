//! Typed calls: arguments from any `Serialize`, results into any
//! `DeserializeOwned`, on top of the JSON call path.
//!
//! A typed call is an ordinary call: its arguments are serialized once, to
//! the JSON value an untyped call would send, before anything else happens;
//! the call then runs through the same machinery (one key for every attempt,
//! the same retries, replays, deadline, journal and cache), and its result is
//! decoded only at the end. A result that does not decode is
//! [`Error::ResultDecode`]: the tool ran, and the raw result is kept.
//! Arguments that do not serialize are [`Error::ArgumentsEncode`]: nothing
//! was sent.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use arcp_types::IdempotencyKey;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::client::Client;
use crate::error::{Error, Execution, ResultDecodeError};
use crate::invocation::InvokeBuilder;
use crate::outcome::ToolOutput;

/// A tool's name with the types of its arguments (`In`) and result (`Out`):
/// declare it once, call it with checked types.
///
/// ```no_run
/// use arcp_sdk::{Client, Error, Tool};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize)]
/// struct Refund {
///     order: u64,
///     cents: u64,
/// }
///
/// #[derive(Deserialize)]
/// struct Refunded {
///     refunded: u64,
/// }
///
/// const REFUND: Tool<Refund, Refunded> = Tool::new("refund");
///
/// # async fn demo(client: Client) -> Result<(), Error> {
/// let out = REFUND.call(&client, &Refund { order: 4812, cents: 500 }).await?;
/// assert_eq!(out.value.refunded, 4812);
/// # Ok(()) }
/// ```
pub struct Tool<In: ?Sized, Out> {
    name: Cow<'static, str>,
    types: PhantomData<fn(&In) -> Out>,
}

impl<In: ?Sized, Out> Tool<In, Out> {
    /// The tool called `name` (usable in a `const`).
    pub const fn new(name: &'static str) -> Self {
        Tool {
            name: Cow::Borrowed(name),
            types: PhantomData,
        }
    }

    /// The tool called `name`, for a name known only at run time.
    pub fn named(name: impl Into<String>) -> Self {
        Tool {
            name: Cow::Owned(name.into()),
            types: PhantomData,
        }
    }

    /// The tool's name on the wire.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl<In: ?Sized + Serialize, Out: DeserializeOwned> Tool<In, Out> {
    /// Invokes the tool with a fresh idempotency key: the typed
    /// [`Client::invoke_tool`]. Await the returned builder for the
    /// outcome, or set options first (an explicit key, a deadline) or
    /// [`send`](InvokeBuilder::send) it for events and cancel; it resolves
    /// to a `ToolOutput<Out>`.
    ///
    /// # Errors
    ///
    /// Those of [`Client::invoke_tool`], and: a result that does not decode
    /// into `Out` fails with [`Error::ResultDecode`] (the tool ran; the raw
    /// result is kept); arguments that do not serialize fail with
    /// [`Error::ArgumentsEncode`] before anything is sent.
    pub fn call(&self, client: &Client, args: &In) -> InvokeBuilder<Out> {
        let arguments = encode(&self.name, args);
        InvokeBuilder::new(client.clone(), self.name.to_string(), arguments)
            .with_decode(decode::<Out>)
    }

    /// A key derived from the namespace, this tool and the arguments
    /// ([`IdempotencyKey::derive`]): the same intent gets the same key in
    /// every process. Fails with [`Error::ArgumentsEncode`] when the
    /// arguments do not serialize.
    pub fn derive_key(&self, namespace: &str, args: &In) -> Result<IdempotencyKey, Error> {
        let value = encode(&self.name, args)?;
        Ok(IdempotencyKey::derive(namespace, &self.name, &value))
    }
}

impl<In: ?Sized, Out> Clone for Tool<In, Out> {
    fn clone(&self) -> Self {
        Tool {
            name: self.name.clone(),
            types: PhantomData,
        }
    }
}

impl<In: ?Sized, Out> fmt::Debug for Tool<In, Out> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tool")
            .field("name", &self.name)
            .field("arguments", &std::any::type_name::<In>())
            .field("result", &std::any::type_name::<Out>())
            .finish()
    }
}

/// The arguments as the JSON value the call sends.
fn encode(tool: &str, args: &(impl Serialize + ?Sized)) -> Result<Value, Error> {
    serde_json::to_value(args).map_err(|e| Error::ArgumentsEncode {
        tool: tool.to_owned(),
        source: Arc::new(e),
        execution: Execution::NotRun,
    })
}

/// A call's result decoded into `T`; the raw result kept if it does not.
fn decode<T: DeserializeOwned>(output: ToolOutput) -> Result<ToolOutput<T>, Error> {
    match T::deserialize(&output.value) {
        Ok(value) => Ok(output.map(|_| value)),
        Err(e) => Err(Error::ResultDecode(Box::new(ResultDecodeError {
            value: output.value,
            expected: std::any::type_name::<T>(),
            source: Arc::new(e),
            key: output.key,
            job_id: output.job_id,
            replayed: output.replayed,
            attempts: output.attempts,
            trace_id: output.trace_id,
        }))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;
    use std::collections::BTreeMap;

    fn output(value: Value) -> ToolOutput {
        ToolOutput {
            value,
            job_id: Some("job_1".into()),
            key: IdempotencyKey::new(),
            replayed: true,
            attempts: 3,
            trace_id: "4bf92f3577b34da6a3ce929d0e0e4736".into(),
        }
    }

    #[derive(Debug, PartialEq, Deserialize)]
    struct Refunded {
        refunded: u64,
    }

    #[test]
    fn a_result_that_decodes_keeps_the_call_facts() {
        let raw = output(json!({"refunded": 4812, "extra": true}));
        let out = decode::<Refunded>(raw.clone()).expect("decodes");
        assert_eq!(out.value, Refunded { refunded: 4812 });
        assert_eq!(out.key, raw.key);
        assert_eq!(out.job_id, raw.job_id);
        assert!(out.replayed);
        assert_eq!(out.attempts, 3);
        assert_eq!(out.trace_id, raw.trace_id);
    }

    #[test]
    fn a_result_that_does_not_decode_says_the_tool_ran_and_keeps_it() {
        let raw = output(json!({"refunded": "all of it"}));
        let err = decode::<Refunded>(raw.clone()).expect_err("a string is not a u64");
        assert_eq!(err.execution(), Execution::Ran);
        assert!(!err.is_retryable());
        assert_eq!(err.code_name(), "RESULT_DECODE_FAILED");
        assert_eq!(err.key(), Some(&raw.key));
        assert_eq!(err.job_id(), Some("job_1"));
        assert_eq!(err.attempts(), Some(3));
        let Error::ResultDecode(e) = &err else {
            panic!("not a decode error: {err:?}");
        };
        assert_eq!(e.value, raw.value);
        assert!(e.expected.ends_with("Refunded"), "{}", e.expected);
        assert!(e.replayed);
        let text = err.to_string();
        assert!(
            text.contains("(job job_1)") && text.contains("Refunded"),
            "{text}"
        );
        assert!(std::error::Error::source(&**e).is_some());
    }

    #[test]
    fn arguments_that_do_not_serialize_say_nothing_ran() {
        // JSON object keys must be strings.
        let args: BTreeMap<(u8, u8), u8> = [((1, 2), 3)].into();
        let err = encode("refund", &args).expect_err("tuple keys do not serialize");
        assert_eq!(err.execution(), Execution::NotRun);
        assert_eq!(err.code_name(), "ARGUMENTS_ENCODE_FAILED");
        assert!(matches!(&err, Error::ArgumentsEncode { tool, .. } if tool == "refund"));
        assert!(err.to_string().contains("`refund`"), "{err}");
    }

    #[test]
    fn a_tool_descriptor_names_its_tool_and_derives_stable_keys() {
        const REFUND: Tool<Value, Refunded> = Tool::new("refund");
        assert_eq!(REFUND.name(), "refund");
        assert_eq!(Tool::<Value, Value>::named(String::from("x")).name(), "x");
        let args = json!({"order": 4812, "cents": 500});
        let reordered = json!({"cents": 500, "order": 4812});
        let key = REFUND.derive_key("orders", &args).unwrap();
        assert_eq!(key, REFUND.derive_key("orders", &reordered).unwrap());
        assert_eq!(key, IdempotencyKey::derive("orders", "refund", &args));
        assert_ne!(key, REFUND.derive_key("other", &args).unwrap());
        let bad: BTreeMap<(u8, u8), u8> = [((1, 2), 3)].into();
        let bad_tool: Tool<BTreeMap<(u8, u8), u8>, Value> = Tool::new("refund");
        assert!(matches!(
            bad_tool.derive_key("orders", &bad),
            Err(Error::ArgumentsEncode { .. })
        ));
        assert!(format!("{REFUND:?}").contains("Refunded"));
    }
}
