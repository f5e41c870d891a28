//! `Deserialize` for payload structs that keep unknown fields in `extra`,
//! in one pass. A derived `#[serde(flatten)] extra` buffers the whole object
//! into serde's internal representation before matching fields; on the
//! replies every call receives, that doubled the decode cost.

/// Implements `Deserialize` for a struct whose fields are listed as
/// `field: "wire name"` (read as `Option<T>`: absent means `Default`) or
/// `field: "wire name" required`, plus an `extra: Object` catching the rest.
/// A repeated known field is an error, as with derived impls.
macro_rules! deserialize_with_extra {
    ($ty:ident { $($field:ident : $name:literal $($required:ident)?),* $(,)? }) => {
        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> serde::de::Visitor<'de> for V {
                    type Value = $ty;
                    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        f.write_str(concat!("a ", stringify!($ty), " object"))
                    }
                    fn visit_map<A: serde::de::MapAccess<'de>>(
                        self,
                        mut map: A,
                    ) -> Result<$ty, A::Error> {
                        $(let mut $field = None;)*
                        let mut extra = serde_json::Map::new();
                        while let Some(key) = map.next_key::<$crate::extra_fields::Key<'de>>()? {
                            match key.as_str() {
                                $($name => {
                                    if $field.is_some() {
                                        return Err(serde::de::Error::duplicate_field($name));
                                    }
                                    $field = Some(map.next_value()?);
                                })*
                                _ => {
                                    let value = map.next_value()?;
                                    extra.insert(key.into_string(), value);
                                }
                            }
                        }
                        Ok($ty {
                            $($field: $crate::extra_fields::deserialize_with_extra!(@take $field, $name $($required)?),)*
                            extra,
                        })
                    }
                }
                d.deserialize_map(V)
            }
        }
    };
    (@take $field:ident, $name:literal required) => {
        $field.ok_or_else(|| serde::de::Error::missing_field($name))?
    };
    (@take $field:ident, $name:literal) => {
        $field.unwrap_or_default()
    };
}

pub(crate) use deserialize_with_extra;

/// An object key: borrowed from the input when it has no escapes (no
/// allocation for the known fields), owned otherwise.
pub(crate) enum Key<'de> {
    Borrowed(&'de str),
    Owned(String),
}

impl Key<'_> {
    pub(crate) fn as_str(&self) -> &str {
        match self {
            Key::Borrowed(s) => s,
            Key::Owned(s) => s,
        }
    }

    pub(crate) fn into_string(self) -> String {
        match self {
            Key::Borrowed(s) => s.to_owned(),
            Key::Owned(s) => s,
        }
    }
}

impl<'de> serde::Deserialize<'de> for Key<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a field name")
            }
            fn visit_borrowed_str<E: serde::de::Error>(self, s: &'de str) -> Result<Key<'de>, E> {
                Ok(Key::Borrowed(s))
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Key<'de>, E> {
                Ok(Key::Owned(s.to_owned()))
            }
            fn visit_string<E: serde::de::Error>(self, s: String) -> Result<Key<'de>, E> {
                Ok(Key::Owned(s))
            }
        }
        d.deserialize_identifier(V)
    }
}
