//! A whole number that may be written with a fraction of zero (`16.0`): JSON Schema's `integer`
//! is a number's value, not how it is written, so the API takes what its schema allows.

use serde::de::{Deserializer, Error, Visitor};
use std::fmt;
use std::marker::PhantomData;

/// A whole number that must be there (not null).
pub fn required<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<u64>,
{
    option(d)?.ok_or_else(|| D::Error::custom("a whole number, not null"))
}

pub fn option<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<u64>,
{
    struct Whole<T>(PhantomData<T>);
    impl<'de, T: TryFrom<u64>> Visitor<'de> for Whole<T> {
        type Value = Option<T>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a whole number (0 or more) or null")
        }

        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(self)
        }

        fn visit_u64<E: Error>(self, n: u64) -> Result<Self::Value, E> {
            T::try_from(n)
                .map(Some)
                .map_err(|_| E::custom(format!("{n} is too large")))
        }

        fn visit_i64<E: Error>(self, n: i64) -> Result<Self::Value, E> {
            match u64::try_from(n) {
                Ok(n) => self.visit_u64(n),
                Err(_) => Err(E::custom(format!("{n} is below 0"))),
            }
        }

        fn visit_f64<E: Error>(self, n: f64) -> Result<Self::Value, E> {
            // Below 2^64, where every whole f64 is a u64.
            if n.fract() == 0.0 && (0.0..18_446_744_073_709_551_616.0).contains(&n) {
                self.visit_u64(n as u64)
            } else {
                Err(E::custom(format!("{n} is not a whole number of 0 or more")))
            }
        }
    }
    d.deserialize_option(Whole(PhantomData))
}

/// As [`option`], for a field whose null means something (absent: `None`; null:
/// `Some(None)`): use with `#[serde(default)]`.
pub fn nullable<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<u64>,
{
    option(d).map(Some)
}
